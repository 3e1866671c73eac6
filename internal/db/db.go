// Package db stores Countersign's state in SQLite: calls, decisions, the
// nonce ledger, the audit chain, tokens and accounts. It implements the
// stores the domain declares: queue.Store and queue.History (Store),
// account.Store (Accounts) and audit.Trail (DB).
//
// The database runs in WAL mode with synchronous=FULL; every write runs in
// a BEGIN IMMEDIATE transaction, so writers across goroutines and
// processes are serialized by SQLite's write lock. Within the process,
// writes that queue while a commit is in flight share the next
// transaction, each in its own savepoint (group commit, writer.go).
package db

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"

	"github.com/countersign/countersign/internal/db/walvfs"
	"github.com/countersign/countersign/internal/store"
)

//go:embed migrations/*.sql
var migrations embed.FS

// DB is an open Countersign database.
type DB struct {
	sql      *sql.DB
	path     string
	identity string
	dev, ino uint64
	now      func() time.Time
	// writing is the writer's token (see writer.go): whoever holds it runs
	// the queued writes. The fields below it are the writer's.
	writing chan struct{}
	writer  *sql.Conn // the connection every write runs on
	// txHead is the audit chain's head in the running write transaction,
	// as it began or as the transaction extended it; txKnown is the rest of
	// what the transaction knows of the database as a whole (writer.go).
	txHead  commitHead
	txKnown txState
	// txStateRead is true once a statement of the running write
	// transaction has read txHead and txKnown (needTxState).
	txStateRead bool
	// reqAdvance is true once the running write made a change the
	// high-water mark must cover (mustAdvance, highwater.MayWait):
	// writeReq.mark.
	reqAdvance bool
	// txAfter collects what the running request asks to run after the
	// commit (storeTx.AfterCommit).
	txAfter []func()
	qmu     sync.Mutex  // guards queue
	queue   []*writeReq // writes waiting for the writer, oldest first
	// batchLimit is how many queued writes one transaction takes at most.
	batchLimit int
	// commits and writes count the committed write transactions and the
	// writes they held.
	commits, writes atomic.Int64
	// commitNanos is the time spent in COMMIT (the sync to disk).
	commitNanos atomic.Int64
	// onCommit, when set, runs after every commit that appended audit
	// entries, with the chain's new head, before the write returns.
	onCommit func(seq int64, head string) error
	// stmts counts the statements of every connection (statements.go).
	stmts stmtCounter
	// auth counts the writes to accounts, sessions and tokens of every
	// process, and cached holds what was read of them (authcache.go); auth
	// is nil only where shared memory is not to be had (no unix), and then
	// nothing is kept.
	auth   *authEpoch
	cached authCaches
}

type commitHead struct {
	seq  int64
	hash string
}

// ErrReplaced is store.ErrReplaced: the database file was removed or
// replaced after it was opened.
var ErrReplaced = store.ErrReplaced

// ErrUnavailable is store.ErrUnavailable: storage failures that a client
// may retry later (disk full, read-only file, locked too long).
var ErrUnavailable = store.ErrUnavailable

// DSN returns the connection string with every pragma Countersign relies on,
// so that each pooled connection gets them.
func DSN(path string) string {
	q := url.Values{}
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", "FULL")
	q.Set("_foreign_keys", "on")
	q.Set("_busy_timeout", "10000")
	q.Set("_txlock", "immediate")
	// Statements are prepared once per pooled connection, not per call.
	q.Set("_stmt_cache_size", "64")
	return fileURI(path, q)
}

// fileURI returns the SQLite URI for the database file at path with the
// query q. The path is escaped: in a URI, "?" and "#" end the path and "%"
// starts an escape, so a path holding them would otherwise make SQLite
// open another file than the one Open created and checks; a leading "//"
// would be read as an authority.
//
// Every connection opens its files through the walvfs VFS, which writes a
// commit's WAL frames in one write rather than two per frame (the
// package's documentation says why that keeps SQLite's guarantees).
func fileURI(path string, q url.Values) string {
	if strings.HasPrefix(path, "//") {
		path = filepath.Clean(path)
	}
	if vfs := walvfs.Name(); vfs != "" {
		q.Set("vfs", vfs)
	}
	return "file:" + uriEscaper.Replace(path) + "?" + q.Encode()
}

var uriEscaper = strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23")

