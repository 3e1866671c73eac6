package policy

import (
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/tools"
)

// A rule cannot approve what only a person can: a tool that requires
// passkeys or names its approvers takes no `then: approve` rule.
func TestApproveRuleRefusedOnPersonOnlyTools(t *testing.T) {
	for _, extra := range []string{
		"    approve_with: passkey\n",
		"    approvers: {roles: [admin]}\n",
	} {
		src := strings.Replace(file("1", `
      - id: small
        when: args.amount_minor <= 5000
        then: approve
`), "    auto_approve: allowed\n", "    auto_approve: allowed\n"+extra, 1)
		_, err := Parse([]byte(src))
		wantLint(t, err, "rules/small", "approves without a person")
	}
}

func TestDecideRequirePasskey(t *testing.T) {
	rules := `
      - id: big-needs-passkey
        when: args.amount_minor >= 100000
        then: ask
        approve_with: passkey
      - id: jpy
        when: args.currency == "JPY"
        then: deny
        reason: finance only
      - id: small
        when: args.amount_minor <= 5000
        then: approve
`
	p := mustPolicy(t, file("1", rules))
	cases := []struct {
		args   string
		action Action
		want   bool
	}{
		{`{"amount_minor":200000,"currency":"USD"}`, Ask, true},
		{`{"amount_minor":50000,"currency":"USD"}`, Ask, false},
		{`{"amount_minor":50000,"currency":"JPY"}`, Deny, false},
		{`{"amount_minor":100,"currency":"USD"}`, Approve, false},
	}
	for _, c := range cases {
		d := decide(t, p, mustArgs(t, c.args))
		if d.Action != c.action || d.RequirePasskey != c.want {
			t.Errorf("%s: %s, passkey %v; want %s, %v", c.args, d.Action, d.RequirePasskey, c.action, c.want)
		}
	}

	// The tool's own requirement holds whatever the ask rule says.
	src := strings.Replace(file("1", "      - {id: any, when: 'true', then: ask}\n"), "    auto_approve: allowed\n", "    approve_with: passkey\n", 1)
	if d := decide(t, mustPolicy(t, src), mustArgs(t, `{"amount_minor":1,"currency":"USD"}`)); !d.RequirePasskey {
		t.Error("a passkey tool's ask decision does not require a passkey")
	}
}

// A rule that fails to evaluate sends the call to people with every
// requirement a later ask rule could have set.
func TestEvaluationErrorKeepsPasskeyRequirement(t *testing.T) {
	p := mustPolicy(t, file("1", `
      - id: divides
        when: 100 / (args.amount_minor - 1) > 1
        then: ask
      - id: passkey-later
        when: "true"
        then: ask
        approve_with: passkey
`))
	d := decide(t, p, mustArgs(t, `{"amount_minor":1,"currency":"EUR"}`))
	if d.Err == nil || !d.RequirePasskey {
		t.Fatalf("err %v, passkey %v; want an error and a passkey requirement", d.Err, d.RequirePasskey)
	}
}

// A mirrored tool's rules that do not fit the upstream's schema send its
// calls to people with every requirement an ask rule among them could have
// set: the most approvals and the passkey, never the tool's bare approvals.
func TestMirroredRulesThatDoNotFitKeepEveryRequirement(t *testing.T) {
	tool, err := tools.Mirror(tools.MirrorSpec{Server: "bank", Name: "pay",
		InputSchema: []byte(`{"type":"object","properties":{"cents":{"type":"integer"}},"required":["cents"]}`),
		Override: tools.MCPOverride{Approvals: 1, Rules: []tools.RuleSpec{
			{ID: "big", When: "args.amount_minor > 1000", Then: tools.ThenAsk, Approvals: 3},
			{ID: "signed", When: "args.cents > 10", Then: tools.ThenAsk, RequirePasskey: true},
		}}})
	if err != nil {
		t.Fatal(err)
	}
	p := mustPolicy(t, file("1", "      - {id: never, when: \"false\", then: ask}\n"))
	p.Registry().SetMirrored("bank", []*tools.Tool{tool})
	d := p.Decide(tool, Input{Target: "mcp:bank", Args: mustArgs(t, `{"cents":5000}`), Actor: "agent:a", Audience: "bank"})
	if d.Err == nil || d.Action != Ask || d.Approvals != 3 || !d.RequirePasskey {
		t.Fatalf("decision %v, %d approvals, passkey %v, err %v; want ask 3 people with passkeys and an error",
			d.Action, d.Approvals, d.RequirePasskey, d.Err)
	}
}
