package db

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/store"
	"github.com/countersign/countersign/internal/store/sqlq"
)

// historyQuery is a filter turned into SQL: FROM ... WHERE ... ORDER BY.
type historyQuery struct {
	from     string
	where    []string
	args     []any
	order    string
	deciders bool // rows come from call_deciders and may repeat a call
	empty    bool // an estimate found that nothing matches
}

// qualified is callColumns with every column prefixed by "c.".
var qualified = callColumnsOf("c.")

// approvalsColumn is every approval of the row's call as a JSON array,
// unsorted: addApprovals and scanExportRow put them in the order loadCall
// does (sortApprovals). Sorted by ORDER BY, each row's subquery opened a
// sorter of its own (the primary key is (call_id, operator)), for a call
// with no approvals too.
const approvalsColumn = `(SELECT json_group_array(json_object('operator', a.operator, 'channel', a.channel, 'at', a.at, 'comment', a.comment,
		'method', a.method, 'digest', a.digest, 'via', a.via, 'presented_page', a.presented_page, 'presented_at', a.presented_at,
		'passkey_id', CASE WHEN a.passkey_id IS NULL THEN NULL ELSE hex(a.passkey_id) END, 'passkey_name', a.passkey_name, 'for', a.behalf))
	FROM approvals a WHERE a.call_id = c.id)`

// estimateCap bounds the rows counted to estimate how selective a filter
// is: enough to tell a rare value from a common one, cheap to count.
const estimateCap = 2000

// A cond is one SQL condition with its arguments.
type cond struct {
	sql  string
	args []any
}

func conds(cs []cond) ([]string, []any) {
	var ss []string
	var args []any
	for _, c := range cs {
		ss = append(ss, c.sql)
		args = append(args, c.args...)
	}
	return ss, args
}

