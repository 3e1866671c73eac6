package client_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/countersign/countersign/client"
	"github.com/countersign/countersign/internal/queue"
)

// TestCounterReachesWait: an operator counters a waited-on call; Wait
// returns it countered with the counter's envelope and digest, Accept
// gets the counter's grant, the counter redeems, and the original again
// is previously_countered.
func TestCounterReachesWait(t *testing.T) {
	tc := startConsole(t, t.TempDir(), "127.0.0.1:0")
	c := client.New(tc.url, tc.token("agent:billing-bot", "payments-host"))
	ctx := context.Background()
	call, err := c.Submit(ctx, refund(40000))
	if err != nil {
		t.Fatal(err)
	}
	waited := waitAsync(ctx, c, call.ID)
	tc.waitForWaiters(1)
	counter, err := tc.queue.Counter(ctx, queue.CounterInput{Operator: "alice", Channel: "cli", CallID: call.ID, Digest: call.Digest,
		Edits: map[string]json.RawMessage{"/amount_minor": json.RawMessage("4000")}})
	if err != nil {
		t.Fatal(err)
	}
	r := receive(t, waited)
	if r.err != nil {
		t.Fatalf("Wait: %v", r.err)
	}
	cb := r.call.CounteredBy
	if r.call.Status != client.StatusCountered || cb == nil || cb.ID != counter.ID || cb.Digest != counter.Digest ||
		canonicalDigest(string(cb.Envelope)) != cb.Digest {
		t.Fatalf("Wait: status %q countered_by %+v", r.call.Status, cb)
	}
	acc, err := c.Accept(ctx, cb.ID)
	if err != nil || acc.Status != client.StatusApproved || acc.Grant == "" || acc.CounteredFrom != call.ID {
		t.Fatalf("Accept: %+v %v", acc, err)
	}
	var args map[string]any
	json.Unmarshal(acc.Args, &args)
	red, err := c.Redeem(ctx, acc.Grant, client.CallSpec{Tool: acc.Tool, Target: acc.Target, Args: args})
	if err != nil || !red.Accepted {
		t.Fatalf("Redeem the counter: %+v %v", red, err)
	}
	_, err = c.Submit(ctx, refund(40000))
	e, ok := client.AsError(err)
	if !ok || e.Code != client.CodePreviouslyCountered || e.Status != http.StatusConflict || e.CallID != call.ID || e.CounteredBy != counter.ID {
		t.Errorf("resubmit: %v (%+v), want 409 previously_countered naming %s", err, e, counter.ID)
	}
}
