package pgstore

import (
	"context"
	"time"

	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/store/sqlq"
)

// Allowances: the SQL is written once in internal/store/sqlq. A use is
// counted by a conditional UPDATE (used < uses) inside the write
// transaction, which also holds the chain head lock that serializes every
// write of every replica (see the package comment): either alone would
// keep the count.

func (t *txn) InsertAllowance(a *queue.Allowance) error {
	t.advance = true // the high-water mark covers it before it is acknowledged
	return sqlq.InsertAllowance(t.ctx, shared{t.tx}, a)
}

func (t *txn) Allowance(id string) (*queue.Allowance, error) {
	return sqlq.Allowance(t.ctx, shared{t.tx}, id)
}

func (t *txn) AllowancesFor(actor, audience, tool string, limit int) ([]*queue.Allowance, error) {
	return sqlq.AllowancesFor(t.ctx, shared{t.tx}, actor, audience, tool, limit)
}

func (t *txn) LiveAllowances(tool, giver string, now time.Time, limit int) (int, int, error) {
	return sqlq.LiveAllowances(t.ctx, shared{t.tx}, tool, giver, now, limit)
}

func (t *txn) SetConfirmers(id string, confirmers []string) error {
	t.advance = true // the high-water mark covers it before it is acknowledged
	return sqlq.SetConfirmers(t.ctx, shared{t.tx}, id, confirmers)
}

func (t *txn) UseAllowance(u queue.AllowanceUse) (bool, error) {
	t.advance = true // the high-water mark covers it before it is acknowledged
	return sqlq.UseAllowance(t.ctx, shared{t.tx}, u)
}

func (t *txn) EndAllowance(id, reason, by string, at time.Time) (bool, error) {
	t.advance = true // the high-water mark covers it before it is acknowledged
	return sqlq.EndAllowance(t.ctx, shared{t.tx}, id, reason, by, at)
}

func (t *txn) AllowanceCalls(id string) ([]string, error) {
	return sqlq.AllowanceCalls(t.ctx, shared{t.tx}, id)
}

// Allowances lists allowances, newest first.
func (s Store) Allowances(ctx context.Context, f queue.AllowanceFilter) ([]*queue.Allowance, error) {
	return sqlq.Allowances(ctx, shared{s.pool}, f)
}

// Allowance reads one allowance.
func (s Store) Allowance(ctx context.Context, id string) (*queue.Allowance, error) {
	return sqlq.Allowance(ctx, shared{s.pool}, id)
}
