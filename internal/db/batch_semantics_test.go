package db

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/testkit"
)

// A group commit must decide every write as a transaction of its own
// would: what one transaction reads once (readTxState: the freezes, the
// audit head, the rollbacks) and what one write remembers (the retry
// pairs) must follow the writes before it in the same transaction. The
// test below runs one sequence of queue operations twice, on two fresh
// databases: one write per transaction, then every operation in one group
// commit. Every answer and the state left must be the same, and as
// expected.

// batchSetup is what the operations act on: approved calls (with their
// grants) and pending ones, made before the operations run.
type batchSetup struct {
	approved []*queue.Call
	pending  []*queue.Call
}

type batchOp struct {
	name string
	want string
	run  func(ctx context.Context, l *ledger, s *batchSetup) string
}

// outcome names an answer without anything random in it.
func outcome(err error) string {
	var fz *queue.FrozenError
	var pe *queue.ProposalError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &fz):
		return "frozen"
	case errors.As(err, &pe):
		return "invalid"
	case errors.Is(err, queue.ErrRetryLimit):
		return "retry_limit"
	}
	return "error: " + err.Error()
}

func redeemOutcome(r *queue.Redemption, err error) string {
	switch {
	case err != nil:
		return outcome(err)
	case r.Accepted:
		return "accepted"
	}
	return r.Reason
}

func refundBody(invoice int) []byte {
	return fmt.Appendf(nil, `{"tool":"payments.refund","target":"invoice:INV-%d","args":{"amount_minor":1299,"currency":"EUR","reason_code":"duplicate"}}`, invoice)
}

func batchOps() []batchOp {
	redeem := func(i int) func(context.Context, *ledger, *batchSetup) string {
		return func(ctx context.Context, l *ledger, s *batchSetup) string {
			return redeemOutcome(l.q.Redeem(ctx, agent, redemptionBody(s.approved[i])))
		}
	}
	freeze := func(tool, actor string) func(context.Context, *ledger, *batchSetup) string {
		return func(ctx context.Context, l *ledger, s *batchSetup) string {
			_, err := l.q.Freeze(ctx, "alice", audit.ChannelCLI, tool, actor, "incident")
			return outcome(err)
		}
	}
	unfreeze := func(tool, actor string) func(context.Context, *ledger, *batchSetup) string {
		return func(ctx context.Context, l *ledger, s *batchSetup) string {
			fs, err := l.q.Unfreeze(ctx, "root", audit.ChannelCLI, tool, actor)
			if err != nil {
				return outcome(err)
			}
			return fmt.Sprintf("lifted %d", len(fs))
		}
	}
	invalid := func(ctx context.Context, l *ledger, s *batchSetup) string {
		_, _, err := l.q.Submit(ctx, agent, []byte(`{"tool":"payments.refund","target":"invoice:INV-1","args":{"amount_minor":1299,"currency":"EUR","reason_code":"duplicate","sql":"drop"}}`))
		return outcome(err)
	}
	valid := func(invoice int) func(context.Context, *ledger, *batchSetup) string {
		return func(ctx context.Context, l *ledger, s *batchSetup) string {
			_, created, err := l.q.Submit(ctx, agent, refundBody(invoice))
			if err == nil && !created {
				return "not created"
			}
			return outcome(err)
		}
	}
	approve := func(i int) func(context.Context, *ledger, *batchSetup) string {
		return func(ctx context.Context, l *ledger, s *batchSetup) string {
			c, err := l.q.Approve(ctx, "bob", audit.ChannelCLI, s.pending[i].ID, s.pending[i].Digest)
			if err == nil {
				return string(c.Status)
			}
			return outcome(err)
		}
	}
	return []batchOp{
		{"freeze the tool", "ok", freeze("payments.refund", "")},
		{"redeem under the freeze just made", "frozen", redeem(0)},
		{"approve under the freeze just made", "frozen", approve(0)},
		{"lift the freeze", "lifted 1", unfreeze("payments.refund", "")},
		{"redeem after the lift", "accepted", redeem(1)},
		{"redeem the same grant again", "replayed", redeem(1)},
		{"freeze the tool again", "ok", freeze("payments.refund", "")},
		{"redeem under the freeze made again", "frozen", redeem(2)},
		{"lift it again", "lifted 1", unfreeze("payments.refund", "")},
		{"freeze the actor", "ok", freeze("", agent.Actor)},
		{"redeem under the actor's freeze", "frozen", redeem(2)},
		{"lift the actor's freeze", "lifted 1", unfreeze("", agent.Actor)},
		{"redeem once every freeze is lifted", "accepted", redeem(2)},
		{"approve once every freeze is lifted", "approved", approve(0)},
		{"revoke a grant", "ok", func(ctx context.Context, l *ledger, s *batchSetup) string {
			_, err := l.q.RevokeGrant(ctx, "alice", audit.ChannelCLI, s.approved[3].ID, "wrong invoice")
			return outcome(err)
		}},
		{"redeem the revoked grant", "revoked", redeem(3)},
		{"present another target", "target_mismatch", func(ctx context.Context, l *ledger, s *batchSetup) string {
			c := s.approved[4]
			return redeemOutcome(l.q.Redeem(ctx, agent, redemptionBodyOf(c.Grant, c.Tool, "invoice:INV-9", c.Args)))
		}},
		{"redeem after a refused presentation", "accepted", redeem(4)},
		{"refused proposal 1", "invalid", invalid},
		{"refused proposal 2", "invalid", invalid},
		{"refused proposal 3", "invalid", invalid},
		{"valid proposal after three refusals", "retry_limit", valid(101)},
		{"clear the block", "ok", func(ctx context.Context, l *ledger, s *batchSetup) string {
			return outcome(l.q.ClearRetry(ctx, "alice", audit.ChannelCLI, agent.Actor, "payments.refund"))
		}},
		{"valid proposal after the block was cleared", "ok", valid(102)},
		{"refused proposal after the clearance", "invalid", invalid},
		{"valid proposal resets the count", "ok", valid(103)},
		{"refused proposal 1 again", "invalid", invalid},
		{"refused proposal 2 again", "invalid", invalid},
		{"valid proposal before a third refusal", "ok", valid(104)},
		{"deny a pending call", "ok", func(ctx context.Context, l *ledger, s *batchSetup) string {
			_, err := l.q.Deny(ctx, "bob", audit.ChannelCLI, s.pending[1].ID, "no")
			return outcome(err)
		}},
		{"freeze while a redemption waits behind it", "ok", freeze("payments.refund", "")},
		{"redeem behind it", "frozen", redeem(5)},
	}
}

