// Package canonical turns a proposal's JSON text into a value that cannot be
// read two ways, encodes values as RFC 8785 (JCS) canonical bytes, and
// computes the digest of a call's envelope.
//
// The parser is stricter than encoding/json on purpose: duplicate member
// names, invalid UTF-8, lone surrogates, fractions and exponents, integers
// that a float64 cannot hold exactly, and excessive nesting are refused
// rather than repaired, so that the value an operator sees and the value that
// was hashed are the same value.
//
// Parsed values are nil, bool, int64, string, []any and Object.
package canonical

import (
	"fmt"
	"strings"
)

// Problem codes shared by the parser, the proposal checks and the tool
// registry's validator. They are part of the public API contract.
const (
	CodeMalformedJSON   = "malformed_json"
	CodeInvalidUTF8     = "invalid_utf8"
	CodeDuplicateKey    = "duplicate_key"
	CodeFloatNotAllowed = "float_not_allowed"
	CodeOutOfRange      = "out_of_range"
	CodeTooDeep         = "too_deep"
	CodeTooLarge        = "too_large"
	CodeUnknownField    = "unknown_field"
	CodeMissingField    = "missing_field"
	CodeEmptyString     = "empty_string"
	CodeWrongType       = "wrong_type"
	CodeInvalidTool     = "invalid_tool"
	CodeInvalidTarget   = "invalid_target"
	CodeTooLong         = "too_long"
	CodePatternMismatch = "pattern_mismatch"
	CodeEnumMismatch    = "enum_mismatch"
	CodeTooManyItems    = "too_many_items"
	CodeUnknownTool     = "unknown_tool"
)

// Problem is one thing wrong with a proposal: a code from the list above, the
// JSON Pointer of the offending value from the proposal's root, and a
// sentence a person or a model can act on.
type Problem struct {
	Code    string `json:"code"`
	Path    string `json:"path"`
	Message string `json:"message"`
	// Offset is the byte offset in the input where a syntax problem was
	// found, or -1 when the problem is not tied to a position.
	Offset int `json:"-"`
}

func (p *Problem) Error() string {
	if p.Path == "" {
		return fmt.Sprintf("%s: %s", p.Code, p.Message)
	}
	return fmt.Sprintf("%s at %s: %s", p.Code, p.Path, p.Message)
}

// Problems is every problem found in one proposal. A non-empty Problems is
// an error; the whole proposal is refused.
type Problems []Problem

func (ps Problems) Error() string {
	switch len(ps) {
	case 0:
		return "no problems"
	case 1:
		return ps[0].Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d problems: ", len(ps))
	for i := range ps {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(ps[i].Error())
	}
	return b.String()
}

// Codes returns the problem codes in order, for logs and metrics.
func (ps Problems) Codes() []string {
	codes := make([]string, len(ps))
	for i, p := range ps {
		codes[i] = p.Code
	}
	return codes
}
