package db

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/retention"
)

// MaxHolds bounds the legal holds a database keeps.
const MaxHolds = retention.MaxHolds

// Hold is a legal hold (retention.Hold).
type Hold = retention.Hold

// Hold errors.
var (
	ErrTooManyHolds = retention.ErrTooManyHolds
	ErrHoldExists   = retention.ErrHoldExists
	ErrNoSuchHold   = retention.ErrNoSuchHold
)

// AddHold adds a legal hold, with its hold_added audit entry, by the
// admin by (whom the caller has checked).
func (d *DB) AddHold(ctx context.Context, kind, value, reason, by string) (Hold, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return Hold{}, err
	}
	h := Hold{ID: "hold_" + hex.EncodeToString(b[:]), Kind: kind, Value: value, Reason: reason, By: by, CreatedAt: ms(d.now())}
	err := d.update(ctx, func(ctx context.Context, tx *writeTx) error {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM retention_holds`).Scan(&n); err != nil {
			return fmt.Errorf("db: count holds: %w", err)
		}
		if n >= MaxHolds {
			return ErrTooManyHolds
		}
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM retention_holds WHERE kind = ? AND value = ?`, kind, value).Scan(&n); err != nil {
			return fmt.Errorf("db: read holds: %w", err)
		}
		if n > 0 {
			return ErrHoldExists
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO retention_holds (id, kind, value, reason, created_by, created_at) VALUES (?,?,?,?,?,?)`,
			h.ID, h.Kind, h.Value, h.Reason, h.By, h.CreatedAt); err != nil {
			return fmt.Errorf("db: add hold: %w", err)
		}
		return d.appendAudit(ctx, tx, &audit.Entry{Time: audit.FormatTime(d.now()), Kind: audit.KindHoldAdded, Principal: by, Channel: audit.ChannelCLI,
			Details: map[string]any{"id": h.ID, kind: value, "reason": reason}})
	})
	return h, err
}

// RemoveHold removes a legal hold, with its hold_removed audit entry.
func (d *DB) RemoveHold(ctx context.Context, id, by string) error {
	return d.update(ctx, func(ctx context.Context, tx *writeTx) error {
		var kind, value string
		err := tx.QueryRowContext(ctx, `SELECT kind, value FROM retention_holds WHERE id = ?`, id).Scan(&kind, &value)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNoSuchHold
		}
		if err != nil {
			return fmt.Errorf("db: read hold: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM retention_holds WHERE id = ?`, id); err != nil {
			return fmt.Errorf("db: remove hold: %w", err)
		}
		return d.appendAudit(ctx, tx, &audit.Entry{Time: audit.FormatTime(d.now()), Kind: audit.KindHoldRemoved, Principal: by, Channel: audit.ChannelCLI,
			Details: map[string]any{"id": id, kind: value}})
	})
}

// Holds lists the legal holds, oldest first.
func (d *DB) Holds(ctx context.Context) ([]Hold, error) {
	rows, err := d.sql.QueryContext(ctx, `SELECT id, kind, value, reason, created_by, created_at FROM retention_holds ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("db: list holds: %w", err)
	}
	defer rows.Close()
	var out []Hold
	for rows.Next() {
		var h Hold
		if err := rows.Scan(&h.ID, &h.Kind, &h.Value, &h.Reason, &h.By, &h.CreatedAt); err != nil {
			return nil, fmt.Errorf("db: list holds: %w", err)
		}
		out = append(out, h)
	}
	return out, rows.Err()
}

// OldestHeldEntry is the first audit entry of any call a legal hold
// covers (0 when none): pruning stops before it.
func (d *DB) OldestHeldEntry(ctx context.Context) (int64, error) {
	var seq sql.NullInt64
	err := d.sql.QueryRowContext(ctx, `SELECT MIN(a.seq) FROM audit a WHERE a.call_id IN (
		SELECT c.id FROM calls c JOIN retention_holds h ON h.kind = 'tool' AND c.tool = h.value
		UNION ALL SELECT c.id FROM calls c JOIN retention_holds h ON h.kind = 'actor' AND c.actor = h.value
		UNION ALL SELECT value FROM retention_holds WHERE kind = 'call')`).Scan(&seq)
	if err != nil {
		return 0, fmt.Errorf("db: oldest held call: %w", err)
	}
	return seq.Int64, nil
}
