package db

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"runtime/debug"
	"time"
)

// Group commit.
//
// Every write of the process is a request queued for the writer. Whoever
// holds the writer's token (d.writing) is the writer: it takes the
// requests queued so far, runs them one after the other in one BEGIN
// IMMEDIATE transaction, each but the first inside its own SAVEPOINT, and
// commits once. A request whose function fails is rolled back to its
// savepoint and answered at once with its error; it undoes nothing of the
// others (the first, which has no savepoint, is rolled back with the
// transaction, which holds nothing else yet, and the requests after it go
// back to the queue; a function that panics is rolled back alike, and its
// panic is raised again in its own caller's goroutine, not in the
// writer's). The
// requests that succeeded are answered only after the shared COMMIT (and
// the advance of the high-water mark it needs, below) returned, so an
// acknowledged write is durable, and
// their after-commit functions run first, in the order they committed.
// Requests queued while the transaction runs its writes join it (up to
// the batch's limit); those that arrive while a commit is in flight wait
// for the next one: under load many writes share one fsync; alone, a
// write is one transaction as before.
//
// The high-water mark (OnCommit) is advanced before a write that holds a
// change it must cover is answered. When a commit holding such a write
// ends with more requests queued, the writer runs them first, as up to
// markShareCommits-1 further commits, and then advances the mark once,
// with the newest head, for all of them: one sync of the mark for several
// commits. Writes are answered in the order they committed: those before
// the first write that waits for the mark are answered at its commit, all
// after it (in its commit and the further ones) once the mark covers them.
//
// The writer is not a goroutine of its own: the token passes between the
// goroutines that have a request queued, and the one that takes it runs
// everybody's. No goroutine has to be started or stopped with the
// database, and a lone write runs on its caller's goroutine without a
// hand-off.
//
// Writers in this process queue here before asking SQLite for its write
// lock, which hands over in microseconds where SQLite's busy handler
// sleeps; other processes are still serialized by SQLite (busy_timeout).
// Every write runs on the same connection, d.writer: in WAL mode SQLite
// discards a connection's page cache whenever another connection has
// written since its last transaction, so on one connection the cache stays
// valid from one write to the next (SQLite still notices a write by
// another process and drops it).

// maxBatch bounds how many requests share one transaction (DB.batchLimit,
// which tests and benchmarks lower to 1 to compare with a transaction per
// write).
const maxBatch = 64

// writerCheckpointPages is how many pages the WAL holds before the writer's
// commit checkpoints it (PRAGMA wal_autocheckpoint; SQLite's default is
// 1,000): a flow writes about 40 pages, and every checkpoint costs three
// syncs.
const writerCheckpointPages = 4000

// writeReq is one write waiting for, or in, a group commit.
type writeReq struct {
	ctx   context.Context
	fn    func(ctx context.Context, tx *writeTx) error
	after []func() // run after the commit, in commit order
	err   error
	// mark is true when fn made a change the high-water mark must cover
	// before it is acknowledged (mustAdvance).
	mark bool
	// panicked is what fn (or one of its after-commit functions) panicked
	// with, re-raised in the caller's goroutine.
	panicked *writePanic
	done     chan struct{} // closed when err and panicked are final
}

// writePanic is a panic of a write's own function, caught by whichever
// goroutine ran the transaction and raised again in the write's caller: a
// bug in one write must neither unwind another caller's goroutine nor leave
// the writer's token held (every later write of the process would wait
// for ever).
type writePanic struct {
	value any
	stack []byte
}

func (p *writePanic) Error() string {
	return fmt.Sprintf("db: a write function panicked: %v\n\n%s", p.value, p.stack)
}

// errPanicked answers a write whose function panicked, until its caller
// re-raises the panic.
var errPanicked = errors.New("db: the write function panicked")

// outcome is r's result in its caller's goroutine: its error, or its
// function's panic raised again.
func (r *writeReq) outcome() error {
	if r.panicked != nil {
		panic(r.panicked)
	}
	return r.err
}

// run runs r's function in tx, turning a panic into errPanicked.
func (r *writeReq) run(tx *writeTx) (err error) {
	defer func() {
		if v := recover(); v != nil {
			r.panicked = &writePanic{value: v, stack: debug.Stack()}
			err = errPanicked
		}
	}()
	return r.fn(context.WithoutCancel(r.ctx), tx)
}

