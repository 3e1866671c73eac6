package queue_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/testkit"
)

// deployer is the trusted context of a token that proposes deploys, which
// need two approvers.
var deployer = queue.Principal{Actor: "agent:deployer", Audience: "deploy-host"}

func submitRefund(tb testing.TB, e *env) *queue.Call {
	tb.Helper()
	body := fmt.Sprintf(`{"tool":"payments.refund","target":"invoice:INV-%d","args":%s}`, rand.Uint32(), refundArgs)
	c, _, err := e.q.Submit(context.Background(), agent, []byte(body))
	if err != nil {
		tb.Fatalf("Submit: %v", err)
	}
	return c
}

func submitDeploy(tb testing.TB, e *env) *queue.Call {
	tb.Helper()
	body := fmt.Sprintf(`{"tool":"releases.deploy","target":"service:checkout","args":{"version":"v1.%d.0","environment":"production","change_ticket":"CHG-1234"}}`, rand.Uint32())
	c, _, err := e.q.Submit(context.Background(), deployer, []byte(body))
	if err != nil {
		tb.Fatalf("Submit: %v", err)
	}
	return c
}

// TestDecisionRules runs the rules of approving and denying over a real
// store: who may decide, the digest the operator saw, the own-call ban, one
// approval per operator, the quorum, and terminal states.
func TestDecisionRules(t *testing.T) {
	ctx := context.Background()
	type step struct {
		op, action string // action: approve, approve-other-digest, deny, deny-empty, deny-long
		want       error  // nil: accepted
		status     queue.Status
	}
	cases := []struct {
		name   string
		deploy bool // releases.deploy (two approvals) instead of payments.refund
		steps  []step
	}{
		{"an operator approves", false, []step{{"alice", "approve", nil, queue.StatusApproved}}},
		{"an admin approves", false, []step{{"root", "approve", nil, queue.StatusApproved}}},
		{"an unknown name decides nothing", false, []step{
			{"mallory", "approve", queue.ErrNotADecider, queue.StatusPending},
			{"mallory", "deny", queue.ErrNotADecider, queue.StatusPending}}},
		{"an empty name decides nothing", false, []step{{"", "approve", queue.ErrNotADecider, queue.StatusPending}}},
		{"an auditor decides nothing", false, []step{
			{"audrey", "approve", queue.ErrNotADecider, queue.StatusPending},
			{"audrey", "deny", queue.ErrNotADecider, queue.StatusPending}}},
		{"a disabled operator decides nothing", false, []step{
			{"dora", "approve", queue.ErrNotADecider, queue.StatusPending},
			{"dora", "deny", queue.ErrNotADecider, queue.StatusPending}}},
		{"another digest approves nothing", false, []step{
			{"alice", "approve-other-digest", queue.ErrDigestMismatch, queue.StatusPending},
			{"alice", "approve", nil, queue.StatusApproved}}},
		{"nobody approves their own call", false, []step{
			{agent.Actor, "approve", queue.ErrOwnCall, queue.StatusPending}}},
		{"the quorum needs two distinct operators", true, []step{
			{"alice", "approve", nil, queue.StatusPending},
			{"alice", "approve", queue.ErrAlreadyApproved, queue.StatusPending},
			{deployer.Actor, "approve", queue.ErrOwnCall, queue.StatusPending},
			{"bob", "approve", nil, queue.StatusApproved}}},
		{"approved stays approved", false, []step{
			{"alice", "approve", nil, queue.StatusApproved},
			{"bob", "deny", queue.ErrNotPending, queue.StatusApproved},
			{"bob", "approve", queue.ErrNotPending, queue.StatusApproved}}},
		{"denied stays denied", false, []step{
			{"alice", "deny", nil, queue.StatusDenied},
			{"bob", "approve", queue.ErrNotPending, queue.StatusDenied},
			{"bob", "deny", queue.ErrNotPending, queue.StatusDenied}}},
		{"a denial needs a reason of bounded length", false, []step{
			{"alice", "deny-empty", queue.ErrReasonRequired, queue.StatusPending},
			{"alice", "deny-long", queue.ErrReasonTooLong, queue.StatusPending},
			{"alice", "deny", nil, queue.StatusDenied}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			testkit.SeedUsers(t, e.db.Accounts(), account.RoleOperator, agent.Actor, deployer.Actor, "dora")
			testkit.SeedUsers(t, e.db.Accounts(), account.RoleAdmin, "root")
			testkit.SeedUsers(t, e.db.Accounts(), account.RoleAuditor, "audrey")
			if err := account.NewService(e.db.Accounts(), nil).DisableUser(ctx, "dora", "test", audit.ChannelCLI); err != nil {
				t.Fatal(err)
			}
			c := submitRefund(t, e)
			if tc.deploy {
				c = submitDeploy(t, e)
			}
			for i, s := range tc.steps {
				var err error
				switch s.action {
				case "approve":
					_, err = e.q.Approve(ctx, s.op, audit.ChannelWeb, c.ID, c.Digest)
				case "approve-other-digest":
					_, err = e.q.Approve(ctx, s.op, audit.ChannelWeb, c.ID, strings.Repeat("0", 64))
				case "deny":
					_, err = e.q.Deny(ctx, s.op, audit.ChannelWeb, c.ID, "not today")
				case "deny-empty":
					_, err = e.q.Deny(ctx, s.op, audit.ChannelWeb, c.ID, "  ")
				case "deny-long":
					_, err = e.q.Deny(ctx, s.op, audit.ChannelWeb, c.ID, strings.Repeat("x", queue.MaxReasonBytes+1))
				}
				if s.want == nil && err != nil || s.want != nil && !errors.Is(err, s.want) {
					t.Fatalf("step %d: %s %s: error %v, want %v", i, s.op, s.action, err, s.want)
				}
				got, err := e.q.Call(ctx, c.ID)
				if err != nil {
					t.Fatal(err)
				}
				if got.Status != s.status {
					t.Fatalf("step %d: %s %s: status %s, want %s", i, s.op, s.action, got.Status, s.status)
				}
				if s.status == queue.StatusApproved && got.Grant == "" {
					t.Fatalf("step %d: approved without a grant", i)
				}
			}
		})
	}
}

