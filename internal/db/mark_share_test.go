package db

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
)

var chains atomic.Int64

// chainedWrites runs n writes, write i queued by write i-1 while it runs
// (write i-1 returns only once write i waits in the queue), each appending
// one audit entry of kind. ran[i] reports, from inside write i, whether
// write i-1's after-commit function had run (that is, whether write i-1
// had been acknowledged). It returns each write's error.
func chainedWrites(t *testing.T, d *DB, n int, kind string) (errs []error, ranBefore []bool) {
	t.Helper()
	errs, ranBefore = make([]error, n), make([]bool, n)
	acked := make([]atomic.Bool, n)
	id := func(i int) string { return fmt.Sprintf("call_chain_%d_%d", chains.Load(), i) }
	defer chains.Add(1)
	var wg sync.WaitGroup
	var write func(i int)
	write = func(i int) {
		errs[i] = d.Store().Update(context.Background(), func(tx queue.Tx) error {
			if i > 0 {
				ranBefore[i] = acked[i-1].Load()
			}
			if i+1 < n {
				wg.Go(func() { write(i + 1) })
				queued(t, d, 1)
			}
			tx.AfterCommit(func() { acked[i].Store(true) })
			if err := tx.InsertCall(groupCall(id(i))); err != nil {
				return err
			}
			return tx.Append(&audit.Entry{Time: audit.FormatTime(time.Now()), Kind: kind,
				CallID: id(i), Principal: "agent:group", Channel: audit.ChannelAPI})
		})
	}
	wg.Go(func() { write(0) })
	wg.Wait()
	return errs, ranBefore
}

