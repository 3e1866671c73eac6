package storetest

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/queue"
)

var _ = add("retry/state and blocks", func(t *testing.T, s Stores) {
	ctx := context.Background()
	update(t, s, func(tx queue.Tx) error {
		st, err := tx.Retry("agent:a", "pay.refund")
		if err == nil && st != (queue.RetryState{}) {
			t.Errorf("Retry of a fresh pair = %+v, want zero", st)
		}
		return err
	})
	at := t0.Add(time.Minute)
	update(t, s, func(tx queue.Tx) error {
		if err := tx.SetRetry("agent:a", "pay.refund", queue.RetryState{Count: 2}); err != nil {
			return err
		}
		return tx.SetRetry("agent:b", "pay.refund", queue.RetryState{Count: 3, BlockedAt: at})
	})
	update(t, s, func(tx queue.Tx) error {
		st, err := tx.Retry("agent:a", "pay.refund")
		if err == nil && (st.Count != 2 || st.Blocked()) {
			t.Errorf("Retry = %+v, want 2 and not blocked", st)
		}
		return err
	})
	blocks, err := s.Queue.Blocks(ctx)
	want := []queue.Block{{Actor: "agent:b", Tool: "pay.refund", Count: 3, BlockedAt: at}}
	if err != nil || !reflect.DeepEqual(blocks, want) {
		t.Errorf("Blocks = %+v, %v; want %+v", blocks, err, want)
	}
	update(t, s, func(tx queue.Tx) error { return tx.SetRetry("agent:b", "pay.refund", queue.RetryState{}) })
	if blocks, err := s.Queue.Blocks(ctx); err != nil || len(blocks) != 0 {
		t.Errorf("Blocks after clearing = %+v, %v; want none", blocks, err)
	}
})
