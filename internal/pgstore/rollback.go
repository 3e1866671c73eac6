package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/store/sqlq"
)

func (t *txn) InsertRollback(r queue.Rollback) error {
	t.advance = true // the high-water mark covers it before it is acknowledged
	if _, err := t.tx.Exec(t.ctx, `INSERT INTO rollbacks (accepted_at, accepted_by, mark_seq, mark_head, db_seq, db_head)
		VALUES ($1,$2,$3,$4,$5,$6)`, ms(r.AcceptedAt), r.AcceptedBy, r.MarkSeq, r.MarkHead, r.DBSeq, r.DBHead); err != nil {
		return fmt.Errorf("pgstore: record rollback: %w", err)
	}
	return nil
}

func (t *txn) LastRollback() (time.Time, error) {
	var at *int64
	if err := t.tx.QueryRow(t.ctx, `SELECT MAX(accepted_at) FROM rollbacks`).Scan(&at); err != nil {
		return time.Time{}, fmt.Errorf("pgstore: read rollbacks: %w", err)
	}
	return fromMS(at), nil
}

// AuditHashAt returns the hash of audit entry seq, or an error wrapping
// sqlq.ErrNoRows when there is none.
func (d *DB) AuditHashAt(ctx context.Context, seq int64) (string, error) {
	return sqlq.AuditHash(ctx, shared{d.pool}, seq)
}
