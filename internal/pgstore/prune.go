package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/retention"
	"github.com/countersign/countersign/internal/store/sqlq"
)

// lockPrune is the session-level advisory lock a prune holds from its plan
// to its commit, so that two prunes (from two replicas' hosts, or two
// runs of a schedule) do not both write an archive of the same entries.
const lockPrune int64 = 0x6373_0000_0000_0004

var _ retention.Store = (*DB)(nil)

// LockPrune takes the prune lock on a connection of its own, or returns
// retention.ErrPruneUnderWay when another session holds it. The lock is
// released by unlock, or by PostgreSQL when the session ends (a prune
// killed halfway holds nothing).
func (d *DB) LockPrune(ctx context.Context) (unlock func(), err error) {
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, classify(fmt.Errorf("pgstore: prune lock: %w", err))
	}
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, lockPrune).Scan(&ok); err != nil {
		conn.Release()
		return nil, classify(fmt.Errorf("pgstore: prune lock: %w", err))
	}
	if !ok {
		conn.Release()
		return nil, retention.ErrPruneUnderWay
	}
	return func() {
		if _, err := conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, lockPrune); err != nil {
			// The session may still hold it: close the connection, which
			// ends the session and its locks.
			conn.Conn().Close(context.WithoutCancel(ctx))
		}
		conn.Release()
	}, nil
}

// Prune implements retention.Store in one write transaction, which holds
// the chain head lock, so no replica appends meanwhile: the pruned entry,
// the delete (which the trigger allows only while the transaction holds
// the prune permit row) and the checkpoint at the pruned entry. A replica
// reading the trail meanwhile sees it whole (its snapshot predates the
// commit) or pruned and vouched for, never half of it.
func (d *DB) Prune(ctx context.Context, r retention.Removal) (*audit.Entry, error) {
	if r.Signer == nil {
		return nil, errors.New("pgstore: prune: no key to sign the checkpoint with")
	}
	var out *audit.Entry
	err := d.update(ctx, func(t *txn) error {
		var from, head *int64
		if err := t.tx.QueryRow(ctx, `SELECT MIN(seq), MAX(seq) FROM audit`).Scan(&from, &head); err != nil {
			return fmt.Errorf("pgstore: prune: %w", err)
		}
		if from == nil || r.ToSeq < *from || r.ToSeq >= *head {
			return retention.ErrNothingToPrune
		}
		if *from != r.FromSeq {
			return retention.ErrPruneMoved
		}
		var last string
		if err := t.tx.QueryRow(ctx, `SELECT hash FROM audit WHERE seq = $1`, r.ToSeq).Scan(&last); err != nil {
			return fmt.Errorf("pgstore: prune: entry %d: %w", r.ToSeq, err)
		}
		var n int
		if err := t.tx.QueryRow(ctx, `SELECT COUNT(*) FROM checkpoints WHERE seq = $1 AND head = $2`, r.ToSeq, last).Scan(&n); err != nil {
			return fmt.Errorf("pgstore: prune: %w", err)
		}
		if n == 0 {
			return retention.ErrPruneUnanchored
		}
		pd := map[string]any{}
		for k, v := range r.Details {
			pd[k] = v
		}
		pd["from_seq"], pd["to_seq"], pd["count"], pd["last_hash"] = *from, r.ToSeq, r.ToSeq-*from+1, last
		e := &audit.Entry{Time: audit.FormatTime(d.now()), Kind: audit.KindPruned, Principal: r.By, Channel: audit.ChannelCLI, Details: pd}
		if err := t.append(e); err != nil {
			return err
		}
		for _, q := range []struct {
			sql  string
			args []any
		}{{`INSERT INTO audit_prune_permit (id) VALUES (1)`, nil}, {`DELETE FROM audit WHERE seq <= $1`, []any{r.ToSeq}}, {`DELETE FROM audit_prune_permit`, nil}} {
			if _, err := t.tx.Exec(ctx, q.sql, q.args...); err != nil {
				return fmt.Errorf("pgstore: prune: %w", err)
			}
		}
		if _, err := sqlq.SignCheckpoint(ctx, shared{t.tx}, r.Signer, d.now()); err != nil {
			return fmt.Errorf("pgstore: prune: sign the checkpoint: %w", err)
		}
		out = e
		return nil
	})
	return out, err
}

// Compact runs VACUUM (ANALYZE) on the audit table and reports its size
// (with its indexes) before and after, and after, in FreePages, about how
// many of the table's pages' worth hold no live entry: the room VACUUM
// made reusable by new entries. Plain VACUUM gives back to the file
// system only empty pages at the end of the table, so the size rarely
// falls; it takes no lock that blocks reads or writes. VACUUM FULL would
// shrink the files but locks the table, and so every replica's writes,
// while it rewrites it: that one is left to the operator (docs/audit.md).
func (d *DB) Compact(ctx context.Context) (before, after retention.CompactSize, err error) {
	if before, err = d.auditSize(ctx, false); err != nil {
		return
	}
	if _, err = d.pool.Exec(ctx, `VACUUM (ANALYZE) audit`); err != nil {
		err = classify(fmt.Errorf("pgstore: vacuum audit: %w", err))
		return
	}
	after, err = d.auditSize(ctx, true)
	return
}

