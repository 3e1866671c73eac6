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

// Batch approvals and denials race single approvals and denials of the
// same calls on several handles: each call is decided exactly once, by whoever won it;
// a call that dropped out of a batch holds no decision of the batch's
// operator; and every decided call has one decision entry (and, approved,
// one grant) in the audit trail.
var _ = add("race/batch decisions against single decisions across handles: each call decided once", func(t *testing.T, s Stores) {
	ctx := context.Background()
	w := newWorld(t, s)
	hs := handles(t, w, 4)
	const calls = 8
	for round := 0; round < rounds; round++ {
		var cs []*queue.Call
		var items []queue.BatchItem
		for range calls {
			c := mustSubmit(t, hs[0], payer, refund(randomInvoice(), "n"))
			cs = append(cs, c)
			items = append(items, queue.BatchItem{CallID: c.ID, Digest: c.Digest})
		}
		var mu sync.Mutex
		winner := map[string][]string{}  // call id: who decided it
		dropped := map[string][]string{} // batch operator: the calls that dropped out
		race(hs, func(i int, h *handle) {
			op := fmt.Sprintf("op%d", i)
			c := cs[i%calls]
			switch i % 4 {
			case 0:
				in := queue.BatchInput{Operator: op, Channel: audit.ChannelWeb, Items: items, Reason: "not now"}
				decide, kind := h.q.ApproveBatch, "approved:"
				if i%8 == 4 {
					decide, kind = h.q.DenyBatch, "denied:"
				}
				out, err := decide(ctx, in)
				if err != nil {
					t.Errorf("%s batch: %v", kind, err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				for _, d := range out.Decided {
					winner[d.ID] = append(winner[d.ID], kind+op)
				}
				for _, d := range out.Dropped {
					if !errors.Is(d.Err, queue.ErrNotPending) {
						t.Errorf("batch: %s dropped with %v, want ErrNotPending", d.CallID, d.Err)
					}
					dropped[op] = append(dropped[op], d.CallID)
				}
				if len(out.Decided)+len(out.Dropped) != calls {
					t.Errorf("batch: %d decided and %d dropped of %d", len(out.Decided), len(out.Dropped), calls)
				}
			case 1, 2:
				_, err := h.q.Approve(ctx, op, audit.ChannelWeb, c.ID, c.Digest)
				record(t, &mu, winner, c.ID, "approved:"+op, err)
			default:
				_, err := h.q.Deny(ctx, op, audit.ChannelWeb, c.ID, "no")
				record(t, &mu, winner, c.ID, "denied:"+op, err)
			}
		})
		for _, c := range cs {
			got, err := hs[1].Queue.Call(ctx, c.ID)
			if err != nil {
				t.Fatal(err)
			}
			if len(winner[c.ID]) != 1 {
				t.Fatalf("round %d: call %s decided by %v, want exactly one decision", round, c.ID, winner[c.ID])
			}
			tl, err := hs[2].Audit.Timeline(ctx, c.ID)
			if err != nil {
				t.Fatal(err)
			}
			counts := map[string]int{}
			for _, e := range tl {
				counts[e.Kind]++
			}
			switch w := winner[c.ID][0]; {
			case got.Status == queue.StatusApproved:
				if len(got.Approvals) != 1 || "approved:"+got.Approvals[0].Operator != w || got.Grant == "" ||
					counts[audit.KindApproved] != 1 || counts[audit.KindGranted] != 1 || counts[audit.KindDenied] != 0 {
					t.Fatalf("round %d: %s won by %s but approved by %v, audit %v", round, c.ID, w, got.Approvals, counts)
				}
			case got.Status == queue.StatusDenied:
				if got.Denial == nil || "denied:"+got.Denial.By != w || got.Grant != "" || len(got.Approvals) != 0 ||
					counts[audit.KindDenied] != 1 || counts[audit.KindApproved] != 0 || counts[audit.KindGranted] != 0 {
					t.Fatalf("round %d: %s won by %s but denied %+v, audit %v", round, c.ID, w, got.Denial, counts)
				}
			default:
				t.Fatalf("round %d: %s is %s after the race", round, c.ID, got.Status)
			}
		}
		for op, ids := range dropped {
			for _, id := range ids {
				if w := winner[id][0]; w == "approved:"+op || w == "denied:"+op {
					t.Fatalf("round %d: %s dropped out of %s's batch but %s decided it", round, id, op, op)
				}
			}
		}
	}
	mustVerify(t, hs[3].Audit, rounds*calls*2)
})

// record notes a single decision's success; a refusal must be that the
// call is no longer pending.
func record(t *testing.T, mu *sync.Mutex, winner map[string][]string, id, who string, err error) {
	switch {
	case err == nil:
		mu.Lock()
		winner[id] = append(winner[id], who)
		mu.Unlock()
	case errors.Is(err, queue.ErrNotPending):
	default:
		t.Errorf("%s: %v", who, err)
	}
}
