package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/store/sqlq"
)

// ErrNothingToPrune is a prune whose last entry is not after the oldest
// entry kept.
var ErrNothingToPrune = errors.New("db: no audit entry to prune before that point")

// ErrPruneUnanchored is a prune whose last entry has no signed checkpoint:
// a verifier could not tell the removal from entries cut out.
var ErrPruneUnanchored = errors.New("db: no signed checkpoint at the last entry to prune")

// Prune removes the oldest audit entries, up to and including toSeq, in
// one transaction that first appends a pruned entry recording what it
// removes (audit.PrunedDetails, with the other details given: the
// archive's manifest digest, the state snapshot) by principal. A signed
// checkpoint must stand at toSeq. It returns the pruned entry.
func (d *DB) Prune(ctx context.Context, toSeq int64, principal string, details map[string]any) (*audit.Entry, error) {
	var out *audit.Entry
	err := d.update(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if err := d.checkIdentity(ctx, tx); err != nil {
			return err
		}
		var from sql.NullInt64
		if err := tx.QueryRowContext(ctx, `SELECT MIN(seq) FROM audit`).Scan(&from); err != nil {
			return fmt.Errorf("db: prune: %w", err)
		}
		if !from.Valid || toSeq < from.Int64 || toSeq >= d.txHead.seq {
			return ErrNothingToPrune
		}
		var last string
		if err := tx.QueryRowContext(ctx, `SELECT hash FROM audit WHERE seq = ?`, toSeq).Scan(&last); err != nil {
			return fmt.Errorf("db: prune: entry %d: %w", toSeq, err)
		}
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM checkpoints WHERE seq = ? AND head = ?`, toSeq, last).Scan(&n); err != nil {
			return fmt.Errorf("db: prune: %w", err)
		}
		if n == 0 {
			return ErrPruneUnanchored
		}
		pd := map[string]any{}
		for k, v := range details {
			pd[k] = v
		}
		pd["from_seq"], pd["to_seq"], pd["count"], pd["last_hash"] = from.Int64, toSeq, toSeq-from.Int64+1, last
		e := &audit.Entry{Time: audit.FormatTime(d.now()), Kind: audit.KindPruned, Principal: principal, Channel: audit.ChannelCLI, Details: pd}
		if err := d.appendAudit(ctx, tx, e); err != nil {
			return err
		}
		for _, q := range []string{`INSERT INTO audit_prune_permit (id) VALUES (1)`, `DELETE FROM audit WHERE seq <= ?`, `DELETE FROM audit_prune_permit`} {
			args := []any{}
			if q == `DELETE FROM audit WHERE seq <= ?` {
				args = append(args, toSeq)
			}
			if _, err := tx.ExecContext(ctx, q, args...); err != nil {
				return fmt.Errorf("db: prune: %w", err)
			}
		}
		out = e
		return nil
	})
	return out, err
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
type CompactSize struct {
	Pages, FreePages, Bytes int64
}

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
