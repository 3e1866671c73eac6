package policy

import (
	"testing"
	"time"
)

// The worked examples of docs/policy.md decide as the document says.
func TestExamplesFile(t *testing.T) {
	p, err := Load("../../examples/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	weekday11 := time.Date(2026, 12, 1, 11, 0, 0, 0, berlin) // a Tuesday
	weekday18 := time.Date(2026, 12, 1, 18, 0, 0, 0, berlin)
	saturday11 := time.Date(2026, 12, 5, 11, 0, 0, 0, berlin)
	tests := []struct {
		name, tool, actor, target, args string
		now                             time.Time
		action                          Action
		rule                            string
		approvals                       int
	}{
		{"small refund from the bot", "payments.refund", "agent:billing-bot", "invoice:INV-1", `{"amount_minor":1299,"currency":"USD","reason_code":"duplicate"}`, weekday11, Approve, "small-refunds", 1},
		{"small refund from another agent", "payments.refund", "agent:other", "invoice:INV-1", `{"amount_minor":1299,"currency":"USD","reason_code":"duplicate"}`, weekday11, Ask, "", 1},
		{"small refund in JPY", "payments.refund", "agent:billing-bot", "invoice:INV-1", `{"amount_minor":1299,"currency":"JPY","reason_code":"duplicate"}`, weekday11, Ask, "", 1},
		{"fraud, small", "payments.refund", "agent:billing-bot", "invoice:INV-1", `{"amount_minor":100,"currency":"USD","reason_code":"fraud"}`, weekday11, Ask, "fraud-needs-two", 2},
		{"too large", "payments.refund", "agent:billing-bot", "invoice:INV-1", `{"amount_minor":2000000,"currency":"USD","reason_code":"requested"}`, weekday11, Deny, "too-large", 0},
		{"deploy in hours", "releases.deploy", "agent:ci", "service:api", `{"environment":"production","version":"v1.2.3"}`, weekday11, Ask, "", 2},
		{"deploy after hours", "releases.deploy", "agent:ci", "service:api", `{"environment":"production","version":"v1.2.3"}`, weekday18, Deny, "production-after-hours", 0},
		{"deploy on Saturday", "releases.deploy", "agent:ci", "service:api", `{"environment":"production","version":"v1.2.3"}`, saturday11, Deny, "production-after-hours", 0},
		{"staging on Saturday", "releases.deploy", "agent:ci", "service:api", `{"environment":"staging","version":"v1.2.3"}`, saturday11, Ask, "", 2},
		{"delete by a stranger", "files.delete", "agent:other", "file:/srv/shared/tmp/x", `{"reason":"old"}`, weekday11, Deny, "unknown-agent", 0},
		{"delete in tmp", "files.delete", "agent:janitor", "file:/srv/shared/tmp/x", `{"reason":"old"}`, weekday11, Ask, "", 1},
		{"delete elsewhere", "files.delete", "agent:archiver", "file:/srv/shared/reports/x", `{"reason":"old"}`, weekday11, Ask, "outside-tmp", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tl, ok := p.Registry().Tool(tt.tool)
			if !ok {
				t.Fatalf("no tool %s", tt.tool)
			}
			d := p.Decide(tl, Input{Target: tt.target, Args: mustArgs(t, tt.args), Actor: tt.actor, Audience: tl.Audience, Now: tt.now})
			rule := ""
			if d.Rule != nil {
				rule = d.Rule.ID
			}
			if d.Err != nil || d.Action != tt.action || rule != tt.rule || d.Approvals != tt.approvals {
				t.Fatalf("%s by %q with %d approvals (err %v), want %s by %q with %d", d.Action, rule, d.Approvals, d.Err, tt.action, tt.rule, tt.approvals)
			}
		})
	}
}
