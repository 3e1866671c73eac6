package client

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/wire"
)

// Every kind of answer the Python and TypeScript suites classify
// (test_refusal_of_each_kind_of_answer, "refusals of the call stay
// refusals"), read the way Do reads an answer, classified the same way.
func TestErrorRefusal(t *testing.T) {
	answer := func(status int, body string) *Error {
		var e *Error
		if !errors.As((&response{status: status, body: []byte(body)}).error(), &e) {
			t.Fatalf("%d %s: not an *Error", status, body)
		}
		return e
	}
	problem := `[{"code":"enum_mismatch","path":"/args/currency","message":"x"}]`
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"invalid_arguments", answer(422, `{"error":{"code":"invalid_arguments","message":"x","problems":`+problem+`}}`), true},
		{"malformed_json", answer(400, `{"error":{"code":"malformed_json","message":"x","problems":[{"code":"malformed_json","path":"","message":"x"}]}}`), true},
		{"too_large", answer(413, `{"error":{"code":"too_large","message":"x"}}`), true},
		{"denied_by_policy", answer(403, `{"error":{"code":"denied_by_policy","message":"x","reason":"r"}}`), true},
		{"previously_denied", answer(409, `{"error":{"code":"previously_denied","message":"x","reason":"r"}}`), true},
		{"retry_limit", answer(429, `{"error":{"code":"retry_limit","message":"x"}}`), true},
		{"unauthorized", answer(401, `{"error":{"code":"unauthorized","message":"the token is unknown or revoked"}}`), false},
		{"audience_not_allowed", answer(403, `{"error":{"code":"audience_not_allowed","message":"x"}}`), false},
		{"unknown_tool", answer(422, `{"error":{"code":"unknown_tool","message":"x","problems":[{"code":"unknown_tool","path":"/tool","message":"x"}]}}`), false},
		{"too_many_waits", answer(429, `{"error":{"code":"too_many_waits","message":"x"}}`), false},
		{"frozen", answer(503, `{"error":{"code":"frozen","message":"x"}}`), false},
		{"frozen redemption", frozenError([]byte(`{"decision":"rejected","reason":"frozen","call_id":"call_x","message":"x","freeze":{"reason":"r"}}`)), false},
		{"internal", answer(500, `{"error":{"code":"internal","message":"x"}}`), false},
		{"not JSON", answer(502, `<html>bad gateway</html>`), false},
		{"nothing sent", &Error{Code: CodeUnauthorized, Message: "no token"}, false},
		{"unreachable", fmt.Errorf("countersign: POST /api/v1/calls: %w", errors.New("connect: connection refused")), false},
		{"wrapped refusal", fmt.Errorf("refund: %w", answer(409, `{"error":{"code":"previously_denied","message":"x"}}`)), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsRefusal(tc.err); got != tc.want {
				t.Errorf("IsRefusal(%v)=%v, want %v", tc.err, got, tc.want)
			}
			var e *Error
			if errors.As(tc.err, &e) && e.Refusal() != tc.want {
				t.Errorf("Refusal()=%v, want %v", e.Refusal(), tc.want)
			}
		})
	}
}

// Every rejection reason of DESIGN §6 (and one this client does not know),
// classified as the Python and TypeScript clients classify a rejected
// grant; an accepted redemption is never a refusal.
func TestRedemptionRefusal(t *testing.T) {
	cases := []struct {
		reason string
		status int
		want   bool
	}{
		{"tool_mismatch", 403, true},
		{"target_mismatch", 403, true},
		{"digest_mismatch", 403, true},
		{"expired", 403, true},
		{"revoked", 403, true},
		{"replayed", 409, true},
		{"tool_changed", 403, true},
		{"malformed", 403, false},
		{"bad_signature", 403, false},
		{"unknown_key", 403, false},
		{"bad_claims", 403, false},
		{"actor_mismatch", 403, false},
		{"audience_mismatch", 403, false},
		{"not_yet_valid", 403, false},
		{"a_new_reason", 403, false},
	}
	for _, tc := range cases {
		t.Run(tc.reason, func(t *testing.T) {
			r := &Redemption{Redemption: wire.Redemption{Decision: "rejected", Reason: tc.reason}, StatusCode: tc.status}
			if got := r.Refusal(); got != tc.want {
				t.Errorf("Refusal()=%v, want %v", got, tc.want)
			}
		})
	}
	if r := (&Redemption{Redemption: wire.Redemption{Decision: "accepted"}, Accepted: true, StatusCode: 200}); r.Refusal() {
		t.Error("an accepted redemption: Refusal()=true, want false")
	}
}

// The sets this client classifies by are the Python and TypeScript
// clients' own, read from their sources: a reason or code added to one
// client and not the others fails here.
func TestRefusalSetsMatchTheOtherClients(t *testing.T) {
	read := func(path string) string {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	set := func(src, pattern string) []string {
		t.Helper()
		m := regexp.MustCompile(pattern).FindStringSubmatch(src)
		if m == nil {
			t.Fatalf("no match for %s", pattern)
		}
		var out []string
		for _, q := range regexp.MustCompile(`["']([a-z_]+)["']`).FindAllStringSubmatch(m[1], -1) {
			out = append(out, q[1])
		}
		slices.Sort(out)
		return out
	}
	keys := func(m map[string]bool) []string {
		var out []string
		for k := range m {
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	py := read("../clients/python/countersign/_errors.py")
	ts := read("../clients/typescript/src/errors.ts")
	for _, c := range []struct {
		name string
		got  []string
		want []string
	}{
		{"python refusal codes", keys(refusalCodes), set(py, `(?s)_REFUSAL_CODES = frozenset\(\{(.*?)\}\)`)},
		{"typescript refusal codes", keys(refusalCodes), set(ts, `(?s)const REFUSAL_CODES = new Set\(\[(.*?)\]\)`)},
		{"python refused grant reasons", keys(refusedGrantReasons), set(py, `(?s)_REFUSED_GRANT_REASONS = frozenset\(\{(.*?)\}\)`)},
		{"typescript refused grant reasons", keys(refusedGrantReasons), set(ts, `(?s)const REFUSED_GRANT_REASONS = new Set\(\[(.*?)\]\)`)},
	} {
		if strings.Join(c.got, ",") != strings.Join(c.want, ",") {
			t.Errorf("%s: Go has %q, want %q", c.name, c.got, c.want)
		}
	}
}
