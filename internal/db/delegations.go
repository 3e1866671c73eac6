package db

import (
	"context"
	"time"

	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/store/sqlq"
)

// Delegations: the SQL is written once in internal/store/sqlq.

func (t *storeTx) InsertDelegation(d *queue.Delegation) error {
	return sqlq.InsertDelegation(t.ctx, shared{t.tx}, d)
}

func (t *storeTx) Delegation(id string) (*queue.Delegation, error) {
	return sqlq.Delegation(t.ctx, shared{t.tx}, id)
}

func (t *storeTx) LiveDelegation(delegator, delegate string, now time.Time) (*queue.Delegation, error) {
	return sqlq.LiveDelegation(t.ctx, shared{t.tx}, delegator, delegate, now)
}

func (t *storeTx) LiveDelegations(person string, now time.Time, limit int) (int, int, error) {
	return sqlq.LiveDelegations(t.ctx, shared{t.tx}, person, now, limit)
}

func (t *storeTx) EndDelegation(id, reason, by string, at time.Time) (bool, error) {
	return sqlq.EndDelegation(t.ctx, shared{t.tx}, id, reason, by, at)
}

// Delegations lists delegations, newest first.
func (s Store) Delegations(ctx context.Context, f queue.DelegationFilter) ([]*queue.Delegation, error) {
	return sqlq.Delegations(ctx, shared{s.sql}, f)
}

func (t *storeTx) SetEscalation(c *queue.Call, due time.Time) error {
	return sqlq.SetEscalation(t.ctx, shared{t.tx}, c, due)
}

// DueEscalations lists the calls whose next escalation tier is due.
func (s Store) DueEscalations(ctx context.Context, now time.Time, limit int) ([]string, error) {
	return sqlq.DueEscalations(ctx, shared{s.sql}, now, limit)
}

// NextEscalation is when the earliest escalation tier is due.
func (s Store) NextEscalation(ctx context.Context) (time.Time, bool, error) {
	return sqlq.NextEscalation(ctx, shared{s.sql})
}
