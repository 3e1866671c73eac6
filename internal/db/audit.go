package db

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/audit"
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
	return auditHead(ctx, d.sql)
}

func auditHead(ctx context.Context, q querier) (int64, string, error) {
	var seq int64
	var hash string
	err := q.QueryRowContext(ctx, `SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1`).Scan(&seq, &hash)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, audit.GenesisHash, nil
	}
	if err != nil {
		return 0, "", classify(fmt.Errorf("db: read audit head: %w", err))
	}
	return seq, hash, nil
}

const checkpointColumns = `seq, head, time, kid, public_key, signature`

func scanCheckpoint(r rowScanner) (audit.Checkpoint, error) {
	var c audit.Checkpoint
	err := r.Scan(&c.Seq, &c.Head, &c.Time, &c.KID, &c.PublicKey, &c.Signature)
	if errors.Is(err, sql.ErrNoRows) {
		return c, audit.ErrNoCheckpoint
	}
	if err != nil {
		return c, classify(fmt.Errorf("db: read checkpoint: %w", err))
	}
	return c, nil
}

// Checkpoint signs the current head of the audit trail and stores the
// checkpoint, unless the newest checkpoint already covers the head, in
// which case that one is returned. The head is read and the checkpoint
// written in one write transaction. An empty trail is audit.ErrNoCheckpoint.
func (d *DB) Checkpoint(ctx context.Context, signer *audit.Signer) (audit.Checkpoint, error) {
	var out audit.Checkpoint
	err := d.update(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if err := d.checkIdentity(ctx, tx); err != nil {
			return err
		}
		seq, head, err := auditHead(ctx, tx)
		if err != nil {
			return err
		}
		if seq == 0 {
			return audit.ErrNoCheckpoint
		}
		latest, err := scanCheckpoint(tx.QueryRowContext(ctx, `SELECT `+checkpointColumns+` FROM checkpoints ORDER BY seq DESC LIMIT 1`))
		if err == nil && latest.Seq == seq {
			out = latest
			return nil
		}
		if err != nil && !errors.Is(err, audit.ErrNoCheckpoint) {
			return err
		}
		c, err := signer.Sign(seq, head, d.now())
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO checkpoints (`+checkpointColumns+`) VALUES (?,?,?,?,?,?)`,
			c.Seq, c.Head, c.Time, c.KID, c.PublicKey, c.Signature); err != nil {
			return fmt.Errorf("db: store checkpoint: %w", err)
		}
		out = c
		return nil
	})
	return out, err
}

// LatestCheckpoint returns the newest signed checkpoint.
func (d *DB) LatestCheckpoint(ctx context.Context) (audit.Checkpoint, error) {
	return scanCheckpoint(d.sql.QueryRowContext(ctx, `SELECT `+checkpointColumns+` FROM checkpoints ORDER BY seq DESC LIMIT 1`))
}

// checkpointsIn lists the checkpoints covering entries from..to, oldest
// first. A database from before checkpoints existed has none.
func checkpointsIn(ctx context.Context, q querier, from, to int64) ([]audit.Checkpoint, error) {
	var n int
	if err := q.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'checkpoints'`).Scan(&n); err != nil {
		return nil, classify(fmt.Errorf("db: read schema: %w", err))
	}
	if n == 0 {
		return nil, nil
	}
	rows, err := q.QueryContext(ctx, `SELECT `+checkpointColumns+` FROM checkpoints WHERE seq BETWEEN ? AND ? ORDER BY seq`, from, to)
	if err != nil {
		return nil, classify(fmt.Errorf("db: read checkpoints: %w", err))
	}
	defer rows.Close()
	var out []audit.Checkpoint
	for rows.Next() {
		c, err := scanCheckpoint(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
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

const entryColumns = `seq, time, kind, call_id, principal, channel, details, prev_hash, hash`

// scanEntry reads an audit row; details are returned as stored, not parsed.
func scanEntry(r rowScanner) (*audit.Entry, []byte, error) {
	var e audit.Entry
	var details []byte
	if err := r.Scan(&e.Seq, &e.Time, &e.Kind, &e.CallID, &e.Principal, &e.Channel, &details, &e.PrevHash, &e.Hash); err != nil {
		return nil, nil, classify(fmt.Errorf("db: scan audit entry: %w", err))
	}
	return &e, details, nil
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
// (audit.Snapshot).
type trailSnapshot struct{ q querier }

func (s trailSnapshot) Range(ctx context.Context, since, until time.Time) (int64, int64, error) {
	return auditRange(ctx, s.q, since, until)
}

func (s trailSnapshot) Hash(ctx context.Context, seq int64) (string, error) {
	var h string
	if err := s.q.QueryRowContext(ctx, `SELECT hash FROM audit WHERE seq = ?`, seq).Scan(&h); err != nil {
		return "", classify(fmt.Errorf("db: read audit entry %d: %w", seq, err))
	}
	return h, nil
}

func (s trailSnapshot) Checkpoints(ctx context.Context, from, to int64) ([]audit.Checkpoint, error) {
	return checkpointsIn(ctx, s.q, from, to)
}

func (s trailSnapshot) Entries(ctx context.Context, from, to int64, fn func(*audit.Entry, []byte) error) error {
	rows, err := s.q.QueryContext(ctx, `SELECT `+entryColumns+` FROM audit WHERE seq BETWEEN ? AND ? ORDER BY seq`, from, to)
	if err != nil {
		return classify(fmt.Errorf("db: read audit: %w", err))
	}
	defer rows.Close()
	for rows.Next() {
		e, details, err := scanEntry(rows)
		if err != nil {
			return err
		}
		if err := fn(e, details); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return classify(fmt.Errorf("db: read audit: %w", err))
	}
	return nil
}

// auditRange turns a time window into the contiguous run of entries to
// export: from the first entry (in time order) at or after since to the last
// entry before until. from is 0 when the trail is empty or nothing matches.
func auditRange(ctx context.Context, q querier, since, until time.Time) (from, to int64, err error) {
	scan := func(query string, args ...any) (int64, error) {
		var n sql.NullInt64
		err := q.QueryRowContext(ctx, query, args...).Scan(&n)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, nil
		}
		if err != nil {
			return 0, classify(fmt.Errorf("db: audit range: %w", err))
		}
		return n.Int64, nil
	}
	if since.IsZero() {
		from, err = scan(`SELECT MIN(seq) FROM audit`)
	} else {
		from, err = scan(`SELECT seq FROM audit WHERE time >= ? ORDER BY time, seq LIMIT 1`, audit.FormatTime(since))
	}
	if err != nil || from == 0 {
		return 0, 0, err
	}
	if until.IsZero() {
		to, err = scan(`SELECT MAX(seq) FROM audit`)
	} else {
		to, err = scan(`SELECT seq FROM audit WHERE time < ? ORDER BY time DESC, seq DESC LIMIT 1`, audit.FormatTime(until))
	}
	if err != nil || to < from {
		return 0, 0, err
	}
	return from, to, nil
}
