package db

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
)

// When SQLite itself ends the shared transaction under a write (a
// constraint with ON CONFLICT ROLLBACK, an interrupted write statement, an
// I/O error), every write that ran in it is lost and must be answered with
// an error, the writes that had not run must run exactly once in a later
// transaction and be answered only once committed, and the audit chain
// must stay whole. The tests below make SQLite end it for real, at every
// place in a group commit.

// endedWrite is one write of such a test: the call it stores (or "" for
// none) and how it ends.
type endedWrite struct {
	id  string
	fn  func(tx queue.Tx) error
	ran atomic.Int32
}

// rollbackByConflict makes SQLite roll back the whole transaction: a
// constraint violated by INSERT OR ROLLBACK.
func rollbackByConflict(tx queue.Tx) error {
	_, err := tx.(*storeTx).tx.ExecContext(context.Background(), `INSERT OR ROLLBACK INTO meta (key, value) VALUES ('identity', 'x')`)
	return err
}

// rollbackByInterrupt interrupts a long write statement: SQLite rolls
// back the transaction it runs in. The driver interrupts a statement when
// its context ends, but an interrupt that comes before the statement has
// begun to run (a goroutine not yet scheduled, on a busy machine) is
// lost; the statement then ends by itself, deleting nothing, and it is
// run again with a new context, up to ten times.
func rollbackByInterrupt(tx queue.Tx) error {
	for range 10 {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(20*time.Millisecond, cancel)
		_, err := tx.(*storeTx).tx.ExecContext(ctx, `DELETE FROM calls WHERE seq = (
			WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r WHERE x < 5000000) SELECT max(x) FROM r)`)
		cancel()
		if err != nil {
			return err
		}
	}
	return errors.New("the long statement was never interrupted")
}

// checkEnded runs writes in one group commit and checks what every
// acknowledged write left, and that nothing else was left.
func checkEnded(t *testing.T, d *DB, ws []*endedWrite, wantOK []bool) {
	t.Helper()
	fns := make([]func(queue.Tx) error, len(ws))
	for i, w := range ws {
		fns[i] = func(tx queue.Tx) error {
			w.ran.Add(1)
			return w.fn(tx)
		}
	}
	errs := inOneBatch(t, d, fns...)
	var want []string
	for i, w := range ws {
		if n := w.ran.Load(); n != 1 {
			t.Errorf("write %d ran %d times, want once", i, n)
		}
		if (errs[i] == nil) != wantOK[i] {
			t.Errorf("write %d = %v, want ok %v", i, errs[i], wantOK[i])
		}
		if errs[i] == nil && w.id != "" {
			want = append(want, w.id)
		}
	}
	var got []string
	for _, id := range callIDs(t, d) {
		if strings.HasPrefix(id, "call_ended_") {
			got = append(got, id)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("calls stored = %v, want the acknowledged ones %v", got, want)
	}
	verifyAuditChain(t, d.SQL())
	// The writer goes on, chaining to the committed head.
	if err := d.Store().Update(context.Background(), func(tx queue.Tx) error {
		return tx.Append(&audit.Entry{Time: audit.FormatTime(time.Now()), Kind: audit.KindSubmitted, CallID: "call_x",
			Principal: "agent:group", Channel: audit.ChannelAPI})
	}); err != nil {
		t.Fatal(err)
	}
	verifyAuditChain(t, d.SQL())
}

func TestGroupCommitEndedBySQLite(t *testing.T) {
	enders := map[string]func(queue.Tx) error{"conflict": rollbackByConflict, "interrupt": rollbackByInterrupt}
	for name, end := range enders {
		for _, returns := range []bool{true, false} {
			for _, at := range []int{0, 1, 2, 3} { // 3 is the last of four
				t.Run(fmt.Sprintf("%s/returns_error=%v/at=%d", name, returns, at), func(t *testing.T) {
					d, err := Open(filepath.Join(t.TempDir(), "countersign.db"))
					if err != nil {
						t.Fatal(err)
					}
					defer d.Close()
					var ws []*endedWrite
					var wantOK []bool
					for i := range 4 {
						id := fmt.Sprintf("call_ended_%d", i)
						w := &endedWrite{id: id}
						if i == at {
							w.fn = func(tx queue.Tx) error {
								if err := submitLike(tx, id); err != nil {
									return err
								}
								err := end(tx)
								if err == nil {
									return errors.New("SQLite did not end the transaction")
								}
								if returns {
									return err
								}
								return nil // a write that ignores the error
							}
						} else {
							w.fn = func(tx queue.Tx) error { return submitLike(tx, id) }
						}
						ws = append(ws, w)
						// Lost: the write that ended it and every write before it;
						// those after it commit (in the next transaction; when the
						// last write ignores the end, COMMIT reports it).
						wantOK = append(wantOK, i > at)
					}
					checkEnded(t, d, ws, wantOK)
				})
			}
		}
	}
}

// TestGroupCommitEndedThenWrites: a write that ignores SQLite's end of the
// transaction and goes on writing runs its later statements outside any
// transaction; none of them may be left.
func TestGroupCommitEndedThenWrites(t *testing.T) {
	d := openTestDB(t)
	ws := []*endedWrite{
		{id: "call_ended_0", fn: func(tx queue.Tx) error { return submitLike(tx, "call_ended_0") }},
		{id: "call_ended_leak", fn: func(tx queue.Tx) error {
			if err := rollbackByConflict(tx); err == nil {
				return errors.New("SQLite did not end the transaction")
			}
			return submitLike(tx, "call_ended_leak")
		}},
		{id: "call_ended_2", fn: func(tx queue.Tx) error { return submitLike(tx, "call_ended_2") }},
	}
	checkEnded(t, d, ws, []bool{false, false, true})
}
