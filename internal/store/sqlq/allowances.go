package sqlq

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/store"
)

// Allowances and their uses (docs/allowances.md).

// AllowanceColumns are an allowance's columns, in the order
// scanAllowance reads them.
const AllowanceColumns = `id, actor, audience, tool, tool_digest, base_call, base_digest, scope, scope_digest, uses, used,
	once_per_call, until, giver, confirmers, confirmers_needed, given_at, ended_at, end_reason, ended_by`

func scanAllowance(r Row) (*queue.Allowance, error) {
	var a queue.Allowance
	var uses, used, needed int64
	var until, given int64
	var confirmers string
	var ended sql.NullInt64
	var reason, by sql.NullString
	err := r.Scan(&a.ID, &a.Actor, &a.Audience, &a.Tool, &a.ToolDigest, &a.BaseCall, &a.BaseDigest, &a.Scope, &a.ScopeDigest,
		&uses, &used, &a.OncePerCall, &until, &a.Giver, &confirmers, &needed, &given, &ended, &reason, &by)
	if errors.Is(err, ErrNoRows) {
		return nil, queue.ErrAllowanceNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("store: scan allowance: %w", err)
	}
	if a.Confirmers, err = store.DecodeNames(confirmers); err != nil {
		return nil, fmt.Errorf("store: allowance %s: %w", a.ID, err)
	}
	a.Uses, a.Used, a.ConfirmersNeeded = int(uses), int(used), int(needed)
	a.Until, a.GivenAt, a.EndedAt = time.UnixMilli(until).UTC(), time.UnixMilli(given).UTC(), fromMS(ended)
	a.EndReason, a.EndedBy = reason.String, by.String
	return &a, nil
}

func collectAllowances(rows Rows, err error) ([]*queue.Allowance, error) {
	if err != nil {
		return nil, fmt.Errorf("store: list allowances: %w", err)
	}
	defer rows.Close()
	var out []*queue.Allowance
	for rows.Next() {
		a, err := scanAllowance(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list allowances: %w", err)
	}
	return out, nil
}

// InsertAllowance stores a new allowance.
func InsertAllowance(ctx context.Context, q Querier, a *queue.Allowance) error {
	confirmers, err := store.EncodeNames(a.Confirmers)
	if err != nil {
		return err
	}
	if _, err := q.Exec(ctx, `INSERT INTO allowances (id, actor, audience, tool, tool_digest, base_call, base_digest, scope,
		scope_digest, uses, used, once_per_call, until, giver, confirmers, confirmers_needed, given_at)
		VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`,
		a.ID, a.Actor, a.Audience, a.Tool, a.ToolDigest, a.BaseCall, a.BaseDigest, a.Scope, a.ScopeDigest,
		int64(a.Uses), int64(a.Used), a.OncePerCall, ms(a.Until), a.Giver, confirmers, int64(a.ConfirmersNeeded), ms(a.GivenAt)); err != nil {
		return fmt.Errorf("store: insert allowance %s: %w", a.ID, err)
	}
	return nil
}

// Allowance reads one allowance, or queue.ErrAllowanceNotFound.
func Allowance(ctx context.Context, q Querier, id string) (*queue.Allowance, error) {
	return scanAllowance(q.QueryRow(ctx, `SELECT `+AllowanceColumns+` FROM allowances WHERE id = ?`, id))
}

// AllowancesFor lists the allowances of actor, audience and tool that have
// not ended, oldest first, at most limit.
//
// The statement has neither ORDER BY nor a bound LIMIT: on SQLite either
// one makes this read, which every covered submission runs, about three
// times as slow (BenchmarkAllowancesFor in internal/db: 17 µs against
// 6 µs with the rows decoded), so the rows are sorted here. SQLite walks the (actor,
// audience, tool, given_at) index of open allowances, so when more than
// limit are open the oldest are read; PostgreSQL promises no order. Live
// allowances are bounded per tool far below any limit a caller passes,
// and a submission ends the spent ones it reads, so more than limit are
// open only for a backlog of expired ones, which reads drain.
func AllowancesFor(ctx context.Context, q Querier, actor, audience, tool string, limit int) ([]*queue.Allowance, error) {
	out, err := collectAllowances(q.Query(ctx, `SELECT `+AllowanceColumns+` FROM allowances
		WHERE actor = ? AND audience = ? AND tool = ? AND ended_at IS NULL LIMIT `+strconv.Itoa(max(limit, 0)),
		actor, audience, tool))
	slices.SortFunc(out, func(a, b *queue.Allowance) int {
		return cmp.Or(a.GivenAt.Compare(b.GivenAt), cmp.Compare(a.ID, b.ID))
	})
	return out, err
}

// Allowances lists allowances, newest first.
func Allowances(ctx context.Context, q Querier, f queue.AllowanceFilter) ([]*queue.Allowance, error) {
	var where []string
	var args []any
	if f.Live {
		where = append(where, `ended_at IS NULL`)
	}
	if f.Tool != "" {
		where, args = append(where, `tool = ?`), append(args, f.Tool)
	}
	if f.Giver != "" {
		where, args = append(where, `giver = ?`), append(args, f.Giver)
	}
	query := `SELECT ` + AllowanceColumns + ` FROM allowances`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, ` AND `)
	}
	limit := f.Limit
	if limit <= 0 || limit > queue.MaxAllowancesListed {
		limit = queue.MaxAllowancesListed
	}
	return collectAllowances(q.Query(ctx, query+` ORDER BY given_at DESC, id DESC LIMIT ?`, append(args, int64(limit))...))
}

