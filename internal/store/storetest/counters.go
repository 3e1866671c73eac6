package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/queue"
)

// A counter-proposal's links and acceptance are stored and read back; the
// countered status is final, and the links never change once written.
var _ = add("calls/counter-proposal links, countered final", func(t *testing.T, s Stores) {
	ctx := context.Background()
	orig := newCall("agent:a", "pay.refund", t0)
	insert(t, s, orig)
	counter := newCall("agent:a", "pay.refund", t0.Add(time.Second))
	counter.CounteredFrom, counter.EditedBy, counter.SubmittedBy = orig.ID, "olivia", "tok_1"
	insert(t, s, counter)
	orig.Status, orig.DecidedAt, orig.CounteredBy = queue.StatusCountered, t0.Add(time.Second), counter.ID
	update(t, s, func(tx queue.Tx) error { return tx.UpdateCall(orig) })

	got, err := s.Queue.Call(ctx, orig.ID)
	if err != nil || got.Status != queue.StatusCountered || got.CounteredBy != counter.ID || got.CounteredFrom != "" {
		t.Fatalf("original reads back %+v, %v", got, err)
	}
	got, err = s.Queue.Call(ctx, counter.ID)
	if err != nil || got.CounteredFrom != orig.ID || got.EditedBy != "olivia" || got.CounteredBy != "" || !got.AcceptedAt.IsZero() {
		t.Fatalf("counter reads back %+v, %v", got, err)
	}
	accepted := t0.Add(2 * time.Second)
	update(t, s, func(tx queue.Tx) error {
		c, err := tx.Call(counter.ID)
		if err != nil {
			return err
		}
		c.AcceptedAt = accepted
		return tx.UpdateCall(c)
	})
	if got, err = s.Queue.Call(ctx, counter.ID); err != nil || !got.AcceptedAt.Equal(accepted) {
		t.Fatalf("accepted_at reads back %v, %v; want %v", got.AcceptedAt, err, accepted)
	}

	// Below the application: a countered call never changes status, and
	// a counter's links never change.
	for name, fn := range map[string]func(tx queue.Tx) error{
		"countered to approved": func(tx queue.Tx) error {
			c, err := tx.Call(orig.ID)
			if err != nil {
				return err
			}
			c.Status = queue.StatusApproved
			return tx.UpdateCall(c)
		},
		"countered_by rewritten": func(tx queue.Tx) error {
			c, err := tx.Call(orig.ID)
			if err != nil {
				return err
			}
			c.CounteredBy = "call_other"
			return tx.UpdateCall(c)
		},
	} {
		if err := s.Queue.Update(ctx, fn); err == nil {
			t.Errorf("%s: committed, want the store to refuse it", name)
		}
	}
	if got, err := s.Queue.Call(ctx, orig.ID); err != nil || got.Status != queue.StatusCountered || got.CounteredBy != counter.ID {
		t.Fatalf("original after refused writes: %+v, %v", got, err)
	}
})
