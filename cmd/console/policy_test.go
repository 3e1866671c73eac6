package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/db"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/testkit"
	"github.com/countersign/countersign/internal/tools"
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

func TestPolicyReplayCommand(t *testing.T) {
	data := t.TempDir()
	d, err := db.Open(dbPath(data))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.Load(exampleTools)
	if err != nil {
		t.Fatal(err)
	}
	testkit.SeedUsers(t, d.Accounts(), account.RoleOperator, "alice")
	q := queue.NewService(queue.Config{Store: d.Store(), Tools: reg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx := context.Background()
	bot := queue.Principal{Actor: "agent:billing-bot", Audience: "payments-host"}
	c, _, err := q.Submit(ctx, bot, []byte(`{"tool":"payments.refund","target":"invoice:INV-9","args":{"amount_minor":1200,"currency":"USD","reason_code":"duplicate"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Deny(ctx, "alice", "web", c.ID, "already refunded"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := q.Submit(ctx, bot, []byte(`{"tool":"payments.refund","target":"invoice:INV-10","args":{"amount_minor":2000000,"currency":"USD","reason_code":"duplicate"}}`)); err != nil {
		t.Fatal(err)
	}
	d.Close()

	code, stdout, stderr := runConsole(t, "", "policy", "replay", "--tools", "../../examples/policy.yaml", "--data", data, "--since", "1h")
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, stderr)
	}
	for _, want := range []string{
		"calls a person denied, or reported failed, that the new rules would approve:\n  " + c.ID,
		"denied by alice: already refunded  → small-refunds",
		"replayed 2 calls since ",
		"1 would now be approved by rule",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	if !regexp.MustCompile(`(?m)^payments\.refund\s+2\s+1\s+1\s+0\s+0$`).MatchString(stdout) {
		t.Errorf("no payments.refund row with 2 calls, 1 ask→approve, 1 ask→deny:\n%s", stdout)
	}

	code, stdout, _ = runConsole(t, "", "policy", "replay", "--tools", "../../examples/policy.yaml", "--data", data, "--json")
	var rep struct {
		Calls        int64 `json:"calls"`
		FlaggedTotal int64 `json:"flagged_total"`
		Tools        []struct {
			Tool       string `json:"tool"`
			AskApprove int64  `json:"ask_to_approve"`
			AskDeny    int64  `json:"ask_to_deny"`
		} `json:"tools"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil || code != 0 {
		t.Fatalf("exit %d, %v: %s", code, err, stdout)
	}
	if rep.Calls != 2 || rep.FlaggedTotal != 1 || len(rep.Tools) != 1 || rep.Tools[0].AskApprove != 1 || rep.Tools[0].AskDeny != 1 {
		t.Fatalf("report %+v", rep)
	}

	// The window leaves the calls out.
	code, stdout, _ = runConsole(t, "", "policy", "replay", "--tools", "../../examples/policy.yaml", "--data", data, "--since", time.Now().Add(time.Hour).Format(time.RFC3339))
	if code != 0 || !strings.Contains(stdout, "replayed 0 calls") {
		t.Fatalf("future --since: exit %d\n%s", code, stdout)
	}
	code, _, stderr = runConsole(t, "", "policy", "replay", "--tools", "../../examples/policy.yaml", "--data", data, "--since", "last week")
	if code != 2 || !strings.Contains(stderr, "since must be") {
		t.Fatalf("bad --since: exit %d, %s", code, stderr)
	}
}
