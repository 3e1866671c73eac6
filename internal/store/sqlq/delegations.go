package sqlq

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/store"
)

// Delegations (docs/team.md).

const delegationColumns = `id, delegator, delegate, given_by, given_at, until, ended_at, end_reason, ended_by`

func scanDelegation(r Row) (*queue.Delegation, error) {
	var d queue.Delegation
	var given, until int64
	var ended sql.NullInt64
	var reason, by sql.NullString
	err := r.Scan(&d.ID, &d.Delegator, &d.Delegate, &d.GivenBy, &given, &until, &ended, &reason, &by)
	if errors.Is(err, ErrNoRows) {
		return nil, queue.ErrDelegationNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("store: scan delegation: %w", err)
	}
	d.GivenAt, d.Until, d.EndedAt = time.UnixMilli(given).UTC(), time.UnixMilli(until).UTC(), fromMS(ended)
	d.EndReason, d.EndedBy = reason.String, by.String
	return &d, nil
}

// InsertDelegation stores a new delegation.
func InsertDelegation(ctx context.Context, q Querier, d *queue.Delegation) error {
	if _, err := q.Exec(ctx, `INSERT INTO delegations (id, delegator, delegate, given_by, given_at, until) VALUES (?,?,?,?,?,?)`,
		d.ID, d.Delegator, d.Delegate, d.GivenBy, ms(d.GivenAt), ms(d.Until)); err != nil {
		return fmt.Errorf("store: insert delegation %s: %w", d.ID, err)
	}
	return nil
}

// Delegation reads one delegation, or queue.ErrDelegationNotFound.
func Delegation(ctx context.Context, q Querier, id string) (*queue.Delegation, error) {
	return scanDelegation(q.QueryRow(ctx, `SELECT `+delegationColumns+` FROM delegations WHERE id = ?`, id))
}

// LiveDelegation returns the oldest delegation from delegator to delegate
// live at now, or queue.ErrDelegationNotFound.
func LiveDelegation(ctx context.Context, q Querier, delegator, delegate string, now time.Time) (*queue.Delegation, error) {
	return scanDelegation(q.QueryRow(ctx, `SELECT `+delegationColumns+` FROM delegations
		WHERE delegator = ? AND delegate = ? AND ended_at IS NULL AND until > ? ORDER BY given_at, id LIMIT 1`,
		delegator, delegate, ms(now)))
}

// LiveDelegations counts the delegations live at now that person gave or
// received, and all live ones, stopping at limit each.
func LiveDelegations(ctx context.Context, q Querier, person string, now time.Time, limit int) (int, int, error) {
	var ofPerson, all int64
	lim := strconv.Itoa(max(limit, 0))
	if err := q.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM (SELECT 1 FROM delegations WHERE ended_at IS NULL AND until > ? AND (delegator = ? OR delegate = ?) LIMIT `+lim+`) p),
		(SELECT count(*) FROM (SELECT 1 FROM delegations WHERE ended_at IS NULL AND until > ? LIMIT `+lim+`) a)`,
		ms(now), person, person, ms(now)).Scan(&ofPerson, &all); err != nil {
		return 0, 0, fmt.Errorf("store: count live delegations of %s: %w", person, err)
	}
	return int(ofPerson), int(all), nil
}

// EndDelegation ends a delegation that has not ended; false when it had.
func EndDelegation(ctx context.Context, q Querier, id, reason, by string, at time.Time) (bool, error) {
	n, err := q.Exec(ctx, `UPDATE delegations SET ended_at = ?, end_reason = ?, ended_by = ? WHERE id = ? AND ended_at IS NULL`,
		ms(at), reason, by, id)
	if err != nil {
		return false, fmt.Errorf("store: end delegation %s: %w", id, err)
	}
	return n == 1, nil
}

// Delegations lists delegations as f selects them, newest first.
func Delegations(ctx context.Context, q Querier, f queue.DelegationFilter) ([]*queue.Delegation, error) {
	where := []string{"1 = 1"}
	var args []any
	if f.Person != "" {
		where, args = append(where, `(delegator = ? OR delegate = ?)`), append(args, f.Person, f.Person)
	}
	if !f.LiveAt.IsZero() {
		where, args = append(where, `ended_at IS NULL AND until > ?`), append(args, ms(f.LiveAt))
	}
	rows, err := q.Query(ctx, `SELECT `+delegationColumns+` FROM delegations WHERE `+strings.Join(where, " AND ")+
		` ORDER BY given_at DESC, id DESC LIMIT `+strconv.Itoa(max(f.Limit, 0)), args...)
	if err != nil {
		return nil, fmt.Errorf("store: list delegations: %w", err)
	}
	defer rows.Close()
	var out []*queue.Delegation
	for rows.Next() {
		d, err := scanDelegation(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list delegations: %w", err)
	}
	return out, nil
}

// SetEscalation writes c's approvers column (its reviewer condition, with
// the tiers it was made under and how many it reached) and its notify
// channels, and keeps its escalations row due at due, or removes it when
// due is zero (no tier is left).
func SetEscalation(ctx context.Context, q Querier, c *queue.Call, due time.Time) error {
	_, approvers, err := store.EncodePeople(c)
	if err != nil {
		return err
	}
	if _, err := q.Exec(ctx, `UPDATE calls SET approvers = ?, notify = ? WHERE id = ?`, approvers, strings.Join(c.Notify, ","), c.ID); err != nil {
		return fmt.Errorf("store: escalate %s: %w", c.ID, err)
	}
	if due.IsZero() {
		_, err = q.Exec(ctx, `DELETE FROM escalations WHERE call_id = ?`, c.ID)
	} else {
		_, err = q.Exec(ctx, `INSERT INTO escalations (call_id, due_at) VALUES (?, ?)
			ON CONFLICT (call_id) DO UPDATE SET due_at = excluded.due_at`, c.ID, ms(due))
	}
	if err != nil {
		return fmt.Errorf("store: escalation of %s: %w", c.ID, err)
	}
	return nil
}

// DueEscalations lists the calls whose next tier is due at or before now,
// earliest first, at most limit.
func DueEscalations(ctx context.Context, q Querier, now time.Time, limit int) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT call_id FROM escalations WHERE due_at <= ? ORDER BY due_at, call_id LIMIT `+
		strconv.Itoa(max(limit, 0)), ms(now))
	if err != nil {
		return nil, fmt.Errorf("store: due escalations: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("store: due escalations: %w", err)
		}
		out = append(out, id)
	}
	return out, rows.Err()
}

// NextEscalation is when the earliest tier is due; false when none is.
func NextEscalation(ctx context.Context, q Querier) (time.Time, bool, error) {
	var due sql.NullInt64
	if err := q.QueryRow(ctx, `SELECT min(due_at) FROM escalations`).Scan(&due); err != nil {
		return time.Time{}, false, fmt.Errorf("store: next escalation: %w", err)
	}
	return fromMS(due), due.Valid, nil
}
