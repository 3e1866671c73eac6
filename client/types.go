package client

import (
	"encoding/json"
	"time"
)

// Status is where a call is in its life.
type Status string

// Call statuses. Every status but StatusPending and StatusApproved is
// terminal; an approved call moves only to redeemed or revoked (or its grant
// expires).
const (
	StatusPending   Status = "pending"
	StatusApproved  Status = "approved"
	StatusDenied    Status = "denied"
	StatusExpired   Status = "expired"
	StatusCancelled Status = "cancelled"
	StatusRedeemed  Status = "redeemed"
	// StatusRevoked is an approved call whose grant an operator revoked
	// before it was redeemed (see Call.Revocation): redeeming it is refused
	// (revoked).
	StatusRevoked Status = "revoked"
)

// Decided reports whether an operator (or the clock) has settled the call:
// any status but pending.
func (s Status) Decided() bool { return s != StatusPending }

// Proposal is what an agent asks to run.
//
// Args is sent as given: a map, a struct, or a json.RawMessage holding the
// exact JSON text. Numbers must be integers that fit in ±(2^53−1): the
// console refuses fractions and exponents (1.0, 1e2) with float_not_allowed,
// so money is an integer in minor units. Use int, int64 or json.Number, not
// float64. A nil Args is sent as an empty object.
type Proposal struct {
	Tool      string `json:"tool"`
	Target    string `json:"target"`
	Args      any    `json:"args"`
	Rationale string `json:"rationale,omitempty"`
}

// CallSpec is the call presented with a grant at redemption: exactly the
// approved tool, target and args. Args follows the rules of Proposal.Args;
// Call.Spec returns the approved call's own spec.
type CallSpec struct {
	Tool   string `json:"tool"`
	Target string `json:"target"`
	Args   any    `json:"args"`
}

// Call is the API's call object.
type Call struct {
	ID       string `json:"id"`
	Status   Status `json:"status"`
	Actor    string `json:"actor"`
	Audience string `json:"audience"`
	Tool     string `json:"tool"`
	Target   string `json:"target"`
	// Args are the arguments as the console stored them, as JSON text.
	// Integers keep every digit; decode with json.Decoder.UseNumber (or into
	// integer fields) to keep it that way.
	Args      json.RawMessage `json:"args"`
	Rationale string          `json:"rationale,omitempty"`
	// Digest is the lowercase hex SHA-256 of the call's canonical envelope.
	Digest    string    `json:"digest"`
	CreatedAt time.Time `json:"created_at"`
	// DecideBy is when a pending call expires.
	DecideBy  time.Time `json:"decide_by"`
	Approvals Approvals `json:"approvals"`
	// Owners are the people who run the agent (from its token when the call
	// was made), each once, named as people see them: account names (a
	// single-sign-on account by its provider user name, never an
	// oidc:HOST/SUB principal) and team:GROUP; none of them may approve the
	// call. Empty when the token names none.
	Owners []string `json:"owners,omitempty"`
	// Grant is the signed single-use token, present while the call is
	// approved and not yet redeemed.
	Grant          string    `json:"grant,omitempty"`
	GrantExpiresAt time.Time `json:"grant_expires_at,omitzero"`
	// Decision is set when an operator denied the call.
	Decision *Decision `json:"decision,omitempty"`
	// Revocation is set when an operator revoked the call's grant before it
	// was redeemed (status revoked): who, why and when. Hand the reason to
	// the model as a denial's.
	Revocation *Revocation `json:"revocation,omitempty"`
	// Comments are the notes operators left with their approvals.
	Comments []Comment `json:"comments,omitempty"`
	// RedeemedAt is when the grant was redeemed; LeaseUntil is when the
	// executor's lease ends (or ended): with no outcome reported by then,
	// the outcome becomes lease_expired.
	RedeemedAt time.Time `json:"redeemed_at,omitzero"`
	LeaseUntil time.Time `json:"lease_until,omitzero"`
	// Outcome is set once the executor reported what happened, or once its
	// lease ran out (status lease_expired).
	Outcome *Outcome `json:"outcome,omitempty"`
	// Resolution is set when a person resolved an unknown or expired
	// outcome.
	Resolution *Resolution `json:"resolution,omitempty"`

	// Created is set by Submit: true when the console stored a new call
	// (201), false when it returned the same actor's identical call that is
	// still pending or approved (200).
	Created bool `json:"-"`
	// Raw is the response body the call was read from.
	Raw json.RawMessage `json:"-"`
}

// Spec returns the call as it must be presented at redemption: its tool,
// target and args exactly as the console returned them.
func (c *Call) Spec() CallSpec {
	return CallSpec{Tool: c.Tool, Target: c.Target, Args: c.Args}
}

// Approvals counts the approvals a call needs and has, and lists them.
type Approvals struct {
	Required int `json:"required"`
	Received int `json:"received"`
	// Given is each approval, in the order given; empty until the first.
	Given []Approval `json:"given,omitempty"`
}

// Approval is one approval of a call.
type Approval struct {
	// By is the operator, named as in Decision.By, or policy:RULE.
	By string `json:"by"`
	// Channel is where it came from: web, cli or policy.
	Channel string `json:"channel"`
	// Method is how it was given: MethodClick, MethodPasskey, MethodCommand,
	// MethodPolicy, or the name of another channel it came through.
	Method string    `json:"method"`
	At     time.Time `json:"at"`
}

