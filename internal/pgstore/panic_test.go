package pgstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/pgstore"
	"github.com/countersign/countersign/internal/pgtest"
	"github.com/countersign/countersign/internal/queue"
)

// TestAfterCommitPanicLeavesWritesWorking: an after-commit function that
// panics panics in its caller, and the store goes on: the next write on
// the same replica and on another one commit. Before, the panic left the
// replica's commit lock held, so its next write waited for ever while it
// held the chain's advisory lock, and so did every write of every replica.
func TestAfterCommitPanicLeavesWritesWorking(t *testing.T) {
	url := pgtest.Database(t)
	open := func() *pgstore.DB {
		d, err := pgstore.Open(context.Background(), url, pgstore.Options{MaxConns: 8})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	a, b := open(), open()
	stuck := false // Close waits for the connections a stuck write holds
	defer func() {
		if !stuck {
			a.Close()
			b.Close()
		}
	}()
	ctx := context.Background()
	func() {
		defer func() {
			if v := recover(); v == nil || !strings.Contains(v.(string), "a bug") {
				t.Errorf("the write's caller got panic %v, want the after-commit function's", v)
			}
		}()
		a.Store().Update(ctx, func(tx queue.Tx) error {
			tx.AfterCommit(func() { panic("a bug in an after-commit function") })
			return nil
		})
	}()
	for _, d := range []*pgstore.DB{a, b} {
		done := make(chan error, 1)
		go func() { done <- d.Store().Update(ctx, func(queue.Tx) error { return nil }) }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(2 * time.Minute): // a deadlock, not a slow machine
			stuck = true
			t.Fatal("no write commits after the panic: the commit lock was left held")
		}
	}
}
