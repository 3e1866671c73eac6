package queue_test

import (
	"context"
	"sync"
	"testing"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/grant"
	"github.com/countersign/countersign/internal/queue"
)

func refundProposal(t *testing.T, amount string) canonical.Proposal {
	t.Helper()
	p, err := canonical.ParseProposal([]byte(`{"tool":"payments.refund","target":"invoice:INV-7","args":{"amount_minor":` + amount + `,"currency":"EUR"}}`))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSubmitAndRedeem: a call a rule approves at submission is redeemed in
// the submission's own transaction, audited as a redemption; its grant is
// then used up for everyone, racing redeemers included. A call that waits
// for people is only submitted.
func TestSubmitAndRedeem(t *testing.T) {
	e := newPolicyEnv(t, rulesFile)
	ctx := context.Background()
	who := queue.Principal{Actor: "agent:billing", Audience: "payments-host"}
	commits0, _ := e.db.WriteCounts()
	c, created, r, _, err := e.q.SubmitAndRedeem(ctx, who, refundProposal(t, "100"), nil, nil)
	if err != nil || !created || r == nil || !r.Accepted {
		t.Fatalf("SubmitAndRedeem = %+v, %v, %+v, %v", c, created, r, err)
	}
	if commits, _ := e.db.WriteCounts(); commits-commits0 != 1 {
		t.Errorf("submitted and redeemed in %d commits, want 1", commits-commits0)
	}
	if c.Status != queue.StatusRedeemed || c.LeaseUntil.IsZero() {
		t.Fatalf("the call: %s, lease until %v", c.Status, c.LeaseUntil)
	}
	red := auditOf(t, e.db, c.ID, audit.KindRedeemed)
	if red.Principal != who.Actor || detail(red, "jti") == nil {
		t.Errorf("the redemption's entry: %+v", red)
	}
	auditOf(t, e.db, c.ID, audit.KindGranted)
	// The grant is used up: every later redemption is a replay.
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			again, err := e.q.RedeemCall(ctx, who, c.Grant, refundProposal(t, "100"))
			if err != nil || again.Accepted || again.Reason != grant.ReasonReplayed {
				t.Errorf("a second redemption = %+v, %v, want refused as %s", again, err, grant.ReasonReplayed)
			}
		}()
	}
	wg.Wait()

	// Waiting for people: submitted, nothing redeemed.
	c, created, r, _, err = e.q.SubmitAndRedeem(ctx, who, refundProposal(t, "200000"), nil, nil)
	if err != nil || !created || r != nil || c.Status != queue.StatusPending {
		t.Fatalf("a call for people = %+v, %v, %+v, %v", c, created, r, err)
	}
}
