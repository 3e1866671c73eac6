package tools

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestEscalateShape: the linter refuses tiers out of order, after the
// decide_within, adding nothing, naming a role that does not decide or a
// field that could lower the requirement, and names added to a tool every
// operator may approve already.
func TestEscalateShape(t *testing.T) {
	const who = "    decide_within: 1h\n    approvers: {groups: [security]}\n"
	tests := []struct {
		name, fields, path, fragment string
	}{
		{"not a list", who + "    escalate: {after: 10m}\n", "escalate", "must be a list"},
		{"out of order", who + "    escalate:\n      - {after: 30m, add_groups: [leads]}\n      - {after: 10m, add_roles: [admin]}\n",
			"escalate/1/after", "after the tier before it"},
		{"the same after twice", who + "    escalate:\n      - {after: 10m, add_groups: [leads]}\n      - {after: 10m, add_roles: [admin]}\n",
			"escalate/1/after", "after the tier before it"},
		{"past decide_within", "    approvers: {groups: [security]}\n    decide_within: 15m\n    escalate:\n      - {after: 20m, add_groups: [leads]}\n",
			"escalate/0/after", "before the tool's decide_within"},
		{"no after", who + "    escalate:\n      - {add_groups: [leads]}\n", "escalate/0", "needs after"},
		{"adds nothing", who + "    escalate:\n      - {after: 10m}\n", "escalate/0", "adds nothing"},
		{"a role that does not decide", who + "    escalate:\n      - {after: 10m, add_roles: [auditor]}\n", "escalate/0/add_roles", "cannot approve"},
		{"lowering approvals", who + "    escalate:\n      - {after: 10m, approvals: 1}\n", "escalate/0", "unknown field approvals"},
		{"lifting the passkey", who + "    escalate:\n      - {after: 10m, approve_with: any}\n", "escalate/0", "unknown field approve_with"},
		{"names added to every operator", "    escalate:\n      - {after: 10m, add_groups: [leads]}\n", "escalate/0", "would add nobody"},
		{"a channel name", who + "    escalate:\n      - {after: 10m, notify: [On Call]}\n", "escalate/0/notify", "channel names"},
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

// TestEscalateRead: tiers are read in order, and are part of the tool's
// definition digest.
func TestEscalateRead(t *testing.T) {
	const tiers = "    decide_within: 1h\n    approvers: {groups: [security]}\n    escalate:\n      - {after: 10m, add_groups: [leads]}\n      - {after: 30m, add_roles: [admin], notify: [oncall]}\n"
	r, err := Parse([]byte(toolFile(tiers)))
	if err != nil {
		t.Fatal(err)
	}
	tool, _ := r.Tool("demo.tool")
	if len(tool.Escalate) != 2 || tool.Escalate[0].After != 10*time.Minute || !slices.Equal(tool.Escalate[0].AddGroups, []string{"leads"}) ||
		tool.Escalate[1].After != 30*time.Minute || !slices.Equal(tool.Escalate[1].AddRoles, []string{"admin"}) ||
		!slices.Equal(tool.Escalate[1].Notify, []string{"oncall"}) {
		t.Fatalf("tiers read %+v", tool.Escalate)
	}
	other, err := Parse([]byte(toolFile(strings.Replace(tiers, "30m", "40m", 1))))
	if err != nil {
		t.Fatal(err)
	}
	o, _ := other.Tool("demo.tool")
	if o.DefinitionDigest == tool.DefinitionDigest {
		t.Error("changing a tier's after leaves the definition digest as it was")
	}
}

// TestWidenOnlyAdds: a tier adds its names to a condition, once each, and
// leaves "every operator" as it is.
func TestWidenOnlyAdds(t *testing.T) {
	a := Approvers{Roles: []string{"admin"}, Groups: []string{"security"}}
	got := a.Widen(Tier{AddRoles: []string{"admin", "operator"}, AddGroups: []string{"leads"}})
	if !slices.Equal(got.Roles, []string{"admin", "operator"}) || !slices.Equal(got.Groups, []string{"security", "leads"}) {
		t.Errorf("Widen = %+v", got)
	}
	if !slices.Equal(a.Roles, []string{"admin"}) {
		t.Errorf("Widen changed its receiver: %+v", a)
	}
	if got := (Approvers{}).Widen(Tier{AddGroups: []string{"leads"}}); !got.Empty() {
		t.Errorf("Widen of every operator = %+v, want every operator still", got)
	}
}