// Open opens (creating if needed) the database at path and applies pending
// migrations.
func Open(path string) (*DB, error) {
	if path == "" || strings.Contains(path, ":memory:") {
		return nil, fmt.Errorf("db: a database file path is required")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("db: create directory: %w", err)
	}
	// Create the file owner-only before SQLite does, so that neither it nor
	// the WAL and shared-memory files SQLite derives from it are ever
	// readable by others.
	if f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600); err != nil {
		return nil, fmt.Errorf("db: open %s: %w", path, err)
	} else {
		f.Close()
	}
	d := &DB{path: path, now: time.Now, writing: make(chan struct{}, 1), batchLimit: maxBatch}
	// Sessions and tokens are kept in memory while no process writes
	// accounts, sessions or tokens (authcache.go). A process that cannot
	// count its writes into the shared counters must not write them
	// unseen: Open fails.
	if haveSharedCounters {
		auth, err := openAuthEpoch(path)
		if err != nil {
			return nil, fmt.Errorf("%w (every Countersign process using %s must map this file beside it: check that its directory is writable by this user, that the file belongs to this user, and that it is a plain file)", err, path)
		}
		d.auth = auth
	}
	// The driver sql.Open("sqlite3", …) would use, its connections
	// counting their statements (statements.go).
	sqldb := sql.OpenDB(connector{dsn: DSN(path), drv: &sqlite3.SQLiteDriver{}, stmts: &d.stmts, auth: d.auth})
	d.sql = sqldb
	sqldb.SetMaxOpenConns(8)
	sqldb.SetMaxIdleConns(8)
	if err := d.migrate(); err != nil {
		sqldb.Close()
		d.auth.close()
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		sqldb.Close()
		d.auth.close()
		return nil, fmt.Errorf("db: restrict %s: %w", path, err)
	}
	if err := d.loadIdentity(); err != nil {
		sqldb.Close()
		d.auth.close()
		return nil, err
	}
	return d, nil
}

// OnCommit sets fn to run after every write transaction that appended
// audit entries, one of them or another of its changes one the mark must
// cover (highwater.MayWait), has committed, with the chain's new head, before the write
// returns to its caller: once per commit, however many entries, writes or
// redemptions the commit holds (a group commit runs it once for all of
// them). An error from fn is returned by every write of that commit (their
// changes are committed, but nothing is acknowledged). Set it before any
// write runs; nil turns it off.
func (d *DB) OnCommit(fn func(seq int64, head string) error) {
	d.lockWriter()
	defer d.unlockWriter()
	d.onCommit = fn
}

// WriteCounts returns how many write transactions this handle has
// committed and how many writes they held: writes ÷ commits is the
// average size of a group commit.
func (d *DB) WriteCounts() (commits, writes int64) {
	return d.commits.Load(), d.writes.Load()
}

// WALFrames is how many frames (pages) this process has appended to
// SQLite's write-ahead logs, counted by the VFS every connection opens its
// files through (walvfs): a console opens one database, so they are its
// commits' pages. Zero where the VFS is not used.
func (d *DB) WALFrames() int64 { return walvfs.Frames() }

// CommitSeconds is the time this handle's commits have spent in COMMIT,
// the sync to disk included: divided by the commits, the mean commit
// latency.
func (d *DB) CommitSeconds() float64 { return float64(d.commitNanos.Load()) / 1e9 }

// Close closes the database.
func (d *DB) Close() error {
	d.releaseWriter()
	err := d.sql.Close()
	d.auth.close() // after the connections, which count into it
	return err
}

// Ping checks that the database answers and is still the one opened: a
// pooled connection keeps answering after its file was deleted or
// replaced, so the file and the recorded identity are checked too, and
// /healthz fails as every write would.
func (d *DB) Ping(ctx context.Context) error {
	if err := d.sameFile(); err != nil {
		return err
	}
	if d.auth != nil && !d.auth.current() {
		return d.auth.errCountersReplaced()
	}
	var id string
	if err := d.sql.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'identity'`).Scan(&id); err != nil {
		return classify(fmt.Errorf("db: ping: %w", err))
	}
	if id != d.identity {
		return ErrReplaced
	}
	return nil
}

// SQL exposes the pool for read-only views and tests.
func (d *DB) SQL() *sql.DB { return d.sql }

// Path is the database file.
func (d *DB) Path() string { return d.path }

// Identity is the random id recorded when the database was created.
func (d *DB) Identity() string { return d.identity }

func (d *DB) migrate() error {
	ctx := context.Background()
	if _, err := d.sql.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL) STRICT`); err != nil {
		return fmt.Errorf("db: create migrations table: %w", err)
	}
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, name := range names {
		base := filepath.Base(name)
		v, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
		if err != nil {
			return fmt.Errorf("db: migration %s: name must start with a number", base)
		}
		if err := d.applyMigration(ctx, v, name); err != nil {
			return err
		}
	}
	return nil
}

