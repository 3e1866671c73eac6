// Package pgstore stores Countersign's state in PostgreSQL, for several
// console replicas sharing one database. It implements the same stores as
// internal/db (queue.Store and queue.History, account.Store, audit.Trail)
// and passes the same conformance suite (internal/store/storetest).
//
// Isolation. PostgreSQL's default READ COMMITTED would let approve race
// deny, two approvals both miss a quorum, and two rejections both count
// from the same number, each on its own replica. Every write transaction
// therefore begins by taking one transaction-scoped advisory lock, the lock
// of the audit chain's head: every write appends to that one linear chain,
// so writes serialize on it in any case, and taking it first means each
// write transaction runs alone, reading (statement by statement, at READ
// COMMITTED) a state that no concurrent writer changes, exactly as SQLite's
// BEGIN IMMEDIATE does. No write needs a retry, none can deadlock against
// another, and a read-then-decide can never act on stale rows. Reads outside
// a write see committed data and take no lock.
//
// Live changes leave through NOTIFY inside the writing transaction, which
// PostgreSQL delivers only once the transaction has committed; the payload
// is the call id and the audit sequence number of the change (see Listen).
// Who has which call page open is not stored: replicas tell each other on
// a second channel, over the same listening connection (Presence).
package pgstore

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/countersign/countersign/internal/store"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Advisory lock keys (pg_advisory_xact_lock and friends take a bigint);
// the high bits spell "cs" so they are unlikely to meet another
// application's keys in a shared database.
const (
	lockChain   int64 = 0x6373_0000_0000_0001 // the audit chain head: every write
	lockMigrate int64 = 0x6373_0000_0000_0002 // applying migrations
	lockSweep   int64 = 0x6373_0000_0000_0003 // the expiry sweeper
)

// Channel is the NOTIFY channel of committed changes.
const Channel = "countersign_changes"

// IsURL reports whether s names a PostgreSQL database (postgres:// or
// postgresql://).
func IsURL(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// DB is an open Countersign database on PostgreSQL.
type DB struct {
	pool     *pgxpool.Pool
	url      string // redacted, for messages
	identity string
	now      func() time.Time

	raw string // the URL as given, for the listener's own connection

	presenceRefresh time.Duration // Options.PresenceRefresh

	// Audit entries this process is committing or committed itself (seq
	// to hash), so that the listener does not publish them a second time;
	// guarded by mu. The hash tells them from another replica's entry of
	// the same seq after a failed commit.
	mu    sync.Mutex
	local map[int64]string

	// commitMu orders this process's commits with their onCommit calls;
	// the chain head lock already orders the commits themselves.
	commitMu sync.Mutex
	onCommit func(seq int64, head string) error

	// commits and writes count this process's committed write
	// transactions and the writes they held.
	commits, writes atomic.Int64
	// commitNanos is the time spent in COMMIT (the sync to disk).
	commitNanos atomic.Int64
}

// WriteCounts returns how many write transactions this process has
// committed and how many writes they held.
func (d *DB) WriteCounts() (commits, writes int64) {
	return d.commits.Load(), d.writes.Load()
}

// OnCommit sets fn to run after every write transaction that appended
// audit entries, one of them or another of its changes one the mark must
// cover (highwater.MayWait), has committed, with the chain's new head, before the write
// returns: once per commit, in commit order. An error from fn is returned
// by the write (committed, but not acknowledged). Set it before any write
// runs.
func (d *DB) OnCommit(fn func(seq int64, head string) error) {
	d.commitMu.Lock()
	defer d.commitMu.Unlock()
	d.onCommit = fn
}

// Options tune Open.
type Options struct {
	// MaxConns bounds the pool (default: pool_max_conns in the URL, else
	// 16).
	MaxConns int32
	// ReadOnly opens without migrating: for verifying and exporting.
	ReadOnly bool
	// PresenceRefresh is how often the listener's presence restates this
	// replica's viewers (default DefaultPresenceRefresh); the others
	// forget them three refreshes after they last heard them.
	PresenceRefresh time.Duration
}

// Open connects to the database at url (postgres://...), applies pending
// migrations and reads the database's identity.
func Open(ctx context.Context, rawURL string, opt Options) (*DB, error) {
	cfg, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		return nil, fmt.Errorf("pgstore: %s: %w", redact(rawURL), err)
	}
	// The pool's size: the option, else pool_max_conns in the URL, else 16.
	switch {
	case opt.MaxConns > 0:
		cfg.MaxConns = opt.MaxConns
	case !strings.Contains(rawURL, "pool_max_conns"):
		cfg.MaxConns = 16
	}
	cfg.MinConns = 0
	cfg.HealthCheckPeriod = 5 * time.Second
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 10 * time.Second
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "countersign"
	// Statements are prepared once per connection and described once.
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheStatement
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgstore: connect to %s: %w", redact(rawURL), err)
	}
	d := &DB{pool: pool, url: redact(rawURL), raw: rawURL, now: time.Now, local: map[int64]string{},
		presenceRefresh: opt.PresenceRefresh}
	if !opt.ReadOnly {
		if err := d.migrate(ctx); err != nil {
			pool.Close()
			return nil, err
		}
	}
	if err := pool.QueryRow(ctx, `SELECT value FROM meta WHERE key = 'identity'`).Scan(&d.identity); err != nil {
		pool.Close()
		return nil, classify(fmt.Errorf("pgstore: %s is not a Countersign database: %w", d.url, err))
	}
	return d, nil
}

