package sqlq

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
)

// AuditHead returns the sequence number and hash of the newest audit entry
// (0 and the genesis hash when there is none).
func AuditHead(ctx context.Context, q Querier) (int64, string, error) {
	var seq int64
	var hash string
	err := q.QueryRow(ctx, `SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1`).Scan(&seq, &hash)
	if errors.Is(err, ErrNoRows) {
		return 0, audit.GenesisHash, nil
	}
	if err != nil {
		return 0, "", fmt.Errorf("store: read audit head: %w", err)
	}
	return seq, hash, nil
}

// AuditHash returns the hash of audit entry seq, or an error wrapping
// ErrNoRows when there is none.
func AuditHash(ctx context.Context, q Querier, seq int64) (string, error) {
	var h string
	if err := q.QueryRow(ctx, `SELECT hash FROM audit WHERE seq = ?`, seq).Scan(&h); err != nil {
		return "", fmt.Errorf("store: read audit entry %d: %w", seq, err)
	}
	return h, nil
}

// CheckpointColumns are a checkpoint row's columns, in the order the
// checkpoint reads scan them.
const CheckpointColumns = `seq, head, time, kid, public_key, signature`

func scanCheckpoint(r Row) (audit.Checkpoint, error) {
	var c audit.Checkpoint
	err := r.Scan(&c.Seq, &c.Head, &c.Time, &c.KID, &c.PublicKey, &c.Signature)
	if errors.Is(err, ErrNoRows) {
		return c, audit.ErrNoCheckpoint
	}
	if err != nil {
		return c, fmt.Errorf("store: read checkpoint: %w", err)
	}
	return c, nil
}

// LatestCheckpoint returns the newest signed checkpoint, or
// audit.ErrNoCheckpoint.
func LatestCheckpoint(ctx context.Context, q Querier) (audit.Checkpoint, error) {
	return scanCheckpoint(q.QueryRow(ctx, `SELECT `+CheckpointColumns+` FROM checkpoints ORDER BY seq DESC LIMIT 1`))
}

// SignCheckpoint signs the head of the audit trail and stores the
// checkpoint, unless the newest checkpoint already covers the head, in
// which case that one is returned. q must be a write transaction that
// holds the engine's lock on the chain head. An empty trail is
// audit.ErrNoCheckpoint.
func SignCheckpoint(ctx context.Context, q Querier, signer *audit.Signer, now time.Time) (audit.Checkpoint, error) {
	seq, head, err := AuditHead(ctx, q)
	if err != nil {
		return audit.Checkpoint{}, err
	}
	if seq == 0 {
		return audit.Checkpoint{}, audit.ErrNoCheckpoint
	}
	latest, err := LatestCheckpoint(ctx, q)
	if err == nil && latest.Seq == seq {
		return latest, nil
	}
	if err != nil && !errors.Is(err, audit.ErrNoCheckpoint) {
		return audit.Checkpoint{}, err
	}
	c, err := signer.Sign(seq, head, now)
	if err != nil {
		return audit.Checkpoint{}, err
	}
	if _, err := q.Exec(ctx, `INSERT INTO checkpoints (`+CheckpointColumns+`) VALUES (?,?,?,?,?,?)`,
		c.Seq, c.Head, c.Time, c.KID, c.PublicKey, c.Signature); err != nil {
		return audit.Checkpoint{}, fmt.Errorf("store: store checkpoint: %w", err)
	}
	return c, nil
}

// Checkpoints lists the checkpoints covering entries from..to, oldest
// first.
func Checkpoints(ctx context.Context, q Querier, from, to int64) ([]audit.Checkpoint, error) {
	rows, err := q.Query(ctx, `SELECT `+CheckpointColumns+` FROM checkpoints WHERE seq BETWEEN ? AND ? ORDER BY seq`, from, to)
	if err != nil {
		return nil, fmt.Errorf("store: read checkpoints: %w", err)
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
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: read checkpoints: %w", err)
	}
	return out, nil
}

