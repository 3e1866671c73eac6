package db

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
)

// TestGroupCommitFailedWritesLeaveNoEntries: writes that append audit
// entries and then fail (with an error or a panic, with a savepoint or as
// the transaction's first write) leave no entry; the next write's entry
// chains to the head as committed, and the commit hook is handed that head.
func TestGroupCommitFailedWritesLeaveNoEntries(t *testing.T) {
	d, err := Open(filepath.Join(t.TempDir(), "countersign.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var hooked []int64
	var hookHead string
	d.OnCommit(func(seq int64, head string) error { hooked, hookHead = append(hooked, seq), head; return nil })
	refused := errors.New("refused")
	appendTwoThen := func(id string, end func() error) func(queue.Tx) error {
		return func(tx queue.Tx) error {
			if err := submitLike(tx, id); err != nil {
				return err
			}
			if err := tx.Append(&audit.Entry{Time: audit.FormatTime(time.Now()), Kind: audit.KindApproved, CallID: id,
				Principal: "alice", Channel: audit.ChannelWeb}); err != nil {
				return err
			}
			return end()
		}
	}
	ok := func(id string) func(queue.Tx) error { return appendTwoThen(id, func() error { return nil }) }
	fail := func(id string) func(queue.Tx) error { return appendTwoThen(id, func() error { return refused }) }
	boom := func(id string) func(queue.Tx) error { return appendTwoThen(id, func() error { panic("boom") }) }
	var panics atomic.Int32
	// The first write fails: the others run in the next transaction.
	run := func(fns ...func(queue.Tx) error) []error {
		errs := make([]error, len(fns))
		var wg sync.WaitGroup
		d.lockWriter()
		for i, fn := range fns {
			wg.Go(func() {
				defer func() {
					if v := recover(); v != nil {
						panics.Add(1)
						errs[i] = errors.New("panicked")
					}
				}()
				errs[i] = d.Store().Update(context.Background(), fn)
			})
			queued(t, d, i+1)
		}
		d.unlockWriter()
		wg.Wait()
		return errs
	}
	errs := run(fail("call_f0"), ok("call_f1"), fail("call_f2"), boom("call_f3"), ok("call_f4"), fail("call_f5"))
	want := []bool{false, true, false, false, true, false}
	for i, err := range errs {
		if (err == nil) != want[i] {
			t.Errorf("write %d = %v", i, err)
		}
	}
	if panics.Load() != 1 {
		t.Errorf("%d panics raised again, want 1", panics.Load())
	}
	ids := auditCallIDs(t, d)
	if w := []string{"call_f1", "call_f1", "call_f4", "call_f4"}; !slices.Equal(ids, w) {
		t.Errorf("audit entries of %v, want %v", ids, w)
	}
	if n := verifyAuditChain(t, d.SQL()); n != 4 {
		t.Errorf("chain of %d entries, want 4", n)
	}
	var seq int64
	var head string
	if err := d.SQL().QueryRow(`SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1`).Scan(&seq, &head); err != nil {
		t.Fatal(err)
	}
	if len(hooked) == 0 || hooked[len(hooked)-1] != seq || hookHead != head {
		t.Errorf("commit hook saw %v %s, want the committed head %d %s", hooked, hookHead, seq, head)
	}
	// The next transaction chains to it.
	if err := d.Store().Update(context.Background(), ok("call_f6")); err != nil {
		t.Fatal(err)
	}
	if n := verifyAuditChain(t, d.SQL()); n != 6 {
		t.Errorf("chain of %d entries, want 6", n)
	}
}

// TestGroupCommitRequeuedWrites: the writes queued behind a first write
// that fails run exactly once, each answered only when what it wrote can
// be read; a requeued write whose caller has gone is not run at all.
func TestGroupCommitRequeuedWrites(t *testing.T) {
	d, err := Open(filepath.Join(t.TempDir(), "countersign.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	gone, leave := context.WithCancel(context.Background())
	defer leave()
	var ran [4]atomic.Int32
	refused := errors.New("refused")
	fns := []func(queue.Tx) error{
		func(tx queue.Tx) error {
			ran[0].Add(1)
			leave() // write 2's caller leaves while its write is in this batch
			if err := submitLike(tx, "call_r0"); err != nil {
				return err
			}
			return refused
		},
		func(tx queue.Tx) error { ran[1].Add(1); return submitLike(tx, "call_r1") },
		func(tx queue.Tx) error { ran[2].Add(1); return submitLike(tx, "call_r2") },
		func(tx queue.Tx) error { ran[3].Add(1); return submitLike(tx, "call_r3") },
	}
	ctxs := []context.Context{context.Background(), context.Background(), gone, context.Background()}
	errs := make([]error, len(fns))
	seen := make([]bool, len(fns))
	var wg sync.WaitGroup
	d.lockWriter()
	for i, fn := range fns {
		wg.Go(func() {
			errs[i] = d.Store().Update(ctxs[i], fn)
			if errs[i] == nil {
				// Acknowledged: another connection reads it at once.
				var n int
				if err := d.SQL().QueryRow(`SELECT COUNT(*) FROM calls WHERE id = ?`, []string{"call_r0", "call_r1", "call_r2", "call_r3"}[i]).Scan(&n); err == nil {
					seen[i] = n == 1
				}
			}
		})
		queued(t, d, i+1)
	}
	d.unlockWriter()
	wg.Wait()
	if !errors.Is(errs[0], refused) {
		t.Errorf("first write = %v, want its refusal", errs[0])
	}
	if !errors.Is(errs[2], context.Canceled) || ran[2].Load() != 0 {
		t.Errorf("requeued write whose caller left = %v, ran %d times; want context.Canceled, not run", errs[2], ran[2].Load())
	}
	for _, i := range []int{1, 3} {
		if errs[i] != nil || ran[i].Load() != 1 || !seen[i] {
			t.Errorf("requeued write %d = %v, ran %d times, readable when acknowledged %v", i, errs[i], ran[i].Load(), seen[i])
		}
	}
	if got, want := callIDs(t, d), []string{"call_r1", "call_r3"}; !slices.Equal(got, want) {
		t.Errorf("calls = %v, want %v", got, want)
	}
	verifyAuditChain(t, d.SQL())
}
