package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/store"
)

// approvalsColumn is every approval of the row's call as a JSON array, in
// the order loadCall reads them.
const approvalsColumn = `COALESCE((SELECT json_agg(json_build_object('operator', a.operator, 'channel', a.channel, 'at', a.at, 'comment', a.comment,
	'method', a.method, 'digest', a.digest, 'via', a.via, 'presented_page', a.presented_page, 'presented_at', a.presented_at,
	'passkey_id', encode(a.passkey_id, 'hex'), 'passkey_name', a.passkey_name, 'for', a.behalf)
	ORDER BY a.at, a.operator) FROM approvals a WHERE a.call_id = c.id)::text, '[]')`

func scanCallWithApprovals(r rowScanner) (*queue.Call, error) {
	var approvals string
	c, err := scanCall(r, &approvals)
	if err != nil {
		return nil, err
	}
	if c.Approvals, err = store.DecodeApprovals(c.ID, approvals); err != nil {
		return nil, err
	}
	return c, nil
}

// historyWhere turns a filter into the conditions on calls c, in history
// order (created_at, seq) newest first. PostgreSQL's planner picks the
// index from its statistics; every filter has one in history order.
func (d *DB) historyWhere(ctx context.Context, f queue.HistoryFilter) (string, []any, error) {
	if err := f.Check(); err != nil {
		return "", nil, err
	}
	var where []string
	var args []any
	add := func(cond string, vs ...any) {
		for _, v := range vs {
			args = append(args, v)
			cond = strings.Replace(cond, "?", "$"+strconv.Itoa(len(args)), 1)
		}
		where = append(where, cond)
	}
	if f.Actor != "" {
		add("c.actor = ?", f.Actor)
	}
	if f.Tool != "" {
		add("c.tool = ?", f.Tool)
	}
	if f.Status != "" {
		add("c.status = ?", f.Status)
	}
	switch f.Outcome {
	case "":
	case queue.OutcomeFilterOpen:
		add("c.status = 'redeemed' AND c.outcome_status IS NULL")
	case queue.OutcomeFilterUnresolved:
		add(unresolvedWhere)
	case queue.OutcomeFilterResolved:
		add("c.resolution IS NOT NULL")
	case queue.OutcomeFilterExecuted, queue.OutcomeFilterNotExecuted:
		add("c.resolution IS NOT NULL AND c.resolution = ?", f.Outcome)
	default: // an outcome status, checked by Check
		add("c.outcome_status = ?", f.Outcome)
	}
	if p := f.Digest(); p != "" {
		// Hex digits only (Check), so nothing in p is a LIKE wildcard.
		add("c.digest LIKE ?", p+"%")
	}
	if !f.Since.IsZero() {
		add("c.created_at >= ?", f.Since.UnixMilli())
	}
	if !f.Until.IsZero() {
		add("c.created_at < ?", f.Until.UnixMilli())
	}
	if f.After > 0 {
		var at int64
		err := d.pool.QueryRow(ctx, `SELECT created_at FROM calls WHERE seq = $1`, f.After).Scan(&at)
		if errors.Is(err, pgx.ErrNoRows) {
			return "", nil, &queue.FilterError{Reason: "the cursor names no call"}
		}
		if err != nil {
			return "", nil, classify(fmt.Errorf("pgstore: history cursor: %w", err))
		}
		add("(c.created_at, c.seq) < (?, ?)", at, f.After)
	}
	if f.Operator != "" || f.Channel != "" {
		sub := "SELECT 1 FROM call_deciders d WHERE d.created_at = c.created_at AND d.call_seq = c.seq"
		if f.Operator != "" {
			args = append(args, f.Operator)
			sub += " AND d.operator = $" + strconv.Itoa(len(args))
		}
		if f.Channel != "" {
			args = append(args, f.Channel)
			sub += " AND d.channel = $" + strconv.Itoa(len(args))
		}
		where = append(where, "EXISTS ("+sub+")")
	}
	s := ""
	if len(where) > 0 {
		s = " WHERE " + strings.Join(where, " AND ")
	}
	return s, args, nil
}

