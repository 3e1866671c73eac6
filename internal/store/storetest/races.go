package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
)

// race runs fn(i) on racers goroutines, each with handle hs[i%len(hs)],
// released together.
func race(hs []*handle, fn func(i int, h *handle)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < racers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			fn(i, hs[i%len(hs)])
		}()
	}
	close(start)
	wg.Wait()
}

func handles(t *testing.T, w *world, n int) []*handle {
	hs := make([]*handle, n)
	for i := range hs {
		hs[i] = w.open(t)
	}
	return hs
}

// testRaceApproveDeny races approvals against denials of one call on
// several handles: exactly one decision wins, and the call, its grant and
// its audit trail agree on which.
var _ = add("race/approve against deny across handles: one decision", func(t *testing.T, s Stores) {
	ctx := context.Background()
	w := newWorld(t, s)
	hs := handles(t, w, 4)
	for round := 0; round < rounds; round++ {
		c := mustSubmit(t, hs[0], payer, refund(randomInvoice(), "n"))
		var mu sync.Mutex
		won := map[string]int{}
		race(hs, func(i int, h *handle) {
			var err error
			kind := audit.KindApproved
			if i%2 == 0 {
				_, err = h.q.Approve(ctx, fmt.Sprintf("op%d", i), audit.ChannelWeb, c.ID, c.Digest)
			} else {
				kind = audit.KindDenied
				_, err = h.q.Deny(ctx, fmt.Sprintf("op%d", i), audit.ChannelWeb, c.ID, "no")
			}
			switch {
			case err == nil:
				mu.Lock()
				won[kind]++
				mu.Unlock()
			case errors.Is(err, queue.ErrNotPending):
			default:
				t.Errorf("%s: %v", kind, err)
			}
		})
		if won[audit.KindApproved]+won[audit.KindDenied] != 1 {
			t.Fatalf("round %d: %v decisions succeeded, want exactly one", round, won)
		}
		got, err := hs[1].Queue.Call(ctx, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		tl, err := hs[2].Audit.Timeline(ctx, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		counts := map[string]int{}
		for _, e := range tl {
			counts[e.Kind]++
		}
		if won[audit.KindApproved] == 1 {
			if got.Status != queue.StatusApproved || got.Grant == "" || got.Denial != nil || len(got.Approvals) != 1 ||
				counts[audit.KindApproved] != 1 || counts[audit.KindGranted] != 1 || counts[audit.KindDenied] != 0 {
				t.Fatalf("round %d: approval won but the call is %s (denial %v, %d approvals), audit %v", round, got.Status, got.Denial, len(got.Approvals), counts)
			}
		} else if got.Status != queue.StatusDenied || got.Grant != "" || len(got.Approvals) != 0 ||
			counts[audit.KindDenied] != 1 || counts[audit.KindApproved] != 0 || counts[audit.KindGranted] != 0 {
			t.Fatalf("round %d: denial won but the call is %s (grant %t, %d approvals), audit %v", round, got.Status, got.Grant != "", len(got.Approvals), counts)
		}
	}
	mustVerify(t, hs[3].Audit, rounds*2)
})

// testRaceQuorum races distinct operators approving a call that needs
// two: the first two approvals count, the second of them mints the one
// grant, and every later one finds the call no longer pending.
var _ = add("race/approvals completing a quorum of two across handles: one grant", func(t *testing.T, s Stores) {
	ctx := context.Background()
	w := newWorld(t, s)
	hs := handles(t, w, 4)
	for round := 0; round < rounds; round++ {
		c := mustSubmit(t, hs[0], deployer, deploy(fmt.Sprintf("svc-%c", 'a'+round)))
		var mu sync.Mutex
		ok, minted := 0, 0
		race(hs, func(i int, h *handle) {
			got, err := h.q.Approve(ctx, fmt.Sprintf("op%d", i), audit.ChannelWeb, c.ID, c.Digest)
			switch {
			case err == nil:
				mu.Lock()
				ok++
				if got.Status == queue.StatusApproved {
					minted++
				}
				mu.Unlock()
			case errors.Is(err, queue.ErrNotPending):
			default:
				t.Errorf("Approve: %v", err)
			}
		})
		if ok != 2 || minted != 1 {
			t.Fatalf("round %d: %d approvals accepted and %d grants minted, want 2 and 1", round, ok, minted)
		}
		got, err := hs[1].Queue.Call(ctx, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != queue.StatusApproved || len(got.Approvals) != 2 || got.Grant == "" {
			t.Fatalf("round %d: call %s with %d approvals, want approved with 2", round, got.Status, len(got.Approvals))
		}
		tl, _ := hs[2].Audit.Timeline(ctx, c.ID)
		counts := map[string]int{}
		for _, e := range tl {
			counts[e.Kind]++
		}
		if counts[audit.KindApproved] != 2 || counts[audit.KindGranted] != 1 {
			t.Fatalf("round %d: audit %v, want 2 approved and 1 granted", round, counts)
		}
	}
	mustVerify(t, hs[3].Audit, rounds*4)
})

// testRaceRetryCount races invalid proposals of one (actor, tool) pair on
// several handles: each counts once, the pair is blocked at the limit with
// one retry_blocked entry, and every proposal after that gets
// retry_limit.
var _ = add("race/retry counting across handles: each rejection counted once", func(t *testing.T, s Stores) {
	ctx := context.Background()
	w := newWorld(t, s)
	hs := handles(t, w, 4)
	bad := []byte(`{"tool":"payments.refund","target":"invoice:INV-1","args":{"amount_minor":1,"currency":"EUR","sql":"drop"}}`)
	var mu sync.Mutex
	counted, limited := 0, 0
	race(hs, func(i int, h *handle) {
		_, _, err := h.q.Submit(ctx, payer, bad)
		var pe *queue.ProposalError
		mu.Lock()
		defer mu.Unlock()
		switch {
		case errors.As(err, &pe):
			counted++
		case errors.Is(err, queue.ErrRetryLimit):
			limited++
		default:
			t.Errorf("Submit: %v", err)
		}
	})
	if counted != queue.RetryLimit || limited != racers-queue.RetryLimit {
		t.Fatalf("%d proposals counted and %d refused with retry_limit, want %d and %d",
			counted, limited, queue.RetryLimit, racers-queue.RetryLimit)
	}
	blocks, err := hs[1].Queue.Blocks(ctx)
	if err != nil || len(blocks) != 1 || blocks[0].Count != queue.RetryLimit || blocks[0].Actor != payer.Actor {
		t.Fatalf("Blocks = %+v %v, want one block at %d", blocks, err, queue.RetryLimit)
	}
	var buf bytesBuffer
	if _, err := hs[2].Audit.ExportAudit(ctx, &buf, audit.ExportOptions{Format: "csv"}); err != nil {
		t.Fatal(err)
	}
	if n := buf.count("," + audit.KindRetryBlocked + ","); n != 1 {
		t.Fatalf("%d retry_blocked entries, want 1", n)
	}
	if n := buf.count("," + audit.KindRejected + ","); n != queue.RetryLimit {
		t.Fatalf("%d rejected entries, want %d", n, queue.RetryLimit)
	}
	// Clearing on one handle unblocks on every other.
	if err := hs[3].q.ClearRetry(ctx, "alice", audit.ChannelWeb, payer.Actor, "payments.refund"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := hs[0].q.Submit(ctx, payer, refund(2, "n")); err != nil {
		t.Fatalf("Submit after the block was cleared: %v", err)
	}
	mustVerify(t, hs[0].Audit, queue.RetryLimit+3)
})

// testRaceRedeem races redemptions of one grant on several handles:
// exactly one is accepted, every other is refused as replayed.
var _ = add("race/redemptions of one grant across handles: one accepted", func(t *testing.T, s Stores) {
	ctx := context.Background()
	w := newWorld(t, s)
	hs := handles(t, w, 4)
	for round := 0; round < rounds; round++ {
		c := mustSubmit(t, hs[0], payer, refund(randomInvoice(), "n"))
		c, err := hs[1].q.Approve(ctx, "alice", audit.ChannelWeb, c.ID, c.Digest)
		if err != nil {
			t.Fatal(err)
		}
		body := redeemBody(c)
		var mu sync.Mutex
		accepted, replayed := 0, 0
		race(hs, func(i int, h *handle) {
			r, err := h.q.Redeem(ctx, payer, body)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.Errorf("Redeem: %v", err)
			case r.Accepted:
				accepted++
			case r.Reason == "replayed":
				replayed++
			default:
				t.Errorf("Redeem refused: %s", r.Reason)
			}
		})
		if accepted != 1 || replayed != racers-1 {
			t.Fatalf("round %d: %d accepted, %d replayed; want 1 and %d", round, accepted, replayed, racers-1)
		}
	}
	mustVerify(t, hs[2].Audit, rounds*3)
})

// testRaceSubmitSame races one actor submitting the same proposal on
// several handles: one call is made, every other submission gets it back.
var _ = add("race/the same proposal across handles: one call", func(t *testing.T, s Stores) {
	ctx := context.Background()
	w := newWorld(t, s)
	hs := handles(t, w, 4)
	body := refund(randomInvoice(), "n")
	var mu sync.Mutex
	ids := map[string]int{}
	created := 0
	race(hs, func(i int, h *handle) {
		c, made, err := h.q.Submit(ctx, payer, body)
		if err != nil {
			t.Errorf("Submit: %v", err)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		ids[c.ID]++
		if made {
			created++
		}
	})
	if len(ids) != 1 || created != 1 {
		t.Fatalf("%d calls (%d created) from one proposal, want 1", len(ids), created)
	}
})

// testRaceChain appends from many writers on several handles at once: the
// audit trail stays one linear chain with no gap and no fork.
var _ = add("race/audit appends across handles: one linear chain", func(t *testing.T, s Stores) {
	ctx := context.Background()
	w := newWorld(t, s)
	hs := handles(t, w, 4)
	race(hs, func(i int, h *handle) {
		for j := 0; j < 4; j++ {
			if _, _, err := h.q.Submit(ctx, payer, refund(randomInvoice(), fmt.Sprint(i, j))); err != nil {
				t.Errorf("Submit: %v", err)
			}
		}
	})
	res := mustVerify(t, hs[0].Audit, racers*4)
	if res.Count != racers*4 {
		t.Fatalf("%d entries, want %d", res.Count, racers*4)
	}
})
