package storetest

import (
	"testing"
	"time"

	"github.com/countersign/countersign/internal/queue"
)

var _ = add("rollback/latest accepted", func(t *testing.T, s Stores) {
	update(t, s, func(tx queue.Tx) error {
		at, err := tx.LastRollback()
		if err == nil && !at.IsZero() {
			t.Errorf("LastRollback of a fresh database = %v, want zero", at)
		}
		return err
	})
	first, second := t0.Add(time.Hour), t0.Add(2*time.Hour)
	for _, at := range []time.Time{second, first} {
		update(t, s, func(tx queue.Tx) error {
			return tx.InsertRollback(queue.Rollback{AcceptedAt: at, AcceptedBy: "adam", MarkSeq: 9,
				MarkHead: "aa", DBSeq: 5, DBHead: "bb"})
		})
	}
	update(t, s, func(tx queue.Tx) error {
		at, err := tx.LastRollback()
		if err == nil && !at.Equal(second) {
			t.Errorf("LastRollback = %v, want the latest, %v", at, second)
		}
		return err
	})
})
