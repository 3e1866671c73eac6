package tools

import (
	"strings"
	"testing"
)

func TestApproversShape(t *testing.T) {
	tests := []struct {
		name, fields, path, fragment string
	}{
		{"not a mapping", "    approvers: [admin]\n", "approvers", "must be a mapping"},
		{"unknown field", "    approvers: {users: [alice]}\n", "approvers", "unknown field users"},
		{"auditor cannot approve", "    approvers: {roles: [auditor]}\n", "approvers/roles", "cannot approve"},
		{"roles not a list", "    approvers: {roles: admin}\n", "approvers/roles", "must be a list"},
		{"blank group", "    approvers: {groups: ['']}\n", "approvers/groups", "non-empty"},
		{"group with spaces at the ends", "    approvers: {groups: [' sre']}\n", "approvers/groups", "without spaces"},
		{"invisible group", "    approvers: {groups: [\"s\\u200bre\"]}\n", "approvers/groups", "invisible"},
		{"duplicate group", "    approvers: {groups: [sre, sre]}\n", "approvers/groups", "listed twice"},
		{"empty condition", "    approvers: {}\n", "approvers", "at least one role or group"},
		{"approve_with value", "    approve_with: yubikey\n", "approve_with", "must be passkey or any"},
		{"approve_with on an approve rule", "    auto_approve: allowed\n    rules:\n      - {id: a, when: 'true', then: approve, approve_with: passkey}\n",
			"rules/a/approve_with", "ask rules only"},
		{"approve_with on a deny rule", "    rules:\n      - {id: a, when: 'true', then: deny, reason: no, approve_with: passkey}\n",
			"rules/a/approve_with", "ask rules only"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, p := range lintProblems(t, toolFile(tt.fields)) {
				if p.Path == tt.path && strings.Contains(p.Message, tt.fragment) {
					return
				}
			}
			t.Fatalf("no problem at %s with %q in %v", tt.path, tt.fragment, lintProblems(t, toolFile(tt.fields)))
		})
	}
}

func TestApproversRead(t *testing.T) {
	r, err := Parse([]byte(toolFile(`    approve_with: passkey
    approvers:
      roles: [admin]
      groups: [payments-leads, sre]
    rules:
      - {id: big, when: 'true', then: ask, approve_with: passkey}
      - {id: other, when: 'true', then: ask}
`)))
	if err != nil {
		t.Fatal(err)
	}
	tl, _ := r.Tool("demo.tool")
	if !tl.RequirePasskey {
		t.Error("approve_with: passkey not read")
	}
	if got := tl.Approvers; len(got.Roles) != 1 || got.Roles[0] != "admin" || len(got.Groups) != 2 {
		t.Errorf("Approvers = %+v", got)
	}
	if !tl.Rules[0].RequirePasskey || tl.Rules[1].RequirePasskey {
		t.Errorf("rules = %+v", tl.Rules)
	}
	if tl.Rules[0].Digest == ruleDigest(RuleSpec{ID: "big", When: "true", Then: ThenAsk}) {
		t.Error("the rule digest does not cover approve_with")
	}
	if got, want := tl.Approvers.Describe(), "role admin, or groups payments-leads, sre"; got != want {
		t.Errorf("Describe = %q, want %q", got, want)
	}
	r2, err := Parse([]byte(toolFile("    approve_with: any\n")))
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := r2.Tool("demo.tool")
	if plain.RequirePasskey || !plain.Approvers.Empty() || plain.Approvers.Describe() != "any operator" {
		t.Errorf("defaults: passkey %v, approvers %+v", plain.RequirePasskey, plain.Approvers)
	}
}

// A rule digest written before approve_with existed stays what it was.
func TestRuleDigestUnchangedWithoutApproveWith(t *testing.T) {
	r := RuleSpec{ID: "small", When: "args.n < 3", Then: ThenApprove, Reason: "small"}
	before := ruleDigest(r)
	r.RequirePasskey = false
	if ruleDigest(r) != before {
		t.Fatal("digest changed")
	}
	if got := prefixedDigest("countersign/v1/rule:", map[string]any{}); len(got) != 64 {
		t.Fatal(got)
	}
}