// auditSize is the audit table's size with its indexes; with free, also
// the room in its heap that no live entry takes, estimated from the live
// rows' sizes (each row's own size and its 4-byte line pointer, and each
// page's 24-byte header), in pages. It reads the whole table.
func (d *DB) auditSize(ctx context.Context, free bool) (retention.CompactSize, error) {
	var s retention.CompactSize
	var block int64
	err := d.pool.QueryRow(ctx, `SELECT pg_total_relation_size('audit'), current_setting('block_size')::bigint`).Scan(&s.Bytes, &block)
	if err != nil {
		return s, classify(fmt.Errorf("pgstore: audit table size: %w", err))
	}
	s.Pages = s.Bytes / block
	if !free {
		return s, nil
	}
	var heap, live int64
	err = d.pool.QueryRow(ctx, `SELECT pg_relation_size('audit'), COALESCE(SUM(pg_column_size(a.*) + 4), 0) FROM audit a`).Scan(&heap, &live)
	if err != nil {
		return s, classify(fmt.Errorf("pgstore: audit table's live rows: %w", err))
	}
	if unused := heap - live - heap/block*24; unused > 0 {
		s.FreePages = unused / block
	}
	return s, nil
}

// OldestOpenEntry implements retention.Store.
func (d *DB) OldestOpenEntry(ctx context.Context, now time.Time) (int64, error) {
	var seq *int64
	err := d.pool.QueryRow(ctx, `SELECT MIN(a.seq) FROM audit a WHERE a.call_id IN (
		SELECT id FROM calls WHERE status = 'pending'
		UNION ALL SELECT id FROM calls WHERE status = 'approved' AND grant_expires_at > $1
		UNION ALL SELECT id FROM calls WHERE status = 'redeemed' AND outcome_status IS NULL
		UNION ALL SELECT c.id FROM calls c WHERE `+unresolvedWhere+`)`, ms(now)).Scan(&seq)
	if err != nil {
		return 0, classify(fmt.Errorf("pgstore: oldest open call: %w", err))
	}
	return orZero(seq), nil
}

// FirstEntryFrom implements retention.Store.
func (d *DB) FirstEntryFrom(ctx context.Context, t time.Time) (int64, error) {
	var seq *int64
	if err := d.pool.QueryRow(ctx, `SELECT MIN(seq) FROM audit WHERE time >= $1`, audit.FormatTime(t)).Scan(&seq); err != nil {
		return 0, classify(fmt.Errorf("pgstore: audit entry at %s: %w", audit.FormatTime(t), err))
	}
	return orZero(seq), nil
}

// OldestEntry implements retention.Store.
func (d *DB) OldestEntry(ctx context.Context) (int64, error) {
	var seq *int64
	if err := d.pool.QueryRow(ctx, `SELECT MIN(seq) FROM audit`).Scan(&seq); err != nil {
		return 0, classify(fmt.Errorf("pgstore: oldest audit entry: %w", err))
	}
	return orZero(seq), nil
}

// CheckpointAtOrBefore implements retention.Store.
func (d *DB) CheckpointAtOrBefore(ctx context.Context, seq int64) (audit.Checkpoint, error) {
	cps, err := sqlq.Checkpoints(ctx, shared{d.pool}, 1, seq)
	if err != nil {
		return audit.Checkpoint{}, err
	}
	if len(cps) == 0 {
		return audit.Checkpoint{}, audit.ErrNoCheckpoint
	}
	return cps[len(cps)-1], nil
}

// OldestKeptForTool implements retention.Store.
func (d *DB) OldestKeptForTool(ctx context.Context, tool string, since time.Time) (int64, error) {
	var seq *int64
	err := d.pool.QueryRow(ctx, `SELECT MIN(a.seq) FROM audit a WHERE a.call_id IN (
		SELECT id FROM calls WHERE tool = $1 AND created_at >= $2)`, tool, ms(since)).Scan(&seq)
	if err != nil {
		return 0, classify(fmt.Errorf("pgstore: oldest call of %s kept: %w", tool, err))
	}
	return orZero(seq), nil
}

// PasskeyRegistration implements retention.Store.
func (d *DB) PasskeyRegistration(ctx context.Context, credentialID string) (int64, string, error) {
	var seq int64
	var hash string
	err := d.pool.QueryRow(ctx, `SELECT seq, hash FROM audit WHERE kind = $1 AND details::jsonb->>'credential_id' = $2
		ORDER BY seq DESC LIMIT 1`, audit.KindPasskeyAdded, credentialID).Scan(&seq, &hash)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, "", nil
	}
	if err != nil {
		return 0, "", classify(fmt.Errorf("pgstore: passkey registration: %w", err))
	}
	return seq, hash, nil
}