// Close closes every connection.
func (d *DB) Close() error {
	d.pool.Close()
	return nil
}

// Ping checks that the database answers and is still the one opened (a
// restored or swapped database holds another identity), so /healthz fails
// as every write would.
func (d *DB) Ping(ctx context.Context) error {
	var id string
	if err := d.pool.QueryRow(ctx, `SELECT value FROM meta WHERE key = 'identity'`).Scan(&id); err != nil {
		return classify(fmt.Errorf("pgstore: ping: %w", err))
	}
	if id != d.identity {
		return store.ErrReplaced
	}
	return nil
}

// Identity is the random id recorded when the database was created.
func (d *DB) Identity() string { return d.identity }

// Location names the database for people, without its password.
func (d *DB) Location() string { return d.url }

// Pool exposes the connection pool for tests and read-only views.
func (d *DB) Pool() *pgxpool.Pool { return d.pool }

func (d *DB) migrate(ctx context.Context) error {
	// Replicas starting at once take turns: the first applies, the others
	// find the migrations recorded.
	if err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, lockMigrate); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)`)
		return err
	}); err != nil {
		return classify(fmt.Errorf("pgstore: create migrations table: %w", err))
	}
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, name := range names {
		base := path.Base(name)
		v, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
		if err != nil {
			return fmt.Errorf("pgstore: migration %s: name must start with a number", base)
		}
		if err := d.applyMigration(ctx, v, name); err != nil {
			return err
		}
	}
	return nil
}

func (d *DB) applyMigration(ctx context.Context, version int, name string) error {
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, lockMigrate); err != nil {
			return err
		}
		var n int
		if err := tx.QueryRow(ctx, `SELECT COUNT(*) FROM schema_migrations WHERE version = $1`, version).Scan(&n); err != nil {
			return fmt.Errorf("read migrations: %w", err)
		}
		if n > 0 {
			return nil
		}
		body, err := migrations.ReadFile(name)
		if err != nil {
			return err
		}
		// The simple protocol runs a file of several statements at once.
		if _, err := tx.Exec(ctx, string(body), pgx.QueryExecModeSimpleProtocol); err != nil {
			return fmt.Errorf("%s: %w", path.Base(name), err)
		}
		if version == 1 {
			var id [16]byte
			if _, err := rand.Read(id[:]); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO meta (key, value) VALUES ('identity', $1)`, hex.EncodeToString(id[:])); err != nil {
				return fmt.Errorf("record identity: %w", err)
			}
		}
		_, err = tx.Exec(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)`,
			version, path.Base(name), time.Now().UTC().Format(time.RFC3339))
		return err
	})
	if err != nil {
		return classify(fmt.Errorf("pgstore: migration %d: %w", version, err))
	}
	return nil
}

// update is the one place write transactions begin and commit. It takes
// the chain head lock first (see the package comment), checks inside the
// transaction that the database is still the one opened, runs fn, and
// commits. The versions fn appended are remembered as this process's own
// once the commit has happened.
func (d *DB) update(ctx context.Context, fn func(t *txn) error) error {
	tx, err := d.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return classify(fmt.Errorf("pgstore: begin: %w", err))
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var id string
	if err := tx.QueryRow(ctx, `SELECT (SELECT value FROM meta WHERE key = 'identity') FROM pg_advisory_xact_lock($1)`,
		lockChain).Scan(&id); err != nil {
		return classify(fmt.Errorf("pgstore: take the write lock: %w", err))
	}
	if id != d.identity {
		return store.ErrReplaced
	}
	t := &txn{ctx: ctx, tx: tx, db: d}
	if err := fn(t); err != nil {
		return classify(err)
	}
	if err := t.notify(); err != nil {
		return classify(err)
	}
	// Remembered before the commit, so the listener, which may hear of the
	// commit before Commit returns, knows them as this process's own.
	d.remember(t.entries)
	return d.commit(ctx, tx, t)
}

// CommitSeconds is the time this process's commits have spent in COMMIT.
func (d *DB) CommitSeconds() float64 { return float64(d.commitNanos.Load()) / 1e9 }

// commit commits t under commitMu and runs its after-commit functions in
// the order of the commits. The lock is released however it returns: an
// after-commit function that panics panics in its caller, and must not
// leave the lock held (the next write would wait for it holding the
// chain's advisory lock, and so every replica's writes with it).
func (d *DB) commit(ctx context.Context, tx pgx.Tx, t *txn) error {
	d.commitMu.Lock()
	defer d.commitMu.Unlock()
	commitStart := time.Now()
	err := tx.Commit(ctx)
	d.commitNanos.Add(int64(time.Since(commitStart)))
	if err != nil {
		d.forget(t.entries)
		// A commit whose answer was lost may or may not have happened;
		// either way nothing is acknowledged.
		return classify(fmt.Errorf("pgstore: commit: %w", err))
	}
	d.commits.Add(1)
	d.writes.Add(1)
	// A commit whose changes may all wait (highwater.MayWait) is
	// acknowledged without moving the mark; the next commit that moves it
	// covers it too.
	if d.onCommit != nil && len(t.entries) > 0 && t.advance {
		if err := d.onCommit(t.headSeq, t.headHash); err != nil {
			return fmt.Errorf("pgstore: committed, but not acknowledged: %w", err)
		}
	}
	// Under commitMu, so they run in the order of the commits.
	for _, fn := range t.after {
		fn()
	}
	return nil
}

func (d *DB) remember(es []entryID) {
	if len(es) == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, e := range es {
		d.local[e.seq] = e.hash
	}
}

func (d *DB) forget(es []entryID) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, e := range es {
		if d.local[e.seq] == e.hash {
			delete(d.local, e.seq)
		}
	}
}

// own reports, and forgets, whether this process committed the entry.
func (d *DB) own(seq int64, hash string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	h, ok := d.local[seq]
	if ok && h == hash {
		delete(d.local, seq)
		return true
	}
	return false
}

// forgetOwnUpTo drops remembered entries at or below seq: the listener
// has read past them.
func (d *DB) forgetOwnUpTo(seq int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for k := range d.local {
		if k <= seq {
			delete(d.local, k)
		}
	}
}

// classify marks errors that mean the storage itself is in trouble: a lost
// or refused connection, a server shutting down, a full disk, a read-only
// server (a standby after failover).
func classify(err error) error {
	if err == nil || errors.Is(err, store.ErrUnavailable) || errors.Is(err, store.ErrReplaced) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case strings.HasPrefix(pe.Code, "08"), // connection exception
			strings.HasPrefix(pe.Code, "53"), // insufficient resources (disk full, too many connections)
			strings.HasPrefix(pe.Code, "57"), // operator intervention (shutdown, cancel)
			strings.HasPrefix(pe.Code, "58"), // system error (I/O)
			pe.Code == "25006",               // read-only transaction
			pe.Code == "40001", pe.Code == "40P01":
			return fmt.Errorf("%w: %v", store.ErrUnavailable, err)
		}
		return err
	}
	var ne net.Error
	var ce *pgconn.ConnectError
	if errors.As(err, &ne) || errors.As(err, &ce) || pgconn.Timeout(err) || errors.Is(err, net.ErrClosed) ||
		strings.Contains(err.Error(), "conn closed") || strings.Contains(err.Error(), "unexpected EOF") ||
		strings.Contains(err.Error(), "connection reset") || strings.Contains(err.Error(), "broken pipe") {
		return fmt.Errorf("%w: %v", store.ErrUnavailable, err)
	}
	return err
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "the PostgreSQL database"
	}
	return u.Redacted()
}

func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func nullMS(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	v := t.UnixMilli()
	return &v
}

func fromMS(n *int64) time.Time {
	if n == nil {
		return time.Time{}
	}
	return time.UnixMilli(*n).UTC()
}

func nullStr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
