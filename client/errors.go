package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/countersign/countersign/internal/wire"
)

// Error is an error answer of the console: the API's one error shape
// {"error":{"code","message","problems",...}} with its HTTP status. Message
// and Problems are written to be handed back to the model that proposed the
// call.
//
// Error declares the members of wire.Error itself rather than embedding
// it: applications build an Error to match against
// (errors.Is(err, &client.Error{Code: client.CodeRetryLimit})), and a
// literal cannot name an embedded struct's members. The conformance test
// of docs/openapi.yaml reads every documented error into Error too.
type Error struct {
	// Status is the HTTP status code.
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	// Problems lists every problem found in a refused proposal.
	Problems []Problem `json:"problems,omitempty"`
	// Reason is the operator's reason (previously_denied), or the freeze's
	// (frozen).
	Reason string `json:"reason,omitempty"`
	// CallID names the call an error refers to (previously_denied).
	CallID string `json:"call_id,omitempty"`
	// Hint says what a person can do about it (retry_limit).
	Hint string `json:"hint,omitempty"`
	// CounteredBy is the counter-proposal to accept or decline
	// (previously_countered).
	CounteredBy string `json:"countered_by,omitempty"`
	// Raw is the response body.
	Raw json.RawMessage `json:"-"`
}

// Problem is one thing wrong with a proposal: a problem code, the JSON
// Pointer of the offending value from the proposal's root, and a sentence.
type Problem = wire.Problem

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "countersign: %d %s: %s", e.Status, e.Code, e.Message)
	for _, p := range e.Problems {
		b.WriteString("; ")
		b.WriteString(p.Code)
		if p.Path != "" {
			b.WriteString(" at ")
			b.WriteString(p.Path)
		}
		if p.Message != "" {
			b.WriteString(": ")
			b.WriteString(p.Message)
		}
	}
	return b.String()
}

// Is reports whether target is an *Error with the same code (and, when
// target's Status is set, the same status), so that
// errors.Is(err, &client.Error{Code: client.CodeRetryLimit}) works.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok || t.Code != e.Code {
		return false
	}
	return t.Status == 0 || t.Status == e.Status
}

// refusalCodes are the console's answers that refuse the call itself,
// whatever their status: a rule of the tools file, an operator's earlier
// denial or counter-proposal, the block after three refusals in a row, a
// body too large. Beside
// them, a proposal whose content the console refused (its problems listed)
// is a refusal too. The Python and TypeScript clients classify the same
// way.
var refusalCodes = map[string]bool{
	CodeDeniedByPolicy: true, CodePreviouslyDenied: true, CodeRetryLimit: true, CodeTooLarge: true,
	CodePreviouslyCountered: true,
}

// Refusal reports whether the console refused this call: something the
// model that proposed it can act on (fix its arguments, stop, ask a person),
// such as a rule (denied_by_policy), an operator's earlier denial
// (previously_denied), an invalid proposal (its problems listed), a body too
// large, or the block after repeated refusals (retry_limit). Hand those to
// the model (Code, Message, Problems, Reason).
//
// It is false for an operational failure the application must handle and
// the model cannot fix: the agent's own token missing, unknown or revoked
// (401 unauthorized) or not allowed the tool's host (403
// audience_not_allowed), a tool the console does not know (unknown_tool: the
// application names the tool), too_many_waits, any 5xx (frozen, unavailable,
// internal), and an answer not in the API's shape (unexpected_response).
// An unreachable console is not an *Error at all; IsRefusal reports false
// for it.
func (e *Error) Refusal() bool {
	if e.Status == 0 {
		return false
	}
	if refusalCodes[e.Code] {
		return true
	}
	// A refused proposal lists its problems (malformed_json,
	// invalid_arguments, ...); unknown_tool lists one too, but names the
	// application's configuration, not the model's arguments.
	return e.Status >= 400 && e.Status < 500 && e.Status != 401 && e.Status != 403 &&
		len(e.Problems) > 0 && e.Code != CodeUnknownTool
}

