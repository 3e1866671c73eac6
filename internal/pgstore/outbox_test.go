package pgstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/notify/outboxtest"
	"github.com/countersign/countersign/internal/pgtest"
	"github.com/countersign/countersign/internal/queue"
)

// TestOutboxConformance runs the outbox suite (the same as SQLite's) on a
// fresh PostgreSQL database.
func TestOutboxConformance(t *testing.T) {
	outboxtest.Run(t, func(t *testing.T) outboxtest.Harness {
		d := mustOpen(t, pgtest.Database(t))
		ctx := context.Background()
		n := 0
		return outboxtest.Harness{
			Outbox: d.Outbox(),
			Enqueue: func(t testing.TB, ns ...queue.Notice) {
				t.Helper()
				if err := d.Store().Update(ctx, func(tx queue.Tx) error { return tx.Enqueue(ns) }); err != nil {
					t.Fatalf("Enqueue: %v", err)
				}
			},
			NewCall: func(t testing.TB) string {
				t.Helper()
				n++
				c := &queue.Call{ID: fmt.Sprintf("call_%d", n), Actor: "agent:a", Audience: "h", Tool: "t.x", Target: "x",
					Args: canonical.Object{}, Envelope: []byte("{}"), Digest: fmt.Sprintf("%064d", n), Status: queue.StatusPending,
					ApprovalsRequired: 1, CreatedAt: time.Now(), DecideBy: time.Now().Add(time.Hour)}
				if err := d.Store().Update(ctx, func(tx queue.Tx) error { return tx.InsertCall(c) }); err != nil {
					t.Fatalf("InsertCall: %v", err)
				}
				return c.ID
			},
			EndCall: func(t testing.TB, id string) {
				t.Helper()
				err := d.Store().Update(ctx, func(tx queue.Tx) error {
					c, err := tx.Call(id)
					if err != nil {
						return err
					}
					c.Status, c.DecidedAt = queue.StatusDenied, time.Now()
					c.Denial = &queue.Denial{By: "op", Reason: "no", At: c.DecidedAt}
					return tx.UpdateCall(c)
				})
				if err != nil {
					t.Fatalf("EndCall: %v", err)
				}
			},
		}
	})
}