// historyQuery plans a filter. SQLite has no statistics on how common a
// value is, so the plan is chosen here: each filter that has an index in
// history order counts its matching rows (up to estimateCap) and the
// rarest one drives the query through its index, the others being checked
// on each row it yields. A filter that matches nothing ends the search at
// once. The cost of a page is then about the rows of the rarest filter, or
// the rows read until the page is full.
func (d *DB) historyQuery(ctx context.Context, f queue.HistoryFilter) (*historyQuery, error) {
	var eq []cond // equality filters on calls, by preference on ties
	for _, x := range []struct{ col, v string }{{"actor", f.Actor}, {"tool", f.Tool}, {"status", f.Status}} {
		if x.v != "" {
			eq = append(eq, cond{x.col + " = ?", []any{x.v}})
		}
	}
	if err := f.Check(); err != nil {
		return nil, err
	}
	// The outcome filter: an equality on a column with an index in history
	// order, or a condition with a partial index of its own.
	var partial func(prefix string) cond
	partialIndex := ""
	switch f.Outcome {
	case "":
	case queue.OutcomeFilterSucceeded, queue.OutcomeFilterFailed, queue.OutcomeFilterUnknown, queue.OutcomeFilterLeaseExpired:
		eq = append(eq, cond{"outcome_status = ?", []any{f.Outcome}})
	case queue.OutcomeFilterOpen:
		partialIndex = "calls_open_created"
		partial = func(p string) cond { return cond{sql: p + "status = 'redeemed' AND " + p + "outcome_status IS NULL"} }
	case queue.OutcomeFilterUnresolved:
		partialIndex = "calls_unresolved_created"
		partial = func(p string) cond { return cond{sql: unresolvedWhere(p)} }
	case queue.OutcomeFilterResolved:
		partialIndex = "calls_resolved_created"
		partial = func(p string) cond { return cond{sql: p + "resolution IS NOT NULL"} }
	case queue.OutcomeFilterExecuted, queue.OutcomeFilterNotExecuted:
		partialIndex = "calls_resolved_created"
		partial = func(p string) cond {
			return cond{p + "resolution IS NOT NULL AND " + p + "resolution = ?", []any{f.Outcome}}
		}
	}
	var digest *cond
	if p := f.Digest(); p != "" {
		// Every digest that starts with p sorts in [p, p+"g").
		digest = &cond{"digest >= ? AND digest < ?", []any{p, p + "g"}}
	}
	var decider []cond
	if f.Operator != "" {
		decider = append(decider, cond{"operator = ?", []any{f.Operator}})
	}
	if f.Channel != "" {
		decider = append(decider, cond{"channel = ?", []any{f.Channel}})
	}
	// Conditions on the history order (created_at, seq): the time window
	// and the cursor. seq is "seq" on calls and "call_seq" on call_deciders.
	var cursorAt int64
	if f.After > 0 {
		err := d.sql.QueryRowContext(ctx, `SELECT created_at FROM calls WHERE seq = ?`, f.After).Scan(&cursorAt)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, &queue.FilterError{Reason: "the cursor names no call"}
		}
		if err != nil {
			return nil, classify(fmt.Errorf("db: history cursor: %w", err))
		}
	}
	keyConds := func(prefix, seq string) []cond {
		var cs []cond
		if !f.Since.IsZero() {
			cs = append(cs, cond{prefix + "created_at >= ?", []any{f.Since.UnixMilli()}})
		}
		if !f.Until.IsZero() {
			cs = append(cs, cond{prefix + "created_at < ?", []any{f.Until.UnixMilli()}})
		}
		if f.After > 0 {
			// (created_at, seq) < (cursorAt, After), written so that an
			// index can use the first term as a range.
			cs = append(cs, cond{prefix + "created_at <= ? AND (" + prefix + "created_at < ? OR " + prefix + seq + " < ?)",
				[]any{cursorAt, cursorAt, f.After}})
		}
		return cs
	}
	count := func(table string, cs []cond) (int, error) {
		where, args := conds(cs)
		var n int
		err := d.sql.QueryRowContext(ctx, `SELECT COUNT(*) FROM (SELECT 1 FROM `+table+` WHERE `+
			strings.Join(where, " AND ")+` LIMIT `+strconv.Itoa(estimateCap)+`)`, args...).Scan(&n)
		if err != nil {
			return 0, classify(fmt.Errorf("db: history estimate: %w", err))
		}
		return n, nil
	}

	// Pick the driver: "" (history order alone), "digest", "deciders" or
	// an eq column.
	driver, best := "", estimateCap+1
	try := func(name, table string, cs []cond, pair bool) error {
		n, err := count(table, cs)
		// A pair's index is never less selective than either of its
		// columns alone, so it wins ties (both counts at the cap).
		if err == nil && (n < best || (n == best && pair)) {
			driver, best = name, n
		}
		return err
	}
	if digest != nil {
		if err := try("digest", "calls INDEXED BY calls_digest", []cond{*digest}, false); err != nil {
			return nil, err
		}
	}
	if partial != nil {
		if err := try("partial", "calls INDEXED BY "+partialIndex, append([]cond{partial("")}, keyConds("", "seq")...), false); err != nil {
			return nil, err
		}
	}
	if len(decider) > 0 {
		if err := try("deciders", "call_deciders", append(append([]cond(nil), decider...), keyConds("", "call_seq")...), false); err != nil {
			return nil, err
		}
	}
	for _, c := range eq {
		col := strings.Fields(c.sql)[0]
		if err := try(col, "calls INDEXED BY calls_"+col+"_created", append([]cond{c}, keyConds("", "seq")...), false); err != nil {
			return nil, err
		}
	}
	// Pairs with an index of their own, tried when both filters are set.
	// The actor-and-status index holds the final statuses only, and SQLite
	// uses a partial index only for a query that states its condition.
	for _, pair := range [][2]string{{"actor", "tool"}, {"actor", "status"}} {
		var cs []cond
		for _, c := range eq {
			if col := strings.Fields(c.sql)[0]; col == pair[0] || col == pair[1] {
				cs = append(cs, c)
			}
		}
		if len(cs) != 2 || best == 0 {
			continue
		}
		if pair[1] == "status" {
			if !queue.Status(f.Status).Terminal() {
				continue
			}
			cs = append(cs, finalStatus(""))
		}
		if err := try(pair[0]+"_"+pair[1], "calls INDEXED BY calls_"+pair[0]+"_"+pair[1]+"_created", append(cs, keyConds("", "seq")...), true); err != nil {
			return nil, err
		}
	}
	q := &historyQuery{empty: best == 0}
	var where []cond
	key, seq := "c.created_at", "c.seq"
	switch driver {
	case "deciders":
		q.deciders = true
		key, seq = "d.created_at", "d.call_seq"
		// CROSS JOIN keeps call_deciders as the outer loop.
		q.from = `call_deciders d CROSS JOIN calls c ON c.seq = d.call_seq`
		for _, c := range decider {
			where = append(where, cond{"d." + c.sql, c.args})
		}
		where = append(where, keyConds("d.", "call_seq")...)
	case "digest":
		q.from = `calls c INDEXED BY calls_digest`
	case "partial":
		q.from = `calls c INDEXED BY ` + partialIndex
	case "":
		q.from = `calls c INDEXED BY calls_created`
	case "actor_status":
		q.from = `calls c INDEXED BY calls_actor_status_created`
		where = append(where, finalStatus("c."))
	default:
		q.from = `calls c INDEXED BY calls_` + driver + `_created`
	}
	for _, c := range eq {
		where = append(where, cond{"c." + c.sql, c.args})
	}
	if digest != nil {
		where = append(where, cond{"c.digest >= ? AND c.digest < ?", digest.args})
	}
	if partial != nil {
		where = append(where, partial("c."))
	}
	if !q.deciders {
		where = append(where, keyConds("c.", "seq")...)
		if len(decider) > 0 {
			// One matching decider row is enough; its index finds it from
			// the call's created_at and seq.
			sub := "SELECT 1 FROM call_deciders d WHERE d.created_at = c.created_at AND d.call_seq = c.seq"
			var args []any
			for _, c := range decider {
				sub += " AND d." + c.sql
				args = append(args, c.args...)
			}
			where = append(where, cond{"EXISTS (" + sub + ")", args})
		}
	}
	q.where, q.args = conds(where)
	q.order = key + " DESC, " + seq + " DESC"
	return q, nil
}

