package db

import (
	"context"
	"time"

	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/store/sqlq"
)

// Allowances: the SQL is written once in internal/store/sqlq. A use is
// counted by a conditional UPDATE inside the write transaction, which on
// SQLite is also the one writer of the database (BEGIN IMMEDIATE), so
// processes sharing the file count as one.

func (t *storeTx) InsertAllowance(a *queue.Allowance) error {
	t.db.mustAdvance() // the high-water mark covers it before it is acknowledged
	return sqlq.InsertAllowance(t.ctx, shared{t.tx}, a)
}

func (t *storeTx) Allowance(id string) (*queue.Allowance, error) {
	return sqlq.Allowance(t.ctx, shared{t.tx}, id)
}

func (t *storeTx) AllowancesFor(actor, audience, tool string, limit int) ([]*queue.Allowance, error) {
	return sqlq.AllowancesFor(t.ctx, shared{t.tx}, actor, audience, tool, limit)
}

func (t *storeTx) LiveAllowances(tool, giver string, now time.Time, limit int) (int, int, error) {
	return sqlq.LiveAllowances(t.ctx, shared{t.tx}, tool, giver, now, limit)
}

func (t *storeTx) SetConfirmers(id string, confirmers []string) error {
	t.db.mustAdvance() // the high-water mark covers it before it is acknowledged
	return sqlq.SetConfirmers(t.ctx, shared{t.tx}, id, confirmers)
}

func (t *storeTx) UseAllowance(u queue.AllowanceUse) (bool, error) {
	t.db.mustAdvance() // the high-water mark covers it before it is acknowledged
	return sqlq.UseAllowance(t.ctx, shared{t.tx}, u)
}

func (t *storeTx) EndAllowance(id, reason, by string, at time.Time) (bool, error) {
	t.db.mustAdvance() // the high-water mark covers it before it is acknowledged
	return sqlq.EndAllowance(t.ctx, shared{t.tx}, id, reason, by, at)
}

func (t *storeTx) AllowanceCalls(id string) ([]string, error) {
	return sqlq.AllowanceCalls(t.ctx, shared{t.tx}, id)
}

// Allowances lists allowances, newest first.
func (s Store) Allowances(ctx context.Context, f queue.AllowanceFilter) ([]*queue.Allowance, error) {
	return sqlq.Allowances(ctx, shared{s.sql}, f)
}

// Allowance reads one allowance.
func (s Store) Allowance(ctx context.Context, id string) (*queue.Allowance, error) {
	return sqlq.Allowance(ctx, shared{s.sql}, id)
}