func TestApproversAllows(t *testing.T) {
	a := Approvers{Roles: []string{"admin"}, Groups: []string{"payments-leads"}}
	cases := []struct {
		role   string
		groups []string
		want   bool
	}{
		{"admin", nil, true},
		{"operator", nil, false},
		{"operator", []string{"eng", "payments-leads"}, true},
		{"operator", []string{"payments-lead"}, false},
	}
	for _, c := range cases {
		if got := a.Allows(c.role, c.groups); got != c.want {
			t.Errorf("Allows(%s, %v) = %v, want %v", c.role, c.groups, got, c.want)
		}
	}
	if !(Approvers{}).Allows("operator", nil) {
		t.Error("an empty condition refuses an operator")
	}
}

func TestAutoApproveBlockersPersonOnly(t *testing.T) {
	for _, tt := range []struct {
		fields, want string
	}{
		{"    auto_approve: allowed\n    approve_with: passkey\n", "passkey"},
		{"    auto_approve: allowed\n    approvers: {groups: [sre]}\n", "group sre"},
	} {
		r, err := Parse([]byte(toolFile(tt.fields)))
		if err != nil {
			t.Fatal(err)
		}
		tl, _ := r.Tool("demo.tool")
		got := tl.AutoApproveBlockers()
		if len(got) != 1 || !strings.Contains(got[0], tt.want) {
			t.Errorf("%q: blockers %v, want one naming %q", tt.fields, got, tt.want)
		}
	}
}

// approve_from lists web, cli and api, each once, and names web; a tool
// without it is approvable from every channel; the list is part of the
// definition digest.
func TestApproveFrom(t *testing.T) {
	for _, tt := range []struct{ name, fields, fragment string }{
		{"not a list", "    approve_from: web\n", "must be a list"},
		{"empty", "    approve_from: []\n", "must be a list"},
		{"unknown channel", "    approve_from: [web, slack]\n", "unknown channel slack"},
		{"twice", "    approve_from: [web, web]\n", "listed twice"},
		{"without web", "    approve_from: [api]\n", "must name web"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, p := range lintProblems(t, toolFile(tt.fields)) {
				if p.Path == "approve_from" && strings.Contains(p.Message, tt.fragment) {
					return
				}
			}
			t.Fatalf("no problem at approve_from with %q in %v", tt.fragment, lintProblems(t, toolFile(tt.fields)))
		})
	}
	tool := func(fields string) *Tool {
		t.Helper()
		r, err := Parse([]byte(toolFile(fields)))
		if err != nil {
			t.Fatal(err)
		}
		tl, _ := r.Tool("demo.tool")
		return tl
	}
	open, web, cli := tool(""), tool("    approve_from: [web]\n"), tool("    approve_from: [web, cli]\n")
	for _, c := range []struct {
		t       *Tool
		channel string
		want    bool
	}{
		{open, ApproveFromAPI, true}, {open, ApproveFromCLI, true}, {open, ApproveFromWeb, true},
		{web, ApproveFromAPI, false}, {web, ApproveFromCLI, false}, {web, ApproveFromWeb, true},
		{cli, ApproveFromAPI, false}, {cli, ApproveFromCLI, true}, {cli, ApproveFromWeb, true},
	} {
		if got := c.t.ApprovableFrom(c.channel); got != c.want {
			t.Errorf("approve_from %v, channel %s: %t, want %t", c.t.ApproveFrom, c.channel, got, c.want)
		}
	}
	if open.DefinitionDigest == web.DefinitionDigest || web.DefinitionDigest == cli.DefinitionDigest {
		t.Error("the definition digest does not cover approve_from")
	}
}
