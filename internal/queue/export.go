package queue

import (
	"bufio"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/canonical"
)

// ExportRow is one call as a store streams it for an export: what the call
// table holds but the grant token itself, which is never exported. Args is
// the arguments' canonical JSON text as stored. A zero time and an empty
// string are what the store holds as NULL.
type ExportRow struct {
	Seq                                       int64
	ID, Status, Actor, Audience, Tool, Target string
	Args                                      string
	Rationale, Digest                         string
	ApprovalsRequired                         int64
	Approvals                                 []Approval // oldest first, each with its passkey's name if one signed it
	CreatedAt, DecideBy, DecidedAt            time.Time
	Denial                                    *Denial // By, Channel and Reason; nil unless denied
	GrantJTI, GrantKID                        string
	GrantExpiresAt, RedeemedAt                time.Time
	RedeemedBy                                string // the API token that redeemed the grant
	LeaseUntil                                time.Time
	Outcome                                   *Outcome
	Resolution                                *Resolution
	RevokedAt                                 time.Time // when an operator revoked the grant; zero if never
}

// grantState is what became of the call's grant at now (Call.GrantState):
// "" for a call never approved.
func (r *ExportRow) grantState(now time.Time) string {
	c := Call{Status: Status(r.Status), GrantExpiresAt: r.GrantExpiresAt}
	if !r.RevokedAt.IsZero() {
		c.Revoked = &Revocation{At: r.RevokedAt}
	}
	return c.GrantState(now)
}

// ExportRows is how a store streams the calls of an export: every call
// matching f (Limit is ignored; After, when set, starts after that call),
// newest first, from one consistent read and in constant memory, each
// handed to fn, whose error stops the stream and is returned.
type ExportRows func(ctx context.Context, f HistoryFilter, fn func(*ExportRow) error) error

// ExportCalls writes the calls that rows streams for f to w as "jsonl" or
// "csv": the one format of call exports, whichever store holds them. JSONL
// has one canonical JSON object per call; CSV has a header row and one row
// per call, each cell kept from being read as a formula (audit.CSVCell).
// Stores implement History.ExportCalls with it.
func ExportCalls(ctx context.Context, rows ExportRows, f HistoryFilter, w io.Writer, format string) error {
	if format != "jsonl" && format != "csv" {
		return audit.ErrFormat
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	var cw *csv.Writer
	if format == "csv" {
		cw = csv.NewWriter(bw)
		if err := cw.Write(callCSVHeader); err != nil {
			return err
		}
	}
	now := f.At
	if now.IsZero() {
		now = time.Now()
	}
	var buf []byte
	record := make([]string, len(callCSVHeader))
	err := rows(ctx, f, func(r *ExportRow) error {
		if cw != nil {
			r.csv(record, now)
			if err := cw.Write(record); err != nil {
				return err
			}
		} else {
			var err error
			if buf, err = r.appendJSON(buf[:0], now); err != nil {
				return err
			}
			if _, err := bw.Write(buf); err != nil {
				return err
			}
		}
		return ctx.Err()
	})
	if err != nil {
		return err
	}
	if cw != nil {
		cw.Flush()
		if err := cw.Error(); err != nil {
			return err
		}
	}
	return bw.Flush()
}

var callCSVHeader = []string{"seq", "id", "created_at", "status", "actor", "audience", "tool", "target", "digest",
	"approvals_required", "approvals", "decided_at", "denied_by", "denied_channel", "deny_reason", "grant_jti",
	"grant_kid", "grant_expires_at", "redeemed_at", "redeemed_by_token", "lease_until", "outcome_status", "outcome_detail",
	"outcome_at", "resolution", "resolved_by", "resolved_channel", "resolved_at", "resolution_note", "resolution_evidence",
	"args", "rationale", "grant_state"}

// exportTime writes a time as RFC 3339 in UTC with milliseconds, "" for
// the zero time.
func exportTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// jsonTime is exportTime with null for the zero time.
func jsonTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return exportTime(t)
}