// How an approval was given: on the call's page, signed with the
// operator's passkey, with `console approve`, or by a rule of the tools
// file.
const (
	MethodClick   = "click"
	MethodPasskey = "passkey"
	MethodCommand = "command"
	MethodPolicy  = "policy"
)

// Decision is an operator's denial: who, why, and when.
type Decision struct {
	// By is the operator as people see them (a local account's name; a
	// single-sign-on operator's provider user name, else display name, else
	// "(single sign-on user)"; never an oidc:HOST/SUB principal), or
	// policy:RULE.
	By     string    `json:"by"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// Revocation is an operator's revocation of an approved call's grant
// before it was redeemed: who, why, and when. The grant is refused at
// redemption (reason revoked) from then on.
type Revocation struct {
	By     string    `json:"by"` // the operator, named as in Decision.By
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// Comment is an operator's note with an approval.
type Comment struct {
	By      string    `json:"by"` // the operator, named as in Decision.By
	Comment string    `json:"comment"`
	At      time.Time `json:"at"`
}

// Outcome is what the executor reported after running the call, or
// lease_expired when nobody reported in time.
type Outcome struct {
	Status string    `json:"status"`
	Detail string    `json:"detail,omitempty"`
	At     time.Time `json:"at,omitzero"`
}

// Outcome statuses accepted by ReportOutcome.
const (
	OutcomeSucceeded = "succeeded"
	OutcomeFailed    = "failed"
	OutcomeUnknown   = "unknown"
)

// OutcomeLeaseExpired is the outcome the console sets when the executor's
// lease ran out with nothing reported. A later ReportOutcome replaces it.
const OutcomeLeaseExpired = "lease_expired"

// Resolution is a person's finding about a call whose outcome nobody knew:
// Verdict is executed or not_executed.
type Resolution struct {
	Verdict  string    `json:"verdict"`
	By       string    `json:"by"` // the operator, named as in Decision.By
	Note     string    `json:"note"`
	Evidence string    `json:"evidence,omitempty"`
	At       time.Time `json:"at"`
}

// Lease is the answer to a heartbeat.
type Lease struct {
	CallID     string    `json:"call_id"`
	LeaseUntil time.Time `json:"lease_until"`
	// ExtendMax is the tool's outcome_within in seconds: the most one
	// heartbeat extends the lease by.
	ExtendMax int64 `json:"extend_max"`
}

// Redemption is the console's answer to a grant presented with a call. A
// rejection is an answer, not an error: Accepted is false and Reason says
// which check failed.
type Redemption struct {
	// Decision is "accepted" or "rejected".
	Decision string `json:"decision"`
	// Accepted is true when the grant was consumed and the call may run now.
	Accepted bool   `json:"-"`
	CallID   string `json:"call_id,omitempty"`
	// Reason is the rejection reason: malformed, bad_signature, unknown_key,
	// bad_claims, actor_mismatch, audience_mismatch, tool_mismatch,
	// target_mismatch, digest_mismatch, not_yet_valid, expired, revoked,
	// replayed or tool_changed. Refusal says whether it is the model's to
	// act on.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// Checks lists every check in the order the console ran them.
	Checks []Check `json:"checks"`
	// Envelope is, when accepted, the exact canonical bytes that were
	// hashed into Digest: the call to run. Pass CallID downstream as the
	// operation's idempotency key.
	Envelope string `json:"envelope,omitempty"`
	Digest   string `json:"digest,omitempty"`
	// LeaseUntil is, when accepted, when the executor's lease ends: report
	// the outcome before then, or extend it with Heartbeat. OutcomeWithin
	// is the tool's lease length in seconds.
	LeaseUntil    time.Time `json:"lease_until,omitzero"`
	OutcomeWithin int64     `json:"outcome_within,omitempty"`
	// StatusCode is the HTTP status: 200 accepted, 403 rejected, 409 replayed.
	StatusCode int `json:"-"`
	// Raw is the response body the redemption was read from.
	Raw json.RawMessage `json:"-"`
}

// Check is one step of a redemption. OK is nil when the check was not
// reached because an earlier one failed.
type Check struct {
	Name string `json:"name"`
	OK   *bool  `json:"ok"`
}

// refusedGrantReasons are the rejection reasons that are the model's to act
// on, as in the Python and TypeScript clients.
var refusedGrantReasons = map[string]bool{
	"tool_mismatch": true, "target_mismatch": true, "digest_mismatch": true, "expired": true,
	"revoked": true, "replayed": true, "tool_changed": true,
}

// Refusal reports whether the grant was rejected for something the model
// can act on: the call presented differs from the one approved (tool,
// target or args), the grant expired, was revoked, was already used
// (replayed), or the tool changed since; hand Reason and Message to the
// model. It is false for an accepted redemption, and for a rejection that
// points at the deployment, not the call: another agent's token
// (actor_mismatch, audience_mismatch), a key or signature this console does
// not accept (unknown_key, bad_signature, bad_claims, malformed), a clock
// ahead of the console's (not_yet_valid), or a reason this client does not
// know: the application must see those. Either way a rejected call must
// not run. A redemption refused by a freeze is not a Redemption but an
// *Error with code frozen, not a refusal either.
func (r *Redemption) Refusal() bool {
	return !r.Accepted && refusedGrantReasons[r.Reason]
}

// Failed returns the first check that failed, or nil.
func (r *Redemption) Failed() *Check {
	for i := range r.Checks {
		if ok := r.Checks[i].OK; ok != nil && !*ok {
			return &r.Checks[i]
		}
	}
	return nil
}
