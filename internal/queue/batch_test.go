package queue_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
)

func batchRefund(t *testing.T, e *env, rationale string) *queue.Call {
	t.Helper()
	body := fmt.Sprintf(`{"tool":"payments.refund","target":"invoice:INV-%d","args":%s,"rationale":%q}`, rand.Uint32N(1e9), refundArgs, rationale)
	c, _, err := e.q.Submit(context.Background(), agent, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func items(calls ...*queue.Call) []queue.BatchItem {
	var out []queue.BatchItem
	for _, c := range calls {
		out = append(out, queue.BatchItem{CallID: c.ID, Digest: c.Digest})
	}
	return out
}

// dropReasons maps each dropped call to its reason.
func dropReasons(r *queue.BatchResult) map[string]error {
	m := map[string]error{}
	for _, d := range r.Dropped {
		m[d.CallID] = d.Err
	}
	return m
}

// TestApproveBatch: a batch approves each call that passes the single
// approval's checks with its own approval, grant and audit entry (method
// batch); a call with a deception warning, one whose tool asks for typed
// confirmation, one shown with another digest and one decided meanwhile
// drop out with their reasons, and stay as they were.
func TestApproveBatch(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	var plain []*queue.Call
	for range 4 {
		plain = append(plain, batchRefund(t, e, "duplicate charge"))
	}
	tricky := batchRefund(t, e, "refund \u202etsop rof")
	files := queue.Principal{Actor: "agent:files", Audience: "files-host"}
	del, _, err := e.q.Submit(ctx, files, []byte(`{"tool":"files.delete","target":"file:/srv/shared/old/report.csv","args":{"reason":"superseded"}}`))
	if err != nil {
		t.Fatal(err)
	}
	stale := batchRefund(t, e, "x")
	decided := batchRefund(t, e, "y")
	if _, err := e.q.Deny(ctx, "bob", audit.ChannelWeb, decided.ID, "no"); err != nil {
		t.Fatal(err)
	}
	in := items(append(plain, tricky, del, stale, decided)...)
	in[6].Digest = plain[0].Digest // the page showed another call's digest
	res, err := e.q.ApproveBatch(ctx, queue.BatchInput{Operator: "alice", Channel: audit.ChannelWeb, Items: in})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Decided) != len(plain) {
		t.Fatalf("approved %d calls, want %d", len(res.Decided), len(plain))
	}
	want := map[string]error{tricky.ID: queue.ErrBatchWarning, del.ID: queue.ErrBatchConfirm,
		stale.ID: queue.ErrDigestMismatch, decided.ID: queue.ErrNotPending}
	got := dropReasons(res)
	if len(got) != len(want) {
		t.Fatalf("dropped %v, want %v", got, want)
	}
	for id, w := range want {
		if !errors.Is(got[id], w) {
			t.Errorf("call %s dropped with %v, want %v", id, got[id], w)
		}
	}
	jtis := map[string]bool{}
	for _, c := range plain {
		c, err := e.q.Call(ctx, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		if c.Status != queue.StatusApproved || c.Grant == "" || len(c.Approvals) != 1 || c.Approvals[0].Operator != "alice" {
			t.Errorf("%s: %s, grant %t, approvals %v; want approved by alice with its own grant", c.ID, c.Status, c.Grant != "", c.Approvals)
		}
		jtis[c.GrantJTI] = true
		n := countOf(t, e.db, `SELECT COUNT(*) FROM audit WHERE kind = 'approved' AND call_id = '`+c.ID+`' AND details LIKE '%"method":"batch"%' AND details LIKE '%"batch":"`+res.ID+`"%'`)
		if n != 1 {
			t.Errorf("%s: %d approved entries of method batch naming %s, want 1", c.ID, n, res.ID)
		}
		if n := countOf(t, e.db, `SELECT COUNT(*) FROM audit WHERE kind = 'granted' AND call_id = '`+c.ID+`'`); n != 1 {
			t.Errorf("%s: %d granted entries, want 1", c.ID, n)
		}
	}
	if len(jtis) != len(plain) {
		t.Errorf("%d distinct grants for %d calls", len(jtis), len(plain))
	}
	for _, c := range []*queue.Call{tricky, del, stale} {
		c, err := e.q.Call(ctx, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		if c.Status != queue.StatusPending || len(c.Approvals) != 0 || c.Grant != "" {
			t.Errorf("dropped %s is %s with %d approvals; want pending, untouched", c.ID, c.Status, len(c.Approvals))
		}
	}
}

// TestApproveBatchPeople: the batch checks owners, the tool's approvers
// and passkeys per call, as the single approval does.
func TestApproveBatchPeople(t *testing.T) {
	ctx := context.Background()
	e := newPeopleEnv(t)
	vault := submitAs(t, e, vaultBot, "vault.rotate", "secret:db", `{}`)
	transfer := submitAs(t, e, bankBot, "funds.transfer", "account:12", `{"amount_minor":5}`)
	quote := submitAs(t, e, bankBot, "funds.quote", "account:12", `{"amount_minor":5}`)
	for _, tc := range []struct {
		operator string
		vault    error
	}{{"olga", queue.ErrOwner}, {"sam", queue.ErrNotAnApprover}} {
		res, err := e.q.ApproveBatch(ctx, queue.BatchInput{Operator: tc.operator, Channel: audit.ChannelWeb, Items: items(vault, transfer)})
		if err != nil {
			t.Fatal(err)
		}
		got := dropReasons(res)
		if len(res.Decided) != 0 || !errors.Is(got[vault.ID], tc.vault) || !errors.Is(got[transfer.ID], queue.ErrBatchPasskey) {
			t.Errorf("%s: decided %d, dropped %v; want vault %v and transfer ErrBatchPasskey", tc.operator, len(res.Decided), got, tc.vault)
		}
	}
	res, err := e.q.ApproveBatch(ctx, queue.BatchInput{Operator: "olga", Channel: audit.ChannelWeb, Items: items(quote)})
	if err != nil || len(res.Decided) != 1 || res.Decided[0].Status != queue.StatusApproved {
		t.Fatalf("olga approves the quote in a batch: %v %+v", err, res)
	}
	// An account that may not decide refuses the whole batch.
	if _, err := e.q.ApproveBatch(ctx, queue.BatchInput{Operator: "nobody", Channel: audit.ChannelWeb, Items: items(vault)}); !errors.Is(err, queue.ErrNotADecider) {
		t.Errorf("batch by an unknown account: %v, want ErrNotADecider", err)
	}
}

// TestBatchBounds: a batch names one to MaxBatch calls, each once; a
// denial needs its one reason.
func TestBatchBounds(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	c := batchRefund(t, e, "x")
	many := make([]queue.BatchItem, queue.MaxBatch+1)
	for i := range many {
		many[i] = queue.BatchItem{CallID: fmt.Sprintf("call_%d", i), Digest: c.Digest}
	}
	for _, tc := range []struct {
		name  string
		items []queue.BatchItem
		want  error
	}{
		{"none", nil, queue.ErrBatchEmpty},
		{"one too many", many, queue.ErrBatchTooLarge},
		{"one call twice", items(c, c), queue.ErrBatchDuplicate},
	} {
		in := queue.BatchInput{Operator: "alice", Channel: audit.ChannelWeb, Items: tc.items, Reason: "no"}
		if _, err := e.q.ApproveBatch(ctx, in); !errors.Is(err, tc.want) {
			t.Errorf("approve %s: %v, want %v", tc.name, err, tc.want)
		}
		if _, err := e.q.DenyBatch(ctx, in); !errors.Is(err, tc.want) {
			t.Errorf("deny %s: %v, want %v", tc.name, err, tc.want)
		}
	}
	// Exactly MaxBatch is accepted (the unknown ids drop out).
	res, err := e.q.ApproveBatch(ctx, queue.BatchInput{Operator: "alice", Channel: audit.ChannelWeb, Items: many[:queue.MaxBatch]})
	if err != nil || len(res.Dropped) != queue.MaxBatch || !errors.Is(res.Dropped[0].Err, queue.ErrNotFound) {
		t.Fatalf("a batch of %d unknown calls: %v, %+v", queue.MaxBatch, err, res)
	}
	if _, err := e.q.DenyBatch(ctx, queue.BatchInput{Operator: "alice", Channel: audit.ChannelWeb, Items: items(c), Reason: "  "}); !errors.Is(err, queue.ErrReasonRequired) {
		t.Errorf("deny without a reason: %v, want ErrReasonRequired", err)
	}
	if got, _ := e.q.Call(ctx, c.ID); got.Status != queue.StatusPending {
		t.Errorf("after refused batches the call is %s", got.Status)
	}
}

// TestDenyBatch: every call is denied with the one reason, each with its
// own denied entry; a call decided meanwhile or shown with another digest
// drops out.
func TestDenyBatch(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	a, b, approved, stale := batchRefund(t, e, "a"), batchRefund(t, e, "b"), batchRefund(t, e, "c"), batchRefund(t, e, "d")
	if _, err := e.q.Approve(ctx, "bob", audit.ChannelWeb, approved.ID, approved.Digest); err != nil {
		t.Fatal(err)
	}
	in := items(a, b, approved, stale)
	in[3].Digest = a.Digest
	res, err := e.q.DenyBatch(ctx, queue.BatchInput{Operator: "alice", Channel: audit.ChannelWeb, Items: in, Reason: " not today "})
	if err != nil {
		t.Fatal(err)
	}
	got := dropReasons(res)
	if len(res.Decided) != 2 || !errors.Is(got[approved.ID], queue.ErrNotPending) || !errors.Is(got[stale.ID], queue.ErrDigestMismatch) {
		t.Fatalf("denied %d, dropped %v", len(res.Decided), got)
	}
	for _, c := range []*queue.Call{a, b} {
		c, _ := e.q.Call(ctx, c.ID)
		if c.Status != queue.StatusDenied || c.Denial == nil || c.Denial.Reason != "not today" || c.Denial.By != "alice" {
			t.Errorf("%s: %s, denial %+v", c.ID, c.Status, c.Denial)
		}
		if n := countOf(t, e.db, `SELECT COUNT(*) FROM audit WHERE kind = 'denied' AND call_id = '`+c.ID+`' AND details LIKE '%"method":"batch"%'`); n != 1 {
			t.Errorf("%s: %d denied entries of method batch", c.ID, n)
		}
	}
	if c, _ := e.q.Call(ctx, stale.ID); c.Status != queue.StatusPending {
		t.Errorf("the stale call is %s, want pending", c.Status)
	}
	if c, _ := e.q.Call(ctx, approved.ID); c.Status != queue.StatusApproved || c.Denial != nil {
		t.Errorf("the approved call is %s", c.Status)
	}
}

// TestBatchEventsAfterCommit: subscribers hear of each decided call once,
// after the commit, and of no dropped call.
func TestBatchEventsAfterCommit(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	a, b, tricky := batchRefund(t, e, "a"), batchRefund(t, e, "b"), batchRefund(t, e, "\u202e")
	var heard []string
	e.q.Subscribe(func(ev queue.Event) {
		if ev.Call != nil {
			// Published after the commit: the store already holds it.
			got, err := e.q.Call(ctx, ev.Call.ID)
			if err != nil || got.Status != ev.Call.Status {
				t.Errorf("event %s for %s published before its commit (%v)", ev.Kind, ev.Call.ID, err)
			}
			heard = append(heard, ev.Kind+":"+ev.Call.ID)
		}
	})
	if _, err := e.q.ApproveBatch(ctx, queue.BatchInput{Operator: "alice", Channel: audit.ChannelWeb, Items: items(a, b, tricky)}); err != nil {
		t.Fatal(err)
	}
	want := audit.KindGranted + ":" + a.ID + " " + audit.KindGranted + ":" + b.ID
	if got := strings.Join(heard, " "); got != want {
		t.Errorf("events %q, want %q", got, want)
	}
}

// TestBatchFreezeAndExpiry: a frozen tool's calls drop out of a batch; a
// call found past its deadline drops out as expired, and its expiry is
// committed with the batch's approvals.
func TestBatchFreezeAndExpiry(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	old := batchRefund(t, e, "old")
	e.clock.Advance(10 * time.Minute)
	fresh := batchRefund(t, e, "fresh")
	files := queue.Principal{Actor: "agent:files", Audience: "files-host"}
	del, _, err := e.q.Submit(ctx, files, []byte(`{"tool":"files.delete","target":"file:/srv/shared/old/report.csv","args":{"reason":"superseded"}}`))
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(6 * time.Minute) // past the refund's 15 minutes for old only
	if _, err := e.q.Freeze(ctx, "alice", audit.ChannelCLI, "files.delete", "", "incident 7"); err != nil {
		t.Fatal(err)
	}
	res, err := e.q.ApproveBatch(ctx, queue.BatchInput{Operator: "bob", Channel: audit.ChannelWeb, Items: items(old, fresh, del)})
	if err != nil {
		t.Fatal(err)
	}
	got := dropReasons(res)
	var fz *queue.FrozenError
	var np *queue.NotPendingError
	if len(res.Decided) != 1 || res.Decided[0].ID != fresh.ID || !errors.As(got[del.ID], &fz) ||
		!errors.As(got[old.ID], &np) || !np.Expired {
		t.Fatalf("decided %d, dropped %v; want fresh approved, the frozen call and the expired one dropped", len(res.Decided), got)
	}
	if c, _ := e.q.Call(ctx, old.ID); c.Status != queue.StatusExpired {
		t.Errorf("the overdue call is %s, want expired (committed with the batch)", c.Status)
	}
	if c, _ := e.q.Call(ctx, del.ID); c.Status != queue.StatusPending {
		t.Errorf("the frozen call is %s, want pending", c.Status)
	}
}

// TestBatchOwnCall: a call proposed under the operator's own name drops
// out of their batch; the others are approved.
func TestBatchOwnCall(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	own, _, err := e.q.Submit(ctx, queue.Principal{Actor: "alice", Audience: "payments-host"},
		[]byte(`{"tool":"payments.refund","target":"invoice:INV-77","args":`+refundArgs+`}`))
	if err != nil {
		t.Fatal(err)
	}
	other := batchRefund(t, e, "x")
	res, err := e.q.ApproveBatch(ctx, queue.BatchInput{Operator: "alice", Channel: audit.ChannelWeb, Items: items(own, other)})
	if err != nil {
		t.Fatal(err)
	}
	if got := dropReasons(res); len(res.Decided) != 1 || res.Decided[0].ID != other.ID || !errors.Is(got[own.ID], queue.ErrOwnCall) {
		t.Fatalf("decided %d, dropped %v; want the other call approved and alice's own dropped with ErrOwnCall", len(res.Decided), got)
	}
}
