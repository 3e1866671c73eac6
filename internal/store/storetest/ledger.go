package storetest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
)

// A grant's nonce is consumed at most once, however many transactions race
// for it (invariant 6).
var _ = add("ledger/one nonce is consumed once under a race", func(t *testing.T, s Stores) {
	ctx := context.Background()
	c := newCall("agent:a", "t.x", t0)
	insert(t, s, c)
	const racers = 32
	jti := randomID("")
	var won, lost atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range racers {
		wg.Go(func() {
			<-start
			err := s.Queue.Update(ctx, func(tx queueTx) error {
				ok, err := tx.ConsumeNonce(jti, c.ID, t0)
				if err != nil {
					return err
				}
				if ok {
					won.Add(1)
				} else {
					lost.Add(1)
				}
				return nil
			})
			if err != nil {
				t.Errorf("Update: %v", err)
			}
		})
	}
	close(start)
	wg.Wait()
	if won.Load() != 1 || lost.Load() != racers-1 {
		t.Fatalf("ConsumeNonce: %d consumed and %d refused, want 1 and %d", won.Load(), lost.Load(), racers-1)
	}
	// Another nonce is its own.
	update(t, s, func(tx queueTx) error {
		ok, err := tx.ConsumeNonce(randomID(""), c.ID, t0)
		if err == nil && !ok {
			t.Error("a fresh nonce was refused")
		}
		return err
	})
})

// A nonce consumed by a transaction that then failed is not consumed.
var _ = add("ledger/a rolled back consumption consumes nothing", func(t *testing.T, s Stores) {
	ctx := context.Background()
	c := newCall("agent:a", "t.x", t0)
	insert(t, s, c)
	jti := randomID("")
	err := s.Queue.Update(ctx, func(tx queueTx) error {
		if _, err := tx.ConsumeNonce(jti, c.ID, t0); err != nil {
			return err
		}
		return errRollback
	})
	if err != errRollback {
		t.Fatalf("Update = %v, want the rollback", err)
	}
	update(t, s, func(tx queueTx) error {
		ok, err := tx.ConsumeNonce(jti, c.ID, t0)
		if err == nil && !ok {
			t.Error("a nonce whose consumption was rolled back is refused")
		}
		return err
	})
})
