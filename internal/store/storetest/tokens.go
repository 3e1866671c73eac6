package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
)

// A call belongs to the token that submitted it (DESIGN §3, invariant 20):
// another token of the same actor, even for another audience, is told the
// call does not exist when it reads, waits for, cancels it or reports on
// it; the identical envelope it submits is a call of its own, never the
// first token's with its grant; only the redeeming token reports the
// outcome and extends the lease, and the executor's own report still
// lands after another token tried.
var _ = add("service/a call belongs to the token that submitted it", func(t *testing.T, s Stores) {
	ctx := context.Background()
	w := newWorld(t, s)
	h := w.open(t)
	a := payer
	a.TokenID = "tok_agent"
	other := payer
	other.TokenID = "tok_desktop"
	elsewhere := other
	elsewhere.Audience = "mcp-desk" // another audience of the same actor
	executor := payer
	executor.TokenID = "tok_executor"

	c := mustSubmit(t, h, a, refund(7, "n"))
	for _, who := range []queue.Principal{other, elsewhere, executor} {
		if _, err := h.q.Get(ctx, who, c.ID); !errors.Is(err, queue.ErrNotFound) {
			t.Errorf("Get by %s: %v, want ErrNotFound", who.TokenID, err)
		}
		if _, err := h.q.Wait(ctx, who, c.ID, 10*time.Millisecond); !errors.Is(err, queue.ErrNotFound) {
			t.Errorf("Wait by %s: %v, want ErrNotFound", who.TokenID, err)
		}
		if _, err := h.q.Cancel(ctx, who, c.ID); !errors.Is(err, queue.ErrNotFound) {
			t.Errorf("Cancel by %s: %v, want ErrNotFound", who.TokenID, err)
		}
	}
	// The same envelope from another token is a call of its own.
	twin, created, err := h.q.Submit(ctx, other, refund(7, "n"))
	if err != nil || !created || twin.ID == c.ID || twin.Digest != c.Digest {
		t.Fatalf("the identical envelope from another token: %v created %t (id %s, first %s), want a new call", err, created, twin.ID, c.ID)
	}
	// The first token finds its own again.
	again, created, err := h.q.Submit(ctx, a, refund(7, "n"))
	if err != nil || created || again.ID != c.ID {
		t.Fatalf("the first token resubmitting: %v created %t id %s, want its own %s", err, created, again.ID, c.ID)
	}

	approved, err := h.q.Approve(ctx, "alice", audit.ChannelWeb, c.ID, c.Digest)
	if err != nil || approved.Grant == "" {
		t.Fatalf("Approve: %v", err)
	}
	if got, err := h.q.Get(ctx, a, c.ID); err != nil || got.Grant != approved.Grant {
		t.Fatalf("Get by the submitting token after approval: %v, want its grant", err)
	}
	if _, err := h.q.Get(ctx, other, c.ID); !errors.Is(err, queue.ErrNotFound) {
		t.Errorf("Get of the approved call by another token: %v, want ErrNotFound (never its grant)", err)
	}
	// The twin resubmitted by the first token's sibling is still its own,
	// pending, without the grant.
	if got, created, err := h.q.Submit(ctx, other, refund(7, "n")); err != nil || created || got.ID != twin.ID || got.Grant != "" {
		t.Fatalf("the other token resubmitting: %v created %t id %s grant %q, want its own pending %s", err, created, got.ID, got.Grant, twin.ID)
	}

	// An executor with a token of its own redeems the grant.
	if r, err := h.q.Redeem(ctx, executor, redeemBody(approved)); err != nil || !r.Accepted {
		t.Fatalf("Redeem by the executor: %+v, %v", r, err)
	}
	for _, who := range []queue.Principal{other, elsewhere} {
		if _, err := h.q.Heartbeat(ctx, who, c.ID, 0); !errors.Is(err, queue.ErrNotFound) {
			t.Errorf("Heartbeat by %s: %v, want ErrNotFound", who.TokenID, err)
		}
		if _, err := h.q.ReportOutcome(ctx, who, c.ID, "failed", "not mine"); !errors.Is(err, queue.ErrNotFound) {
			t.Errorf("ReportOutcome by %s: %v, want ErrNotFound", who.TokenID, err)
		}
	}
	// The submitting token sees the call but did not redeem it.
	if _, err := h.q.ReportOutcome(ctx, a, c.ID, "failed", "not mine"); !errors.Is(err, queue.ErrNotLeaseHolder) {
		t.Errorf("ReportOutcome by the submitting token that did not redeem: %v, want ErrNotLeaseHolder", err)
	}
	if _, err := h.q.Heartbeat(ctx, executor, c.ID, 0); err != nil {
		t.Errorf("Heartbeat by the executor: %v", err)
	}
	done, err := h.q.ReportOutcome(ctx, executor, c.ID, "succeeded", "refunded")
	if err != nil || done.Outcome == nil || done.Outcome.Status != "succeeded" {
		t.Fatalf("ReportOutcome by the executor after the others tried: %+v, %v", done, err)
	}
})

// One token keeps a bounded number of calls waiting (invariant 19): one
// more is refused and stored nowhere, another token of the same actor is
// still served, and a decision makes room again.
var _ = add("service/a token keeps a bounded number of calls waiting", func(t *testing.T, s Stores) {
	ctx := context.Background()
	w := newWorld(t, s)
	w.maxPending = 3
	h := w.open(t)
	a := payer
	a.TokenID = "tok_flood"
	b := payer
	b.TokenID = "tok_calm"
	var first *queue.Call
	for i := range 3 {
		c := mustSubmit(t, h, a, refund(uint32(100+i), "n"))
		if first == nil {
			first = c
		}
	}
	if _, _, err := h.q.Submit(ctx, a, refund(200, "n")); !errors.Is(err, queue.ErrTooManyPending) {
		t.Fatalf("the 4th pending call of one token: %v, want ErrTooManyPending", err)
	}
	if calls, _, err := s.History.History(ctx, queue.HistoryFilter{Limit: 10}); err != nil || len(calls) != 3 {
		t.Errorf("calls stored after the refusal = %d, %v; want 3", len(calls), err)
	}
	mustSubmit(t, h, b, refund(300, "n"))
	if _, err := h.q.Deny(ctx, "alice", audit.ChannelWeb, first.ID, "not now"); err != nil {
		t.Fatal(err)
	}
	mustSubmit(t, h, a, refund(201, "n"))
})