// batchRun makes the setup on a fresh ledger and runs ops, each in a
// transaction of its own (batch false) or all in one group commit.
func batchRun(t *testing.T, ops []batchOp, batch bool) ([]string, *ledger) {
	t.Helper()
	clk := testkit.NewClock(epoch)
	l := newLedger(t, clk.Now)
	ctx := context.Background()
	if err := testkit.Seed(ctx, l.db.Accounts(), account.RoleAdmin, "root"); err != nil {
		t.Fatal(err)
	}
	s := &batchSetup{}
	for range 6 {
		s.approved = append(s.approved, MustApprove(t, l))
	}
	for i := range 2 {
		c, _, err := l.q.Submit(ctx, agent, refundBody(900+i))
		if err != nil {
			t.Fatal(err)
		}
		s.pending = append(s.pending, c)
	}
	got := make([]string, len(ops))
	if !batch {
		for i, op := range ops {
			got[i] = op.run(ctx, l, s)
		}
		return got, l
	}
	commits := l.db.commits.Load()
	var wg sync.WaitGroup
	l.db.lockWriter()
	for i, op := range ops {
		wg.Go(func() { got[i] = op.run(ctx, l, s) })
		queued(t, l.db, i+1)
	}
	l.db.unlockWriter()
	wg.Wait()
	if n := l.db.commits.Load() - commits; n != 1 {
		t.Errorf("the operations took %d commits, want one group commit", n)
	}
	return got, l
}

// batchState is what the operations left, without anything random.
func batchState(t *testing.T, l *ledger) []string {
	t.Helper()
	var out []string
	q := func(label, query string) {
		for _, vals := range rowValues(t, l.db, query) {
			out = append(out, fmt.Sprint(label, vals))
		}
	}
	q("call", `SELECT status, approvals_required FROM calls ORDER BY seq`)
	q("redemptions", `SELECT COUNT(*) FROM redemptions`)
	q("freeze", `SELECT tool, actor, lifted_at IS NULL FROM freezes ORDER BY id`)
	q("retry", `SELECT actor, tool, count, blocked_at IS NOT NULL FROM retries ORDER BY actor, tool`)
	q("audit", `SELECT kind, principal FROM audit ORDER BY seq`)
	return out
}

func TestGroupCommitDecidesAsSeparateTransactions(t *testing.T) {
	ops := batchOps()
	serial, ls := batchRun(t, ops, false)
	batched, lb := batchRun(t, ops, true)
	for i, op := range ops {
		if serial[i] != op.want {
			t.Errorf("%s, one transaction each: %s, want %s", op.name, serial[i], op.want)
		}
		if batched[i] != op.want {
			t.Errorf("%s, in one group commit: %s, want %s", op.name, batched[i], op.want)
		}
	}
	ss, sb := batchState(t, ls), batchState(t, lb)
	if !slices.Equal(ss, sb) {
		t.Errorf("state after one transaction each:\n%q\nafter one group commit:\n%q", ss, sb)
	}
	verifyAuditChain(t, ls.db.SQL())
	verifyAuditChain(t, lb.db.SQL())
}

// TestGroupCommitRandomOrders runs random orders of the same operations
// (and so random places in the transaction for each) both ways.
func TestGroupCommitRandomOrders(t *testing.T) {
	if testing.Short() {
		t.Skip("several ledgers")
	}
	all := batchOps()
	for round := range 3 {
		r := rand.New(rand.NewPCG(uint64(round), 7))
		ops := slices.Clone(all)
		r.Shuffle(len(ops), func(i, j int) { ops[i], ops[j] = ops[j], ops[i] })
		serial, ls := batchRun(t, ops, false)
		batched, lb := batchRun(t, ops, true)
		for i, op := range ops {
			if serial[i] != batched[i] {
				t.Errorf("round %d, %s (#%d): %s alone, %s in a group commit", round, op.name, i, serial[i], batched[i])
			}
		}
		if ss, sb := batchState(t, ls), batchState(t, lb); !slices.Equal(ss, sb) {
			t.Errorf("round %d: state after one transaction each:\n%q\nafter one group commit:\n%q", round, ss, sb)
		}
		verifyAuditChain(t, lb.db.SQL())
	}
}