// LiveAllowances counts the allowances live at now of tool and of giver,
// stopping at limit each.
func LiveAllowances(ctx context.Context, q Querier, tool, giver string, now time.Time, limit int) (int, int, error) {
	const live = `ended_at IS NULL AND until > ? AND used < uses`
	var ofTool, ofGiver int64
	err := q.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM (SELECT 1 FROM allowances WHERE tool = ? AND `+live+` LIMIT ?) t),
		(SELECT count(*) FROM (SELECT 1 FROM allowances WHERE giver = ? AND `+live+` LIMIT ?) g)`,
		tool, ms(now), int64(limit), giver, ms(now), int64(limit)).Scan(&ofTool, &ofGiver)
	if err != nil {
		return 0, 0, fmt.Errorf("store: count live allowances: %w", err)
	}
	return int(ofTool), int(ofGiver), nil
}

// SetConfirmers replaces the confirmers of an allowance that has not
// ended.
func SetConfirmers(ctx context.Context, q Querier, id string, confirmers []string) error {
	names, err := store.EncodeNames(confirmers)
	if err != nil {
		return err
	}
	n, err := q.Exec(ctx, `UPDATE allowances SET confirmers = ? WHERE id = ? AND ended_at IS NULL`, names, id)
	if err != nil {
		return fmt.Errorf("store: confirm allowance %s: %w", id, err)
	}
	if n != 1 {
		return fmt.Errorf("store: confirm allowance %s: %w", id, queue.ErrAllowanceNotFound)
	}
	return nil
}

// UseAllowance counts and records one use. The UPDATE checks the count,
// the end, the until and (once per call) the digest itself, so the use is
// counted only while every one of them allows it, whatever runs beside it.
func UseAllowance(ctx context.Context, q Querier, u queue.AllowanceUse) (bool, error) {
	once := sql.NullString{String: u.Digest, Valid: u.Once}
	n, err := q.Exec(ctx, `UPDATE allowances SET used = used + 1
		WHERE id = ? AND ended_at IS NULL AND used < uses AND until > ?
		AND NOT EXISTS (SELECT 1 FROM allowance_uses x WHERE x.allowance_id = allowances.id AND x.once_digest = ?)`,
		u.AllowanceID, ms(u.At), once)
	if err != nil {
		return false, fmt.Errorf("store: use allowance %s: %w", u.AllowanceID, err)
	}
	if n != 1 {
		return false, nil
	}
	if _, err := q.Exec(ctx, `INSERT INTO allowance_uses (allowance_id, call_id, digest, once_digest, used_at) VALUES (?,?,?,?,?)`,
		u.AllowanceID, u.CallID, u.Digest, once, ms(u.At)); err != nil {
		return false, fmt.Errorf("store: record use of allowance %s: %w", u.AllowanceID, err)
	}
	return true, nil
}

// EndAllowance ends an allowance that has not ended yet.
func EndAllowance(ctx context.Context, q Querier, id, reason, by string, at time.Time) (bool, error) {
	n, err := q.Exec(ctx, `UPDATE allowances SET ended_at = ?, end_reason = ?, ended_by = ? WHERE id = ? AND ended_at IS NULL`,
		ms(at), reason, by, id)
	if err != nil {
		return false, fmt.Errorf("store: end allowance %s: %w", id, err)
	}
	return n == 1, nil
}

// AllowanceCalls lists the calls an allowance approved, by the time of
// their use, then by id.
func AllowanceCalls(ctx context.Context, q Querier, id string) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT call_id FROM allowance_uses WHERE allowance_id = ? ORDER BY used_at, call_id`, id)
	if err != nil {
		return nil, fmt.Errorf("store: uses of allowance %s: %w", id, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return nil, fmt.Errorf("store: uses of allowance %s: %w", id, err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: uses of allowance %s: %w", id, err)
	}
	return out, nil
}
