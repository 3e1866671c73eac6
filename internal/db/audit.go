package db

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/store/sqlq"
)

// OpenReadOnly opens an existing database for reading only, without
// migrating it or taking any write lock: for verifying and exporting the
// audit trail while the server runs, or from a copy.
func OpenReadOnly(path string) (*DB, error) {
	if path == "" || strings.Contains(path, ":memory:") {
		return nil, fmt.Errorf("db: a database file path is required")
	}
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("db: open %s: %w", path, err)
	}
	q := url.Values{}
	q.Set("mode", "ro")
	q.Set("_busy_timeout", "10000")
	q.Set("_txlock", "deferred")
	sqldb, err := sql.Open("sqlite3", fileURI(path, q))
	if err != nil {
		return nil, fmt.Errorf("db: open %s: %w", path, err)
	}
	sqldb.SetMaxOpenConns(4)
	d := &DB{sql: sqldb, path: path, now: time.Now, writing: make(chan struct{}, 1), batchLimit: maxBatch}
	if err := sqldb.QueryRow(`SELECT value FROM meta WHERE key = 'identity'`).Scan(&d.identity); err != nil {
		sqldb.Close()
		return nil, fmt.Errorf("db: %s is not a Countersign database: %w", path, err)
	}
	return d, nil
}

// readSnapshot runs fn on one connection inside a deferred read
// transaction: fn sees one consistent state of the database while writers
// go on (WAL), and no write lock is taken.
func (d *DB) readSnapshot(ctx context.Context, fn func(q querier) error) (err error) {
	conn, err := d.sql.Conn(ctx)
	if err != nil {
		return classify(fmt.Errorf("db: connect: %w", err))
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `BEGIN DEFERRED`); err != nil {
		return classify(fmt.Errorf("db: begin read: %w", err))
	}
	defer func() {
		if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), `ROLLBACK`); rerr != nil {
			// Never hand a connection that may still be inside a
			// transaction back to the pool.
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}()
	return fn(conn)
}

// AuditHead returns the sequence number and hash of the newest audit entry
// (0 and the genesis hash when there is none).
func (d *DB) AuditHead(ctx context.Context) (int64, string, error) {
	return sqlq.AuditHead(ctx, shared{d.sql})
}

// Checkpoint signs the current head of the audit trail and stores the
// checkpoint, unless the newest checkpoint already covers the head, in
// which case that one is returned. The head is read and the checkpoint
// written in one write transaction. An empty trail is audit.ErrNoCheckpoint.
func (d *DB) Checkpoint(ctx context.Context, signer *audit.Signer) (audit.Checkpoint, error) {
	var out audit.Checkpoint
	err := d.update(ctx, func(ctx context.Context, tx *writeTx) error {
		if err := d.checkIdentity(ctx, tx); err != nil {
			return err
		}
		var err error
		out, err = sqlq.SignCheckpoint(ctx, shared{tx}, signer, d.now())
		return err
	})
	return out, err
}

// LatestCheckpoint returns the newest signed checkpoint.
func (d *DB) LatestCheckpoint(ctx context.Context) (audit.Checkpoint, error) {
	return sqlq.LatestCheckpoint(ctx, shared{d.sql})
}

// VerifyChain recomputes the whole audit chain in one read snapshot, and
// checks every stored checkpoint's signature and head. Damage is reported
// in the result; the error is for failing to read the database at all.
func (d *DB) VerifyChain(ctx context.Context) (audit.VerifyResult, error) {
	return d.Verify(ctx, audit.VerifyOptions{})
}

// Verify is VerifyChain with checkpoints kept outside the database (which
// expose a database replaced by an older copy) and, optionally, the only
// key ids that checkpoints may be signed with.
func (d *DB) Verify(ctx context.Context, opts audit.VerifyOptions) (audit.VerifyResult, error) {
	var res audit.VerifyResult
	err := d.readSnapshot(ctx, func(q querier) error {
		var err error
		res, err = audit.VerifySnapshot(ctx, trailSnapshot{q}, opts)
		return err
	})
	if err != nil {
		return audit.VerifyResult{}, err
	}
	return res, nil
}

// ExportAudit streams the audit trail to w from one read snapshot, row by
// row, in constant memory, in the formats audit.WriteExport writes.
func (d *DB) ExportAudit(ctx context.Context, w io.Writer, opt audit.ExportOptions) (audit.ExportResult, error) {
	if opt.Format != "jsonl" && opt.Format != "csv" {
		return audit.ExportResult{}, audit.ErrFormat
	}
	var res audit.ExportResult
	err := d.readSnapshot(ctx, func(q querier) error {
		var err error
		res, err = audit.WriteExport(ctx, w, trailSnapshot{q}, opt, d.identity, d.now())
		return err
	})
	return res, err
}

// trailSnapshot reads the audit trail from one read snapshot
// (audit.Snapshot). A database from before checkpoints existed, opened
// read-only and so not migrated, has no checkpoints table and no
// checkpoints.
type trailSnapshot struct{ q querier }

func (s trailSnapshot) Range(ctx context.Context, since, until time.Time) (int64, int64, error) {
	return sqlq.AuditRange(ctx, shared(s), since, until)
}

func (s trailSnapshot) Hash(ctx context.Context, seq int64) (string, error) {
	return sqlq.AuditHash(ctx, shared(s), seq)
}

func (s trailSnapshot) Entries(ctx context.Context, from, to int64, fn func(*audit.Entry, []byte) error) error {
	return sqlq.Trail{Q: shared(s)}.Entries(ctx, from, to, fn)
}

func (s trailSnapshot) Checkpoints(ctx context.Context, from, to int64) ([]audit.Checkpoint, error) {
	var n int
	if err := s.q.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'checkpoints'`).Scan(&n); err != nil {
		return nil, classify(fmt.Errorf("db: read schema: %w", err))
	}
	if n == 0 {
		return nil, nil
	}
	return sqlq.Checkpoints(ctx, shared(s), from, to)
}
