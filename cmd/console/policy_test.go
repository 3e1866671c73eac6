package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// policyTools is a tools file with rules, for the policy commands' tests.
const policyTools = `tools:
  payments.refund:
    audience: payments-host
    target: '^invoice:INV-[0-9]+$'
    auto_approve: allowed
    informational: [/notes]
    args:
      type: object
      additionalProperties: false
      required: [amount_minor, currency]
      properties:
        amount_minor: {type: integer, minimum: 1}
        currency: {type: string, enum: [USD, EUR, JPY]}
        notes: {type: string}
    rules:
      - id: no-jpy
        when: args.currency == "JPY"
        then: deny
        reason: JPY refunds go through finance
      - id: big-asks-two
        when: args.amount_minor > 100000
        then: ask
        approvals: 2
      - id: small-refunds
        when: args.amount_minor <= 5000 && actor == "agent:billing-bot"
        then: approve
        reason: small refunds from the billing bot
`

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPolicyTestCommand(t *testing.T) {
	file := writeFile(t, "tools.yaml", policyTools)
	proposal := func(amount, currency string) string {
		return `{"tool":"payments.refund","target":"invoice:INV-1","args":{"amount_minor":` + amount + `,"currency":"` + currency + `","notes":"n"}}`
	}
	type step struct {
		Rule    string `json:"rule"`
		Matched bool   `json:"matched"`
	}
	type out struct {
		Decision    string `json:"decision"`
		Rule        string `json:"rule"`
		RuleDigest  string `json:"rule_digest"`
		Reason      string `json:"reason"`
		Approvals   int    `json:"approvals"`
		Steps       []step `json:"steps"`
		ToolDigest  string `json:"tool_digest"`
		ToolsDigest string `json:"tools_digest"`
	}
	tests := []struct {
		name, proposal, actor string
		want                  out
		steps                 int
	}{
		{"small refund approved", proposal("1200", "USD"), "agent:billing-bot", out{Decision: "approve", Rule: "small-refunds", Approvals: 1, Reason: "small refunds from the billing bot"}, 3},
		{"another actor asks", proposal("1200", "USD"), "agent:other", out{Decision: "ask", Approvals: 1}, 3},
		{"big refund asks two", proposal("200000", "USD"), "agent:billing-bot", out{Decision: "ask", Rule: "big-asks-two", Approvals: 2}, 2},
		{"JPY denied", proposal("100", "JPY"), "agent:billing-bot", out{Decision: "deny", Rule: "no-jpy", Reason: "JPY refunds go through finance"}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runConsole(t, "", "policy", "test", "--tools", file, "--actor", tt.actor, "--json", tt.proposal)
			if code != 0 {
				t.Fatalf("exit %d, stderr %s", code, stderr)
			}
			var got out
			if err := json.Unmarshal([]byte(stdout), &got); err != nil {
				t.Fatalf("%v: %s", err, stdout)
			}
			if got.Decision != tt.want.Decision || got.Rule != tt.want.Rule || got.Approvals != tt.want.Approvals || got.Reason != tt.want.Reason {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
			if len(got.Steps) != tt.steps || len(got.ToolDigest) != 64 || len(got.ToolsDigest) != 64 {
				t.Fatalf("steps %+v, digests %q %q", got.Steps, got.ToolDigest, got.ToolsDigest)
			}
			if tt.want.Rule != "" && (len(got.RuleDigest) != 64 || !got.Steps[len(got.Steps)-1].Matched) {
				t.Fatalf("rule digest %q, steps %+v", got.RuleDigest, got.Steps)
			}
		})
	}

	// The human-readable form says which rule matched and shows each rule.
	code, stdout, _ := runConsole(t, proposal("1200", "USD"), "policy", "test", "--tools", file, "--actor", "agent:billing-bot")
	if code != 0 || !strings.HasPrefix(stdout, "approve: by rule small-refunds, recorded as policy:small-refunds") ||
		!strings.Contains(stdout, "MATCH") || !strings.Contains(stdout, `when: args.currency == "JPY"`) {
		t.Fatalf("exit %d, stdout:\n%s", code, stdout)
	}

	// A refused proposal is the API's error, exit 2; a refused file exit 1.
	code, stdout, _ = runConsole(t, "", "policy", "test", "--tools", file, "--actor", "a", `{"tool":"payments.refund","target":"invoice:INV-1","args":{"amount_minor":1.5,"currency":"USD"}}`)
	if code != 2 || !strings.Contains(stdout, "float_not_allowed") {
		t.Fatalf("float: exit %d, stdout %s", code, stdout)
	}
	bad := writeFile(t, "bad.yaml", strings.Replace(policyTools, "args.currency ==", "args.curency ==", 1))
	code, _, stderr := runConsole(t, "", "policy", "test", "--tools", bad, "--actor", "a", proposal("1", "USD"))
	if code != 1 || !strings.Contains(stderr, "args.curency") {
		t.Fatalf("bad file: exit %d, stderr %s", code, stderr)
	}
}

func TestToolsLintReportsRuleProblems(t *testing.T) {
	bad := writeFile(t, "bad.yaml", strings.Replace(strings.Replace(policyTools, "args.currency ==", "args.curency ==", 1),
		"auto_approve: allowed", "auto_approve: never", 1))
	code, stdout, _ := runConsole(t, "", "tools", "lint", bad)
	if code != 2 {
		t.Fatalf("exit %d, stdout %s", code, stdout)
	}
	for _, want := range []string{
		bad + ":17: payments.refund: rules/no-jpy/when: names args.curency, which the tool's args schema does not declare",
		bad + ":24: payments.refund: rules/small-refunds: rule small-refunds approves without a person, which payments.refund does not allow",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("lint output lacks %q:\n%s", want, stdout)
		}
	}
}