func (d *DB) applyMigration(ctx context.Context, version int, name string) error {
	tx, err := d.sql.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("db: begin migration %d: %w", version, err)
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations WHERE version = ?`, version).Scan(&n); err != nil {
		return fmt.Errorf("db: read migrations: %w", err)
	}
	if n > 0 {
		return nil
	}
	body, err := migrations.ReadFile(name)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, string(body)); err != nil {
		return fmt.Errorf("db: migration %s: %w", filepath.Base(name), err)
	}
	if bytes.Contains(body, []byte("PRAGMA writable_schema = ON")) {
		// A migration that rewrote a recorded definition (loosening a
		// CHECK constraint) bumps the schema version, so that every
		// connection, this one included, parses the schema again.
		var v int64
		if err := tx.QueryRowContext(ctx, `PRAGMA schema_version`).Scan(&v); err != nil {
			return fmt.Errorf("db: migration %s: read schema version: %w", filepath.Base(name), err)
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA schema_version = %d`, v+1)); err != nil {
			return fmt.Errorf("db: migration %s: bump schema version: %w", filepath.Base(name), err)
		}
	}
	if version == 1 {
		var id [16]byte
		if _, err := rand.Read(id[:]); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO meta (key, value) VALUES ('identity', ?)`, hex.EncodeToString(id[:])); err != nil {
			return fmt.Errorf("db: record identity: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
		version, filepath.Base(name), time.Now().UTC().Format(time.RFC3339)); err != nil {
		return fmt.Errorf("db: record migration %d: %w", version, err)
	}
	return tx.Commit()
}

func (d *DB) loadIdentity() error {
	if err := d.sql.QueryRow(`SELECT value FROM meta WHERE key = 'identity'`).Scan(&d.identity); err != nil {
		return fmt.Errorf("db: read identity: %w", err)
	}
	dev, ino, err := fileID(d.path)
	if err != nil {
		return err
	}
	d.dev, d.ino = dev, ino
	return nil
}

// sameFile fails with ErrReplaced when the file at the database's path is
// no longer the one opened (removed, or another file in its place).
func (d *DB) sameFile() error {
	dev, ino, err := fileID(d.path)
	if err != nil {
		return err
	}
	if dev != d.dev || ino != d.ino {
		return ErrReplaced
	}
	return nil
}

func fileID(path string) (uint64, uint64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %v", ErrReplaced, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, nil
	}
	return uint64(st.Dev), uint64(st.Ino), nil
}

// checkIdentity fails closed when the file on disk is not the database that
// was opened: removed, replaced by another file, or holding another identity.
func (d *DB) checkIdentity(ctx context.Context, tx *writeTx) error {
	if err := d.sameFile(); err != nil {
		return err
	}
	var id string
	if err := tx.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'identity'`).Scan(&id); err != nil {
		if ctx.Err() != nil {
			// The caller gave up; that says nothing about the file.
			return fmt.Errorf("db: check identity: %w", ctx.Err())
		}
		if cerr := classify(fmt.Errorf("db: check identity: %w", err)); errors.Is(cerr, ErrUnavailable) {
			// An I/O error, a busy or corrupt database: not another file.
			return cerr
		}
		// No identity row, or no meta table: not a Countersign database.
		return fmt.Errorf("%w: %v", ErrReplaced, err)
	}
	if id != d.identity {
		return ErrReplaced
	}
	return nil
}

// classify marks errors that mean the storage itself is in trouble.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var se sqlite3.Error
	if errors.As(err, &se) {
		switch se.Code {
		case sqlite3.ErrFull, sqlite3.ErrReadonly, sqlite3.ErrIoErr, sqlite3.ErrCantOpen,
			sqlite3.ErrBusy, sqlite3.ErrLocked, sqlite3.ErrCorrupt, sqlite3.ErrNotADB:
			return fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
	}
	return err
}

func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func nullMS(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixMilli(), Valid: true}
}

func fromMS(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return time.UnixMilli(n.Int64).UTC()
}
