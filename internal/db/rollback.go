package db

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/store/sqlq"
)

func (t *storeTx) InsertRollback(r queue.Rollback) error {
	t.db.mustAdvance() // the high-water mark covers it before it is acknowledged
	if err := t.db.needTxState(t.ctx, t.tx); err != nil {
		return err
	}
	t.db.txKnown.rollbackKnown = false // LastRollback reads it again
	_, err := t.tx.ExecContext(t.ctx, `INSERT INTO rollbacks (accepted_at, accepted_by, mark_seq, mark_head, db_seq, db_head)
		VALUES (?,?,?,?,?,?)`, ms(r.AcceptedAt), r.AcceptedBy, r.MarkSeq, r.MarkHead, r.DBSeq, r.DBHead)
	if err != nil {
		return fmt.Errorf("db: record rollback: %w", err)
	}
	return nil
}

func (t *storeTx) LastRollback() (time.Time, error) {
	// As the transaction's state read it (needTxState), under the write
	// lock, unless the transaction has inserted a rollback since.
	if err := t.db.needTxState(t.ctx, t.tx); err != nil {
		return time.Time{}, err
	}
	if t.db.txKnown.rollbackKnown {
		return fromMS(t.db.txKnown.lastRollback), nil
	}
	var at sql.NullInt64
	if err := t.tx.QueryRowContext(t.ctx, `SELECT MAX(accepted_at) FROM rollbacks`).Scan(&at); err != nil {
		return time.Time{}, fmt.Errorf("db: read rollbacks: %w", err)
	}
	return fromMS(at), nil
}

// AuditHashAt returns the hash of audit entry seq, or an error wrapping
// sqlq.ErrNoRows when there is none.
func (d *DB) AuditHashAt(ctx context.Context, seq int64) (string, error) {
	return sqlq.AuditHash(ctx, shared{d.sql}, seq)
}
