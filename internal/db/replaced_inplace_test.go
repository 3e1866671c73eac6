package db

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/store"
)

// replaceInPlace writes another Countersign database into d's file with
// SQLite's backup API, as `sqlite3 countersign.db ".restore other.db"`
// would: the file keeps its inode (sameFile passes), and only the
// identity row tells the two databases apart. It returns the other
// database, with one call, call_other, submitted and audited.
func replaceInPlace(t *testing.T, d *DB) { t.Helper(); replaceInPlaceWith(t, d, nil) }

// replaceInPlaceWith is replaceInPlace, with what fill writes into the
// other database first.
func replaceInPlaceWith(t *testing.T, d *DB, fill func(tx queue.Tx) error) {
	t.Helper()
	ctx := context.Background()
	other := openTestDB(t)
	if err := other.Store().Update(ctx, func(tx queue.Tx) error {
		if fill != nil {
			if err := fill(tx); err != nil {
				return err
			}
		}
		return submitLike(tx, "call_other")
	}); err != nil {
		t.Fatal(err)
	}
	dst, err := d.SQL().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	src, err := other.SQL().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	err = dst.Raw(func(dc any) error {
		return src.Raw(func(sc any) error {
			b, err := dc.(*countingConn).c.Backup("main", sc.(*countingConn).c, "main")
			if err != nil {
				return err
			}
			if _, err := b.Step(-1); err != nil {
				b.Finish()
				return err
			}
			return b.Finish()
		})
	})
	if err != nil {
		t.Fatalf("restore another database into the file: %v", err)
	}
	var id string
	if err := d.SQL().QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'identity'`).Scan(&id); err != nil || id == d.identity {
		t.Fatalf("identity in the file after the restore: %q, %v; want another database's", id, err)
	}
}

// TestReplacedInPlaceEveryWriteIsReplaced: queue.Store.Update promises
// that "before fn runs, Update checks inside the transaction that the
// database is still the one the store opened, and fails with
// store.ErrReplaced when it is not". Since the transaction's state is read
// lazily, fn runs on the other database's rows first, and a write whose
// first statement is neither a read of a call nor a submission's checks
// answers from those rows (not found, a conflict) instead of ErrReplaced.
func TestReplacedInPlaceEveryWriteIsReplaced(t *testing.T) {
	ctx := context.Background()
	writes := []struct {
		name  string
		write func(d *DB) error
	}{
		{"remove a hold", func(d *DB) error { return d.RemoveHold(ctx, "hold_0123456789abcdef", "root") }},
		{"a write whose first read is an allowance", func(d *DB) error {
			return d.Store().Update(ctx, func(tx queue.Tx) error {
				_, err := tx.Allowance("allow_missing")
				return err
			})
		}},
		{"a write whose first read is a plan", func(d *DB) error {
			return d.Store().Update(ctx, func(tx queue.Tx) error {
				_, err := tx.Plan("plan_missing")
				return err
			})
		}},
		// These read the state before they answer: they hold.
		{"a read of a call the other database has", func(d *DB) error {
			return d.Store().Update(ctx, func(tx queue.Tx) error {
				_, err := tx.Call("call_other")
				return err
			})
		}},
		{"a read of a missing call", func(d *DB) error {
			return d.Store().Update(ctx, func(tx queue.Tx) error {
				_, err := tx.Call("call_missing")
				return err
			})
		}},
		{"a retry state set, no state read", func(d *DB) error {
			return d.Store().Update(ctx, func(tx queue.Tx) error {
				return tx.SetRetry("agent:a", "payments.refund", queue.RetryState{Count: 1})
			})
		}},
	}
	for _, w := range writes {
		t.Run(w.name, func(t *testing.T) {
			d := openTestDB(t)
			replaceInPlace(t, d)
			if err := w.write(d); !errors.Is(err, store.ErrReplaced) {
				t.Errorf("write on a database replaced in place: %v; want store.ErrReplaced", err)
			}
			if n := countRows(t, d.SQL(), `SELECT COUNT(*) FROM retries`); n != 0 {
				t.Errorf("%d retry rows written into the other database, want 0", n)
			}
		})
	}
}

// TestReplacedCallReturnsNoCall: a read of a call whose statement also
// found the identity wrong returns ErrReplaced, and no call: the other
// database's row must not reach the write's function with it.
func TestReplacedCallReturnsNoCall(t *testing.T) {
	d := openTestDB(t)
	replaceInPlace(t, d)
	var got *queue.Call
	err := d.Store().Update(context.Background(), func(tx queue.Tx) error {
		c, err := tx.Call("call_other")
		got = c
		return err
	})
	if !errors.Is(err, store.ErrReplaced) {
		t.Fatalf("write: %v, want store.ErrReplaced", err)
	}
	if got != nil {
		t.Errorf("tx.Call returned the other database's call %s with ErrReplaced; want nil", got.ID)
	}
}

// TestReplacedInPlaceGroupCommitCommitsNothing: writes that read no state,
// and one that swallows the ErrReplaced of its read of a call, share a
// group commit: the state read before COMMIT fails all of them, and
// nothing lands in the other database.
func TestReplacedInPlaceGroupCommitCommitsNothing(t *testing.T) {
	d := openTestDB(t)
	replaceInPlace(t, d)
	setRetry := func(actor string) func(queue.Tx) error {
		return func(tx queue.Tx) error {
			return tx.SetRetry(actor, "payments.refund", queue.RetryState{Count: 1})
		}
	}
	errs := inOneBatch(t, d,
		setRetry("agent:a"),
		func(tx queue.Tx) error {
			_, _ = tx.Call("call_other") // ErrReplaced, ignored
			return tx.SetRetry("agent:b", "payments.refund", queue.RetryState{Count: 1})
		},
		setRetry("agent:c"),
	)
	for i, err := range errs {
		if !errors.Is(err, store.ErrReplaced) {
			t.Errorf("write %d: %v, want store.ErrReplaced", i, err)
		}
	}
	if n := countRows(t, d.SQL(), `SELECT COUNT(*) FROM retries`); n != 0 {
		t.Errorf("%d retry rows committed into the other database, want 0", n)
	}
}

// TestTxStateReadByAFailedWriteIsReadAgain: the state is first read by a
// write in a savepoint that appends an entry and fails; the writes after
// it, one of which reads a call on the path that skips the state, append
// onto the chain as it is, not onto the failed write's head.
func TestTxStateReadByAFailedWriteIsReadAgain(t *testing.T) {
	d := openTestDB(t)
	ctx := context.Background()
	for _, id := range []string{"call_a", "call_b"} {
		if err := d.Store().Update(ctx, func(tx queue.Tx) error { return submitLike(tx, id) }); err != nil {
			t.Fatal(err)
		}
	}
	failed := errors.New("refused")
	entry := func(id string) *audit.Entry {
		return &audit.Entry{Time: audit.FormatTime(time.Now()), Kind: audit.KindOutcome, CallID: id, Principal: "agent:a", Channel: audit.ChannelAPI}
	}
	readAndAppend := func(id string, fail bool) func(queue.Tx) error {
		return func(tx queue.Tx) error {
			c, err := tx.Call(id)
			if err != nil {
				return err
			}
			if err := tx.Append(entry(c.ID)); err != nil {
				return err
			}
			if fail {
				return failed
			}
			return nil
		}
	}
	errs := inOneBatch(t, d,
		setRetryNoState,
		readAndAppend("call_a", true), // reads the state, appends, fails
		readAndAppend("call_b", false),
		func(tx queue.Tx) error { return tx.Append(entry("call_a")) },
		readAndAppend("call_a", true),
		readAndAppend("call_b", false),
	)
	want := []error{nil, failed, nil, nil, failed, nil}
	for i := range errs {
		if !errors.Is(errs[i], want[i]) && !(errs[i] == nil && want[i] == nil) {
			t.Errorf("write %d: %v, want %v", i, errs[i], want[i])
		}
	}
	if n := verifyAuditChain(t, d.SQL()); n != 2+3 {
		t.Errorf("%d audit entries, want 5", n)
	}
}

func setRetryNoState(tx queue.Tx) error {
	return tx.SetRetry("agent:a", "payments.refund", queue.RetryState{Count: 1})
}

// TestReplacedInPlaceClaimReturnsNoDeliveries: a claim of the outbox's
// due notices reads no transaction state; on a database restored in place
// it fails at COMMIT with ErrReplaced, and must not hand back the other
// database's notices with that error (the dispatcher checks the error
// first today; nothing should depend on that).
func TestReplacedInPlaceClaimReturnsNoDeliveries(t *testing.T) {
	d := openTestDB(t)
	now := time.Now()
	replaceInPlaceWith(t, d, func(tx queue.Tx) error {
		return tx.Enqueue([]queue.Notice{{EventID: "evt_other", Kind: "call.submitted", Channel: "hook", Body: []byte(`{}`), At: now, DueAt: now}})
	})
	claimed, _, err := d.Outbox().Claim(context.Background(), "me", now.Add(time.Second), time.Minute, 10)
	if !errors.Is(err, store.ErrReplaced) {
		t.Fatalf("Claim: %v, want store.ErrReplaced", err)
	}
	if len(claimed) != 0 {
		t.Errorf("Claim returned %d deliveries of the other database (first %q) with ErrReplaced; want none", len(claimed), claimed[0].EventID)
	}
}

// TestReplacedInPlacePruneCountsNothing: a prune of the outbox on a
// database restored in place deletes the other database's old notices in
// a transaction that fails at COMMIT with ErrReplaced, and so counts none
// of them as pruned.
func TestReplacedInPlacePruneCountsNothing(t *testing.T) {
	d := openTestDB(t)
	now := time.Now()
	replaceInPlaceWith(t, d, func(tx queue.Tx) error {
		return tx.Enqueue([]queue.Notice{{EventID: "evt_other", Kind: "call.submitted", Channel: "hook", Body: []byte(`{}`), At: now, DueAt: now}})
	})
	// Delivered long ago, in the file as it now is.
	if _, err := d.SQL().Exec(`UPDATE outbox SET state = 'delivered', at = 1, last_attempt_at = 1`); err != nil {
		t.Fatal(err)
	}
	n, err := d.Outbox().Prune(context.Background(), now)
	if !errors.Is(err, store.ErrReplaced) {
		t.Fatalf("Prune: %d, %v; want store.ErrReplaced", n, err)
	}
	if n != 0 {
		t.Errorf("Prune counted %d notices pruned in a transaction that was rolled back; want 0", n)
	}
}