// EntryColumns are an audit row's columns, in the order ScanEntry reads
// them.
const EntryColumns = `seq, time, kind, call_id, principal, channel, details, prev_hash, hash`

// ScanEntry reads an audit row; details are returned as stored, not
// parsed.
func ScanEntry(r Row) (*audit.Entry, []byte, error) {
	var e audit.Entry
	var details []byte
	if err := r.Scan(&e.Seq, &e.Time, &e.Kind, &e.CallID, &e.Principal, &e.Channel, &details, &e.PrevHash, &e.Hash); err != nil {
		return nil, nil, fmt.Errorf("store: scan audit entry: %w", err)
	}
	return &e, details, nil
}

// AuditRange turns a time window into the contiguous run of entries to
// export: from the first entry (in time order) at or after since to the
// last entry before until. from is 0 when the trail is empty or nothing
// matches.
func AuditRange(ctx context.Context, q Querier, since, until time.Time) (from, to int64, err error) {
	scan := func(query string, args ...any) (int64, error) {
		var n sql.NullInt64
		err := q.QueryRow(ctx, query, args...).Scan(&n)
		if errors.Is(err, ErrNoRows) {
			return 0, nil
		}
		if err != nil {
			return 0, fmt.Errorf("store: audit range: %w", err)
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

// Trail reads the audit trail through Q (audit.Snapshot); Q should be one
// read snapshot.
type Trail struct{ Q Querier }

// Range is AuditRange.
func (s Trail) Range(ctx context.Context, since, until time.Time) (int64, int64, error) {
	return AuditRange(ctx, s.Q, since, until)
}

// Hash is AuditHash.
func (s Trail) Hash(ctx context.Context, seq int64) (string, error) {
	return AuditHash(ctx, s.Q, seq)
}

// Checkpoints is Checkpoints.
func (s Trail) Checkpoints(ctx context.Context, from, to int64) ([]audit.Checkpoint, error) {
	return Checkpoints(ctx, s.Q, from, to)
}

// Entries calls fn with each entry from..to in order.
func (s Trail) Entries(ctx context.Context, from, to int64, fn func(*audit.Entry, []byte) error) error {
	rows, err := s.Q.Query(ctx, `SELECT `+EntryColumns+` FROM audit WHERE seq BETWEEN ? AND ? ORDER BY seq`, from, to)
	if err != nil {
		return fmt.Errorf("store: read audit: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		e, details, err := ScanEntry(rows)
		if err != nil {
			return err
		}
		if err := fn(e, details); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("store: read audit: %w", err)
	}
	return nil
}

// Timeline returns every audit entry about one call, oldest first, with
// details parsed. A call that does not exist is queue.ErrNotFound.
func Timeline(ctx context.Context, q Querier, callID string) ([]audit.Entry, error) {
	if callID == "" {
		return nil, queue.ErrNotFound
	}
	rows, err := q.Query(ctx, `SELECT `+EntryColumns+` FROM audit WHERE call_id = ? ORDER BY seq`, callID)
	if err != nil {
		return nil, fmt.Errorf("store: timeline of %s: %w", callID, err)
	}
	defer rows.Close()
	var out []audit.Entry
	for rows.Next() {
		e, details, err := ScanEntry(rows)
		if err != nil {
			return nil, err
		}
		if e.Details, err = audit.ParseDetails(details); err != nil {
			return nil, fmt.Errorf("store: audit entry %d: %w", e.Seq, err)
		}
		out = append(out, *e)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: timeline of %s: %w", callID, err)
	}
	if len(out) == 0 {
		var n int
		if err := q.QueryRow(ctx, `SELECT COUNT(*) FROM calls WHERE id = ?`, callID).Scan(&n); err != nil {
			return nil, fmt.Errorf("store: timeline of %s: %w", callID, err)
		}
		if n == 0 {
			return nil, queue.ErrNotFound
		}
	}
	return out, nil
}
