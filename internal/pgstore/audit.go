package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
)

// readSnapshot runs fn inside a REPEATABLE READ, READ ONLY transaction: fn
// sees one consistent state of the database while writers go on, and takes
// no lock that a writer waits for.
func (d *DB) readSnapshot(ctx context.Context, fn func(q querier) error) error {
	tx, err := d.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return classify(fmt.Errorf("pgstore: begin read: %w", err))
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	return fn(tx)
}

// AuditHead returns the sequence number and hash of the newest audit entry
// (0 and the genesis hash when there is none).
func (d *DB) AuditHead(ctx context.Context) (int64, string, error) {
	return auditHead(ctx, d.pool)
}

func auditHead(ctx context.Context, q querier) (int64, string, error) {
	var seq int64
	var hash string
	err := q.QueryRow(ctx, `SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1`).Scan(&seq, &hash)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, audit.GenesisHash, nil
	}
	if err != nil {
		return 0, "", classify(fmt.Errorf("pgstore: read audit head: %w", err))
	}
	return seq, hash, nil
}

const checkpointColumns = `seq, head, time, kid, public_key, signature`

func scanCheckpoint(r rowScanner) (audit.Checkpoint, error) {
	var c audit.Checkpoint
	err := r.Scan(&c.Seq, &c.Head, &c.Time, &c.KID, &c.PublicKey, &c.Signature)
	if errors.Is(err, pgx.ErrNoRows) {
		return c, audit.ErrNoCheckpoint
	}
	if err != nil {
		return c, classify(fmt.Errorf("pgstore: read checkpoint: %w", err))
	}
	return c, nil
}

// Checkpoint signs the current head of the audit trail and stores the
// checkpoint, unless the newest checkpoint already covers the head, in
// which case that one is returned. The head is read and the checkpoint
// written in one write transaction, which holds the chain head lock. An
// empty trail is audit.ErrNoCheckpoint.
func (d *DB) Checkpoint(ctx context.Context, signer *audit.Signer) (audit.Checkpoint, error) {
	var out audit.Checkpoint
	err := d.update(ctx, func(t *txn) error {
		seq, head, err := auditHead(ctx, t.tx)
		if err != nil {
			return err
		}
		if seq == 0 {
			return audit.ErrNoCheckpoint
		}
		latest, err := scanCheckpoint(t.tx.QueryRow(ctx, `SELECT `+checkpointColumns+` FROM checkpoints ORDER BY seq DESC LIMIT 1`))
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
		if _, err := t.tx.Exec(ctx, `INSERT INTO checkpoints (`+checkpointColumns+`) VALUES ($1,$2,$3,$4,$5,$6)`,
			c.Seq, c.Head, c.Time, c.KID, c.PublicKey, c.Signature); err != nil {
			return fmt.Errorf("pgstore: store checkpoint: %w", err)
		}
		out = c
		return nil
	})
	return out, err
}

// LatestCheckpoint returns the newest signed checkpoint.
func (d *DB) LatestCheckpoint(ctx context.Context) (audit.Checkpoint, error) {
	return scanCheckpoint(d.pool.QueryRow(ctx, `SELECT `+checkpointColumns+` FROM checkpoints ORDER BY seq DESC LIMIT 1`))
}

func checkpointsIn(ctx context.Context, q querier, from, to int64) ([]audit.Checkpoint, error) {
	rows, err := q.Query(ctx, `SELECT `+checkpointColumns+` FROM checkpoints WHERE seq BETWEEN $1 AND $2 ORDER BY seq`, from, to)
	if err != nil {
		return nil, classify(fmt.Errorf("pgstore: read checkpoints: %w", err))
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
	return out, classify(rows.Err())
}

// VerifyChain recomputes the whole audit chain in one read snapshot, and
// checks every stored checkpoint's signature and head.
func (d *DB) VerifyChain(ctx context.Context) (audit.VerifyResult, error) {
	return d.Verify(ctx, audit.VerifyOptions{})
}

// Verify is VerifyChain with checkpoints kept outside the database and,
// optionally, the only key ids that checkpoints may be signed with.
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
	var details string
	if err := r.Scan(&e.Seq, &e.Time, &e.Kind, &e.CallID, &e.Principal, &e.Channel, &details, &e.PrevHash, &e.Hash); err != nil {
		return nil, nil, classify(fmt.Errorf("pgstore: scan audit entry: %w", err))
	}
	return &e, []byte(details), nil
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
	if err := s.q.QueryRow(ctx, `SELECT hash FROM audit WHERE seq = $1`, seq).Scan(&h); err != nil {
		return "", classify(fmt.Errorf("pgstore: read audit entry %d: %w", seq, err))
	}
	return h, nil
}

