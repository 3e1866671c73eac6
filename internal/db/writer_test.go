package db

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/queue"
)

// groupCall is a pending call with an id of its own, for writes that
// stand for a submission.
func groupCall(id string) *queue.Call {
	var d [32]byte
	rand.Read(d[:])
	now := time.Now().UTC().Truncate(time.Millisecond)
	return &queue.Call{ID: id, Actor: "agent:group", Audience: "payments-host", Tool: "payments.refund", Target: "invoice:" + id,
		Args: canonical.Object{}, Envelope: []byte(`{"v":1}`), Digest: hex.EncodeToString(d[:]), Status: queue.StatusPending,
		ApprovalsRequired: 1, GrantTTL: time.Minute, CreatedAt: now, DecideBy: now.Add(time.Hour)}
}

// submitLike stores call id and one audit entry, as a submission does;
// the entry's kind is one the high-water mark must cover (a submission's
// may wait, highwater.MayWait), so that the commit hook runs for it.
func submitLike(tx queue.Tx, id string) error {
	if err := tx.InsertCall(groupCall(id)); err != nil {
		return err
	}
	return tx.Append(&audit.Entry{Time: audit.FormatTime(time.Now()), Kind: audit.KindRejected, CallID: id,
		Principal: "agent:group", Channel: audit.ChannelAPI})
}

// queued waits until n writes wait in d's queue.
func queued(t *testing.T, d *DB, n int) {
	t.Helper()
	for {
		d.qmu.Lock()
		got := len(d.queue)
		d.qmu.Unlock()
		if got >= n {
			return
		}
		runtime.Gosched()
		time.Sleep(time.Millisecond)
	}
}

// inOneBatch queues one write per fn, in order, while this test holds the
// writer's token, then lets them run: the first goroutine to take the
// token runs all of them in one transaction. It returns each write's
// error.
func inOneBatch(t *testing.T, d *DB, fns ...func(queue.Tx) error) []error {
	t.Helper()
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	d.lockWriter()
	for i, fn := range fns {
		wg.Go(func() { errs[i] = d.Store().Update(context.Background(), fn) })
		queued(t, d, i+1) // queue order is fns' order
	}
	d.unlockWriter()
	wg.Wait()
	return errs
}