// History returns one page of calls matching f, newest first, and the
// cursor of the next page (0 when this page is the last).
func (d *DB) History(ctx context.Context, f queue.HistoryFilter) ([]*queue.Call, int64, error) {
	limit := f.PageSize()
	where, args, err := d.historyWhere(ctx, f)
	if err != nil {
		return nil, 0, err
	}
	args = append(args, limit+1)
	rows, err := d.pool.Query(ctx, `SELECT `+qualified+`, `+approvalsColumn+` FROM calls c`+where+
		` ORDER BY c.created_at DESC, c.seq DESC LIMIT $`+strconv.Itoa(len(args)), args...)
	if err != nil {
		return nil, 0, classify(fmt.Errorf("pgstore: history: %w", err))
	}
	defer rows.Close()
	var calls []*queue.Call
	for rows.Next() {
		c, err := scanCallWithApprovals(rows)
		if err != nil {
			return nil, 0, err
		}
		calls = append(calls, c)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, classify(fmt.Errorf("pgstore: history: %w", err))
	}
	var next int64
	if len(calls) > limit {
		calls = calls[:limit]
		next = calls[limit-1].Seq
	}
	return calls, next, nil
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
	where, args, err := d.historyWhere(ctx, f)
	if err != nil {
		return err
	}
	return d.readSnapshot(ctx, func(q querier) error {
		rows, err := q.Query(ctx, `SELECT `+exportColumns+`, `+approvalsColumn+` FROM calls c`+where+
			` ORDER BY c.created_at DESC, c.seq DESC`, args...)
		if err != nil {
			return classify(fmt.Errorf("pgstore: export calls: %w", err))
		}
		defer rows.Close()
		for rows.Next() {
			r, err := scanExportRow(rows)
			if err != nil {
				return err
			}
			if err := fn(r); err != nil {
				return err
			}
		}
		if err := rows.Err(); err != nil {
			return classify(fmt.Errorf("pgstore: export calls: %w", err))
		}
		return nil
	})
}

// scanExportRow reads a row of exportColumns and approvalsColumn.
func scanExportRow(rows pgx.Rows) (*queue.ExportRow, error) {
	var r queue.ExportRow
	var rationale, denyReason, outDetail, note []byte
	var required int32
	var created, decideBy int64
	var decidedAt, grantExp, redeemedAt, outAt, leaseUntil, resolvedAt, revokedAt *int64
	var deniedBy, deniedChannel, jti, kid, outStatus *string
	var redeemedBy, resolution, resolvedBy, resolvedChannel, evidence *string
	var approvals string
	if err := rows.Scan(&r.Seq, &r.ID, &r.Status, &r.Actor, &r.Audience, &r.Tool, &r.Target, &r.Args, &rationale,
		&r.Digest, &required, &created, &decideBy, &decidedAt, &deniedBy, &deniedChannel, &denyReason,
		&jti, &kid, &grantExp, &redeemedAt, &outStatus, &outDetail, &outAt, &redeemedBy,
		&leaseUntil, &resolution, &resolvedBy, &resolvedChannel, &note, &evidence, &resolvedAt, &revokedAt,
		&approvals); err != nil {
		return nil, classify(fmt.Errorf("pgstore: export calls: %w", err))
	}
	r.Rationale, r.ApprovalsRequired = string(rationale), int64(required)
	r.CreatedAt, r.DecideBy, r.DecidedAt = time.UnixMilli(created).UTC(), time.UnixMilli(decideBy).UTC(), fromMS(decidedAt)
	if deniedBy != nil {
		r.Denial = &queue.Denial{By: *deniedBy, Channel: deref(deniedChannel), Reason: string(denyReason)}
	}
	r.GrantJTI, r.GrantKID, r.GrantExpiresAt = deref(jti), deref(kid), fromMS(grantExp)
	r.RedeemedAt, r.RedeemedBy, r.LeaseUntil = fromMS(redeemedAt), deref(redeemedBy), fromMS(leaseUntil)
	r.RevokedAt = fromMS(revokedAt)
	if outStatus != nil {
		r.Outcome = &queue.Outcome{Status: *outStatus, Detail: string(outDetail), At: fromMS(outAt)}
	}
	if resolution != nil {
		r.Resolution = &queue.Resolution{Verdict: *resolution, By: deref(resolvedBy), Channel: deref(resolvedChannel),
			Note: string(note), Evidence: deref(evidence), At: fromMS(resolvedAt)}
	}
	var err error
	if r.Approvals, err = store.DecodeApprovals(r.ID, approvals); err != nil {
		return nil, err
	}
	return &r, nil
}
