package client_test

import (
	"context"
	"testing"

	"github.com/countersign/countersign/client"
)

// BenchmarkSubmit measures one proposal over HTTP against a real console:
// strict parse, validation, digest, and the SQLite transaction.
func BenchmarkSubmit(b *testing.B) {
	tc := startConsole(b, b.TempDir(), "127.0.0.1:0")
	c := client.New(tc.url, tc.token("agent:billing-bot", "payments-host"))
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		if _, err := c.Submit(ctx, refund(int64(i%5_000_000+1))); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkApproveToWait measures from an operator's approval to Wait
// returning the grant: the approval's transaction, the wake-up after
// commit, and the long-poll's answer.
func BenchmarkApproveToWait(b *testing.B) {
	tc := startConsole(b, b.TempDir(), "127.0.0.1:0")
	c := client.New(tc.url, tc.token("agent:billing-bot", "payments-host"))
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		call, err := c.Submit(ctx, refund(int64(i%5_000_000+1)))
		if err != nil {
			b.Fatal(err)
		}
		ch := make(chan error, 1)
		go func() {
			got, err := c.Wait(ctx, call.ID)
			if err == nil && got.Status != client.StatusApproved {
				err = context.Canceled
			}
			ch <- err
		}()
		tc.waitForWaiters(1)
		b.StartTimer()
		if _, err := tc.queue.Approve(ctx, "alice", "cli", call.ID, call.Digest); err != nil {
			b.Fatal(err)
		}
		if err := <-ch; err != nil {
			b.Fatal(err)
		}
	}
}
