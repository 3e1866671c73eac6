package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/retention"
	"github.com/countersign/countersign/internal/store/sqlq"
)

// The errors of a prune (see retention.Store).
var (
	ErrNothingToPrune  = retention.ErrNothingToPrune
	ErrPruneUnanchored = retention.ErrPruneUnanchored
	ErrPruneMoved      = retention.ErrPruneMoved
)

var _ retention.Store = (*DB)(nil)

// Prune implements retention.Store: in one transaction, the pruned entry,
// the delete (which the trigger allows only while the transaction holds
// the permit row) and the checkpoint at the pruned entry.
func (d *DB) Prune(ctx context.Context, r retention.Removal) (*audit.Entry, error) {
	if r.Signer == nil {
		return nil, errors.New("db: prune: no key to sign the checkpoint with")
	}
	var out *audit.Entry
	err := d.update(ctx, func(ctx context.Context, tx *writeTx) error {
		if err := d.checkIdentity(ctx, tx); err != nil {
			return err
		}
		if err := d.needTxState(ctx, tx); err != nil {
			return err
		}
		var from sql.NullInt64
		if err := tx.QueryRowContext(ctx, `SELECT MIN(seq) FROM audit`).Scan(&from); err != nil {
			return fmt.Errorf("db: prune: %w", err)
		}
		if !from.Valid || r.ToSeq < from.Int64 || r.ToSeq >= d.txHead.seq {
			return ErrNothingToPrune
		}
		if from.Int64 != r.FromSeq {
			return ErrPruneMoved
		}
		var last string
		if err := tx.QueryRowContext(ctx, `SELECT hash FROM audit WHERE seq = ?`, r.ToSeq).Scan(&last); err != nil {
			return fmt.Errorf("db: prune: entry %d: %w", r.ToSeq, err)
		}
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM checkpoints WHERE seq = ? AND head = ?`, r.ToSeq, last).Scan(&n); err != nil {
			return fmt.Errorf("db: prune: %w", err)
		}
		if n == 0 {
			return ErrPruneUnanchored
		}
		e := &audit.Entry{Time: audit.FormatTime(d.now()), Kind: audit.KindPruned, Principal: r.By, Channel: audit.ChannelCLI,
			Details: prunedDetails(r, from.Int64, last)}
		if err := d.appendAudit(ctx, tx, e); err != nil {
			return err
		}
		for _, q := range []struct {
			sql  string
			args []any
		}{{`INSERT INTO audit_prune_permit (id) VALUES (1)`, nil}, {`DELETE FROM audit WHERE seq <= ?`, []any{r.ToSeq}}, {`DELETE FROM audit_prune_permit`, nil}} {
			if _, err := tx.ExecContext(ctx, q.sql, q.args...); err != nil {
				return fmt.Errorf("db: prune: %w", err)
			}
		}
		if _, err := sqlq.SignCheckpoint(ctx, shared{tx}, r.Signer, d.now()); err != nil {
			return fmt.Errorf("db: prune: sign the checkpoint: %w", err)
		}
		out = e
		return nil
	})
	return out, err
}

// prunedDetails is the pruned entry's details: r's, with the range, its
// count and the last removed entry's hash.
func prunedDetails(r retention.Removal, from int64, last string) map[string]any {
	pd := map[string]any{}
	for k, v := range r.Details {
		pd[k] = v
	}
	pd["from_seq"], pd["to_seq"], pd["count"], pd["last_hash"] = from, r.ToSeq, r.ToSeq-from+1, last
	return pd
}

// Compact rewrites the database file without its free pages (VACUUM) and
// reports its size before and after, in pages and bytes. It blocks every
// write while it runs.
func (d *DB) Compact(ctx context.Context) (before, after CompactSize, err error) {
	if before, err = d.size(ctx); err != nil {
		return
	}
	if _, err = d.sql.ExecContext(ctx, `VACUUM`); err != nil {
		err = fmt.Errorf("db: compact: %w", err)
		return
	}
	after, err = d.size(ctx)
	return
}

// CompactSize is a database file's size: its pages, the free ones among
// them, and bytes.
type CompactSize = retention.CompactSize

func (d *DB) size(ctx context.Context) (CompactSize, error) {
	var s CompactSize
	var pageSize int64
	for _, q := range []struct {
		sql string
		dst *int64
	}{{`PRAGMA page_count`, &s.Pages}, {`PRAGMA freelist_count`, &s.FreePages}, {`PRAGMA page_size`, &pageSize}} {
		if err := d.sql.QueryRowContext(ctx, q.sql).Scan(q.dst); err != nil {
			return s, fmt.Errorf("db: %s: %w", q.sql, err)
		}
	}
	s.Bytes = s.Pages * pageSize
	return s, nil
}

// OldestOpenEntry is the first audit entry of the oldest call still open:
// pending, approved with a grant still live at now, redeemed without an
// outcome, or with an outcome unknown and unresolved. Pruning stops before
// it (0 when no call is open).
func (d *DB) OldestOpenEntry(ctx context.Context, now time.Time) (int64, error) {
	var seq sql.NullInt64
	err := d.sql.QueryRowContext(ctx, `SELECT MIN(a.seq) FROM audit a WHERE a.call_id IN (
		SELECT id FROM calls WHERE status = 'pending'
		UNION ALL SELECT id FROM calls WHERE status = 'approved' AND grant_expires_at > ?
		UNION ALL SELECT id FROM calls WHERE status = 'redeemed' AND outcome_status IS NULL
		UNION ALL SELECT id FROM calls WHERE `+unresolvedWhere("")+`)`, ms(now)).Scan(&seq)
	if err != nil {
		return 0, fmt.Errorf("db: oldest open call: %w", err)
	}
	return seq.Int64, nil
}

// FirstEntryFrom is the first audit entry whose time is at or after t (0
// when there is none): pruning by age removes only entries before it.
func (d *DB) FirstEntryFrom(ctx context.Context, t time.Time) (int64, error) {
	var seq sql.NullInt64
	if err := d.sql.QueryRowContext(ctx, `SELECT MIN(seq) FROM audit WHERE time >= ?`, audit.FormatTime(t)).Scan(&seq); err != nil {
		return 0, fmt.Errorf("db: audit entry at %s: %w", audit.FormatTime(t), err)
	}
	return seq.Int64, nil
}

// OldestEntry is the oldest audit entry kept (0 for an empty trail).
func (d *DB) OldestEntry(ctx context.Context) (int64, error) {
	var seq sql.NullInt64
	if err := d.sql.QueryRowContext(ctx, `SELECT MIN(seq) FROM audit`).Scan(&seq); err != nil {
		return 0, fmt.Errorf("db: oldest audit entry: %w", err)
	}
	return seq.Int64, nil
}

// CheckpointAtOrBefore is the newest signed checkpoint at or before seq;
// audit.ErrNoCheckpoint when there is none.
func (d *DB) CheckpointAtOrBefore(ctx context.Context, seq int64) (audit.Checkpoint, error) {
	cps, err := sqlq.Checkpoints(ctx, shared{d.sql}, 1, seq)
	if err != nil {
		return audit.Checkpoint{}, err
	}
	if len(cps) == 0 {
		return audit.Checkpoint{}, audit.ErrNoCheckpoint
	}
	return cps[len(cps)-1], nil
}

// OldestKeptForTool is the first audit entry of the oldest call of tool
// proposed at or after since (0 when none): a tool kept longer than the
// trail's horizon holds the prune back to it.
func (d *DB) OldestKeptForTool(ctx context.Context, tool string, since time.Time) (int64, error) {
	var seq sql.NullInt64
	err := d.sql.QueryRowContext(ctx, `SELECT MIN(a.seq) FROM audit a WHERE a.call_id IN (
		SELECT id FROM calls WHERE tool = ? AND created_at >= ?)`, tool, ms(since)).Scan(&seq)
	if err != nil {
		return 0, fmt.Errorf("db: oldest call of %s kept: %w", tool, err)
	}
	return seq.Int64, nil
}

// PasskeyRegistration is the newest passkey_registered entry of a
// credential (base64url): its seq and hash, 0 and "" when the trail holds
// none (a registration pruned before).
func (d *DB) PasskeyRegistration(ctx context.Context, credentialID string) (int64, string, error) {
	var seq int64
	var hash string
	err := d.sql.QueryRowContext(ctx, `SELECT seq, hash FROM audit WHERE kind = ? AND json_extract(details, '$.credential_id') = ?
		ORDER BY seq DESC LIMIT 1`, audit.KindPasskeyAdded, credentialID).Scan(&seq, &hash)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, "", nil
	}
	if err != nil {
		return 0, "", fmt.Errorf("db: passkey registration: %w", err)
	}
	return seq, hash, nil
}

// LatestToolsDigest is the tools_digest of the newest tools_loaded entry
// ("" when the trail holds none): the tools file in force when a prune
// records its snapshot.
func (d *DB) LatestToolsDigest(ctx context.Context) (string, error) {
	var digest sql.NullString
	err := d.sql.QueryRowContext(ctx, `SELECT json_extract(details, '$.tools_digest') FROM audit WHERE kind = 'tools_loaded'
		ORDER BY seq DESC LIMIT 1`).Scan(&digest)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("db: tools digest: %w", err)
	}
	return digest.String, nil
}