// A decider disabled after loading the page decides nothing: the rule is
// checked inside the decision's transaction, not before it.
func TestDeciderCheckedInsideTheTransaction(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	c := submitRefund(t, e)
	accounts := account.NewService(e.db.Accounts(), nil)
	e.store.setBefore(func() {
		e.store.setBefore(nil)
		if err := accounts.DisableUser(ctx, "alice", "test", audit.ChannelCLI); err != nil {
			t.Error(err)
		}
	})
	if _, err := e.q.Approve(ctx, "alice", audit.ChannelWeb, c.ID, c.Digest); !errors.Is(err, queue.ErrNotADecider) {
		t.Fatalf("Approve by an operator disabled meanwhile: %v, want ErrNotADecider", err)
	}
	if got, _ := e.q.Call(ctx, c.ID); got.Status != queue.StatusPending {
		t.Fatalf("status %s, want pending", got.Status)
	}
}

// TestRetryCap: three content rejections in a row block the (actor, tool)
// pair with ErrRetryLimit, even for a valid proposal; only a decider clears
// the block; a valid proposal resets the count.
func TestRetryCap(t *testing.T) {
	ctx := context.Background()
	invalid := []byte(`{"tool":"payments.refund","target":"invoice:INV-1","args":{"amount_minor":1,"currency":"EUR","reason_code":"duplicate","sql":"x"}}`)
	valid := func() []byte {
		return fmt.Appendf(nil, `{"tool":"payments.refund","target":"invoice:INV-%d","args":%s}`, rand.Uint32(), refundArgs)
	}
	cases := []struct {
		name  string
		tries []bool // true: a valid proposal
		want  []error
	}{
		{"two rejections then a valid one", []bool{false, false, true}, []error{errProposal, errProposal, nil}},
		{"three rejections block the pair", []bool{false, false, false, true, false},
			[]error{errProposal, errProposal, errProposal, queue.ErrRetryLimit, queue.ErrRetryLimit}},
		{"a valid proposal resets the count", []bool{false, false, true, false, false, true},
			[]error{errProposal, errProposal, nil, errProposal, errProposal, nil}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			for i, ok := range tc.tries {
				b := invalid
				if ok {
					b = valid()
				}
				_, _, err := e.q.Submit(ctx, agent, b)
				if !matches(err, tc.want[i]) {
					t.Fatalf("try %d: %v, want %v", i, err, tc.want[i])
				}
			}
		})
	}
	t.Run("only a decider clears a block", func(t *testing.T) {
		e := newEnv(t)
		testkit.SeedUsers(t, e.db.Accounts(), account.RoleAuditor, "audrey")
		for range queue.RetryLimit {
			e.q.Submit(ctx, agent, invalid)
		}
		if _, _, err := e.q.Submit(ctx, agent, valid()); !errors.Is(err, queue.ErrRetryLimit) {
			t.Fatalf("after %d rejections: %v, want ErrRetryLimit", queue.RetryLimit, err)
		}
		if err := e.q.ClearRetry(ctx, "audrey", audit.ChannelWeb, agent.Actor, "payments.refund"); !errors.Is(err, queue.ErrNotADecider) {
			t.Fatalf("ClearRetry by an auditor: %v, want ErrNotADecider", err)
		}
		if err := e.q.ClearRetry(ctx, "alice", audit.ChannelWeb, agent.Actor, "payments.refund"); err != nil {
			t.Fatalf("ClearRetry by an operator: %v", err)
		}
		if err := e.q.ClearRetry(ctx, "alice", audit.ChannelWeb, agent.Actor, "payments.refund"); !errors.Is(err, queue.ErrNotBlocked) {
			t.Fatalf("ClearRetry of no block: %v, want ErrNotBlocked", err)
		}
		if _, _, err := e.q.Submit(ctx, agent, valid()); err != nil {
			t.Fatalf("Submit after the block was cleared: %v", err)
		}
	})
}

// errProposal stands for any *queue.ProposalError in a table.
var errProposal = errors.New("a proposal error")

func matches(err, want error) bool {
	switch want {
	case nil:
		return err == nil
	case errProposal:
		var pe *queue.ProposalError
		return errors.As(err, &pe)
	}
	return errors.Is(err, want)
}
