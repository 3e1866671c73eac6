package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/countersign/countersign/client"
	"github.com/countersign/countersign/internal/queue"
)

type gatedResult struct {
	call *client.Call
	err  error
}

// gatedAsync runs Gated for p in a goroutine; ran receives the amount of
// each run.
func gatedAsync(ctx context.Context, c *client.Client, p client.Proposal, ran chan<- int64, opts ...client.GateOption) <-chan gatedResult {
	ch := make(chan gatedResult, 1)
	go func() {
		call, err := c.Gated(ctx, p, func(_ context.Context, call *client.Call) error {
			var a struct {
				AmountMinor int64 `json:"amount_minor"`
			}
			json.Unmarshal(call.Args, &a)
			ran <- a.AmountMinor
			return nil
		}, opts...)
		ch <- gatedResult{call, err}
	}()
	return ch
}

func gatedResultOf(t *testing.T, ch <-chan gatedResult) gatedResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("Gated did not return within 20s")
	}
	return gatedResult{}
}

func ranAmounts(ran chan int64) []int64 {
	var out []int64
	for {
		select {
		case a := <-ran:
			out = append(out, a)
		default:
			return out
		}
	}
}

// TestGatedCounter: without AcceptCounter a countered call is a
// *NotApprovedError carrying the counter and what changed, and nothing
// runs; proposing exactly the counter's call accepts and runs it; with
// AcceptCounter the edited call runs.
func TestGatedCounter(t *testing.T) {
	tc := startConsole(t, t.TempDir(), "127.0.0.1:0")
	c := client.New(tc.url, tc.token("agent:billing-bot", "payments-host"))
	ctx := context.Background()
	ran := make(chan int64, 4)
	counterOf := func(amount string) *queue.Call {
		t.Helper()
		tc.waitForWaiters(1)
		calls, err := tc.queue.PendingCalls(ctx, 10)
		if err != nil || len(calls) != 1 {
			t.Fatalf("pending: %d %v", len(calls), err)
		}
		k, err := tc.queue.Counter(ctx, queue.CounterInput{Operator: "alice", Channel: "cli", CallID: calls[0].ID, Digest: calls[0].Digest,
			Edits: map[string]json.RawMessage{"/amount_minor": json.RawMessage(amount)}})
		if err != nil {
			t.Fatal(err)
		}
		return k
	}

	done := gatedAsync(ctx, c, refund(40000), ran)
	k := counterOf("4000")
	r := gatedResultOf(t, done)
	var ne *client.NotApprovedError
	if !errors.As(r.err, &ne) || ne.Call.Status != client.StatusCountered || ne.Counter == nil || ne.Counter.ID != k.ID ||
		!slices.Equal(ne.Changes, []string{"amount_minor changed from 40000 to 4000"}) {
		t.Fatalf("Gated on a countered call: %v (%+v)", r.err, ne)
	}
	if got := ranAmounts(ran); len(got) != 0 {
		t.Fatalf("the function ran %v on a countered call", got)
	}
	if got, _ := c.Get(ctx, k.ID); !got.AcceptedAt.IsZero() {
		t.Fatal("the counter was accepted without the caller opting in")
	}
	r = gatedResultOf(t, gatedAsync(ctx, c, refund(4000), ran))
	if r.err != nil || r.call.ID != k.ID || !slices.Equal(ranAmounts(ran), []int64{4000}) {
		t.Fatalf("Gated with the counter's call: %v", r.err)
	}
	if got, _ := c.Get(ctx, k.ID); got.Status != client.StatusRedeemed || got.Outcome == nil || got.Outcome.Status != "succeeded" {
		t.Fatalf("the counter after it ran: %+v", got)
	}

	// Proposed again with AcceptCounter, a call countered a moment ago is
	// refused as previously_countered: the counter it names runs.
	done = gatedAsync(ctx, c, refund(60000), ran)
	k = counterOf("6000")
	if r := gatedResultOf(t, done); !errors.As(r.err, &ne) {
		t.Fatalf("Gated on a countered call: %v", r.err)
	}
	r = gatedResultOf(t, gatedAsync(ctx, c, refund(60000), ran, client.AcceptCounter()))
	if r.err != nil || r.call.ID != k.ID || !slices.Equal(ranAmounts(ran), []int64{6000}) {
		t.Fatalf("Gated with AcceptCounter after previously_countered: %v", r.err)
	}

	done = gatedAsync(ctx, c, refund(50000), ran, client.AcceptCounter())
	k = counterOf("5000")
	r = gatedResultOf(t, done)
	if r.err != nil || r.call.ID != k.ID || !slices.Equal(ranAmounts(ran), []int64{5000}) {
		t.Fatalf("Gated with AcceptCounter: %v", r.err)
	}
}
