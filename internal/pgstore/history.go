package pgstore

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/queue"
)

// approvalsColumn is every approval of the row's call as a JSON array, in
// the order loadCall reads them.
const approvalsColumn = `COALESCE((SELECT json_agg(json_build_object('operator', a.operator, 'channel', a.channel, 'at', a.at, 'comment', a.comment,
	'passkey_id', encode(a.passkey_id, 'hex'), 'passkey_name', a.passkey_name)
	ORDER BY a.at, a.operator) FROM approvals a WHERE a.call_id = c.id)::text, '[]')`

type approvalJSON struct {
	Operator    string  `json:"operator"`
	Channel     string  `json:"channel"`
	At          int64   `json:"at"`
	Comment     string  `json:"comment"`
	PasskeyID   *string `json:"passkey_id"` // hex
	PasskeyName *string `json:"passkey_name"`
}

// approval reads one approval of a history row; its passkey's evidence is
// left out (it is in the audit entry).
func (a approvalJSON) approval() queue.Approval {
	out := queue.Approval{Operator: a.Operator, Channel: a.Channel, At: time.UnixMilli(a.At).UTC(), Comment: a.Comment}
	if a.PasskeyID != nil {
		id, _ := hex.DecodeString(*a.PasskeyID)
		out.Passkey = &queue.ApprovalPasskey{CredentialID: id, Name: deref(a.PasskeyName)}
	}
	return out
}