// runAfter runs r's after-commit functions; a panic stops r's and is
// raised again in r's caller, the other writes' still run.
func (r *writeReq) runAfter() {
	defer func() {
		if v := recover(); v != nil {
			r.panicked = &writePanic{value: v, stack: debug.Stack()}
		}
	}()
	for _, fn := range r.after {
		fn()
	}
}

// update runs fn in a write transaction, checking inside it that the
// database is still the one opened (ErrReplaced otherwise: before COMMIT,
// and when fn fails before anything read the transaction's state), and
// returns when what fn wrote is committed, or with the error that kept it
// from being. fn may
// share the transaction with other writes (see Group commit above): it
// must do its work through the ctx and tx it is given, which do not end
// when the caller's context does, and its changes are its own, rolled back
// alone when it returns an error. A caller whose context ends while its
// write waits gets ctx.Err() and nothing is written; once its write runs,
// it runs to its end.
func (d *DB) update(ctx context.Context, fn func(ctx context.Context, tx *writeTx) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("db: begin: %w", err)
	}
	r := &writeReq{ctx: ctx, fn: fn, done: make(chan struct{})}
	d.qmu.Lock()
	d.queue = append(d.queue, r)
	d.qmu.Unlock()
	for {
		select {
		case <-r.done:
			return r.outcome()
		case d.writing <- struct{}{}:
			select {
			case <-r.done: // the last writer ran it
			default:
				d.runQueued(r)
			}
			<-d.writing
		case <-ctx.Done():
			if d.dequeue(r) {
				return fmt.Errorf("db: begin: %w", ctx.Err())
			}
			<-r.done // a writer has it: it runs to its end
			return r.outcome()
		}
	}
}

// dequeue removes r from the queue, false when a writer already took it.
func (d *DB) dequeue(r *writeReq) bool {
	d.qmu.Lock()
	defer d.qmu.Unlock()
	for i, q := range d.queue {
		if q == r {
			d.queue = append(d.queue[:i], d.queue[i+1:]...)
			return true
		}
	}
	return false
}

// runQueued runs the oldest queued requests as one group commit, and
// then, while that commit's writes wait for the high-water mark and more
// requests are queued, the next ones as further commits (up to
// markShareCommits in all): one advance of the mark, one sync, then covers
// all of them. Called by the holder of d.writing, on behalf of own (its
// caller's write, nil for none): once own is answered, no further commit
// runs on its caller's time.
func (d *DB) runQueued(own *writeReq) {
	var h heldWrites
	for range markShareCommits {
		if batch := d.takeQueued(d.batchLimit); len(batch) > 0 {
			d.runBatch(batch, &h)
		}
		if !h.mark || !d.writesQueued() || own.answered() {
			break
		}
	}
	d.acknowledge(&h)
}

