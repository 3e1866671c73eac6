package storetest

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/tools"
)

var _ = add("calls/round trip", func(t *testing.T, s Stores) {
	ctx := context.Background()
	c := newCall("agent:a", "payments.refund", t0)
	c.Rationale = "the customer was charged twice"
	c.SubmittedBy = "tok_a"
	insert(t, s, c)
	if c.Seq == 0 {
		t.Fatal("InsertCall left Seq 0; it must set the insertion order")
	}
	got, err := s.Queue.Call(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, c) {
		t.Errorf("Call =\n%+v\nwant\n%+v", got, c)
	}
	if _, err := s.Queue.Call(ctx, "call_missing"); !errors.Is(err, queue.ErrNotFound) {
		t.Errorf("Call of an unknown id: %v, want queue.ErrNotFound", err)
	}
	var inTx *queue.Call
	update(t, s, func(tx queue.Tx) error {
		var err error
		inTx, err = tx.LatestByDigest(c.Actor, c.Digest, "tok_a")
		return err
	})
	if inTx.ID != c.ID {
		t.Errorf("LatestByDigest = %s, want %s", inTx.ID, c.ID)
	}
	err = s.Queue.Update(ctx, func(tx queue.Tx) error {
		_, err := tx.LatestByDigest("agent:other", c.Digest, "tok_a")
		return err
	})
	if !errors.Is(err, queue.ErrNotFound) {
		t.Errorf("LatestByDigest of another actor: %v, want queue.ErrNotFound", err)
	}
})