// TestMarkSharedByTheNextCommits: a commit whose writes the high-water
// mark must cover, with more writes queued behind it, runs up to
// markShareCommits-1 further commits before it advances the mark once,
// with the newest head, for all of them; their writes are acknowledged
// only then, in commit order.
func TestMarkSharedByTheNextCommits(t *testing.T) {
	d, err := Open(filepath.Join(t.TempDir(), "countersign.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	d.batchLimit = 1 // one write per commit: the writes queued behind are the next commits
	var hooked []int64
	d.OnCommit(func(seq int64, _ string) error { hooked = append(hooked, seq); return nil })
	const n = markShareCommits + 2
	errs, ranBefore := chainedWrites(t, d, n, audit.KindRedeemed)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if commits, _ := d.WriteCounts(); commits != n {
		t.Fatalf("%d commits, want %d (one per write)", commits, n)
	}
	want := []int64{markShareCommits, n}
	if fmt.Sprint(hooked) != fmt.Sprint(want) {
		t.Errorf("the mark advanced to %v, want %v: once per %d commits, with the newest head", hooked, want, markShareCommits)
	}
	for i := 1; i < n; i++ {
		if shared := i%markShareCommits != 0; ranBefore[i] == shared {
			t.Errorf("write %d ran with write %d acknowledged = %v, want %v", i, i-1, ranBefore[i], !shared)
		}
	}
}

// TestMarkNotAwaitedByCommitsThatMayWait: a commit whose changes may all
// wait for the mark (highwater.MayWait) is acknowledged at once, even with
// writes queued behind it, and advances no mark.
func TestMarkNotAwaitedByCommitsThatMayWait(t *testing.T) {
	d, err := Open(filepath.Join(t.TempDir(), "countersign.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	d.batchLimit = 1
	hooks := 0
	d.OnCommit(func(int64, string) error { hooks++; return nil })
	errs, ranBefore := chainedWrites(t, d, 3, audit.KindSubmitted)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if hooks != 0 {
		t.Errorf("commits of submissions advanced the mark %d times, want none", hooks)
	}
	for i := 1; i < 3; i++ {
		if !ranBefore[i] {
			t.Errorf("write %d ran before write %d, which needs no mark, was acknowledged", i, i-1)
		}
	}
}

// TestWritesQueuedDuringATransactionJoinIt: a write queued while a
// transaction runs its writes joins that transaction and shares its commit
// and its advance of the mark, up to the batch's limit.
func TestWritesQueuedDuringATransactionJoinIt(t *testing.T) {
	d, err := Open(filepath.Join(t.TempDir(), "countersign.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	hooks := 0
	d.OnCommit(func(int64, string) error { hooks++; return nil })
	errs, _ := chainedWrites(t, d, 5, audit.KindRedeemed)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if commits, writes := d.WriteCounts(); commits != 1 || writes != 5 || hooks != 1 {
		t.Errorf("%d writes in %d commits, %d advances of the mark; want 5 in 1, 1", writes, commits, hooks)
	}
	d.batchLimit = 2
	errs, _ = chainedWrites(t, d, 5, audit.KindRedeemed)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if commits, writes := d.WriteCounts(); commits != 1+3 || writes != 10 {
		t.Errorf("with a limit of 2 writes per commit: %d commits in all, want 4", commits)
	}
}

// TestMarkHoldsOnlyTheWritesAfterTheFirstThatNeedsIt: in a commit holding
// a submission, then a redemption, then another submission, with a write
// queued behind it, the first submission is answered at the commit (it may
// wait for the mark, and nothing before it waits); the redemption and the
// submission after it are answered only once the mark covers the next
// commit too.
func TestMarkHoldsOnlyTheWritesAfterTheFirstThatNeedsIt(t *testing.T) {
	d, err := Open(filepath.Join(t.TempDir(), "countersign.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	d.batchLimit = 3 // the write queued last is the next commit
	var hooked []int64
	d.OnCommit(func(seq int64, _ string) error { hooked = append(hooked, seq); return nil })
	var acked [3]atomic.Bool
	var seen [3]bool
	var wg sync.WaitGroup
	write := func(i int, kind string) func(queue.Tx) error {
		return func(tx queue.Tx) error {
			tx.AfterCommit(func() { acked[i].Store(true) })
			id := fmt.Sprintf("call_prefix_%d", i)
			if err := tx.InsertCall(groupCall(id)); err != nil {
				return err
			}
			if i == 2 {
				// Queued behind the batch; it runs as the next commit.
				wg.Go(func() {
					if err := d.Store().Update(context.Background(), func(tx queue.Tx) error {
						for j := range seen {
							seen[j] = acked[j].Load()
						}
						return tx.Append(&audit.Entry{Time: audit.FormatTime(time.Now()), Kind: audit.KindSubmitted,
							CallID: "call_prefix_next", Principal: "agent:group", Channel: audit.ChannelAPI})
					}); err != nil {
						t.Error(err)
					}
				})
				queued(t, d, 1)
			}
			return tx.Append(&audit.Entry{Time: audit.FormatTime(time.Now()), Kind: kind, CallID: id,
				Principal: "agent:group", Channel: audit.ChannelAPI})
		}
	}
	// The test is the writer, on behalf of none of the writes (a writer
	// whose own write is answered runs no further commit).
	errs := make([]error, 3)
	var writers sync.WaitGroup
	d.lockWriter()
	for i, kind := range []string{audit.KindSubmitted, audit.KindRedeemed, audit.KindSubmitted} {
		writers.Go(func() { errs[i] = d.Store().Update(context.Background(), write(i, kind)) })
		queued(t, d, i+1)
	}
	d.runQueued(nil)
	d.unlockWriter()
	writers.Wait()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if want := [3]bool{true, false, false}; seen != want {
		t.Errorf("when the next commit ran, writes answered = %v, want %v", seen, want)
	}
	if fmt.Sprint(hooked) != "[4]" {
		t.Errorf("the mark advanced to %v, want once, to 4 (the next commit's head)", hooked)
	}
}

// TestWriterAnsweredRunsNoFurtherCommit: a writer whose own write may wait
// for the mark, committed before a redemption, is answered at its commit
// and advances the mark at once rather than run the commits queued behind
// on its caller's time; the writes queued behind commit apart.
func TestWriterAnsweredRunsNoFurtherCommit(t *testing.T) {
	d, err := Open(filepath.Join(t.TempDir(), "countersign.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	d.batchLimit = 2
	var hooked []int64
	d.OnCommit(func(seq int64, _ string) error { hooked = append(hooked, seq); return nil })
	entry := func(id, kind string) func(queue.Tx) error {
		return func(tx queue.Tx) error {
			if err := tx.InsertCall(groupCall(id)); err != nil {
				return err
			}
			return tx.Append(&audit.Entry{Time: audit.FormatTime(time.Now()), Kind: kind, CallID: id,
				Principal: "agent:group", Channel: audit.ChannelAPI})
		}
	}
	d.lockWriter()
	own := &writeReq{ctx: context.Background(), done: make(chan struct{}),
		fn: func(ctx context.Context, tx *writeTx) error {
			return entry("call_own", audit.KindSubmitted)(&storeTx{ctx: ctx, tx: tx, db: d})
		}}
	d.queue = append(d.queue, own)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := d.Store().Update(context.Background(), entry("call_redeemed", audit.KindRedeemed)); err != nil {
			t.Error(err)
		}
	})
	queued(t, d, 2)
	wg.Go(func() {
		if err := d.Store().Update(context.Background(), entry("call_behind", audit.KindRedeemed)); err != nil {
			t.Error(err)
		}
	})
	queued(t, d, 3)
	d.runQueued(own)
	if !own.answered() || own.err != nil {
		t.Fatalf("the writer's own write: answered %v, %v", own.answered(), own.err)
	}
	if fmt.Sprint(hooked) != "[2]" {
		t.Errorf("after the writer's commit the mark advanced to %v, want once, to 2", hooked)
	}
	if commits, _ := d.WriteCounts(); commits != 1 {
		t.Errorf("the writer ran %d commits, want 1", commits)
	}
	d.unlockWriter()
	wg.Wait()
	if fmt.Sprint(hooked) != "[2 3]" {
		t.Errorf("the mark advanced to %v, want [2 3]", hooked)
	}
}
