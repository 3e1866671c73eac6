package tools_test

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/countersign/countersign/internal/tools"
)

// TestRuleDigestRecomputedFromTheDocumentedForm recomputes each rule's
// digest the way docs/policy.md tells an auditor to: SHA-256 over
// "countersign/v1/rule:" and the RFC 8785 text written out by hand, with
// approvals 0 and reason "" when the rule leaves them out.
func TestRuleDigestRecomputedFromTheDocumentedForm(t *testing.T) {
	reg, err := tools.Parse([]byte(`tools:
  payments.refund:
    audience: payments-host
    target: '.+'
    auto_approve: allowed
    args: {type: object, additionalProperties: false}
    rules:
      - id: bare
        when: "target == 'x'"
        then: deny
      - id: full
        when: "target.startsWith('invoice:')"
        then: ask
        approvals: 2
        reason: "  refunds need two  "
        approve_with: passkey
        notify: []
`))
	if err != nil {
		t.Fatal(err)
	}
	tl, ok := reg.Tool("payments.refund")
	if !ok {
		t.Fatal("no tool")
	}
	want := map[string]string{
		"bare": `{"approvals":0,"id":"bare","reason":"","then":"deny","when":"target == 'x'"}`,
		"full": `{"approvals":2,"approve_with":"passkey","id":"full","reason":"refunds need two","then":"ask","when":"target.startsWith('invoice:')"}`,
	}
	if len(tl.Rules) != len(want) {
		t.Fatalf("%d rules, want %d", len(tl.Rules), len(want))
	}
	for _, r := range tl.Rules {
		sum := sha256.Sum256([]byte("countersign/v1/rule:" + want[r.ID]))
		if got := hex.EncodeToString(sum[:]); r.Digest != got {
			t.Errorf("rule %s: digest %s, want %s (of %s)", r.ID, r.Digest, got, want[r.ID])
		}
	}
}