func (s trailSnapshot) Checkpoints(ctx context.Context, from, to int64) ([]audit.Checkpoint, error) {
	return checkpointsIn(ctx, s.q, from, to)
}

func (s trailSnapshot) Entries(ctx context.Context, from, to int64, fn func(*audit.Entry, []byte) error) error {
	rows, err := s.q.Query(ctx, `SELECT `+entryColumns+` FROM audit WHERE seq BETWEEN $1 AND $2 ORDER BY seq`, from, to)
	if err != nil {
		return classify(fmt.Errorf("pgstore: read audit: %w", err))
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
		return classify(fmt.Errorf("pgstore: read audit: %w", err))
	}
	return nil
}

// auditRange turns a time window into the contiguous run of entries to
// export (see internal/db).
func auditRange(ctx context.Context, q querier, since, until time.Time) (from, to int64, err error) {
	scan := func(query string, args ...any) (int64, error) {
		var n *int64
		err := q.QueryRow(ctx, query, args...).Scan(&n)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && n == nil) {
			return 0, nil
		}
		if err != nil {
			return 0, classify(fmt.Errorf("pgstore: audit range: %w", err))
		}
		return *n, nil
	}
	if since.IsZero() {
		from, err = scan(`SELECT MIN(seq) FROM audit`)
	} else {
		from, err = scan(`SELECT seq FROM audit WHERE time >= $1 ORDER BY time, seq LIMIT 1`, audit.FormatTime(since))
	}
	if err != nil || from == 0 {
		return 0, 0, err
	}
	if until.IsZero() {
		to, err = scan(`SELECT MAX(seq) FROM audit`)
	} else {
		to, err = scan(`SELECT seq FROM audit WHERE time < $1 ORDER BY time DESC, seq DESC LIMIT 1`, audit.FormatTime(until))
	}
	if err != nil || to < from {
		return 0, 0, err
	}
	return from, to, nil
}

// Timeline returns every audit entry about one call, oldest first, with
// details parsed. A call that does not exist is queue.ErrNotFound.
func (d *DB) Timeline(ctx context.Context, callID string) ([]audit.Entry, error) {
	if callID == "" {
		return nil, queue.ErrNotFound
	}
	rows, err := d.pool.Query(ctx, `SELECT `+entryColumns+` FROM audit WHERE call_id = $1 ORDER BY seq`, callID)
	if err != nil {
		return nil, classify(fmt.Errorf("pgstore: timeline of %s: %w", callID, err))
	}
	defer rows.Close()
	var out []audit.Entry
	for rows.Next() {
		e, details, err := scanEntry(rows)
		if err != nil {
			return nil, err
		}
		if e.Details, err = audit.ParseDetails(details); err != nil {
			return nil, fmt.Errorf("pgstore: audit entry %d: %w", e.Seq, err)
		}
		out = append(out, *e)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, classify(fmt.Errorf("pgstore: timeline of %s: %w", callID, err))
	}
	if len(out) == 0 {
		var n int
		if err := d.pool.QueryRow(ctx, `SELECT COUNT(*) FROM calls WHERE id = $1`, callID).Scan(&n); err != nil {
			return nil, classify(fmt.Errorf("pgstore: timeline of %s: %w", callID, err))
		}
		if n == 0 {
			return nil, queue.ErrNotFound
		}
	}
	return out, nil
}