func scanCallWithApprovals(r rowScanner) (*queue.Call, error) {
	var approvals string
	c, err := scanCall(r, &approvals)
	if err != nil {
		return nil, err
	}
	var as []approvalJSON
	if err := json.Unmarshal([]byte(approvals), &as); err != nil {
		return nil, fmt.Errorf("pgstore: approvals of %s: %w", c.ID, err)
	}
	for _, a := range as {
		c.Approvals = append(c.Approvals, a.approval())
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
	c.resolution_evidence, c.resolved_at`

// ExportCalls streams every call matching f (Limit is ignored; After, when
// set, starts after that call) to w as "jsonl" or "csv", newest first, from
// one read snapshot and in constant memory. Grant tokens are not exported.
func (d *DB) ExportCalls(ctx context.Context, f queue.HistoryFilter, w io.Writer, format string) error {
	if format != "jsonl" && format != "csv" {
		return audit.ErrFormat
	}
	where, args, err := d.historyWhere(ctx, f)
	if err != nil {
		return err
	}
	return d.readSnapshot(ctx, func(q querier) error {
		bw := bufio.NewWriterSize(w, 64<<10)
		var cw *csv.Writer
		if format == "csv" {
			cw = csv.NewWriter(bw)
			if err := cw.Write(callCSVHeader); err != nil {
				return err
			}
		}
		rows, err := q.Query(ctx, `SELECT `+exportColumns+`, `+approvalsColumn+` FROM calls c`+where+
			` ORDER BY c.created_at DESC, c.seq DESC`, args...)
		if err != nil {
			return classify(fmt.Errorf("pgstore: export calls: %w", err))
		}
		defer rows.Close()
		var buf []byte
		record := make([]string, len(callCSVHeader))
		for rows.Next() {
			var r exportRow
			var rationale, denyReason, outDetail, note []byte
			var required int32
			if err := rows.Scan(&r.seq, &r.id, &r.status, &r.actor, &r.audience, &r.tool, &r.target, &r.args, &rationale,
				&r.digest, &required, &r.created, &r.decideBy, &r.decidedAt, &r.deniedBy, &r.deniedChannel, &denyReason,
				&r.jti, &r.kid, &r.grantExp, &r.redeemedAt, &r.outStatus, &outDetail, &r.outAt, &r.redeemedBy,
				&r.leaseUntil, &r.resolution, &r.resolvedBy, &r.resolvedChannel, &note, &r.evidence, &r.resolvedAt,
				&r.approvals); err != nil {
				return classify(fmt.Errorf("pgstore: export calls: %w", err))
			}
			r.rationale, r.required = string(rationale), int64(required)
			if note != nil {
				s := string(note)
				r.resolutionNote = &s
			}
			if denyReason != nil {
				s := string(denyReason)
				r.denyReason = &s
			}
			if outDetail != nil {
				s := string(outDetail)
				r.outDetail = &s
			}
			var as []approvalJSON
			if err := json.Unmarshal([]byte(r.approvals), &as); err != nil {
				return fmt.Errorf("pgstore: approvals of %s: %w", r.id, err)
			}
			if cw != nil {
				r.csv(record, as)
				if err := cw.Write(record); err != nil {
					return err
				}
			} else {
				if buf, err = r.appendJSON(buf[:0], as); err != nil {
					return err
				}
				if _, err := bw.Write(buf); err != nil {
					return err
				}
			}
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if err := rows.Err(); err != nil {
			return classify(fmt.Errorf("pgstore: export calls: %w", err))
		}
		return flush(bw, cw)
	})
}

// exportRow is one call as exported; the same shape as internal/db's.
type exportRow struct {
	seq                                                        int64
	id, status, actor, audience, tool, target, args, rationale string
	digest                                                     string
	required, created, decideBy                                int64
	decidedAt, grantExp, redeemedAt, outAt                     *int64
	deniedBy, deniedChannel, denyReason, jti, kid, outStatus   *string
	outDetail                                                  *string
	redeemedBy, resolution, resolvedBy, resolvedChannel        *string
	resolutionNote, evidence                                   *string
	leaseUntil, resolvedAt                                     *int64
	approvals                                                  string
}

var callCSVHeader = []string{"seq", "id", "created_at", "status", "actor", "audience", "tool", "target", "digest",
	"approvals_required", "approvals", "decided_at", "denied_by", "denied_channel", "deny_reason", "grant_jti",
	"grant_kid", "grant_expires_at", "redeemed_at", "redeemed_by_token", "lease_until", "outcome_status", "outcome_detail",
	"outcome_at", "resolution", "resolved_by", "resolved_channel", "resolved_at", "resolution_note", "resolution_evidence",
	"args", "rationale"}

// exportTime writes unix milliseconds as RFC 3339 with milliseconds.
func exportTime(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

func nullTime(n *int64) any {
	if n == nil {
		return nil
	}
	return exportTime(*n)
}

func nullText(s *string) any {
	if s == nil {
		return nil
	}
	return *s
}

func (r *exportRow) appendJSON(dst []byte, as []approvalJSON) ([]byte, error) {
	args, err := canonical.ParseWith([]byte(r.args), canonical.Options{MaxBytes: audit.MaxDetailsBytes,
		MaxDepth: canonical.MaxArgsDepth + 1, Numbers: canonical.NumbersFor(r.tool)})
	if err != nil {
		return nil, fmt.Errorf("pgstore: call %s: stored args do not parse: %w", r.id, err)
	}
	approvals := make([]any, len(as))
	for i, a := range as {
		m := map[string]any{"operator": a.Operator, "channel": a.Channel, "at": exportTime(a.At)}
		if a.PasskeyName != nil {
			m["passkey"] = *a.PasskeyName
		}
		approvals[i] = m
	}
	var denial, outcome, resolution any
	if r.resolution != nil {
		resolution = map[string]any{"verdict": *r.resolution, "by": deref(r.resolvedBy), "channel": deref(r.resolvedChannel),
			"note": deref(r.resolutionNote), "evidence": deref(r.evidence), "at": nullTime(r.resolvedAt)}
	}
	if r.deniedBy != nil {
		denial = map[string]any{"by": *r.deniedBy, "channel": deref(r.deniedChannel), "reason": deref(r.denyReason)}
	}
	if r.outStatus != nil {
		outcome = map[string]any{"status": *r.outStatus, "detail": deref(r.outDetail), "at": nullTime(r.outAt)}
	}
	o := map[string]any{
		"seq": r.seq, "id": r.id, "status": r.status, "actor": r.actor, "audience": r.audience, "tool": r.tool,
		"target": r.target, "args": args, "rationale": r.rationale, "digest": r.digest,
		"approvals_required": r.required, "approvals": approvals, "created_at": exportTime(r.created),
		"decide_by": exportTime(r.decideBy), "decided_at": nullTime(r.decidedAt), "denial": denial,
		"grant_jti": nullText(r.jti), "grant_kid": nullText(r.kid), "grant_expires_at": nullTime(r.grantExp),
		"redeemed_at": nullTime(r.redeemedAt), "redeemed_by_token": nullText(r.redeemedBy),
		"lease_until": nullTime(r.leaseUntil), "outcome": outcome, "resolution": resolution,
	}
	dst, err = canonical.Append(dst, o)
	if err != nil {
		return nil, fmt.Errorf("pgstore: export call %s: %w", r.id, err)
	}
	return append(dst, '\n'), nil
}

func (r *exportRow) csv(record []string, as []approvalJSON) {
	t := func(n *int64) string {
		if n == nil {
			return ""
		}
		return exportTime(*n)
	}
	parts := make([]string, len(as))
	for i, a := range as {
		parts[i] = a.Operator + " via " + a.Channel + " at " + exportTime(a.At)
	}
	vals := []string{strconv.FormatInt(r.seq, 10), r.id, exportTime(r.created), r.status, r.actor, r.audience, r.tool,
		r.target, r.digest, strconv.FormatInt(r.required, 10), strings.Join(parts, "; "), t(r.decidedAt),
		deref(r.deniedBy), deref(r.deniedChannel), deref(r.denyReason), deref(r.jti), deref(r.kid), t(r.grantExp),
		t(r.redeemedAt), deref(r.redeemedBy), t(r.leaseUntil), deref(r.outStatus), deref(r.outDetail), t(r.outAt),
		deref(r.resolution), deref(r.resolvedBy), deref(r.resolvedChannel), t(r.resolvedAt), deref(r.resolutionNote),
		deref(r.evidence), r.args, r.rationale}
	for i, v := range vals {
		record[i] = csvCell(v)
	}
}