func callIDs(t *testing.T, d *DB) []string {
	t.Helper()
	rows, err := d.SQL().Query(`SELECT id FROM calls ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// auditCallIDs lists the call ids of the audit entries in chain order.
func auditCallIDs(t *testing.T, d *DB) []string {
	t.Helper()
	rows, err := d.SQL().Query(`SELECT call_id FROM audit ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// TestGroupCommitIsolatesFailures: twelve writes in one transaction, a
// third of them failing after they wrote (one by returning an error, one
// by a statement SQLite refuses): each failure is answered with its own
// error and leaves nothing, the others are committed by one commit (the
// per-commit hook runs once, with the head of the last entry), their
// after-commit functions run in the order of their audit entries, and the
// chain verifies.
func TestGroupCommitIsolatesFailures(t *testing.T) {
	d, err := Open(filepath.Join(t.TempDir(), "countersign.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var hooks []int64
	d.OnCommit(func(seq int64, head string) error { hooks = append(hooks, seq); return nil })
	refused := errors.New("refused by the request")
	var mu sync.Mutex
	var order []string
	var fns []func(queue.Tx) error
	var want []string
	for i := range 12 {
		id := fmt.Sprintf("call_group_%02d", i)
		fns = append(fns, func(tx queue.Tx) error {
			if err := submitLike(tx, id); err != nil {
				return err
			}
			tx.AfterCommit(func() { mu.Lock(); order = append(order, id); mu.Unlock() })
			switch i % 6 {
			case 1:
				return refused
			case 4:
				return tx.InsertCall(groupCall("call_group_00")) // UNIQUE id
			}
			return nil
		})
		if i%6 != 1 && i%6 != 4 {
			want = append(want, id)
		}
	}
	errs := inOneBatch(t, d, fns...)
	for i, err := range errs {
		switch i % 6 {
		case 1:
			if !errors.Is(err, refused) {
				t.Errorf("write %d = %v, want its own error", i, err)
			}
		case 4:
			if err == nil || !strings.Contains(err.Error(), "UNIQUE") {
				t.Errorf("write %d = %v, want the UNIQUE constraint's error", i, err)
			}
		default:
			if err != nil {
				t.Errorf("write %d = %v, want committed", i, err)
			}
		}
	}
	wantStored(t, d, want)
	if !slices.Equal(order, want) {
		t.Errorf("after-commit order = %v, want the commit order %v", order, want)
	}
	if n := verifyAuditChain(t, d.SQL()); len(hooks) != 1 || hooks[0] != n {
		t.Errorf("commit hook ran with %v, want once with the head %d", hooks, n)
	}
	if commits, writes := d.WriteCounts(); commits != 1 || writes != int64(len(want)) {
		t.Errorf("WriteCounts = %d commits, %d writes; want 1, %d", commits, writes, len(want))
	}
}

// TestGroupCommitLostTransaction: when SQLite ends the shared
// transaction under a write (here the write ends it itself, as SQLite does
// after an I/O error or a full disk), the writes that ran in it before are
// answered with an error and left nothing, and the writes queued after it
// still run and commit.
func TestGroupCommitLostTransaction(t *testing.T) {
	d, err := Open(filepath.Join(t.TempDir(), "countersign.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	write := func(id string) func(queue.Tx) error {
		return func(tx queue.Tx) error { return submitLike(tx, id) }
	}
	ender := func(tx queue.Tx) error {
		if err := submitLike(tx, "call_lost_ender"); err != nil {
			return err
		}
		_, err := tx.(*storeTx).tx.ExecContext(context.Background(), `ROLLBACK`)
		return err
	}
	errs := inOneBatch(t, d, write("call_lost_1"), write("call_lost_2"), ender, write("call_after_1"), write("call_after_2"))
	for i, err := range errs[:3] {
		if err == nil {
			t.Errorf("write %d before the end of the transaction = nil, want an error", i)
		}
	}
	for i, err := range errs[3:] {
		if err != nil {
			t.Errorf("write %d after the end of the transaction = %v, want committed", i+3, err)
		}
	}
	want := []string{"call_after_1", "call_after_2"}
	wantStored(t, d, want)
	verifyAuditChain(t, d.SQL())
	// The writer goes on.
	if err := d.Store().Update(context.Background(), write("call_later")); err != nil {
		t.Fatal(err)
	}
}

// TestGroupCommitCallerGone: a caller whose context ends while its write
// waits gets the context's error and nothing is written; a caller whose
// context ends while its write runs does not break the shared transaction:
// its write runs to its end and commits with the others.
func TestGroupCommitCallerGone(t *testing.T) {
	d, err := Open(filepath.Join(t.TempDir(), "countersign.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()

	d.lockWriter()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		done <- d.Store().Update(ctx, func(tx queue.Tx) error { return submitLike(tx, "call_gone_waiting") })
	}()
	queued(t, d, 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("write whose caller left while it waited = %v, want context.Canceled", err)
	}
	d.unlockWriter()

	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	var errs [2]error
	var wg sync.WaitGroup
	d.lockWriter()
	wg.Go(func() {
		errs[0] = d.Store().Update(ctx, func(tx queue.Tx) error {
			cancel() // the caller leaves in the middle of its write
			if err := submitLike(tx, "call_gone_running"); err != nil {
				return err
			}
			_, err := tx.Call("call_gone_running")
			return err
		})
	})
	queued(t, d, 1)
	wg.Go(func() {
		errs[1] = d.Store().Update(context.Background(), func(tx queue.Tx) error { return submitLike(tx, "call_stays") })
	})
	queued(t, d, 2)
	d.unlockWriter()
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Errorf("writes = %v, want both committed", errs)
	}
	want := []string{"call_gone_running", "call_stays"}
	if got := callIDs(t, d); !slices.Equal(got, want) {
		t.Errorf("calls = %v, want %v", got, want)
	}
	verifyAuditChain(t, d.SQL())
}

// TestGroupCommitPanicStaysWithItsWrite: a write function that panics in
// a shared transaction panics in its own caller's goroutine, as it would
// in a transaction of its own (the console's recover middleware answers
// that one request), whichever goroutine ran the transaction; what it
// wrote is rolled back, the other writes of the transaction commit, and
// the writer goes on. Before, the panic unwound the goroutine that held
// the writer's token, which was never given back: the other writes of the
// batch were never answered and no write of the process ran again.
func TestGroupCommitPanicStaysWithItsWrite(t *testing.T) {
	d, err := Open(filepath.Join(t.TempDir(), "countersign.db"))
	if err != nil {
		t.Fatal(err)
	}
	stuck := false // Close waits for the writer's token
	defer func() {
		if !stuck {
			d.Close()
		}
	}()
	ids := []string{"call_panic_before", "call_panic", "call_panic_after"}
	errs, panics := make([]error, len(ids)), make([]any, len(ids))
	var wg sync.WaitGroup
	d.lockWriter()
	for i, id := range ids {
		wg.Go(func() {
			defer func() { panics[i] = recover() }()
			errs[i] = d.Store().Update(context.Background(), func(tx queue.Tx) error {
				if err := submitLike(tx, id); err != nil {
					return err
				}
				if i == 1 {
					panic("a bug in the write of " + id)
				}
				return nil
			})
		})
		queued(t, d, i+1)
	}
	d.unlockWriter()
	answered := make(chan struct{})
	go func() { wg.Wait(); close(answered) }()
	select {
	case <-answered:
	case <-time.After(2 * time.Minute): // a deadlock, not a slow machine
		stuck = true
		t.Fatal("the writes of the batch were never answered: the writer's token was left held")
	}
	for i := range ids {
		switch {
		case i == 1 && (panics[i] == nil || !strings.Contains(fmt.Sprint(panics[i]), "a bug in the write of call_panic")):
			t.Errorf("the panicking write's caller got panic %v (err %v), want the write's panic", panics[i], errs[i])
		case i != 1 && (panics[i] != nil || errs[i] != nil):
			t.Errorf("write %d = %v, panic %v; want committed", i, errs[i], panics[i])
		}
	}
	want := []string{"call_panic_before", "call_panic_after"}
	if got := callIDs(t, d); !slices.Equal(got, want) {
		t.Errorf("calls = %v, want %v", got, want)
	}
	verifyAuditChain(t, d.SQL())
	done := make(chan error, 1)
	go func() {
		done <- d.Store().Update(context.Background(), func(tx queue.Tx) error { return submitLike(tx, "call_panic_later") })
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Minute):
		stuck = true
		t.Fatal("no write runs after the panic: the writer's token was left held")
	}
}

// TestGroupCommitHookFailure: when the per-commit hook fails, every write
// of that commit is answered with its error (committed, not acknowledged)
// and none of their after-commit functions runs.
func TestGroupCommitHookFailure(t *testing.T) {
	d, err := Open(filepath.Join(t.TempDir(), "countersign.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	fail := errors.New("mark behind")
	d.OnCommit(func(int64, string) error { return fail })
	ran := 0
	var fns []func(queue.Tx) error
	for i := range 3 {
		fns = append(fns, func(tx queue.Tx) error {
			tx.AfterCommit(func() { ran++ })
			return submitLike(tx, fmt.Sprintf("call_hook_%d", i))
		})
	}
	for i, err := range inOneBatch(t, d, fns...) {
		if !errors.Is(err, fail) {
			t.Errorf("write %d = %v, want the hook's error", i, err)
		}
	}
	if ran != 0 {
		t.Errorf("%d after-commit functions ran, want none", ran)
	}
}

// TestGroupCommitRace: sixteen goroutines write at once, a quarter of
// their writes failing after they wrote: exactly the acknowledged writes
// are in the database, each with its audit entry, in one chain that
// verifies, and the after-commit functions ran in chain order.
func TestGroupCommitRace(t *testing.T) {
	const writers, each = 16, 40
	d, err := Open(filepath.Join(t.TempDir(), "countersign.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	commits := 0
	d.OnCommit(func(int64, string) error { commits++; return nil })
	var mu sync.Mutex
	acked := map[string]bool{}
	var order []string
	refused := errors.New("refused")
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			for i := range each {
				id := fmt.Sprintf("call_race_%02d_%03d", g, i)
				err := d.Store().Update(context.Background(), func(tx queue.Tx) error {
					if err := submitLike(tx, id); err != nil {
						return err
					}
					tx.AfterCommit(func() { order = append(order, id) }) // the writer runs them one at a time
					if (g+i)%4 == 0 {
						return refused
					}
					return nil
				})
				switch {
				case err == nil:
					mu.Lock()
					acked[id] = true
					mu.Unlock()
				case !errors.Is(err, refused):
					t.Errorf("%s: %v", id, err)
				}
			}
		})
	}
	wg.Wait()
	ids := callIDs(t, d)
	if len(ids) != len(acked) {
		t.Errorf("%d calls stored, %d acknowledged", len(ids), len(acked))
	}
	for _, id := range ids {
		if !acked[id] {
			t.Errorf("%s is stored but was not acknowledged", id)
		}
	}
	if got := auditCallIDs(t, d); !slices.Equal(got, ids) {
		t.Errorf("audit entries and calls differ: %d entries, %d calls", len(got), len(ids))
	}
	if !slices.Equal(order, ids) {
		t.Errorf("after-commit functions ran out of the commit order")
	}
	verifyAuditChain(t, d.SQL())
	t.Logf("%d writes acknowledged in %d commits", len(acked), commits)
}

// TestGroupCommitMixedStores: writes through the
// other stores (accounts, audit appends) join the same group commit and
// keep one chain.
func TestGroupCommitMixedStores(t *testing.T) {
	d, err := Open(filepath.Join(t.TempDir(), "countersign.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var wg sync.WaitGroup
	errs := make([]error, 3)
	d.lockWriter()
	wg.Go(func() {
		errs[0] = d.Store().Update(context.Background(), func(tx queue.Tx) error { return submitLike(tx, "call_mixed") })
	})
	queued(t, d, 1)
	wg.Go(func() {
		errs[1] = d.AppendAudit(context.Background(), &audit.Entry{Time: audit.FormatTime(time.Now()), Kind: audit.KindTokenCreated,
			Principal: "test", Channel: audit.ChannelCLI})
	})
	queued(t, d, 2)
	wg.Go(func() {
		errs[2] = d.update(context.Background(), func(ctx context.Context, tx *writeTx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO meta (key, value) VALUES ('identity', 'twice')`) // primary key
			return err
		})
	})
	queued(t, d, 3)
	d.unlockWriter()
	wg.Wait()
	if errs[0] != nil || errs[1] != nil || errs[2] == nil {
		t.Fatalf("writes = %v, want nil, nil, a constraint error", errs)
	}
	if n := verifyAuditChain(t, d.SQL()); n != 2 {
		t.Errorf("chain of %d entries, want 2", n)
	}
}

// errGroupRefused is the error of the child's writes that fail on purpose.
var errGroupRefused = errors.New("refused on purpose")

// childGroupLoop prints "ready", then until it is killed: eight goroutines
// write at once, each write a call, its audit entry and a ledger row (a
// failing quarter of them refused after writing all three). A write is
// reported "acked ID" or "failed ID" once Update has returned; each commit
// "commit SEQ"; anything else "unexpected ...".
func childGroupLoop() int {
	d, err := Open(os.Getenv(dbEnv))
	if err != nil {
		fmt.Printf("unexpected open: %v\n", err)
		return 1
	}
	d.OnCommit(func(seq int64, _ string) error { fmt.Printf("commit %d\n", seq); return nil })
	var tag [4]byte
	rand.Read(tag[:])
	fmt.Println("ready")
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				id := fmt.Sprintf("call_kill_%x_%d_%d", tag, g, i)
				err := d.Store().Update(context.Background(), func(tx queue.Tx) error {
					if err := submitLike(tx, id); err != nil {
						return err
					}
					if _, err := tx.ConsumeNonce(id, id, time.Now()); err != nil {
						return err
					}
					if i%4 == 3 {
						return errGroupRefused
					}
					return nil
				})
				switch {
				case err == nil:
					fmt.Printf("acked %s\n", id)
				case errors.Is(err, errGroupRefused):
					fmt.Printf("failed %s\n", id)
				default:
					fmt.Printf("unexpected %s: %v\n", id, err)
				}
			}
		})
	}
	wg.Wait()
	return 0
}

// TestKilledGroupCommit kills a process writing from eight goroutines at
// once (so that writes share commits) with SIGKILL at random moments, 15
// times. Afterwards the database passes integrity_check, every write the
// child acknowledged is there whole (call, audit entry, ledger row), no
// write that failed left anything, every call that is there is whole
// (nothing half applied, acknowledged or not), and the chain verifies.
func TestKilledGroupCommit(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: kill loop: group-committing processes killed mid-write")
	}
	const kills = 15
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := mrand.New(mrand.NewPCG(seed, seed>>32))
	l := newLedger(t, nil)
	if err := l.db.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	acked, failed := map[string]bool{}, map[string]bool{}
	commits, unexpected := 0, 0
	for i := range kills {
		lines, err := runAndKill(t, l, "group-loop", deadline, func() time.Duration {
			return time.Duration(20+rng.IntN(300)) * time.Millisecond
		})
		if err != nil {
			t.Fatalf("child %d: %v", i, err)
		}
		for _, line := range lines {
			kind, id, _ := strings.Cut(line, " ")
			switch kind {
			case "acked":
				acked[id] = true
			case "failed":
				failed[id] = true
			case "commit":
				commits++
			case "ready":
			default:
				if unexpected++; unexpected <= 10 {
					t.Errorf("child %d: %s", i, line)
				}
			}
		}
	}
	t.Logf("%d kills: %d writes acknowledged and %d failed in %d commits", kills, len(acked), len(failed), commits)
	if len(acked) == 0 || len(failed) == 0 {
		t.Fatal("the children acknowledged no write or failed none before they were killed")
	}
	MustOpen(t, l)
	sqldb := l.db.SQL()
	integrityCheck(t, sqldb)
	count := func(query, id string) int { return countRows(t, sqldb, query, id) }
	for id := range acked {
		if c, e, n := count(`SELECT COUNT(*) FROM calls WHERE id = ?`, id), count(`SELECT COUNT(*) FROM audit WHERE call_id = ?`, id),
			count(`SELECT COUNT(*) FROM redemptions WHERE jti = ?`, id); c != 1 || e != 1 || n != 1 {
			t.Errorf("acknowledged %s: %d calls, %d entries, %d ledger rows; want 1, 1, 1", id, c, e, n)
		}
	}
	for id := range failed {
		if c, e, n := count(`SELECT COUNT(*) FROM calls WHERE id = ?`, id), count(`SELECT COUNT(*) FROM audit WHERE call_id = ?`, id),
			count(`SELECT COUNT(*) FROM redemptions WHERE jti = ?`, id); c+e+n != 0 {
			t.Errorf("failed %s left %d calls, %d entries, %d ledger rows", id, c, e, n)
		}
	}
	if n := countRows(t, sqldb, `SELECT COUNT(*) FROM calls c WHERE c.id LIKE 'call_kill_%' AND (
		(SELECT COUNT(*) FROM audit a WHERE a.call_id = c.id) <> 1 OR (SELECT COUNT(*) FROM redemptions r WHERE r.jti = c.id) <> 1)`); n != 0 {
		t.Errorf("%d calls are not whole (their audit entry or ledger row missing or doubled)", n)
	}
	if n := countRows(t, sqldb, `SELECT COUNT(*) FROM audit a WHERE a.call_id LIKE 'call_kill_%' AND NOT EXISTS (SELECT 1 FROM calls c WHERE c.id = a.call_id)`); n != 0 {
		t.Errorf("%d audit entries of calls that are not there", n)
	}
	verifyAuditChain(t, sqldb)
}

// The writer's connection keeps its temporary files, the undo journals of
// the savepoints a group commit runs its writes in, in memory: spilled to
// a file, every page a write changes past 64 KiB is a write() more.
// Readers keep temporary files on disk (their sorts may be large).
func TestWriterJournalsInMemory(t *testing.T) {
	d := openTestDB(t)
	ctx := context.Background()
	if err := d.update(ctx, func(ctx context.Context, tx *writeTx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	var store int
	d.lockWriter()
	err := d.writer.QueryRowContext(ctx, `PRAGMA temp_store`).Scan(&store)
	d.unlockWriter()
	if err != nil {
		t.Fatal(err)
	}
	if store != 2 { // 2 is MEMORY
		t.Errorf("the writer's temp_store is %d, want 2 (memory)", store)
	}
	if err := d.sql.QueryRowContext(ctx, `PRAGMA temp_store`).Scan(&store); err != nil {
		t.Fatal(err)
	}
	if store != 0 {
		t.Errorf("a reader's temp_store is %d, want 0 (the default, files)", store)
	}
}

// TestWriterCheckpointsSeldom: the writer, whose commits run SQLite's
// automatic checkpoints, checkpoints every writerCheckpointPages pages of
// WAL, not every 1,000 (three syncs each).
func TestWriterCheckpointsSeldom(t *testing.T) {
	d := openTestDB(t)
	ctx := context.Background()
	if err := d.update(ctx, func(ctx context.Context, tx *writeTx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	var pages int
	d.lockWriter()
	err := d.writer.QueryRowContext(ctx, `PRAGMA wal_autocheckpoint`).Scan(&pages)
	d.unlockWriter()
	if err != nil {
		t.Fatal(err)
	}
	if pages != writerCheckpointPages {
		t.Errorf("the writer checkpoints every %d pages, want %d", pages, writerCheckpointPages)
	}
}

// wantStored checks that the calls stored, and the calls the audit
// entries name, are want, in order.
func wantStored(t *testing.T, d *DB, want []string) {
	t.Helper()
	if got := callIDs(t, d); !slices.Equal(got, want) {
		t.Errorf("calls = %v, want %v", got, want)
	}
	if got := auditCallIDs(t, d); !slices.Equal(got, want) {
		t.Errorf("audit entries of calls = %v, want %v", got, want)
	}
}