// finalStatus is the condition of the partial index
// calls_actor_status_created, as the index states it: a status no decision
// changes any more.
func finalStatus(prefix string) cond {
	return cond{sql: prefix + "status NOT IN ('pending','approved')"}
}

func (q *historyQuery) sql(columns string) string {
	s := `SELECT ` + columns + ` FROM ` + q.from
	if len(q.where) > 0 {
		s += ` WHERE ` + strings.Join(q.where, " AND ")
	}
	return s + ` ORDER BY ` + q.order
}

// addApprovals adds the approvals of approvalsColumn to c.
func addApprovals(c *queue.Call, approvals string) error {
	if approvals == "[]" {
		return nil // most calls have none: nothing to decode
	}
	as, err := store.DecodeApprovals(c.ID, approvals)
	c.Approvals = append(c.Approvals, as...)
	sortApprovals(c.Approvals)
	return err
}

// sortApprovals puts a call's approvals in the order they were given,
// then by operator: the order every read of a call hands them out in.
// Sorted here, not by ORDER BY: the approvals' primary key is (call_id,
// operator), so SQLite would sort each call's approvals in a sorter of its
// own, which costs more than the few approvals a call has.
func sortApprovals(as []queue.Approval) {
	slices.SortFunc(as, func(a, b queue.Approval) int {
		return cmp.Or(a.At.Compare(b.At), strings.Compare(a.Operator, b.Operator))
	})
}

// History returns one page of calls matching f, newest first, and the
// cursor of the next page (0 when this page is the last).
func (d *DB) History(ctx context.Context, f queue.HistoryFilter) ([]*queue.Call, int64, error) {
	limit := f.PageSize()
	q, err := d.historyQuery(ctx, f)
	if err != nil || q.empty {
		return nil, 0, err
	}
	query := q.sql(qualified + ", " + approvalsColumn)
	if !q.deciders {
		query += limitClause(limit + 1)
	}
	rows, err := d.sql.QueryContext(ctx, query, q.args...)
	if err != nil {
		return nil, 0, classify(fmt.Errorf("db: history: %w", err))
	}
	defer rows.Close()
	var calls []*queue.Call
	for rows.Next() {
		c, cs, err := scanCallWith(rows, 1)
		if err != nil {
			return nil, 0, err
		}
		// Rows from call_deciders repeat a call once per matching decider,
		// next to each other in this order.
		if n := len(calls); n > 0 && calls[n-1].Seq == c.Seq {
			continue
		}
		if err := addApprovals(c, cs.approvals); err != nil {
			return nil, 0, err
		}
		calls = append(calls, c)
		if len(calls) > limit {
			break
		}
	}
	if err := rows.Err(); err != nil {
		return nil, 0, classify(fmt.Errorf("db: history: %w", err))
	}
	var next int64
	if len(calls) > limit {
		calls = calls[:limit]
		next = calls[limit-1].Seq
	}
	return calls, next, nil
}

// Timeline returns every audit entry about one call, oldest first, with
// details parsed. A call that does not exist is queue.ErrNotFound.
func (d *DB) Timeline(ctx context.Context, callID string) ([]audit.Entry, error) {
	return sqlq.Timeline(ctx, shared{d.sql}, callID)
}