// IsRefusal reports whether err is (or wraps) the console's refusal of the
// call, for the model to be told (see Error.Refusal). Any other error (an
// unreachable console, a cancelled context, a 401, a 5xx) is the
// application's to handle:
//
//	call, err := c.Submit(ctx, p)
//	var e *client.Error
//	switch {
//	case errors.As(err, &e) && e.Refusal():
//		return tellTheModel(e.Code, e.Message, e.Problems)
//	case err != nil:
//		return err // not the model's: a bad token, a 5xx, the console unreachable
//	}
func IsRefusal(err error) bool {
	e, ok := AsError(err)
	return ok && e.Refusal()
}

// HasProblem reports whether the error lists a problem with code at path;
// an empty path matches any path.
func (e *Error) HasProblem(code, path string) bool {
	for _, p := range e.Problems {
		if p.Code == code && (path == "" || p.Path == path) {
			return true
		}
	}
	return false
}

// AsError returns the console's error inside err, if there is one.
func AsError(err error) (*Error, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e, true
	}
	return nil, false
}

// IsCode reports whether err is (or wraps) a console error with code.
func IsCode(err error, code string) bool {
	e, ok := AsError(err)
	return ok && e.Code == code
}

// StatusCode returns the HTTP status of a console error in err, or 0.
func StatusCode(err error) int {
	if e, ok := AsError(err); ok {
		return e.Status
	}
	return 0
}

// Error codes of the agent API. A refused proposal whose JSON text could
// not be read carries the problem code itself (malformed_json,
// duplicate_key, float_not_allowed, ...) as its error code.
const (
	CodeInvalidArguments   = "invalid_arguments"
	CodeUnknownTool        = "unknown_tool"
	CodeTooLarge           = "too_large"
	CodeDeniedByPolicy     = "denied_by_policy"
	CodeTooManyWaits       = "too_many_waits"
	CodeAudienceNotAllowed = "audience_not_allowed"
	CodePreviouslyDenied   = "previously_denied"
	// CodePreviouslyCountered: an operator answered this exact call with
	// an edited one; Error.CounteredBy names it, to Accept or Cancel.
	CodePreviouslyCountered  = "previously_countered"
	CodeRetryLimit           = "retry_limit"
	CodeUnauthorized         = "unauthorized"
	CodeNotFound             = "not_found"
	CodeNotPending           = "not_pending"
	CodeNotRedeemed          = "not_redeemed"
	CodeOutcomeReported      = "outcome_already_reported"
	CodeNotLeaseHolder       = "not_lease_holder"
	CodeLeaseExpired         = "lease_expired"
	CodeInvalidOutcome       = "invalid_outcome"
	CodeInvalidWait          = "invalid_wait"
	CodeMalformed            = "malformed"
	CodeUnsupportedMediaType = "unsupported_media_type"
	CodeUnavailable          = "unavailable"
	// CodeFrozen: an operator froze the call's tool or actor (503); Reason
	// is the freeze's. Nothing was approved or consumed.
	CodeFrozen   = "frozen"
	CodeInternal = "internal"
	// CodeUnexpectedResponse is set by this package when the answer was not
	// in the API's error shape (a proxy's error page, for instance).
	CodeUnexpectedResponse = "unexpected_response"
)

// Problem codes (DESIGN §5), found in Error.Problems.
const (
	ProblemUnknownField    = "unknown_field"
	ProblemMissingField    = "missing_field"
	ProblemEmptyString     = "empty_string"
	ProblemWrongType       = "wrong_type"
	ProblemFloatNotAllowed = "float_not_allowed"
	ProblemOutOfRange      = "out_of_range"
	ProblemPatternMismatch = "pattern_mismatch"
	ProblemEnumMismatch    = "enum_mismatch"
	ProblemTooLong         = "too_long"
	ProblemTooManyItems    = "too_many_items"
	ProblemDuplicateKey    = "duplicate_key"
	ProblemInvalidUTF8     = "invalid_utf8"
	ProblemTooDeep         = "too_deep"
	ProblemTooLarge        = "too_large"
	ProblemUnknownTool     = "unknown_tool"
	ProblemInvalidTool     = "invalid_tool"
	ProblemInvalidTarget   = "invalid_target"
	ProblemMalformedJSON   = "malformed_json"
)