// answered reports whether r (nil for none) has been answered.
func (r *writeReq) answered() bool {
	if r == nil {
		return false
	}
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// takeQueued takes the oldest queued requests, up to limit, and answers
// at once those whose callers have gone.
func (d *DB) takeQueued(limit int) []*writeReq {
	d.qmu.Lock()
	defer d.qmu.Unlock()
	n := min(len(d.queue), limit)
	batch := make([]*writeReq, 0, n)
	for _, r := range d.queue[:n] {
		if err := r.ctx.Err(); err != nil {
			// The caller has gone; it learns that nothing was written.
			r.err = fmt.Errorf("db: begin: %w", err)
			close(r.done)
			continue
		}
		batch = append(batch, r)
	}
	d.queue = append(d.queue[:0], d.queue[n:]...)
	return batch
}

// writesQueued reports whether any request waits in the queue.
func (d *DB) writesQueued() bool {
	d.qmu.Lock()
	defer d.qmu.Unlock()
	return len(d.queue) > 0
}

// markShareCommits bounds how many commits one advance of the high-water
// mark may cover: a write that must be covered waits for at most
// markShareCommits-1 further commits before the mark is advanced and it is
// acknowledged.
const markShareCommits = 4

// heldWrites is what the writer has committed and not yet acknowledged,
// in commit order: writes are acknowledged in the order they committed,
// and a write that must be covered by the high-water mark holds back
// itself and every write committed after it, in its commit and the next
// ones, until the mark covers them.
type heldWrites struct {
	reqs []*writeReq
	// head is the chain's head after the newest commit that moved it.
	head commitHead
	// mark is true once a held write must be covered by the mark before
	// it is acknowledged (writeReq.mark, with a commit hook set); reqs
	// holds it and the writes committed after it.
	mark bool
}

// acknowledge advances the high-water mark when a held commit must be
// covered (once, with the newest head, which covers every commit before
// it), then runs the held writes' after-commit functions and answers them,
// in commit order.
func (d *DB) acknowledge(h *heldWrites) {
	if h.mark {
		if err := d.onCommit(h.head.seq, h.head.hash); err != nil {
			for _, r := range h.reqs {
				finish(r, fmt.Errorf("db: committed, but not acknowledged: %w", err))
			}
			return
		}
	}
	for _, r := range h.reqs {
		r.runAfter()
		finish(r, nil)
	}
}

// join adds to batch, once its request i (the last) has run, the requests
// queued while the transaction ran, up to d.batchLimit in all: they share
// its commit rather than wait for it to end and pay a commit of their own.
func (d *DB) join(batch []*writeReq, i int) []*writeReq {
	if i < len(batch)-1 || len(batch) >= d.batchLimit {
		return batch
	}
	return append(batch, d.takeQueued(d.batchLimit-len(batch))...)
}

// requeue puts requests that have not run back at the front of the queue.
func (d *DB) requeue(rs []*writeReq) {
	if len(rs) == 0 {
		return
	}
	d.qmu.Lock()
	defer d.qmu.Unlock()
	d.queue = append(append([]*writeReq(nil), rs...), d.queue...)
}

func finish(r *writeReq, err error) {
	r.err = err
	close(r.done)
}

// runBatch runs batch in one transaction. It answers the requests that
// failed, and adds those that committed to h, to be answered by
// acknowledge. Each write but the first runs in a savepoint of its own.
func (d *DB) runBatch(batch []*writeReq, h *heldWrites) {
	failAll := func(rs []*writeReq, err error) {
		for _, r := range rs {
			finish(r, err)
		}
	}
	// The transaction belongs to no single caller: it must not end when
	// one of them goes away (database/sql rolls back a transaction whose
	// context ends, and SQLite rolls back a whole transaction when a write
	// statement in it is interrupted).
	ctx := context.Background()
	tx, err := d.beginWrite(ctx)
	if err != nil {
		failAll(batch, classify(fmt.Errorf("db: begin: %w", err)))
		return
	}
	defer tx.Rollback()
	// The transaction checks that the file is still the database that was
	// opened, and reads what its writes need of the database as a whole
	// (txState), by one statement: the first of its writes' statements
	// that can carry it (a read of a call, a submission's checks), or one
	// of its own when a write needs the state first (needTxState), and at
	// the latest before COMMIT, so no write commits in a database that
	// replaced it.
	d.txStateRead = false
	committed := batch[:0:0]
	for i := 0; i < len(batch); i++ {
		r := batch[i]
		head, stateRead := d.txHead, d.txStateRead
		d.txAfter = nil
		// The first write of a transaction runs without a savepoint: when
		// it fails, the transaction holds nothing else, so it is rolled
		// back whole and the writes after it go back to the queue for the
		// next one. A batch of one is a plain transaction.
		savepoint := i > 0
		if savepoint {
			if _, err := tx.ExecContext(ctx, `SAVEPOINT request`); err != nil {
				d.broken(tx, committed, batch[i:], err)
				return
			}
		}
		d.reqAdvance = false
		err := r.run(tx)
		if err != nil && !d.txStateRead {
			// The write failed before anything of it checked the file: an
			// answer read from another database (not found, a conflict)
			// is none, ErrReplaced is the write's error, as it was when
			// the check ran before every write.
			if serr := d.readTxState(ctx, tx); errors.Is(serr, ErrReplaced) {
				err = serr
			}
		}
		if err != nil {
			// A state read while this write ran may hold what the write
			// did before it failed (a freeze lifted, say): read it again.
			d.txHead, d.txStateRead = head, stateRead
			if !savepoint {
				if rerr := tx.Rollback(); rerr != nil && !errors.Is(rerr, sql.ErrTxDone) {
					d.discardWriter()
				}
				finish(r, classify(err))
				d.requeue(batch[1:])
				return
			}
			// Back to this write's savepoint, the innermost one named
			// request (those of the writes before it are still open, see
			// below), and release it alone.
			if _, rerr := tx.ExecContext(ctx, `ROLLBACK TO request`); rerr != nil {
				d.broken(tx, committed, batch[i+1:], rerr)
				finish(r, classify(err))
				return
			}
			if _, rerr := tx.ExecContext(ctx, `RELEASE request`); rerr != nil {
				d.broken(tx, committed, batch[i+1:], rerr)
				finish(r, classify(err))
				return
			}
			// Its failure is final now: nothing of it is in the transaction.
			finish(r, classify(err))
			batch = d.join(batch, i)
			continue
		}
		// A write that succeeded leaves its savepoint open, where a RELEASE
		// statement would end it: COMMIT ends every savepoint still open,
		// and a later write that fails rolls back to its own savepoint
		// only. SQLite may have ended the transaction under fn (a statement
		// it ignored failed with SQLITE_FULL, say), and then the next
		// SAVEPOINT would begin a new transaction: the connection is asked
		// whether it is still in one (no statement), and if not nothing of
		// this write or of those before it is left.
		batch = d.join(batch, i)
		if i < len(batch)-1 && d.txEnded() {
			d.broken(tx, append(committed, r), batch[i+1:], errTxEnded)
			return
		}
		r.after, r.mark = d.txAfter, d.reqAdvance
		committed = append(committed, r)
	}
	d.txAfter = nil
	if len(committed) == 0 {
		return // every request failed and was rolled back; the deferred Rollback ends the transaction
	}
	if err := d.needTxState(ctx, tx); err != nil {
		failAll(committed, err)
		return
	}
	commitStart := time.Now()
	err = tx.Commit()
	d.commitNanos.Add(int64(time.Since(commitStart)))
	if err != nil {
		// The connection may be left inside a transaction it could not
		// end; never reuse it.
		d.discardWriter()
		failAll(committed, classify(fmt.Errorf("db: commit: %w", err)))
		return
	}
	d.commits.Add(1)
	d.writes.Add(int64(len(committed)))
	// A write whose changes may all wait (highwater.MayWait) needs no
	// advance of the mark before it is acknowledged; the next advance
	// covers it too. It is answered now unless a write before it, in this
	// commit or a held one, waits for the mark.
	moved := d.txHead.seq != d.txKnown.base
	if moved {
		h.head = d.txHead
	}
	for _, r := range committed {
		if !h.mark && !(moved && r.mark && d.onCommit != nil) {
			r.runAfter()
			finish(r, nil)
			continue
		}
		h.reqs = append(h.reqs, r)
		h.mark = true
	}
}

// txState is what the running write transaction knows of the database as
// a whole, read by one statement of the transaction (needTxState)
// instead of by a statement of each write that needs it. It stays true for
// the whole transaction because the transaction holds SQLite's write lock
// from its BEGIN IMMEDIATE: no other connection, in this process or
// another, commits anything until it ends, so only the transaction's own
// writes can change what was read, and each of those that can updates
// txState itself (appendAudit, InsertFreeze, InsertRollback).
type txState struct {
	// base is the audit chain's head sequence number when the transaction
	// began; d.txHead is the head as the transaction has extended it.
	base int64
	// mayBeFrozen is false while the transaction knows that no freeze is in
	// force: none was when it began and none has been inserted since. A
	// freeze inserted by a write that was rolled back to its savepoint
	// leaves it true, which only costs that Frozen looks.
	mayBeFrozen bool
	// lastRollback is the latest rollback's accepted_at, while
	// rollbackKnown; a rollback inserted by the transaction makes it
	// unknown, and LastRollback reads it again.
	lastRollback  sql.NullInt64
	rollbackKnown bool
}

// mustAdvance makes the running write wait, once committed, for the
// high-water mark to cover it before it is acknowledged, whatever its
// entries: it holds a change whose loss could let something happen again
// (a use, a consumed nonce, a revocation, a bound). A write rolled back to
// its savepoint leaves nothing to cover.
func (d *DB) mustAdvance() { d.reqAdvance = true }

// txStateColumns are what readTxState reads, as columns of one row: the
// database's identity, the audit chain's head (sequence number and hash),
// whether any freeze is in force and when the latest rollback was
// accepted. A statement that reads one row may carry them before its own
// columns (withTxState).
const txStateColumns = `(SELECT value FROM meta WHERE key = 'identity'),
	(SELECT seq FROM audit ORDER BY seq DESC LIMIT 1), (SELECT hash FROM audit ORDER BY seq DESC LIMIT 1),
	EXISTS (SELECT 1 FROM freezes INDEXED BY freezes_active WHERE lifted_at IS NULL),
	(SELECT MAX(accepted_at) FROM rollbacks)`

// txStateRow receives txStateColumns.
type txStateRow struct {
	id, hash sql.NullString
	seq      sql.NullInt64
	st       txState
}

// dest lists r's fields in the order of txStateColumns.
func (r *txStateRow) dest() []any {
	return []any{&r.id, &r.seq, &r.hash, &r.st.mayBeFrozen, &r.st.lastRollback}
}

// needTxState reads the running transaction's state (readTxState) unless
// one of its statements has read it already. Everything that uses
// d.txHead or d.txKnown calls it first.
func (d *DB) needTxState(ctx context.Context, tx *writeTx) error {
	if d.txStateRead {
		return nil
	}
	return d.readTxState(ctx, tx)
}

// readTxState checks, inside tx, that the file is still the database that
// was opened (the checks of checkIdentity), and reads the audit chain's
// head, whether any freeze is in force and when the latest rollback was
// accepted, into d.txHead and d.txKnown: one statement per transaction where a
// statement of each approval, redemption and audit entry read them before.
func (d *DB) readTxState(ctx context.Context, tx *writeTx) error {
	return d.withTxState(ctx, tx, `SELECT `+txStateColumns, nil, func(r rowScanner) error { return r.Scan() })
}

// withTxState runs query (a SELECT of one row whose columns begin with
// txStateColumns) in tx, scanning the state into the transaction's and
// the rest of the row through scan. Before the statement it checks the
// file as readTxState does; when the statement fails, its error is
// txStateErr's (ErrReplaced for a file that is not the database opened).
// A query that finds no row leaves the state unread, and scan gets
// sql.ErrNoRows.
func (d *DB) withTxState(ctx context.Context, tx *writeTx, query string, args []any, scan func(rowScanner) error) error {
	if err := d.sameFile(); err != nil {
		return err
	}
	r := new(txStateRow)
	err := scan(prefixed{tx.QueryRowContext(ctx, query, args...), r.dest()})
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return err
	case errors.Is(err, errScan):
		return d.txStateErr(ctx, tx, err)
	case err != nil:
		return err
	}
	return d.setTxState(r)
}