// jsonText is s, or null when s is empty (a NULL column).
func jsonText(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func (r *ExportRow) appendJSON(dst []byte, now time.Time) ([]byte, error) {
	args, err := canonical.ParseWith([]byte(r.Args), canonical.Options{MaxBytes: audit.MaxDetailsBytes,
		MaxDepth: canonical.MaxArgsDepth + 1, Numbers: canonical.NumbersFor(r.Tool)})
	if err != nil {
		return nil, fmt.Errorf("queue: export call %s: stored args do not parse: %w", r.ID, err)
	}
	approvals := make([]any, len(r.Approvals))
	for i, a := range r.Approvals {
		m := map[string]any{"operator": a.Operator, "channel": a.Channel, "at": exportTime(a.At)}
		if a.Passkey != nil {
			m["passkey"] = a.Passkey.Name
		}
		approvals[i] = m
	}
	var denial, outcome, resolution any
	if v := r.Resolution; v != nil {
		resolution = map[string]any{"verdict": v.Verdict, "by": v.By, "channel": v.Channel,
			"note": v.Note, "evidence": v.Evidence, "at": jsonTime(v.At)}
	}
	if d := r.Denial; d != nil {
		denial = map[string]any{"by": d.By, "channel": d.Channel, "reason": d.Reason}
	}
	if o := r.Outcome; o != nil {
		outcome = map[string]any{"status": o.Status, "detail": o.Detail, "at": jsonTime(o.At)}
	}
	o := map[string]any{
		"seq": r.Seq, "id": r.ID, "status": r.Status, "actor": r.Actor, "audience": r.Audience, "tool": r.Tool,
		"target": r.Target, "args": args, "rationale": r.Rationale, "digest": r.Digest,
		"approvals_required": r.ApprovalsRequired, "approvals": approvals, "created_at": exportTime(r.CreatedAt),
		"decide_by": exportTime(r.DecideBy), "decided_at": jsonTime(r.DecidedAt), "denial": denial,
		"grant_jti": jsonText(r.GrantJTI), "grant_kid": jsonText(r.GrantKID), "grant_expires_at": jsonTime(r.GrantExpiresAt),
		"redeemed_at": jsonTime(r.RedeemedAt), "redeemed_by_token": jsonText(r.RedeemedBy),
		"lease_until": jsonTime(r.LeaseUntil), "outcome": outcome, "resolution": resolution,
		"grant_state": jsonText(r.grantState(now)),
	}
	dst, err = canonical.Append(dst, o)
	if err != nil {
		return nil, fmt.Errorf("queue: export call %s: %w", r.ID, err)
	}
	return append(dst, '\n'), nil
}

func (r *ExportRow) csv(record []string, now time.Time) {
	parts := make([]string, len(r.Approvals))
	for i, a := range r.Approvals {
		parts[i] = a.Operator + " via " + a.Channel + " at " + exportTime(a.At)
	}
	var d Denial
	if r.Denial != nil {
		d = *r.Denial
	}
	var o Outcome
	if r.Outcome != nil {
		o = *r.Outcome
	}
	var v Resolution
	if r.Resolution != nil {
		v = *r.Resolution
	}
	vals := []string{strconv.FormatInt(r.Seq, 10), r.ID, exportTime(r.CreatedAt), r.Status, r.Actor, r.Audience, r.Tool,
		r.Target, r.Digest, strconv.FormatInt(r.ApprovalsRequired, 10), strings.Join(parts, "; "), exportTime(r.DecidedAt),
		d.By, d.Channel, d.Reason, r.GrantJTI, r.GrantKID, exportTime(r.GrantExpiresAt),
		exportTime(r.RedeemedAt), r.RedeemedBy, exportTime(r.LeaseUntil), o.Status, o.Detail, exportTime(o.At),
		v.Verdict, v.By, v.Channel, exportTime(v.At), v.Note, v.Evidence, r.Args, r.Rationale, r.grantState(now)}
	for i, s := range vals {
		record[i] = audit.CSVCell(s)
	}
}
