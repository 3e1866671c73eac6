package db

import (
	"context"
	"errors"
	"fmt"
	"runtime/metrics"
	"testing"

	"github.com/countersign/countersign/internal/queue"
)

// goroutinesCreated is how many goroutines the process has started.
func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestWriteStartsNoGoroutine: a write made alone runs on its caller's
// goroutine from its BEGIN to its answer, and starts no goroutine: not
// the one database/sql starts for every *sql.Tx, nor the one for every
// query in one (the transaction's state, a write that reads), whose
// starts and wake-ups cost a thread woken and handed over each (writeTx).
// A write whose context can end, as a request's does, and one that fails
// and is rolled back, alike. Through *sql.Tx, each of these writes started 3.
func TestWriteStartsNoGoroutine(t *testing.T) {
	d := openTestDB(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := d.Store()
	for i := range 3 { // the writer's connection, its statements prepared
		if err := s.Update(ctx, func(tx queue.Tx) error { return submitLike(tx, fmt.Sprintf("call_warm_%d", i)) }); err != nil {
			t.Fatal(err)
		}
	}
	errFails := errors.New("the write fails")
	const writes = 60
	before := goroutinesCreated()
	for i := range writes {
		err := s.Update(ctx, func(tx queue.Tx) error {
			if err := submitLike(tx, fmt.Sprintf("call_nogo_%d", i)); err != nil {
				return err
			}
			if _, err := tx.Call(fmt.Sprintf("call_nogo_%d", i)); err != nil { // a read in the transaction
				return err
			}
			if i%3 == 2 {
				return errFails
			}
			return nil
		})
		if (i%3 == 2) != errors.Is(err, errFails) {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	per := float64(goroutinesCreated()-before) / writes
	t.Logf("%.2f goroutines started per write", per)
	// Anything else the test process starts meanwhile counts too: a
	// little slack, far below one per write.
	if per > 0.1 {
		t.Errorf("a write alone started %.2f goroutines, want 0: the write's transaction or its queries run through "+
			"database/sql's *sql.Tx again, or the write is handed to another goroutine", per)
	}
}