// setTxState takes the state r read as the transaction's, or fails with
// ErrReplaced when the identity read is not the database's.
func (d *DB) setTxState(r *txStateRow) error {
	if !r.id.Valid || r.id.String != d.identity {
		return ErrReplaced
	}
	r.st.base, r.st.rollbackKnown = r.seq.Int64, true
	d.txKnown, d.txHead = r.st, commitHead{seq: r.seq.Int64, hash: r.hash.String}
	d.txStateRead = true
	return nil
}

// prefixed is a row whose first columns go to pre, the rest to the
// destinations Scan is given.
type prefixed struct {
	row rowScanner
	pre []any
}

// errScan marks the error of the statement a prefixed row ran, as
// opposed to what its caller made of the row.
var errScan = errors.New("the statement failed")

func (p prefixed) Scan(dest ...any) error {
	err := p.row.Scan(append(p.pre, dest...)...)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: %w", errScan, err)
	}
	return err
}

// txStateErr is the error of a write transaction whose statement reading
// its state (readTxState, withTxState) failed with err. The write fails
// closed either way, but only a database that is not the one opened reads
// as ErrReplaced: a cancelled context keeps its error, a storage failure
// (an I/O error, SQLITE_BUSY, a corrupt page) is ErrUnavailable as
// classify makes it, and any other statement error is ErrReplaced only
// when the identity cannot be read alone, or differs (checkIdentity): a
// file that holds no Countersign database has no meta table.
func (d *DB) txStateErr(ctx context.Context, tx *writeTx, err error) error {
	err = fmt.Errorf("db: read the transaction's state: %w", err)
	if ctx.Err() != nil {
		// The caller gave up; that says nothing about the file.
		return fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if cerr := classify(err); errors.Is(cerr, ErrUnavailable) {
		return cerr
	}
	if ierr := d.checkIdentity(ctx, tx); ierr != nil {
		return ierr
	}
	return err
}

// errTxEnded is the error of writes whose transaction SQLite ended under
// them.
var errTxEnded = errors.New("SQLite ended the transaction")

// txEnded reports whether the writer's connection is no longer inside a
// transaction (SQLite's autocommit mode), asked of the connection without
// a statement. Called by the writer.
func (d *DB) txEnded() bool {
	ended := true
	if d.writer != nil {
		_ = d.writer.Raw(func(dc any) error {
			ended = dc.(*countingConn).c.AutoCommit()
			return nil
		})
	}
	return ended
}

// broken handles a transaction that SQLite rolled back by itself (an I/O
// error, a full disk, an interrupted statement): the requests that ran in
// it are lost and answered with the error; those that had not run yet go
// back to the front of the queue for the next writer.
func (d *DB) broken(tx *writeTx, ran, notRun []*writeReq, err error) {
	d.txAfter = nil
	if rerr := tx.Rollback(); rerr != nil && !errors.Is(rerr, sql.ErrTxDone) {
		d.discardWriter()
	}
	err = classify(fmt.Errorf("db: the transaction was rolled back: %w", err))
	for _, r := range ran {
		finish(r, err)
	}
	d.requeue(notRun)
}

// lockWriter takes the writer's token, for changes to the writer's state
// outside a write.
func (d *DB) lockWriter()   { d.writing <- struct{}{} }
func (d *DB) unlockWriter() { <-d.writing }

// discardWriter closes the writer connection for good (not back into the
// pool); the next write takes a fresh one. Called by the writer.
func (d *DB) discardWriter() {
	if d.writer == nil {
		return
	}
	d.writer.Raw(func(any) error { return driver.ErrBadConn })
	d.writer.Close()
	d.writer = nil
}

// releaseWriter returns the writer connection to the pool; the next write
// takes a connection from the pool again.
func (d *DB) releaseWriter() {
	d.lockWriter()
	defer d.unlockWriter()
	if d.writer != nil {
		// Back in the pool, the connection commits what it is asked to.
		if err := guardWriter(d.writer, false); err != nil {
			d.discardWriter()
			return
		}
		d.writer.Close()
		d.writer = nil
	}
}

// guardWriter turns the commit guard of conn's connection on or off
// (countingConn.guardCommits).
func guardWriter(conn *sql.Conn, on bool) error {
	return conn.Raw(func(dc any) error {
		cc, ok := dc.(*countingConn)
		if !ok {
			return fmt.Errorf("db: the writer's connection is a %T", dc)
		}
		cc.guardCommits(on)
		return nil
	})
}

// beginWrite begins a write transaction on the writer connection, taking a
// connection from the pool when there is none yet or when the last one was
// discarded (discardWriter, or a connection database/sql found bad).
// Called by the writer.
func (d *DB) beginWrite(ctx context.Context) (*writeTx, error) {
	for attempt := 0; ; attempt++ {
		if d.writer == nil {
			// Waiting for a pooled connection is bounded; the transaction
			// itself is not tied to this context.
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			conn, err := d.sql.Conn(cctx)
			cancel()
			if err != nil {
				return nil, err
			}
			// The writer touches every index of the tables it writes: a
			// page cache of 16 MiB (SQLite's default is 2 MiB) keeps them
			// in memory instead of re-reading them from the OS on each
			// write. Readers keep the default.
			//
			// A write that shares its transaction runs in a savepoint,
			// whose undo journal SQLite keeps in memory up to 64 KiB and
			// then spills to a temporary file: a write() of every page the
			// write changes, and a file opened and deleted per transaction.
			// On this connection temporary files are memory instead: the
			// journal holds at most what one transaction changes, and
			// nothing of it must survive a crash (the WAL is the journal
			// that must). Readers, whose sorts may be large, keep files.
			//
			// The writer commits, so it runs SQLite's automatic checkpoints:
			// each costs three syncs (the WAL before its pages are copied,
			// the database file after, and the restarted WAL's header at
			// the next commit) and comes every writerCheckpointPages pages
			// of WAL instead of SQLite's 1,000. Durability is the WAL's,
			// synced at every commit either way; the WAL file grows to
			// about 16 MiB and is reused from its start after each one.
			for _, pragma := range []string{`PRAGMA cache_size = -16384`, `PRAGMA temp_store = MEMORY`,
				fmt.Sprintf(`PRAGMA wal_autocheckpoint = %d`, writerCheckpointPages)} {
				if _, err := conn.ExecContext(ctx, pragma); err != nil {
					conn.Close()
					return nil, err
				}
			}
			// Nothing commits on the writer's connection but the writer's
			// transactions (guardCommits): a write that goes on after SQLite
			// ended the shared transaction under it leaves nothing.
			if err := guardWriter(conn, true); err != nil {
				conn.Close()
				return nil, err
			}
			d.writer = conn
		}
		tx, err := beginOn(d.writer) // BEGIN IMMEDIATE via _txlock
		if err == nil {
			return tx, nil
		}
		if !errors.Is(err, sql.ErrConnDone) && !errors.Is(err, driver.ErrBadConn) {
			return nil, err
		}
		d.writer.Close()
		d.writer = nil
		if attempt > 0 {
			return nil, err
		}
	}
}