// A long-poll reads a call's head (its status and whose it is) before it
// waits, instead of the whole call: every store reads it, and it agrees
// with the call as Call reads it, in every status.
var _ = add("calls/the head of a call", func(t *testing.T, s Stores) {
	ctx := context.Background()
	h, ok := s.Queue.(interface {
		CallHead(ctx context.Context, id string) (queue.CallHead, error)
	})
	if !ok {
		t.Fatalf("%T reads no call head: a long-poll would read the whole call before it waits", s.Queue)
	}
	pending, decided, untokened := newCall("agent:a", "payments.refund", t0), newCall("agent:b", "payments.refund", t0.Add(time.Second)),
		newCall("agent:a", "payments.refund", t0.Add(2*time.Second))
	pending.SubmittedBy, decided.SubmittedBy = "tok_a", "tok_b"
	insert(t, s, pending, decided, untokened)
	update(t, s, func(tx queue.Tx) error {
		c, err := tx.Call(decided.ID)
		if err != nil {
			return err
		}
		c.Status, c.DecidedAt = queue.StatusDenied, t0.Add(3*time.Second)
		c.Denial = &queue.Denial{By: "olga", Channel: audit.ChannelWeb, Reason: "no", At: c.DecidedAt}
		return tx.UpdateCall(c)
	})
	for _, id := range []string{pending.ID, decided.ID, untokened.ID} {
		c, err := s.Queue.Call(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		got, err := h.CallHead(ctx, id)
		want := queue.CallHead{Status: c.Status, Actor: c.Actor, SubmittedBy: c.SubmittedBy}
		if err != nil || got != want {
			t.Errorf("CallHead(%s) = %+v, %v; want %+v", id, got, err, want)
		}
	}
	if _, err := h.CallHead(ctx, "call_missing"); !errors.Is(err, queue.ErrNotFound) {
		t.Errorf("CallHead of an unknown id: %v, want queue.ErrNotFound", err)
	}
})

// The identical-envelope lookup finds only the calls the asking token
// submitted, and any denied call of the actor (the memory of a denial is
// the actor's): a call stored without a token is found by no token.
var _ = add("calls/the lookup by digest is per token", func(t *testing.T, s Stores) {
	mine, theirs, legacy := newCall("agent:a", "payments.refund", t0), newCall("agent:a", "payments.refund", t0.Add(time.Second)),
		newCall("agent:a", "payments.refund", t0.Add(2*time.Second))
	theirs.Digest, legacy.Digest = mine.Digest, mine.Digest
	mine.SubmittedBy, theirs.SubmittedBy = "tok_mine", "tok_theirs"
	insert(t, s, mine, theirs, legacy)
	lookup := func(token string) (*queue.Call, error) {
		var got *queue.Call
		err := s.Queue.Update(context.Background(), func(tx queue.Tx) error {
			var err error
			got, err = tx.LatestByDigest("agent:a", mine.Digest, token)
			return err
		})
		return got, err
	}
	for token, want := range map[string]string{"tok_mine": mine.ID, "tok_theirs": theirs.ID} {
		if got, err := lookup(token); err != nil || got.ID != want {
			t.Errorf("LatestByDigest for %s = %v, %v; want %s", token, got, err, want)
		}
	}
	if got, err := lookup("tok_other"); !errors.Is(err, queue.ErrNotFound) {
		t.Errorf("LatestByDigest for a token that submitted none = %v, %v; want queue.ErrNotFound", got, err)
	}
	// Denied, their call is what every token of the actor finds, newer
	// than mine.
	update(t, s, func(tx queue.Tx) error {
		theirs.Status, theirs.DecidedAt = queue.StatusDenied, t0.Add(time.Minute)
		theirs.Denial = &queue.Denial{By: "alice", Channel: audit.ChannelWeb, Reason: "no", At: theirs.DecidedAt}
		return tx.UpdateCall(theirs)
	})
	for _, token := range []string{"tok_mine", "tok_other"} {
		if got, err := lookup(token); err != nil || got.ID != theirs.ID {
			t.Errorf("LatestByDigest for %s after the denial = %v, %v; want the denied %s", token, got, err, theirs.ID)
		}
	}
})

var _ = add("calls/a decision's fields persist", func(t *testing.T, s Stores) {
	ctx := context.Background()
	approved, denied, redeemed := newCall("agent:a", "t.x", t0), newCall("agent:a", "t.x", t0), newCall("agent:a", "t.x", t0)
	approved.ApprovalsRequired = 2
	insert(t, s, approved, denied, redeemed)
	at := t0.Add(time.Minute)
	update(t, s, func(tx queue.Tx) error {
		for _, a := range []queue.Approval{{Operator: "bob", Channel: audit.ChannelCLI, At: at.Add(time.Second)},
			{Operator: "alice", Channel: audit.ChannelWeb, At: at, Comment: "checked the ticket\nand the invoice"}} {
			if err := tx.AddApproval(approved.ID, a); err != nil {
				return err
			}
		}
		approved.Status, approved.DecidedAt = queue.StatusApproved, at.Add(time.Second)
		approved.Grant, approved.GrantJTI, approved.GrantKID = "header.claims.sig", "00112233445566778899aabbccddeeff", "k1"
		approved.GrantExpiresAt = at.Add(2 * time.Minute)
		if err := tx.UpdateCall(approved); err != nil {
			return err
		}
		denied.Status, denied.DecidedAt = queue.StatusDenied, at
		denied.Denial = &queue.Denial{By: "alice", Channel: audit.ChannelWeb, Reason: "not today", At: at}
		if err := tx.UpdateCall(denied); err != nil {
			return err
		}
		redeemed.Status, redeemed.DecidedAt, redeemed.RedeemedAt = queue.StatusRedeemed, at, at.Add(time.Second)
		redeemed.Outcome = &queue.Outcome{Status: "succeeded", Detail: "ok", At: at.Add(2 * time.Second)}
		return tx.UpdateCall(redeemed)
	})
	// Approvals come back in the order they were given.
	approved.Approvals = []queue.Approval{{Operator: "alice", Channel: audit.ChannelWeb, At: at, Comment: "checked the ticket\nand the invoice"},
		{Operator: "bob", Channel: audit.ChannelCLI, At: at.Add(time.Second)}}
	for _, want := range []*queue.Call{approved, denied, redeemed} {
		got, err := s.Queue.Call(ctx, want.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Call =\n%+v\nwant\n%+v", got, want)
		}
	}
	err := s.Queue.Update(ctx, func(tx queue.Tx) error {
		c := newCall("agent:a", "t.x", t0)
		return tx.UpdateCall(c)
	})
	if !errors.Is(err, queue.ErrNotFound) {
		t.Errorf("UpdateCall of a call never inserted: %v, want queue.ErrNotFound", err)
	}
})

// A terminal status never changes, whatever the caller asks (invariant 7):
// the store itself refuses, below the queue's rules.
var _ = add("calls/terminal states never change", func(t *testing.T, s Stores) {
	ctx := context.Background()
	moves := []struct {
		from, to queue.Status
		allowed  bool
	}{
		{queue.StatusPending, queue.StatusApproved, true},
		{queue.StatusPending, queue.StatusDenied, true},
		{queue.StatusPending, queue.StatusExpired, true},
		{queue.StatusPending, queue.StatusCancelled, true},
		{queue.StatusApproved, queue.StatusRedeemed, true},
		{queue.StatusApproved, queue.StatusDenied, false},
		{queue.StatusApproved, queue.StatusPending, false},
		{queue.StatusApproved, queue.StatusExpired, false},
		{queue.StatusDenied, queue.StatusApproved, false},
		{queue.StatusDenied, queue.StatusPending, false},
		{queue.StatusExpired, queue.StatusPending, false},
		{queue.StatusExpired, queue.StatusApproved, false},
		{queue.StatusCancelled, queue.StatusPending, false},
		{queue.StatusRedeemed, queue.StatusApproved, false},
		{queue.StatusRedeemed, queue.StatusPending, false},
	}
	for _, m := range moves {
		c := newCall("agent:a", "t.x", t0)
		insert(t, s, c)
		// Reach from as the queue does: directly from pending, redeemed
		// through approved.
		path := []queue.Status{m.from}
		if m.from == queue.StatusRedeemed {
			path = []queue.Status{queue.StatusApproved, queue.StatusRedeemed}
		}
		for _, st := range path {
			if st == queue.StatusPending {
				continue
			}
			c.Status = st
			update(t, s, func(tx queue.Tx) error { return tx.UpdateCall(c) })
		}
		c.Status = m.to
		err := s.Queue.Update(ctx, func(tx queue.Tx) error { return tx.UpdateCall(c) })
		if allowed := err == nil; allowed != m.allowed {
			t.Errorf("%s → %s: error %v, want allowed %t", m.from, m.to, err, m.allowed)
		}
		want := m.from
		if m.allowed {
			want = m.to
		}
		got, err := s.Queue.Call(ctx, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != want {
			t.Errorf("%s → %s: status %s, want %s", m.from, m.to, got.Status, want)
		}
	}
})

// Nothing a failed transaction did is kept: not the call, not its audit
// entry.
var _ = add("calls/a failed update keeps nothing", func(t *testing.T, s Stores) {
	ctx := context.Background()
	c := newCall("agent:a", "t.x", t0)
	boom := errors.New("boom")
	err := s.Queue.Update(ctx, func(tx queue.Tx) error {
		if err := tx.InsertCall(c); err != nil {
			return err
		}
		if err := tx.Append(entry(audit.KindSubmitted, c.ID, t0)); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Update = %v, want fn's error", err)
	}
	if _, err := s.Queue.Call(ctx, c.ID); !errors.Is(err, queue.ErrNotFound) {
		t.Errorf("Call after a failed update: %v, want queue.ErrNotFound", err)
	}
	if seq, _, err := s.Audit.AuditHead(ctx); err != nil || seq != 0 {
		t.Errorf("AuditHead after a failed update = %d, %v; want 0", seq, err)
	}
})

var _ = add("calls/pending, due and the next deadline", func(t *testing.T, s Stores) {
	ctx := context.Background()
	if _, ok, err := s.Queue.NextDeadline(ctx); err != nil || ok {
		t.Fatalf("NextDeadline of an empty store = %t, %v; want none", ok, err)
	}
	early, late, decided := newCall("agent:a", "t.x", t0), newCall("agent:a", "t.x", t0.Add(time.Second)), newCall("agent:a", "t.x", t0)
	early.DecideBy, late.DecideBy, decided.DecideBy = t0.Add(time.Minute), t0.Add(time.Hour), t0.Add(time.Second)
	insert(t, s, early, late, decided)
	update(t, s, func(tx queue.Tx) error {
		decided.Status = queue.StatusDenied
		return tx.UpdateCall(decided)
	})
	if got, ok, err := s.Queue.NextDeadline(ctx); err != nil || !ok || !got.Equal(early.DecideBy) {
		t.Errorf("NextDeadline = %v, %t, %v; want %v", got, ok, err, early.DecideBy)
	}
	due, err := s.Queue.DueCalls(ctx, t0.Add(2*time.Minute), 10)
	if err != nil || !reflect.DeepEqual(due, []string{early.ID}) {
		t.Errorf("DueCalls = %v, %v; want [%s]", due, err, early.ID)
	}
	if due, _ := s.Queue.DueCalls(ctx, t0.Add(2*time.Hour), 1); len(due) != 1 || due[0] != early.ID {
		t.Errorf("DueCalls with limit 1 = %v; want the earliest deadline first", due)
	}
	pending, err := s.Queue.PendingCalls(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range pending {
		ids = append(ids, c.ID)
	}
	if !reflect.DeepEqual(ids, []string{late.ID, early.ID}) {
		t.Errorf("PendingCalls = %v; want the pending calls newest first [%s %s]", ids, late.ID, early.ID)
	}
})

// A page of pending calls starts after its key, by deadline then id, so a
// queue of any length is read one page at a time, each call exactly once,
// with its approvals.
var _ = add("calls/pending pages by deadline", func(t *testing.T, s Stores) {
	ctx := context.Background()
	var want []*queue.Call
	for i, d := range []time.Duration{3, 1, 2, 2, 2, 5} {
		c := newCall("agent:a", "t.x", t0.Add(time.Duration(i)*time.Second))
		c.DecideBy = t0.Add(d * time.Minute)
		insert(t, s, c)
		want = append(want, c)
	}
	decided := newCall("agent:a", "t.x", t0)
	decided.DecideBy = t0.Add(time.Minute)
	insert(t, s, decided)
	update(t, s, func(tx queue.Tx) error {
		decided.Status = queue.StatusDenied
		return tx.UpdateCall(decided)
	})
	approvedID := want[3].ID
	update(t, s, func(tx queue.Tx) error {
		return tx.AddApproval(approvedID, queue.Approval{Operator: "alice", Channel: "console", At: t0.Add(time.Second)})
	})
	slices.SortFunc(want, func(a, b *queue.Call) int {
		if c := a.DecideBy.Compare(b.DecideBy); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	var got []string
	key := queue.PageKey{}
	for pages := 0; pages < 10; pages++ {
		page, err := s.Queue.PendingPage(ctx, key, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > 2 {
			t.Fatalf("a page of 2 holds %d calls", len(page))
		}
		if len(page) == 0 {
			break
		}
		for _, c := range page {
			got = append(got, c.ID)
			if approved := c.ID == approvedID; approved != (len(c.Approvals) == 1) {
				t.Errorf("%s has %d approvals in its page", c.ID, len(c.Approvals))
			}
		}
		key = queue.KeyOf(page[len(page)-1])
	}
	var ids []string
	for _, c := range want {
		ids = append(ids, c.ID)
	}
	if !reflect.DeepEqual(got, ids) {
		t.Errorf("pages = %v; want every pending call once by deadline then id %v", got, ids)
	}
})

// The pending calls are counted, and those due before a time: a decided
// call is not counted, and a deadline at the time itself is not before it.
var _ = add("calls/count pending and due", func(t *testing.T, s Stores) {
	ctx := context.Background()
	if all, due, err := s.Queue.CountPending(ctx, t0.Add(time.Hour)); err != nil || all != 0 || due != 0 {
		t.Fatalf("CountPending of an empty store = %d, %d, %v", all, due, err)
	}
	for i, d := range []time.Duration{1, 2, 3, 10} {
		c := newCall("agent:a", "t.x", t0.Add(time.Duration(i)*time.Second))
		c.DecideBy = t0.Add(d * time.Minute)
		insert(t, s, c)
	}
	decided := newCall("agent:a", "t.x", t0)
	decided.DecideBy = t0.Add(time.Minute)
	insert(t, s, decided)
	update(t, s, func(tx queue.Tx) error {
		decided.Status = queue.StatusDenied
		return tx.UpdateCall(decided)
	})
	all, due, err := s.Queue.CountPending(ctx, t0.Add(3*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if all != 4 || due != 2 {
		t.Errorf("CountPending(deadline+3min) = %d, %d; want 4 pending, 2 due before", all, due)
	}
})

// The pending calls are read grouped by what a person's standing toward
// them depends on: calls alike in tool, actor, tool definition, owners,
// approvers and approvals are one group, with how many are due before a
// time; any difference in one of them (or in the approvals required) is
// another group; decided calls are in none.
var _ = add("calls/pending groups", func(t *testing.T, s Stores) {
	ctx := context.Background()
	if gs, err := s.Queue.PendingGroups(ctx, t0.Add(time.Hour)); err != nil || len(gs) != 0 {
		t.Fatalf("PendingGroups of an empty store = %v, %v", gs, err)
	}
	mk := func(i int, edit func(c *queue.Call)) *queue.Call {
		c := newCall("agent:a", "t.x", t0.Add(time.Duration(i)*time.Second))
		c.ToolDigest, c.DecideBy = "def1", t0.Add(time.Duration(i+1)*time.Minute)
		c.Approvers = tools.Approvers{Roles: []string{"operator"}, Groups: []string{"payments"}}
		c.Owners = []string{"olga"}
		if edit != nil {
			edit(c)
		}
		insert(t, s, c)
		return c
	}
	for i := range 3 {
		mk(i, nil) // due at 1, 2 and 3 minutes
	}
	mk(3, func(c *queue.Call) { c.Actor = "agent:b" })
	mk(4, func(c *queue.Call) { c.Owners = []string{"team:ops"} })
	mk(5, func(c *queue.Call) { c.Approvers = tools.Approvers{Roles: []string{"admin"}} })
	mk(6, func(c *queue.Call) { c.ToolDigest = "def2" })
	mk(9, func(c *queue.Call) { c.ApprovalsRequired = 3 })
	approved := mk(7, func(c *queue.Call) { c.ApprovalsRequired = 2 })
	update(t, s, func(tx queue.Tx) error {
		return tx.AddApproval(approved.ID, queue.Approval{Operator: "alice", Channel: "console", At: t0, For: "bob"})
	})
	decided := mk(8, nil)
	update(t, s, func(tx queue.Tx) error {
		decided.Status = queue.StatusDenied
		return tx.UpdateCall(decided)
	})
	gs, err := s.Queue.PendingGroups(ctx, t0.Add(150*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(gs) != 7 {
		t.Fatalf("%d groups, want 7: %+v", len(gs), gs)
	}
	total := 0
	for _, g := range gs {
		c := g.Call
		total += g.Count
		if c.Status != queue.StatusPending || c.Tool != "t.x" {
			t.Errorf("a group's call %+v", c)
		}
		switch {
		case c.Actor == "agent:a" && c.ToolDigest == "def1" && len(c.Approvals) == 0 && slices.Equal(c.Owners, []string{"olga"}) && c.ApprovalsRequired == 1 &&
			slices.Equal(c.Approvers.Roles, []string{"operator"}) && slices.Equal(c.Approvers.Groups, []string{"payments"}):
			if g.Count != 3 || g.Due != 2 {
				t.Errorf("the group of three: %d calls, %d due; want 3, 2", g.Count, g.Due)
			}
		case len(c.Approvals) == 1:
			if a := c.Approvals[0]; a.Operator != "alice" || a.For != "bob" || c.ApprovalsRequired != 2 || g.Count != 1 {
				t.Errorf("the approved call's group: %+v, %d calls", a, g.Count)
			}
		default:
			if g.Count != 1 || g.Due != 0 {
				t.Errorf("group %+v: %d calls, %d due; want 1, 0", c, g.Count, g.Due)
			}
		}
	}
	if total != 9 {
		t.Errorf("the groups hold %d calls, want the 9 pending", total)
	}
})

// PendingCallsOf filters by tool in the read: a tool's oldest pending call
// is found under any number of newer calls of other tools, with its
// approvals; decided calls and plan items are not listed.
var _ = add("calls/pending calls of one tool, filtered in the read", func(t *testing.T, s Stores) {
	ctx := context.Background()
	old := newCall("agent:a", "files.copy", t0)
	decided := newCall("agent:a", "files.copy", t0.Add(time.Second))
	decided.Status = queue.StatusDenied
	insert(t, s, old, decided)
	var newer []*queue.Call
	for i := range 3 {
		c := newCall("agent:a", "payments.refund", t0.Add(time.Duration(i+2)*time.Second))
		insert(t, s, c)
		newer = append(newer, c)
	}
	p, items := storedPlan("agent:a", "tok_1", 1, t0.Add(time.Minute))
	items[0].Tool = "files.copy"
	insertPlan(t, s, p, items)
	update(t, s, func(tx queue.Tx) error {
		return tx.AddApproval(old.ID, queue.Approval{Operator: "alice", Channel: "console", At: t0.Add(time.Second)})
	})
	got, err := s.Queue.PendingCallsOf(ctx, "files.copy", 1)
	if err != nil || len(got) != 1 || got[0].ID != old.ID {
		t.Fatalf("PendingCallsOf(files.copy, 1) = %d calls, %v; want the old call only", len(got), err)
	}
	if len(got[0].Approvals) != 1 || got[0].Approvals[0].Operator != "alice" {
		t.Errorf("the listed call's approvals = %+v; want alice's", got[0].Approvals)
	}
	got, err = s.Queue.PendingCallsOf(ctx, "payments.refund", 2)
	if err != nil || len(got) != 2 || got[0].ID != newer[2].ID || got[1].ID != newer[1].ID {
		t.Fatalf("PendingCallsOf(payments.refund, 2) = %d calls, %v; want the two newest", len(got), err)
	}
	if got, err := s.Queue.PendingCallsOf(ctx, "files.nope", 10); err != nil || len(got) != 0 {
		t.Errorf("a tool with no calls: %d calls, %v", len(got), err)
	}
})
