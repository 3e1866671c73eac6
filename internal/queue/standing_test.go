package queue

import (
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/tools"
)

// Standing names the first reason a person is not offered Approve, in the
// order the call's page explains them, and none when they are.
func TestStandingRefusal(t *testing.T) {
	olivia := account.User{Name: "olivia", Role: account.RoleOperator, Groups: []string{"payments"}}
	call := func(edit func(c *Call)) *Call {
		c := &Call{ID: "call_x", Tool: "payments.refund", Actor: "agent:billing", Status: StatusPending, ApprovalsRequired: 2,
			Approvers: tools.Approvers{Groups: []string{"payments"}}}
		if edit != nil {
			edit(c)
		}
		return c
	}
	freeze := []Freeze{{ID: 1, Tool: "payments.refund", Reason: "audit", By: "root", At: time.Unix(0, 0)}}
	cases := []struct {
		name       string
		c          *Call
		u          account.User
		fz         []Freeze
		changed    bool
		delegators []string
		want       string
		wantFor    []string
	}{
		{name: "offered", c: call(nil), u: olivia, want: ""},
		{name: "an auditor", c: call(nil), u: account.User{Name: "aude", Role: account.RoleAuditor}, want: RefusedNotDecider},
		{name: "decided", c: call(func(c *Call) { c.Status = StatusApproved }), u: olivia, want: RefusedNotPending},
		{name: "a plan item", c: call(func(c *Call) { c.PlanID = "plan_x" }), u: olivia, want: RefusedNotPending},
		{name: "every approval in", c: call(func(c *Call) { c.Approvals = []Approval{{Operator: "a"}, {Operator: "b"}} }), u: olivia, want: RefusedComplete},
		{name: "frozen", c: call(nil), u: olivia, fz: freeze, want: RefusedFrozen},
		{name: "tool changed", c: call(nil), u: olivia, changed: true, want: RefusedToolChanged},
		{name: "own call", c: call(func(c *Call) { c.Actor = "Olivia" }), u: olivia, want: RefusedOwnCall},
		{name: "owner by team", c: call(func(c *Call) { c.Owners = []string{"team:payments"} }), u: olivia, want: RefusedOwner},
		{name: "not an approver", c: call(func(c *Call) { c.Approvers = tools.Approvers{Roles: []string{"admin"}} }), u: olivia, want: RefusedNotApprover},
		{name: "for a delegator", c: call(func(c *Call) { c.Approvers = tools.Approvers{Roles: []string{"admin"}} }), u: olivia,
			delegators: []string{"adele", "adele", "olivia"}, want: "", wantFor: []string{"adele"}},
		{name: "a delegator who approved", c: call(func(c *Call) {
			c.Approvers = tools.Approvers{Roles: []string{"admin"}}
			c.Approvals = []Approval{{Operator: "adele"}}
		}), u: olivia, delegators: []string{"adele"}, want: RefusedNotApprover},
		{name: "approved already", c: call(func(c *Call) { c.Approvals = []Approval{{Operator: "olivia"}} }), u: olivia, want: RefusedApproved},
		{name: "approved for another", c: call(func(c *Call) { c.Approvals = []Approval{{Operator: "omar", For: "olivia"}} }), u: olivia, want: RefusedApproved},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := StandingOf(tc.c, tc.u, tc.fz, tc.changed, tc.delegators)
			if got := st.Refusal(); got != tc.want {
				t.Errorf("Refusal() = %q, want %q (%+v)", got, tc.want, st)
			}
			if st.MayApprove() != (tc.want == "") {
				t.Errorf("MayApprove() = %v with refusal %q", st.MayApprove(), tc.want)
			}
			if len(st.For) != len(tc.wantFor) || len(st.For) > 0 && st.For[0] != tc.wantFor[0] {
				t.Errorf("For = %v, want %v", st.For, tc.wantFor)
			}
		})
	}
}