// LatestToolsDigest implements retention.Store.
func (d *DB) LatestToolsDigest(ctx context.Context) (string, error) {
	var digest *string
	err := d.pool.QueryRow(ctx, `SELECT details::jsonb->>'tools_digest' FROM audit WHERE kind = 'tools_loaded'
		ORDER BY seq DESC LIMIT 1`).Scan(&digest)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", classify(fmt.Errorf("pgstore: tools digest: %w", err))
	}
	if digest == nil {
		return "", nil
	}
	return *digest, nil
}

// AddHold implements retention.Store. The count and the insert run under
// the chain head lock, as every write does, so two replicas adding the
// thousandth hold at once add one.
func (d *DB) AddHold(ctx context.Context, kind, value, reason, by string) (retention.Hold, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return retention.Hold{}, err
	}
	h := retention.Hold{ID: "hold_" + hex.EncodeToString(b[:]), Kind: kind, Value: value, Reason: reason, By: by, CreatedAt: ms(d.now())}
	err := d.update(ctx, func(t *txn) error {
		var n, same int
		if err := t.tx.QueryRow(ctx, `SELECT COUNT(*), COUNT(*) FILTER (WHERE kind = $1 AND value = $2) FROM retention_holds`, kind, value).
			Scan(&n, &same); err != nil {
			return fmt.Errorf("pgstore: count holds: %w", err)
		}
		if n >= retention.MaxHolds {
			return retention.ErrTooManyHolds
		}
		if same > 0 {
			return retention.ErrHoldExists
		}
		if _, err := t.tx.Exec(ctx, `INSERT INTO retention_holds (id, kind, value, reason, created_by, created_at) VALUES ($1,$2,$3,$4,$5,$6)`,
			h.ID, h.Kind, h.Value, h.Reason, h.By, h.CreatedAt); err != nil {
			return fmt.Errorf("pgstore: add hold: %w", err)
		}
		return t.append(&audit.Entry{Time: audit.FormatTime(d.now()), Kind: audit.KindHoldAdded, Principal: by, Channel: audit.ChannelCLI,
			Details: map[string]any{"id": h.ID, kind: value, "reason": reason}})
	})
	return h, err
}

// RemoveHold implements retention.Store.
func (d *DB) RemoveHold(ctx context.Context, id, by string) error {
	return d.update(ctx, func(t *txn) error {
		var kind, value string
		err := t.tx.QueryRow(ctx, `DELETE FROM retention_holds WHERE id = $1 RETURNING kind, value`, id).Scan(&kind, &value)
		if errors.Is(err, pgx.ErrNoRows) {
			return retention.ErrNoSuchHold
		}
		if err != nil {
			return fmt.Errorf("pgstore: remove hold: %w", err)
		}
		return t.append(&audit.Entry{Time: audit.FormatTime(d.now()), Kind: audit.KindHoldRemoved, Principal: by, Channel: audit.ChannelCLI,
			Details: map[string]any{"id": id, kind: value}})
	})
}

// Holds implements retention.Store.
func (d *DB) Holds(ctx context.Context) ([]retention.Hold, error) {
	rows, err := d.pool.Query(ctx, `SELECT id, kind, value, reason, created_by, created_at FROM retention_holds ORDER BY created_at, id`)
	if err != nil {
		return nil, classify(fmt.Errorf("pgstore: list holds: %w", err))
	}
	defer rows.Close()
	var out []retention.Hold
	for rows.Next() {
		var h retention.Hold
		if err := rows.Scan(&h.ID, &h.Kind, &h.Value, &h.Reason, &h.By, &h.CreatedAt); err != nil {
			return nil, classify(fmt.Errorf("pgstore: list holds: %w", err))
		}
		out = append(out, h)
	}
	return out, classify(rows.Err())
}

// OldestHeldEntry implements retention.Store.
func (d *DB) OldestHeldEntry(ctx context.Context) (int64, error) {
	var seq *int64
	err := d.pool.QueryRow(ctx, `SELECT MIN(a.seq) FROM audit a WHERE a.call_id IN (
		SELECT c.id FROM calls c JOIN retention_holds h ON h.kind = 'tool' AND c.tool = h.value COLLATE "C"
		UNION ALL SELECT c.id FROM calls c JOIN retention_holds h ON h.kind = 'actor' AND c.actor = h.value COLLATE "C"
		UNION ALL SELECT value COLLATE "C" FROM retention_holds WHERE kind = 'call')`).Scan(&seq)
	if err != nil {
		return 0, classify(fmt.Errorf("pgstore: oldest held call: %w", err))
	}
	return orZero(seq), nil
}

func orZero(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}
