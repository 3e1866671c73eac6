package db

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
)

// What a write transaction knows of the database as a whole is read once,
// by the first of its statements that needs it (needTxState), or with its
// first read of a call or a submission's checks: the tests below check
// that it is never stale, neither after another handle committed (it is read again by
// every transaction) nor after a write of the same group commit changed it.

func openTwo(t *testing.T) (*DB, *DB) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "countersign.db")
	d, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	// A second handle on the same file stands for another process.
	other, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	return d, other
}

func frozenIn(t *testing.T, d *DB, tool, actor string) *queue.Freeze {
	t.Helper()
	var f *queue.Freeze
	if err := d.Store().Update(context.Background(), func(tx queue.Tx) error {
		got, err := tx.Frozen(tool, actor)
		if errors.Is(err, queue.ErrNotFound) {
			return nil
		}
		f = got
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestTxStateFreezeFromAnotherHandle: a freeze committed by another
// process after this handle's last write stops the next one.
func TestTxStateFreezeFromAnotherHandle(t *testing.T) {
	d, other := openTwo(t)
	if f := frozenIn(t, d, "payments.refund", "agent:a"); f != nil {
		t.Fatalf("frozen before any freeze: %+v", f)
	}
	if err := other.Store().Update(context.Background(), func(tx queue.Tx) error {
		return tx.InsertFreeze(&queue.Freeze{Tool: "payments.refund", Reason: "incident", By: "root", At: time.Now()})
	}); err != nil {
		t.Fatal(err)
	}
	if f := frozenIn(t, d, "payments.refund", "agent:a"); f == nil || f.Reason != "incident" {
		t.Fatalf("after another process froze the tool: %+v, want the freeze", f)
	}
}

// TestTxStateFreezeInTheSameCommit: a freeze inserted by one write of a
// group commit stops the writes after it in the same transaction, though
// the transaction's first statement found no freeze; one inserted by a
// write that failed stops nothing.
func TestTxStateFreezeInTheSameCommit(t *testing.T) {
	d := openTestDB(t)
	failed := errors.New("refused")
	var before, after, afterFailed *queue.Freeze
	check := func(out **queue.Freeze, tool string) func(queue.Tx) error {
		return func(tx queue.Tx) error {
			f, err := tx.Frozen(tool, "agent:a")
			if errors.Is(err, queue.ErrNotFound) {
				return nil
			}
			*out = f
			return err
		}
	}
	errs := inOneBatch(t, d,
		check(&before, "payments.refund"),
		func(tx queue.Tx) error {
			return tx.InsertFreeze(&queue.Freeze{Tool: "payments.refund", Reason: "incident", By: "root", At: time.Now()})
		},
		check(&after, "payments.refund"),
		func(tx queue.Tx) error {
			if err := tx.InsertFreeze(&queue.Freeze{Tool: "deploy.run", Reason: "rolled back", By: "root", At: time.Now()}); err != nil {
				return err
			}
			return failed
		},
		check(&afterFailed, "deploy.run"),
	)
	for i, err := range errs {
		if want := error(nil); i == 3 {
			if !errors.Is(err, failed) {
				t.Errorf("write %d = %v, want its own error", i, err)
			}
		} else if err != want {
			t.Errorf("write %d = %v", i, err)
		}
	}
	if before != nil {
		t.Errorf("frozen before the freeze: %+v", before)
	}
	if after == nil || after.Reason != "incident" {
		t.Errorf("after the freeze in the same transaction: %+v, want it", after)
	}
	if afterFailed != nil {
		t.Errorf("the freeze of a write that failed stops a later one: %+v", afterFailed)
	}
}

// TestTxStateReadByAWriteThatFails: the state is read by the statement of
// a write that needs it first, which may come after that write's own
// changes. When such a write fails and is rolled back to its savepoint,
// what its statement read goes with it: here the write lifts the only
// freeze, reads the state (no freeze in force, within the write), and
// fails; the write after it must find the freeze in force again.
func TestTxStateReadByAWriteThatFails(t *testing.T) {
	d := openTestDB(t)
	if err := d.Store().Update(context.Background(), func(tx queue.Tx) error {
		return tx.InsertFreeze(&queue.Freeze{Tool: "payments.refund", Reason: "incident", By: "root", At: time.Now()})
	}); err != nil {
		t.Fatal(err)
	}
	failed := errors.New("refused")
	var within, after *queue.Freeze
	check := func(out **queue.Freeze) func(queue.Tx) error {
		return func(tx queue.Tx) error {
			f, err := tx.Frozen("payments.refund", "agent:a")
			if errors.Is(err, queue.ErrNotFound) {
				return nil
			}
			*out = f
			return err
		}
	}
	errs := inOneBatch(t, d,
		// The first write reads no state.
		func(tx queue.Tx) error { return tx.SetRetry("agent:a", "payments.refund", queue.RetryState{Count: 1}) },
		func(tx queue.Tx) error {
			if lifted, err := tx.LiftFreezes("payments.refund", "", "root", time.Now()); err != nil || len(lifted) != 1 {
				t.Errorf("lift = %v, %v; want the freeze", lifted, err)
			}
			if err := check(&within)(tx); err != nil {
				return err
			}
			return failed
		},
		check(&after),
	)
	if errs[0] != nil || !errors.Is(errs[1], failed) || errs[2] != nil {
		t.Fatalf("writes = %v, want the second one refused", errs)
	}
	if within != nil {
		t.Errorf("frozen within the write that lifted the freeze: %+v", within)
	}
	if after == nil || after.Reason != "incident" {
		t.Errorf("after the lifting write failed: %+v, want the freeze in force", after)
	}
}

// TestTxStateRollbackInTheSameCommit: a rollback accepted by one write of
// a group commit is what LastRollback returns to the writes after it.
func TestTxStateRollbackInTheSameCommit(t *testing.T) {
	d := openTestDB(t)
	at := time.Now().UTC().Truncate(time.Millisecond)
	var before, after time.Time
	last := func(out *time.Time) func(queue.Tx) error {
		return func(tx queue.Tx) (err error) { *out, err = tx.LastRollback(); return err }
	}
	for i, err := range inOneBatch(t, d,
		last(&before),
		func(tx queue.Tx) error {
			return tx.InsertRollback(queue.Rollback{AcceptedAt: at, AcceptedBy: "root", MarkSeq: 2, MarkHead: "x", DBSeq: 1, DBHead: "y"})
		},
		last(&after),
	) {
		if err != nil {
			t.Errorf("write %d = %v", i, err)
		}
	}
	if !before.IsZero() {
		t.Errorf("before any rollback: %v", before)
	}
	if !after.Equal(at) {
		t.Errorf("after a rollback in the same transaction: %v, want %v", after, at)
	}
}

// TestTxStateAuditHeadFromAnotherHandle: entries appended by two handles
// in turn form one chain; each transaction starts from the head as
// stored, whoever appended it.
func TestTxStateAuditHeadFromAnotherHandle(t *testing.T) {
	d, other := openTwo(t)
	for i, h := range []*DB{d, other, d, d, other, d} {
		if err := h.AppendAudit(context.Background(), &audit.Entry{Time: audit.FormatTime(time.Now()), Kind: audit.KindSubmitted,
			CallID: "call_" + string(rune('a'+i)), Principal: "agent:a", Channel: audit.ChannelAPI}); err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
	}
	if n := verifyAuditChain(t, d.SQL()); n != 6 {
		t.Errorf("chain of %d entries, want 6", n)
	}
}

// TestTxStateCommitHook: the per-commit hook runs for a commit whose
// writes appended entries, with the last head, and not for one whose only
// appending write was rolled back.
func TestTxStateCommitHook(t *testing.T) {
	d := openTestDB(t)
	var hooks []int64
	d.OnCommit(func(seq int64, head string) error { hooks = append(hooks, seq); return nil })
	if err := d.Store().Update(context.Background(), func(tx queue.Tx) error { return submitLike(tx, "call_hook_1") }); err != nil {
		t.Fatal(err)
	}
	errs := inOneBatch(t, d,
		func(tx queue.Tx) error {
			if err := submitLike(tx, "call_hook_2"); err != nil {
				return err
			}
			return errors.New("refused")
		},
		func(tx queue.Tx) error { _, err := tx.LastRollback(); return err },
	)
	if errs[0] == nil || errs[1] != nil {
		t.Fatalf("writes = %v", errs)
	}
	if len(hooks) != 1 || hooks[0] != 1 {
		t.Errorf("hook ran with %v, want once, with head 1", hooks)
	}
}

// TestWriteStatements counts the statements of small writes: a write
// transaction is BEGIN, one statement that checks the identity and reads
// the audit head, freezes and rollbacks, the write's own statements, and
// COMMIT. Checking for a freeze and a rollback add no statement of their
// own, and the write's audit entries are written by one.
func TestWriteStatements(t *testing.T) {
	d := openTestDB(t)
	// The first write opens the writer's connection (and sets its pragmas).
	if err := d.Store().Update(context.Background(), func(tx queue.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	var got []string
	d.TraceStatements(func(q string) { got = append(got, q) })
	defer d.TraceStatements(nil)
	count := func(name string, want int, fn func(tx queue.Tx) error) {
		t.Helper()
		got = nil
		before := d.Statements()
		if err := d.Store().Update(context.Background(), fn); err != nil {
			t.Fatal(err)
		}
		if n := d.Statements() - before; n != int64(want) || len(got) != want {
			t.Errorf("%s: %d statements, want %d: %q", name, n, want, got)
		}
	}
	count("a freeze check, a rollback check and two entries", 4, func(tx queue.Tx) error {
		if _, err := tx.Frozen("payments.refund", "agent:a"); !errors.Is(err, queue.ErrNotFound) {
			return err
		}
		if _, err := tx.LastRollback(); err != nil {
			return err
		}
		for _, k := range []string{audit.KindApproved, audit.KindGranted} {
			if err := tx.Append(&audit.Entry{Time: audit.FormatTime(time.Now()), Kind: k, CallID: "call_x",
				Principal: "alice", Channel: audit.ChannelWeb}); err != nil {
				return err
			}
		}
		return nil
	})
	count("both retry pairs", 4, func(tx queue.Tx) error {
		for _, tool := range []string{"payments.refund", queue.AnyTool, "payments.refund"} {
			if _, err := tx.Retry("agent:a", tool); err != nil {
				return err
			}
		}
		return nil
	})
	count("a retry pair written and read again", 6, func(tx queue.Tx) error {
		if _, err := tx.Retry("agent:a", "payments.refund"); err != nil {
			return err
		}
		if err := tx.SetRetry("agent:a", "payments.refund", queue.RetryState{Count: 1}); err != nil {
			return err
		}
		rs, err := tx.Retry("agent:a", "payments.refund")
		if err == nil && rs.Count != 1 {
			t.Errorf("read after SetRetry: %+v, want the count written", rs)
		}
		return err
	})
	if err := d.Store().Update(context.Background(), func(tx queue.Tx) error { return submitLike(tx, "call_y") }); err != nil {
		t.Fatal(err)
	}
	// The transaction's first read of a call carries its state.
	count("a call", 3, func(tx queue.Tx) error {
		_, err := tx.Call("call_y")
		return err
	})
	count("a call read after a freeze check", 4, func(tx queue.Tx) error {
		if _, err := tx.Frozen("payments.refund", "agent:a"); !errors.Is(err, queue.ErrNotFound) {
			return err
		}
		_, err := tx.Call("call_y")
		return err
	})
	count("a missing call", 4, func(tx queue.Tx) error {
		if _, err := tx.Call("call_none"); !errors.Is(err, queue.ErrNotFound) {
			t.Errorf("missing call: %v", err)
		}
		return nil
	})
}

// TestGroupCommitStatements: a group commit of three writes runs BEGIN,
// the statement that reads the transaction's state (once, when the first
// write appends its entry), a SAVEPOINT before each write but the first,
// the writes' own statements and COMMIT: no RELEASE (COMMIT ends the
// savepoints still open).
func TestGroupCommitStatements(t *testing.T) {
	d := openTestDB(t)
	if err := d.Store().Update(context.Background(), func(tx queue.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []string
	d.TraceStatements(func(q string) {
		mu.Lock()
		got = append(got, strings.Fields(q)[0])
		mu.Unlock()
	})
	for i, err := range inOneBatch(t, d,
		func(tx queue.Tx) error { return submitLike(tx, "call_s1") },
		func(tx queue.Tx) error { return submitLike(tx, "call_s2") },
		func(tx queue.Tx) error { return submitLike(tx, "call_s3") },
	) {
		if err != nil {
			t.Errorf("write %d = %v", i, err)
		}
	}
	d.TraceStatements(nil)
	want := []string{"BEGIN", "INSERT", "SELECT", "INSERT", "SAVEPOINT", "INSERT", "INSERT", "SAVEPOINT", "INSERT", "INSERT", "COMMIT"}
	if !slices.Equal(got, want) {
		t.Errorf("statements = %q, want %q", got, want)
	}
	if n := verifyAuditChain(t, d.SQL()); n != 3 {
		t.Errorf("chain of %d entries, want 3", n)
	}
}

// TestGroupCommitFirstWriteFails: the first write of a group commit runs
// without a savepoint; when it fails, nothing of it is left, and the
// writes queued after it commit in the next transaction, in their order.
func TestGroupCommitFirstWriteFails(t *testing.T) {
	d := openTestDB(t)
	refused := errors.New("refused")
	var order []string
	write := func(id string) func(queue.Tx) error {
		return func(tx queue.Tx) error {
			tx.AfterCommit(func() { order = append(order, id) })
			return submitLike(tx, id)
		}
	}
	errs := inOneBatch(t, d,
		func(tx queue.Tx) error {
			if err := submitLike(tx, "call_f0"); err != nil {
				return err
			}
			return refused
		},
		write("call_f1"), write("call_f2"),
	)
	if !errors.Is(errs[0], refused) || errs[1] != nil || errs[2] != nil {
		t.Fatalf("writes = %v, want the first refused and the others committed", errs)
	}
	want := []string{"call_f1", "call_f2"}
	wantStored(t, d, want)
	if !slices.Equal(order, want) {
		t.Errorf("after-commit order = %v, want %v", order, want)
	}
	verifyAuditChain(t, d.SQL())
}