// exportColumns are read for call exports: args stay as their stored
// canonical text, and the grant token itself is never exported.
const exportColumns = `c.seq, c.id, c.status, c.actor, c.audience, c.tool, c.target, c.args, c.rationale, c.digest,
	c.approvals_required, c.created_at, c.decide_by, c.decided_at, c.denied_by, c.denied_channel, c.deny_reason,
	c.grant_jti, c.grant_kid, c.grant_expires_at, c.redeemed_at, c.outcome_status, c.outcome_detail, c.outcome_at,
	c.redeemed_by, c.lease_until, c.resolution, c.resolved_by, c.resolved_channel, c.resolution_note,
	c.resolution_evidence, c.resolved_at, (SELECT r.revoked_at FROM grant_revocations r WHERE r.call_id = c.id)`

// ExportCalls streams every call matching f (Limit is ignored; After, when
// set, starts after that call) to w as "jsonl" or "csv", newest first, from
// one read snapshot and in constant memory, in the format queue.ExportCalls
// writes. Grant tokens are not exported.
func (d *DB) ExportCalls(ctx context.Context, f queue.HistoryFilter, w io.Writer, format string) error {
	return queue.ExportCalls(ctx, d.exportRows, f, w, format)
}

// exportRows streams the calls of an export (queue.ExportRows).
func (d *DB) exportRows(ctx context.Context, f queue.HistoryFilter, fn func(*queue.ExportRow) error) error {
	q, err := d.historyQuery(ctx, f)
	if err != nil {
		return err
	}
	if q.empty {
		return nil
	}
	return d.readSnapshot(ctx, func(db querier) error {
		rows, err := db.QueryContext(ctx, q.sql(exportColumns+", "+approvalsColumn), q.args...)
		if err != nil {
			return classify(fmt.Errorf("db: export calls: %w", err))
		}
		defer rows.Close()
		var last int64
		for rows.Next() {
			r, err := scanExportRow(rows)
			if err != nil {
				return err
			}
			if r.Seq == last {
				continue // the same call through another decider
			}
			last = r.Seq
			if err := fn(r); err != nil {
				return err
			}
		}
		if err := rows.Err(); err != nil {
			return classify(fmt.Errorf("db: export calls: %w", err))
		}
		return nil
	})
}

// scanExportRow reads a row of exportColumns and approvalsColumn.
func scanExportRow(rows *sql.Rows) (*queue.ExportRow, error) {
	var r queue.ExportRow
	var created, decideBy int64
	var decidedAt, grantExp, redeemedAt, outAt, leaseUntil, resolvedAt, revokedAt sql.NullInt64
	var deniedBy, deniedChannel, denyReason, jti, kid, outStatus, outDetail sql.NullString
	var redeemedBy, resolution, resolvedBy, resolvedChannel, note, evidence sql.NullString
	var approvals string
	if err := rows.Scan(&r.Seq, &r.ID, &r.Status, &r.Actor, &r.Audience, &r.Tool, &r.Target, &r.Args, &r.Rationale,
		&r.Digest, &r.ApprovalsRequired, &created, &decideBy, &decidedAt, &deniedBy, &deniedChannel, &denyReason,
		&jti, &kid, &grantExp, &redeemedAt, &outStatus, &outDetail, &outAt, &redeemedBy,
		&leaseUntil, &resolution, &resolvedBy, &resolvedChannel, &note, &evidence,
		&resolvedAt, &revokedAt, &approvals); err != nil {
		return nil, classify(fmt.Errorf("db: export calls: %w", err))
	}
	r.CreatedAt, r.DecideBy, r.DecidedAt = time.UnixMilli(created).UTC(), time.UnixMilli(decideBy).UTC(), fromMS(decidedAt)
	if deniedBy.Valid {
		r.Denial = &queue.Denial{By: deniedBy.String, Channel: deniedChannel.String, Reason: denyReason.String}
	}
	r.GrantJTI, r.GrantKID, r.GrantExpiresAt = jti.String, kid.String, fromMS(grantExp)
	r.RedeemedAt, r.RedeemedBy, r.LeaseUntil = fromMS(redeemedAt), redeemedBy.String, fromMS(leaseUntil)
	r.RevokedAt = fromMS(revokedAt)
	if outStatus.Valid {
		r.Outcome = &queue.Outcome{Status: outStatus.String, Detail: outDetail.String, At: fromMS(outAt)}
	}
	if resolution.Valid {
		r.Resolution = &queue.Resolution{Verdict: resolution.String, By: resolvedBy.String, Channel: resolvedChannel.String,
			Note: note.String, Evidence: evidence.String, At: fromMS(resolvedAt)}
	}
	var err error
	if r.Approvals, err = store.DecodeApprovals(r.ID, approvals); err != nil {
		return nil, err
	}
	sortApprovals(r.Approvals)
	return &r, nil
}
