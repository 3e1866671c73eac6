package pgstore

import (
	"context"
	"time"

	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/store/sqlq"
)

// Plans: the plans' rows are read and written by internal/store/sqlq; their
// items are calls, read as Call reads them.

func (t *txn) InsertPlan(p *queue.Plan) error { return sqlq.InsertPlan(t.ctx, shared{t.tx}, p) }

func (t *txn) Plan(id string) (*queue.Plan, error) { return sqlq.Plan(t.ctx, shared{t.tx}, id) }

func (t *txn) UpdatePlan(p *queue.Plan) error { return sqlq.UpdatePlan(t.ctx, shared{t.tx}, p) }

func (t *txn) PendingPlansBy(token string, now time.Time, limit int) (int, error) {
	return sqlq.PendingPlansBy(t.ctx, shared{t.tx}, token, now, limit)
}

func (t *txn) PlanItems(id string) ([]*queue.Call, error) {
	ids, err := sqlq.PlanItemIDs(t.ctx, shared{t.tx}, id)
	if err != nil {
		return nil, err
	}
	items := make([]*queue.Call, len(ids))
	for i, cid := range ids {
		if items[i], err = t.Call(cid); err != nil {
			return nil, err
		}
	}
	return items, nil
}

// Plan reads one plan.
func (s Store) Plan(ctx context.Context, id string) (*queue.Plan, error) {
	return sqlq.Plan(ctx, shared{s.pool}, id)
}

// PlanItems lists a plan's items in order, with their approvals.
func (s Store) PlanItems(ctx context.Context, id string) ([]*queue.Call, error) {
	ids, err := sqlq.PlanItemIDs(ctx, shared{s.pool}, id)
	if err != nil {
		return nil, err
	}
	items := make([]*queue.Call, len(ids))
	for i, cid := range ids {
		if items[i], err = s.Call(ctx, cid); err != nil {
			return nil, err
		}
	}
	return items, nil
}

// DuePlans lists plans whose time ran out at now.
func (s Store) DuePlans(ctx context.Context, now time.Time, limit int) ([]string, error) {
	return sqlq.DuePlans(ctx, shared{s.pool}, now, limit)
}

// PendingPlans lists the plans pending at now, by deadline then id.
func (s Store) PendingPlans(ctx context.Context, now time.Time, limit int) ([]*queue.Plan, error) {
	return sqlq.PendingPlans(ctx, shared{s.pool}, now, limit)
}

// planIndexOf is c's plan_index column: NULL for a call outside any plan.
func planIndexOf(c *queue.Call) *int32 {
	if c.PlanID == "" {
		return nil
	}
	n := int32(c.PlanIndex)
	return &n
}

// NextPlanDeadline is when the earliest plan runs out of time.
func (s Store) NextPlanDeadline(ctx context.Context) (time.Time, bool, error) {
	return sqlq.NextPlanDeadline(ctx, shared{s.pool})
}
