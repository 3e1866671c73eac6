package sqlq

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/countersign/countersign/internal/queue"
)

// Plans (docs/plans.md). Their items are calls, read by each engine as it
// reads every call; here are the plans' own rows.

// PlanColumns are a plan's columns, in the order scanPlan reads them.
const PlanColumns = `id, actor, audience, submitted_by, rationale, ordered, digest, items, approvals_required, max_for_ms,
	status, created_at, decide_by, decided_at, decided_by, reason, valid_until`

func scanPlan(r Row) (*queue.Plan, error) {
	var p queue.Plan
	var rationale, reason []byte
	var items, required, maxFor, created, decideBy int64
	var status string
	var decidedAt, validUntil sql.NullInt64
	var decidedBy sql.NullString
	err := r.Scan(&p.ID, &p.Actor, &p.Audience, &p.SubmittedBy, &rationale, &p.Ordered, &p.Digest, &items, &required, &maxFor,
		&status, &created, &decideBy, &decidedAt, &decidedBy, &reason, &validUntil)
	if errors.Is(err, ErrNoRows) {
		return nil, queue.ErrPlanNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("store: scan plan: %w", err)
	}
	p.Rationale, p.Reason = string(rationale), string(reason)
	p.Items, p.ApprovalsRequired, p.MaxFor = int(items), int(required), time.Duration(maxFor)*time.Millisecond
	p.Status = queue.PlanStatus(status)
	p.CreatedAt, p.DecideBy = time.UnixMilli(created).UTC(), time.UnixMilli(decideBy).UTC()
	p.DecidedAt, p.DecidedBy, p.ValidUntil = fromMS(decidedAt), decidedBy.String, fromMS(validUntil)
	return &p, nil
}

func nullBytes(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}

// InsertPlan stores a new plan.
func InsertPlan(ctx context.Context, q Querier, p *queue.Plan) error {
	if _, err := q.Exec(ctx, `INSERT INTO plans (id, actor, audience, submitted_by, rationale, ordered, digest, items,
		approvals_required, max_for_ms, status, created_at, decide_by)
		VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)`,
		p.ID, p.Actor, p.Audience, p.SubmittedBy, []byte(p.Rationale), p.Ordered, p.Digest, int64(p.Items),
		int64(p.ApprovalsRequired), p.MaxFor.Milliseconds(), string(p.Status), ms(p.CreatedAt), ms(p.DecideBy)); err != nil {
		return fmt.Errorf("store: insert plan %s: %w", p.ID, err)
	}
	return nil
}

// Plan reads one plan; queue.ErrPlanNotFound when there is none.
func Plan(ctx context.Context, q Querier, id string) (*queue.Plan, error) {
	return scanPlan(q.QueryRow(ctx, `SELECT `+PlanColumns+` FROM plans WHERE id = ?`, id))
}

// UpdatePlan writes a plan's status, decision and valid_until.
func UpdatePlan(ctx context.Context, q Querier, p *queue.Plan) error {
	n, err := q.Exec(ctx, `UPDATE plans SET status = ?, decided_at = ?, decided_by = ?, reason = ?, valid_until = ? WHERE id = ?`,
		string(p.Status), nullMS(p.DecidedAt), sql.NullString{String: p.DecidedBy, Valid: p.DecidedBy != ""},
		nullBytes(p.Reason), nullMS(p.ValidUntil), p.ID)
	if err != nil {
		return fmt.Errorf("store: update plan %s: %w", p.ID, err)
	}
	if n != 1 {
		return queue.ErrPlanNotFound
	}
	return nil
}

// PlanItemIDs lists the ids of a plan's items, in order.
func PlanItemIDs(ctx context.Context, q Querier, id string) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT id FROM calls WHERE plan_id = ? ORDER BY plan_index`, id)
	if err != nil {
		return nil, fmt.Errorf("store: items of plan %s: %w", id, err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, fmt.Errorf("store: items of plan %s: %w", id, err)
		}
		ids = append(ids, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: items of plan %s: %w", id, err)
	}
	return ids, nil
}

// PendingPlansBy counts the plans token submitted that are pending at
// now, stopping at limit.
func PendingPlansBy(ctx context.Context, q Querier, token string, now time.Time, limit int) (int, error) {
	var n int64
	err := q.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM plans WHERE submitted_by = ? AND status = 'pending'
		AND decide_by > ? LIMIT ?) p`, token, ms(now), int64(limit)).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("store: count the pending plans of a token: %w", err)
	}
	return int(n), nil
}

// PendingPlans lists at most limit plans pending at now, by deadline then
// id.
func PendingPlans(ctx context.Context, q Querier, now time.Time, limit int) ([]*queue.Plan, error) {
	rows, err := q.Query(ctx, `SELECT `+PlanColumns+` FROM plans WHERE status = 'pending' AND decide_by > ?
		ORDER BY decide_by, id LIMIT ?`, ms(now), int64(limit))
	if err != nil {
		return nil, fmt.Errorf("store: pending plans: %w", err)
	}
	defer rows.Close()
	var out []*queue.Plan
	for rows.Next() {
		p, err := scanPlan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: pending plans: %w", err)
	}
	return out, nil
}

// DuePlans lists at most limit plans whose time ran out at now: pending
// past their deadline, or approved past valid_until.
func DuePlans(ctx context.Context, q Querier, now time.Time, limit int) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT id FROM plans WHERE status = 'pending' AND decide_by <= ?
		UNION ALL SELECT id FROM plans WHERE status = 'approved' AND valid_until <= ? LIMIT ?`, ms(now), ms(now), int64(limit))
	if err != nil {
		return nil, fmt.Errorf("store: due plans: %w", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("store: due plans: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: due plans: %w", err)
	}
	return ids, nil
}

// NextPlanDeadline is when the earliest plan runs out of time: a pending
// plan's decide_by or an approved plan's valid_until.
func NextPlanDeadline(ctx context.Context, q Querier) (time.Time, bool, error) {
	var pending, approved sql.NullInt64
	if err := q.QueryRow(ctx, `SELECT (SELECT min(decide_by) FROM plans WHERE status = 'pending'),
		(SELECT min(valid_until) FROM plans WHERE status = 'approved')`).Scan(&pending, &approved); err != nil {
		return time.Time{}, false, fmt.Errorf("store: next plan deadline: %w", err)
	}
	switch {
	case !pending.Valid && !approved.Valid:
		return time.Time{}, false, nil
	case !approved.Valid || pending.Valid && pending.Int64 <= approved.Int64:
		return fromMS(pending), true, nil
	default:
		return fromMS(approved), true, nil
	}
}
