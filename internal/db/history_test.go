package db

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/store/sqlq"
)

// historyFixture makes calls of two actors and two tools with every kind of
// ending, decided by three operators through two channels, with creation
// times that sometimes tie.
func historyFixture(t *testing.T) (*auditHarness, []*queue.Call) {
	t.Helper()
	h := newAuditHarness(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	agents := []queue.Principal{h.agent, {Actor: "agent:other", Audience: "pay-host"}}
	var ids []string
	for i := range 90 {
		h.clock.Advance(time.Duration(rng.IntN(2)) * time.Millisecond)
		who := agents[rng.IntN(2)]
		decision := rng.IntN(7)
		if i%30 == 0 {
			// A rare actor whose calls op:bob decides.
			who, decision = queue.Principal{Actor: "agent:rare", Audience: "pay-host"}, 6
		}
		var c *queue.Call
		if rng.IntN(3) == 0 {
			c = h.submit(t, who, fmt.Sprintf(`{"tool":"test.dual","target":"service:s","args":{"version":"v%d"}}`, i))
		} else {
			c = h.submit(t, who, payBody(i+1))
		}
		ids = append(ids, c.ID)
		var err error
		switch decision {
		case 0: // stays pending
		case 1:
			_, err = h.q.Cancel(ctx, who, c.ID)
		case 2:
			_, err = h.q.Deny(ctx, "op:carl", audit.ChannelWeb, c.ID, "no")
		case 3:
			// Approve, then the same operator denies through another channel
			// (a pending two-approver call), or the call is granted.
			if _, err = h.q.Approve(ctx, "op:ann", audit.ChannelWeb, c.ID, c.Digest); err == nil && c.ApprovalsRequired == 2 {
				_, err = h.q.Deny(ctx, "op:ann", audit.ChannelCLI, c.ID, "changed my mind")
			}
		case 4:
			if _, err = h.q.Approve(ctx, "op:ann", audit.ChannelWeb, c.ID, c.Digest); err == nil && c.ApprovalsRequired == 2 {
				_, err = h.q.Approve(ctx, "op:bob", audit.ChannelWeb, c.ID, c.Digest)
			}
		default:
			var a *queue.Call
			if a, err = h.q.Approve(ctx, "op:bob", audit.ChannelCLI, c.ID, c.Digest); err == nil && c.ApprovalsRequired == 2 {
				a, err = h.q.Approve(ctx, "op:carl", audit.ChannelCLI, c.ID, c.Digest)
			}
			if err == nil && rng.IntN(2) == 0 {
				_, err = h.q.Redeem(ctx, who, []byte(redeemBody(a)))
			}
		}
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	ids = append(ids, settleRedeemed(t, h, ids)...)
	calls := make([]*queue.Call, len(ids))
	for i, id := range ids {
		c, err := h.d.Store().Call(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		calls[i] = c
	}
	// Newest first: by creation time, then seq.
	slices.SortFunc(calls, func(a, b *queue.Call) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return int(b.Seq - a.Seq)
	})
	return h, calls
}

// settleRedeemed gives the fixture's redeemed calls every ending after
// redemption: reported outcomes, leases that lapse (test.pay's 5 minutes)
// or still run (test.dual's 2 hours), resolutions and a late report.
//
// It makes more redeemed calls for the purpose and returns their ids.
func settleRedeemed(t *testing.T, h *auditHarness, ids []string) []string {
	t.Helper()
	ctx := context.Background()
	var more []string
	for i := range 24 {
		h.clock.Advance(time.Millisecond)
		who := []queue.Principal{h.agent, {Actor: "agent:other", Audience: "pay-host"}}[i%2]
		var c *queue.Call
		if i%3 == 2 {
			c = h.submit(t, who, fmt.Sprintf(`{"tool":"test.dual","target":"service:s","args":{"version":"w%d"}}`, i))
			if _, err := h.q.Approve(ctx, "op:ann", audit.ChannelWeb, c.ID, c.Digest); err != nil {
				t.Fatal(err)
			}
		} else {
			c = h.submit(t, who, payBody(1000+i))
		}
		a, err := h.q.Approve(ctx, "op:bob", audit.ChannelCLI, c.ID, c.Digest)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.q.Redeem(ctx, who, []byte(redeemBody(a))); err != nil {
			t.Fatal(err)
		}
		more = append(more, c.ID)
	}
	var redeemed []*queue.Call
	for _, id := range append(slices.Clone(ids), more...) {
		c, err := h.d.Store().Call(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if c.Status == queue.StatusRedeemed {
			redeemed = append(redeemed, c)
		}
	}
	report := func(c *queue.Call, status string) {
		if _, err := h.q.ReportOutcome(ctx, queue.Principal{Actor: c.Actor, Audience: c.Audience}, c.ID, status, "d"); err != nil {
			t.Fatalf("report %s of %s: %v", status, c.ID, err)
		}
	}
	resolve := func(c *queue.Call, verdict string) {
		if _, err := h.q.Resolve(ctx, "op:dan", audit.ChannelWeb, c.ID, verdict, "checked the ledger", "https://ledger.example/"+c.ID); err != nil {
			t.Fatalf("resolve %s: %v", c.ID, err)
		}
	}
	for i, c := range redeemed {
		switch i % 6 {
		case 0:
			report(c, queue.OutcomeSucceeded)
		case 1:
			report(c, queue.OutcomeFailed)
		case 2:
			report(c, queue.OutcomeUnknown)
		case 3:
			report(c, queue.OutcomeUnknown)
			resolve(c, queue.VerdictNotExecuted)
		}
	}
	h.clock.Advance(6 * time.Minute)
	if n, err := h.q.ExpireLeases(ctx); err != nil || n == 0 {
		t.Fatalf("ExpireLeases = %d, %v; want some test.pay leases lapsed", n, err)
	}
	for i, c := range redeemed {
		if c.Tool != "test.pay" {
			continue
		}
		switch i % 6 {
		case 4:
			resolve(c, queue.VerdictExecuted)
		case 5:
			if i%12 == 5 {
				report(c, queue.OutcomeSucceeded) // late: replaces lease_expired
			}
		}
	}
	return more
}

// outcomeMatches applies HistoryFilter.Outcome to c.
func outcomeMatches(c *queue.Call, outcome string) bool {
	switch outcome {
	case "":
		return true
	case queue.OutcomeFilterOpen:
		return c.OutcomeOpen()
	case queue.OutcomeFilterUnresolved:
		return c.Unresolved()
	case queue.OutcomeFilterResolved:
		return c.Resolution != nil
	case queue.OutcomeFilterExecuted, queue.OutcomeFilterNotExecuted:
		return c.Resolution != nil && c.Resolution.Verdict == outcome
	}
	return c.Outcome != nil && c.Outcome.Status == outcome
}

// decidedBy reports whether operator (or anyone, when empty) decided c
// through channel (or any, when empty).
func decidedBy(c *queue.Call, operator, channel string) bool {
	match := func(op, ch string) bool {
		return (operator == "" || op == operator) && (channel == "" || ch == channel)
	}
	for _, a := range c.Approvals {
		if match(a.Operator, a.Channel) {
			return true
		}
	}
	return c.Denial != nil && match(c.Denial.By, c.Denial.Channel)
}

// want applies f to the fixture in Go.
func want(calls []*queue.Call, f queue.HistoryFilter) []string {
	prefix := strings.ToLower(strings.ReplaceAll(f.DigestPrefix, " ", ""))
	var out []string
	for _, c := range calls {
		switch {
		case f.Actor != "" && c.Actor != f.Actor,
			f.Tool != "" && c.Tool != f.Tool,
			f.Status != "" && string(c.Status) != f.Status,
			(f.Operator != "" || f.Channel != "") && !decidedBy(c, f.Operator, f.Channel),
			!f.Since.IsZero() && c.CreatedAt.Before(f.Since),
			!f.Until.IsZero() && !c.CreatedAt.Before(f.Until),
			!strings.HasPrefix(c.Digest, prefix),
			!outcomeMatches(c, f.Outcome):
			continue
		}
		out = append(out, c.ID)
	}
	return out
}

// allPages reads every page of f.
func allPages(t *testing.T, d *DB, f queue.HistoryFilter) []string {
	t.Helper()
	var out []string
	seen := map[string]bool{}
	for pages := 0; ; pages++ {
		if pages > 100 {
			t.Fatal("paging does not end")
		}
		calls, next, err := d.History(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		if len(calls) > max(f.Limit, 1) {
			t.Fatalf("page of %d calls, limit %d", len(calls), f.Limit)
		}
		for _, c := range calls {
			if seen[c.ID] {
				t.Fatalf("call %s on two pages", c.ID)
			}
			seen[c.ID] = true
			out = append(out, c.ID)
		}
		if next == 0 {
			return out
		}
		if len(calls) != f.Limit {
			t.Fatalf("a page of %d calls (limit %d) with a next cursor", len(calls), f.Limit)
		}
		f.After = next
	}
}

func TestHistoryFilters(t *testing.T) {
	h, calls := historyFixture(t)
	mid := calls[len(calls)/2].CreatedAt
	digest := calls[10].Digest
	tests := []struct {
		name string
		f    queue.HistoryFilter
	}{
		{"all", queue.HistoryFilter{}},
		{"actor", queue.HistoryFilter{Actor: "agent:other"}},
		{"tool", queue.HistoryFilter{Tool: "test.dual"}},
		{"status denied", queue.HistoryFilter{Status: "denied"}},
		{"status pending", queue.HistoryFilter{Status: "pending"}},
		{"status redeemed", queue.HistoryFilter{Status: "redeemed"}},
		{"status cancelled", queue.HistoryFilter{Status: "cancelled"}},
		{"operator", queue.HistoryFilter{Operator: "op:ann"}},
		{"operator in quorum", queue.HistoryFilter{Operator: "op:carl"}},
		{"channel web", queue.HistoryFilter{Channel: audit.ChannelWeb}},
		{"channel cli", queue.HistoryFilter{Channel: audit.ChannelCLI}},
		{"operator and channel", queue.HistoryFilter{Operator: "op:ann", Channel: audit.ChannelCLI}},
		{"operator and status", queue.HistoryFilter{Operator: "op:bob", Status: "approved"}},
		{"actor and tool", queue.HistoryFilter{Actor: h.agent.Actor, Tool: "test.pay"}},
		{"actor and status", queue.HistoryFilter{Actor: "agent:other", Status: "denied"}},
		{"actor and status redeemed", queue.HistoryFilter{Actor: h.agent.Actor, Status: "redeemed"}},
		{"actor and status pending", queue.HistoryFilter{Actor: h.agent.Actor, Status: "pending"}},
		{"actor, tool and status", queue.HistoryFilter{Actor: "agent:other", Tool: "test.dual", Status: "approved"}},
		{"since", queue.HistoryFilter{Since: mid}},
		{"until", queue.HistoryFilter{Until: mid}},
		{"window and operator", queue.HistoryFilter{Since: calls[70].CreatedAt, Until: calls[20].CreatedAt, Operator: "op:bob"}},
		{"digest prefix in groups", queue.HistoryFilter{DigestPrefix: strings.ToUpper(digest[:4] + " " + digest[4:6])}},
		{"whole digest", queue.HistoryFilter{DigestPrefix: digest}},
		{"nobody", queue.HistoryFilter{Operator: "op:nobody"}},
		{"rare actor and operator", queue.HistoryFilter{Actor: "agent:rare", Operator: "op:bob"}},
		{"rare actor and channel", queue.HistoryFilter{Actor: "agent:rare", Channel: audit.ChannelCLI, Status: "redeemed"}},
		{"unresolved", queue.HistoryFilter{Outcome: queue.OutcomeFilterUnresolved}},
		{"unresolved of an actor", queue.HistoryFilter{Outcome: queue.OutcomeFilterUnresolved, Actor: "agent:other"}},
		{"open leases", queue.HistoryFilter{Outcome: queue.OutcomeFilterOpen}},
		{"succeeded", queue.HistoryFilter{Outcome: queue.OutcomeFilterSucceeded}},
		{"failed", queue.HistoryFilter{Outcome: queue.OutcomeFilterFailed}},
		{"unknown", queue.HistoryFilter{Outcome: queue.OutcomeFilterUnknown}},
		{"lease expired", queue.HistoryFilter{Outcome: queue.OutcomeFilterLeaseExpired}},
		{"resolved", queue.HistoryFilter{Outcome: queue.OutcomeFilterResolved}},
		{"executed", queue.HistoryFilter{Outcome: queue.OutcomeFilterExecuted}},
		{"not executed by an operator", queue.HistoryFilter{Outcome: queue.OutcomeFilterNotExecuted, Operator: "op:bob"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := want(calls, tt.f)
			if tt.name != "nobody" && len(w) == 0 {
				t.Fatal("the fixture has no call for this filter; the case tests nothing")
			}
			for _, limit := range []int{7, 500} {
				f := tt.f
				f.Limit = limit
				if got := allPages(t, h.d, f); !slices.Equal(got, w) {
					t.Errorf("limit %d: got %d calls %v\nwant %d %v", limit, len(got), got, len(w), w)
				}
			}
		})
	}
}

// TestHistoryPlan checks that the rarest filter drives the query.
func TestHistoryPlan(t *testing.T) {
	h, calls := historyFixture(t)
	tests := []struct {
		f    queue.HistoryFilter
		from string
	}{
		{queue.HistoryFilter{}, "calls c INDEXED BY calls_created"},
		{queue.HistoryFilter{Since: calls[10].CreatedAt}, "calls c INDEXED BY calls_created"},
		{queue.HistoryFilter{Actor: "agent:rare", Operator: "op:bob"}, "calls c INDEXED BY calls_actor_created"},
		{queue.HistoryFilter{Actor: "agent:bot", Operator: "op:carl", Channel: audit.ChannelCLI}, "call_deciders d CROSS JOIN calls c ON c.seq = d.call_seq"},
		{queue.HistoryFilter{Status: "pending", Tool: "test.pay"}, "calls c INDEXED BY calls_status_created"},
		// The actor-and-status index holds final statuses only.
		{queue.HistoryFilter{Status: "pending", Tool: "test.pay", Actor: "agent:bot"}, "calls c INDEXED BY calls_status_created"},
		{queue.HistoryFilter{Status: "denied", Actor: "agent:bot"}, "calls c INDEXED BY calls_actor_status_created"},
		{queue.HistoryFilter{Status: "redeemed", Actor: "agent:bot"}, "calls c INDEXED BY calls_actor_status_created"},
		{queue.HistoryFilter{Tool: "test.dual", Actor: "agent:bot"}, "calls c INDEXED BY calls_actor_tool_created"},
		{queue.HistoryFilter{Actor: "agent:bot", DigestPrefix: calls[3].Digest[:6]}, "calls c INDEXED BY calls_digest"},
		{queue.HistoryFilter{Outcome: queue.OutcomeFilterUnresolved}, "calls c INDEXED BY calls_unresolved_created"},
		{queue.HistoryFilter{Outcome: queue.OutcomeFilterExecuted}, "calls c INDEXED BY calls_resolved_created"},
		{queue.HistoryFilter{Outcome: queue.OutcomeFilterOpen}, "calls c INDEXED BY calls_open_created"},
		{queue.HistoryFilter{Outcome: queue.OutcomeFilterFailed}, "calls c INDEXED BY calls_outcome_status_created"},
	}
	for _, tt := range tests {
		q, err := h.d.historyQuery(context.Background(), tt.f)
		if err != nil {
			t.Fatal(err)
		}
		if q.from != tt.from {
			t.Errorf("%+v driven by %q, want %q", tt.f, q.from, tt.from)
		}
	}
	q, err := h.d.historyQuery(context.Background(), queue.HistoryFilter{Actor: "agent:bot", Tool: "test.none"})
	if err != nil || !q.empty {
		t.Errorf("a filter that matches nothing: empty = %v, %v", q != nil && q.empty, err)
	}
}

func TestHistoryCallsAreComplete(t *testing.T) {
	h, calls := historyFixture(t)
	page, _, err := h.d.History(context.Background(), queue.HistoryFilter{Limit: queue.MaxHistoryLimit})
	if err != nil {
		t.Fatal(err)
	}
	for i, got := range page {
		w := calls[i]
		if got.ID != w.ID || got.Status != w.Status || got.Digest != w.Digest || len(got.Approvals) != len(w.Approvals) ||
			mustJSON(got.Args) != mustJSON(w.Args) || got.Grant != w.Grant || (got.Denial == nil) != (w.Denial == nil) {
			t.Fatalf("History call %d = %+v\nwant %+v", i, got, w)
		}
		for j := range w.Approvals {
			if got.Approvals[j] != w.Approvals[j] {
				t.Errorf("call %s approval %d = %+v, want %+v", w.ID, j, got.Approvals[j], w.Approvals[j])
			}
		}
	}
}

func TestHistoryRefusesBadFilters(t *testing.T) {
	h := newAuditHarness(t)
	for _, f := range []queue.HistoryFilter{{Status: "done"}, {Outcome: "ran"}, {DigestPrefix: "xyz"}, {DigestPrefix: strings.Repeat("a", 65)}, {After: 12345}} {
		if _, _, err := h.d.History(context.Background(), f); !errors.Is(err, queue.ErrFilter) {
			t.Errorf("History(%+v) error = %v, want queue.ErrFilter", f, err)
		}
	}
	calls, next, err := h.d.History(context.Background(), queue.HistoryFilter{})
	if err != nil || len(calls) != 0 || next != 0 {
		t.Errorf("empty history = %v, %d, %v", calls, next, err)
	}
}

func TestTimeline(t *testing.T) {
	h := newAuditHarness(t)
	ctx := context.Background()
	c := h.submit(t, h.agent, `{"tool":"test.dual","target":"service:s","args":{"version":"v1"}}`)
	h.submit(t, h.agent, payBody(5)) // another call's entries
	if _, err := h.q.Approve(ctx, "op:ann", audit.ChannelWeb, c.ID, c.Digest); err != nil {
		t.Fatal(err)
	}
	c, err := h.q.Approve(ctx, "op:bob", audit.ChannelCLI, c.ID, c.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.q.Redeem(ctx, h.agent, []byte(redeemBody(c))); err != nil {
		t.Fatal(err)
	}
	entries, err := h.d.Timeline(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range entries {
		kinds = append(kinds, e.Kind)
		if e.CallID != c.ID {
			t.Errorf("entry %d is about %s", e.Seq, e.CallID)
		}
	}
	if w := []string{"submitted", "approved", "approved", "granted", "redeemed"}; !slices.Equal(kinds, w) {
		t.Errorf("timeline = %v, want %v", kinds, w)
	}
	if d, ok := entries[0].Details.(interface{ Get(string) (any, bool) }); !ok {
		t.Errorf("details = %T, want a parsed object", entries[0].Details)
	} else if got, _ := d.Get("digest"); got != c.Digest {
		t.Errorf("submitted digest = %v, want %s", got, c.Digest)
	}
	for _, id := range []string{"call_missing", ""} {
		if _, err := h.d.Timeline(ctx, id); !errors.Is(err, queue.ErrNotFound) {
			t.Errorf("Timeline(%q) = %v, want ErrNotFound", id, err)
		}
	}
}

func TestExportCalls(t *testing.T) {
	h, calls := historyFixture(t)
	ctx := context.Background()
	for _, f := range []queue.HistoryFilter{{}, {Operator: "op:ann"}, {Channel: audit.ChannelWeb, Status: "approved"}, {Actor: "agent:other", Limit: 3}} {
		w := want(calls, f)
		var jb, cb bytes.Buffer
		if err := h.d.ExportCalls(ctx, f, &jb, "jsonl"); err != nil {
			t.Fatal(err)
		}
		if err := h.d.ExportCalls(ctx, f, &cb, "csv"); err != nil {
			t.Fatal(err)
		}
		var got []string
		for line := range strings.Lines(jb.String()) {
			var o struct {
				ID        string            `json:"id"`
				Digest    string            `json:"digest"`
				Args      json.RawMessage   `json:"args"`
				Approvals []json.RawMessage `json:"approvals"`
				Status    string            `json:"status"`
			}
			if err := json.Unmarshal([]byte(line), &o); err != nil {
				t.Fatalf("line %q: %v", line, err)
			}
			got = append(got, o.ID)
		}
		if !slices.Equal(got, w) {
			t.Errorf("%+v: JSONL ids %v, want %v", f, got, w)
		}
		records, err := csv.NewReader(&cb).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		got = got[:0]
		for _, r := range records[1:] {
			got = append(got, r[1])
		}
		if !slices.Equal(got, w) {
			t.Errorf("%+v: CSV ids %v, want %v", f, got, w)
		}
		for _, c := range calls {
			if c.Grant != "" && (strings.Contains(jb.String(), c.Grant) || strings.Contains(cb.String(), c.Grant)) {
				t.Fatalf("the export holds call %s's grant token", c.ID)
			}
		}
	}
	// One exported call in full.
	var jb bytes.Buffer
	c := calls[0]
	if err := h.d.ExportCalls(ctx, queue.HistoryFilter{DigestPrefix: c.Digest}, &jb, "jsonl"); err != nil {
		t.Fatal(err)
	}
	var o map[string]any
	if err := json.Unmarshal(jb.Bytes(), &o); err != nil {
		t.Fatal(err)
	}
	if o["id"] != c.ID || o["actor"] != c.Actor || o["status"] != string(c.Status) || o["args"].(map[string]any) == nil ||
		o["created_at"] != c.CreatedAt.Format("2006-01-02T15:04:05.000Z07:00") || len(o["approvals"].([]any)) != len(c.Approvals) {
		t.Errorf("exported %v\nfor %+v", o, c)
	}
	// The final resolution travels with the export.
	resolved := want(calls, queue.HistoryFilter{Outcome: queue.OutcomeFilterResolved})
	jb.Reset()
	var cb bytes.Buffer
	f := queue.HistoryFilter{Outcome: queue.OutcomeFilterResolved}
	if err := h.d.ExportCalls(ctx, f, &jb, "jsonl"); err != nil {
		t.Fatal(err)
	}
	if err := h.d.ExportCalls(ctx, f, &cb, "csv"); err != nil {
		t.Fatal(err)
	}
	byID := map[string]*queue.Call{}
	for _, c := range calls {
		byID[c.ID] = c
	}
	n := 0
	for line := range strings.Lines(jb.String()) {
		var o struct {
			ID         string `json:"id"`
			Token      string `json:"redeemed_by_token"`
			LeaseUntil string `json:"lease_until"`
			Outcome    struct{ Status string }
			Resolution struct{ Verdict, By, Channel, Note, Evidence, At string }
		}
		if err := json.Unmarshal([]byte(line), &o); err != nil {
			t.Fatal(err)
		}
		c := byID[o.ID]
		r := c.Resolution
		if o.Resolution.Verdict != r.Verdict || o.Resolution.By != r.By || o.Resolution.Note != r.Note ||
			o.Resolution.Evidence != r.Evidence || o.Resolution.Channel != r.Channel ||
			o.Resolution.At != r.At.Format("2006-01-02T15:04:05.000Z07:00") || o.Outcome.Status != c.Outcome.Status ||
			o.LeaseUntil != c.LeaseUntil.Format("2006-01-02T15:04:05.000Z07:00") || o.Token != c.RedeemedBy {
			t.Errorf("exported %s\nfor %+v %+v", line, c, r)
		}
		n++
	}
	records, err := csv.NewReader(&cb).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := map[string]int{}
	for i, name := range records[0] {
		col[name] = i
	}
	for _, r := range records[1:] {
		c := byID[r[1]]
		if r[col["resolution"]] != c.Resolution.Verdict || r[col["resolved_by"]] != c.Resolution.By ||
			r[col["resolution_note"]] != c.Resolution.Note || r[col["resolution_evidence"]] != c.Resolution.Evidence ||
			r[col["outcome_status"]] != c.Outcome.Status {
			t.Errorf("CSV row %v for %+v", r, c.Resolution)
		}
	}
	if n != len(resolved) || len(records)-1 != len(resolved) || n == 0 {
		t.Errorf("exported %d JSONL and %d CSV resolved calls, want %d", n, len(records)-1, len(resolved))
	}
	if err := h.d.ExportCalls(ctx, queue.HistoryFilter{}, &jb, "pdf"); !errors.Is(err, audit.ErrFormat) {
		t.Errorf("format pdf: %v, want audit.ErrFormat", err)
	}
}

// The scale test: COUNTERSIGN_SCALE=1 go test -run TestScale -v -timeout 60m ./internal/db/
//
// It builds a database of COUNTERSIGN_SCALE_CALLS calls (default one
// million) with their audit entries (about four per call) and a checkpoint
// every 1000 entries, then times history pages and streams exports while
// sampling the heap. COUNTERSIGN_SCALE_DIR keeps the database between runs.
func TestScale(t *testing.T) {
	if os.Getenv("COUNTERSIGN_SCALE") != "1" {
		t.Skip("set COUNTERSIGN_SCALE=1 to run the one-million-call scale test (several minutes)")
	}
	n := 1_000_000
	if v := os.Getenv("COUNTERSIGN_SCALE_CALLS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			t.Fatal(err)
		}
	}
	dir := os.Getenv("COUNTERSIGN_SCALE_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	path := filepath.Join(dir, fmt.Sprintf("scale-%d.db", n))
	d, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := context.Background()
	var have int
	_ = d.SQL().QueryRow(`SELECT COUNT(*) FROM calls`).Scan(&have)
	if have != n {
		if have != 0 {
			t.Fatalf("%s holds %d calls, not %d: remove it", path, have, n)
		}
		start := time.Now()
		entries := generateScale(t, d, n)
		t.Logf("generated %d calls and %d audit entries in %v", n, entries, time.Since(start).Round(time.Second))
	}
	var entries int64
	_ = d.SQL().QueryRow(`SELECT MAX(seq) FROM audit`).Scan(&entries)
	fi, _ := os.Stat(path)
	t.Logf("database: %d calls, %d audit entries, %d MiB", n, entries, fi.Size()>>20)

	// History pages: the median of 11 runs after a warm-up.
	first, next, err := d.History(ctx, queue.HistoryFilter{})
	if err != nil || len(first) != queue.DefaultHistoryLimit {
		t.Fatalf("first page = %d calls, %v", len(first), err)
	}
	mid := first[0].CreatedAt.Add(-time.Duration(n/2) * 800 * time.Millisecond)
	pages := []struct {
		name string
		f    queue.HistoryFilter
	}{
		{"first page, no filter", queue.HistoryFilter{}},
		{"second page (cursor)", queue.HistoryFilter{After: next}},
		{"page n/1000 deep (cursor)", queue.HistoryFilter{After: first[0].Seq - int64(n/20)}},
		{"actor (a busy one)", queue.HistoryFilter{Actor: "agent:a000"}},
		{"actor (20 calls in all)", queue.HistoryFilter{Actor: "agent:rare"}},
		{"tool", queue.HistoryFilter{Tool: "tool.t07"}},
		{"status denied", queue.HistoryFilter{Status: "denied"}},
		{"status pending", queue.HistoryFilter{Status: "pending"}},
		{"operator", queue.HistoryFilter{Operator: "op:03"}},
		{"operator (10 decisions in all)", queue.HistoryFilter{Operator: "op:rare"}},
		{"channel cli", queue.HistoryFilter{Channel: "cli"}},
		{"operator and channel", queue.HistoryFilter{Operator: "op:05", Channel: "cli"}},
		{"actor and tool", queue.HistoryFilter{Actor: "agent:a001", Tool: "tool.t03"}},
		{"actor and status", queue.HistoryFilter{Actor: "agent:a050", Status: "expired"}},
		{"operator and status", queue.HistoryFilter{Operator: "op:02", Status: "redeemed"}},
		{"one day, mid-history", queue.HistoryFilter{Since: mid, Until: mid.Add(24 * time.Hour)}},
		{"one day and actor", queue.HistoryFilter{Since: mid, Until: mid.Add(24 * time.Hour), Actor: "agent:a003"}},
		{"digest prefix (4 hex)", queue.HistoryFilter{DigestPrefix: first[7].Digest[:4]}},
		{"digest (full)", queue.HistoryFilter{DigestPrefix: first[7].Digest}},
	}
	for _, p := range pages {
		if p.f.After == 0 && strings.Contains(p.name, "cursor") {
			t.Fatalf("%s: no cursor", p.name)
		}
		var times []time.Duration
		var got int
		for i := range 12 {
			start := time.Now()
			calls, _, err := d.History(ctx, p.f)
			el := time.Since(start)
			if err != nil {
				t.Fatalf("%s: %v", p.name, err)
			}
			got = len(calls)
			if i > 0 {
				times = append(times, el)
			}
		}
		slices.Sort(times)
		med := times[len(times)/2]
		t.Logf("history %-32s %3d calls  median %8v  max %8v", p.name, got, med.Round(time.Microsecond), times[len(times)-1].Round(time.Microsecond))
		if got == 0 {
			t.Errorf("%s: the page is empty; the case measures nothing", p.name)
		}
		if med > 50*time.Millisecond {
			t.Errorf("%s: median %v, want under 50ms", p.name, med)
		}
	}

	// Streams, each sampled for heap and rate.
	out := filepath.Join(dir, "audit-export.jsonl")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	var res audit.ExportResult
	measureStream(t, "audit export JSONL to a file", entries, func(w io.Writer) error {
		res, err = d.ExportAudit(ctx, w, audit.ExportOptions{Format: "jsonl"})
		return err
	}, f)
	f.Close()
	if res.Count != entries {
		t.Errorf("exported %d entries, want %d", res.Count, entries)
	}
	measureStream(t, "audit export CSV", entries, func(w io.Writer) error {
		_, err := d.ExportAudit(ctx, w, audit.ExportOptions{Format: "csv"})
		return err
	}, nil)
	measureStream(t, "calls export JSONL", int64(n), func(w io.Writer) error {
		return d.ExportCalls(ctx, queue.HistoryFilter{}, w, "jsonl")
	}, nil)
	measureStream(t, "calls export CSV", int64(n), func(w io.Writer) error {
		return d.ExportCalls(ctx, queue.HistoryFilter{}, w, "csv")
	}, nil)
	var vr audit.VerifyResult
	measureStream(t, "VerifyChain (database)", entries, func(io.Writer) error {
		vr, err = d.VerifyChain(ctx)
		return err
	}, nil)
	if !vr.OK || vr.Count != entries {
		t.Errorf("VerifyChain = %+v", vr)
	}
	var rep audit.Report
	measureStream(t, "VerifyExport (offline, file)", entries, func(io.Writer) error {
		f, err := os.Open(out)
		if err != nil {
			return err
		}
		defer f.Close()
		rep, err = audit.VerifyExport(bufio.NewReaderSize(f, 1<<20), audit.VerifyOptions{})
		return err
	}, nil)
	if rep.Count != entries || rep.Head != vr.Head || rep.Checkpoints != vr.Checkpoints {
		t.Errorf("offline verification %+v, database %+v", rep, vr)
	}
	os.Remove(out)
}

// countingWriter counts bytes and forwards them (to nothing when w is nil).
type countingWriter struct {
	w io.Writer
	n atomic.Int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.n.Add(int64(len(p)))
	if c.w == nil {
		return len(p), nil
	}
	return c.w.Write(p)
}

// measureStream runs fn while sampling the heap and the bytes written
// every 100ms, and logs the duration, rate and heap figures.
func measureStream(t *testing.T, name string, rows int64, fn func(io.Writer) error, to io.Writer) {
	t.Helper()
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	cw := &countingWriter{w: to}
	type sample struct {
		bytes int64
		heap  uint64
	}
	var samples []sample
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				samples = append(samples, sample{cw.n.Load(), m.HeapInuse})
			}
		}
	}()
	cpu0 := scaleCPUTime()
	start := time.Now()
	err := fn(cw)
	el := time.Since(start)
	cpu := scaleCPUTime() - cpu0
	close(stop)
	<-done
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	heaps := make([]uint64, len(samples))
	for i, s := range samples {
		heaps[i] = s.heap
	}
	slices.Sort(heaps)
	pct := func(p float64) uint64 {
		if len(heaps) == 0 {
			return 0
		}
		return heaps[min(len(heaps)-1, int(p*float64(len(heaps))))]
	}
	maxHeap := pct(1)
	// Heap at about a tenth, half and nine tenths of the run: flat memory
	// shows as the same figure throughout.
	at := func(frac float64) uint64 {
		if len(samples) == 0 {
			return 0
		}
		return samples[min(len(samples)-1, int(frac*float64(len(samples))))].heap
	}
	// Rate per second of wall time, slowest and fastest whole second.
	var slow, fast int64 = -1, 0
	for i := 10; i < len(samples); i += 10 {
		r := samples[i].bytes - samples[i-10].bytes
		if slow < 0 || r < slow {
			slow = r
		}
		fast = max(fast, r)
	}
	mib := func(b uint64) float64 { return float64(b) / (1 << 20) }
	t.Logf("%-30s %9d rows in %6.1fs (%6.1f CPU s)  %8.0f rows/s (%8.0f per CPU s)  %6.1f MiB/s (slowest second %.1f, fastest %.1f)",
		name, rows, el.Seconds(), cpu.Seconds(), float64(rows)/el.Seconds(), float64(rows)/cpu.Seconds(),
		mib(uint64(cw.n.Load()))/el.Seconds(), mib(uint64(max(slow, 0))), mib(uint64(fast)))
	t.Logf("%-30s heap in use: %.1f MiB before; %.1f/%.1f/%.1f MiB at 10/50/90%% of the run; median %.1f, p99 %.1f, max %.1f over %d samples",
		"", mib(base.HeapInuse), mib(at(0.1)), mib(at(0.5)), mib(at(0.9)), mib(pct(0.5)), mib(pct(0.99)), mib(maxHeap), len(heaps))
	if maxHeap > base.HeapInuse+64<<20 {
		t.Errorf("%s: heap in use reached %.1f MiB (from %.1f): the stream is being held in memory", name, mib(maxHeap), mib(base.HeapInuse))
	}
}

// scaleCPUTime is the process's user and system CPU time so far.
func scaleCPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// generateScale writes n calls with their approvals, deciders, audit
// entries (the chain computed in Go) and a checkpoint every 1000 entries,
// in transactions of 20,000 calls on one connection. It returns the number
// of entries.
func generateScale(t *testing.T, d *DB, n int) int64 {
	t.Helper()
	ctx := context.Background()
	conn, err := d.SQL().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `PRAGMA cache_size = -262144`); err != nil {
		t.Fatal(err)
	}
	signer := newSigner(t)
	rng := rand.New(rand.NewPCG(7, 11))
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	var seq int64
	prev := ""
	checks := make([]any, 0, 11)
	for _, name := range []string{"shape", "signature", "claims", "actor", "audience", "tool", "target", "digest", "time", "status", "nonce"} {
		checks = append(checks, map[string]any{"name": name, "ok": true})
	}
	rareActor := map[int]bool{}
	for i := range 20 {
		rareActor[n/20*i+7] = true
	}
	rareOp := map[int]bool{}
	for i := range 10 {
		rareOp[n/10*i+3] = true
	}
	const batch = 20_000
	for lo := 0; lo < n; lo += batch {
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		prep := func(q string) *sql.Stmt {
			s, err := tx.PrepareContext(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		insCall := prep(`INSERT INTO calls (seq, id, actor, audience, tool, target, args, rationale, envelope, digest, status,
			approvals_required, grant_ttl_ms, created_at, decide_by, decided_at, denied_by, denied_channel, deny_reason,
			grant_jti, grant_kid, grant_expires_at, redeemed_at, outcome_status, outcome_detail, outcome_at)
			VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`)
		insApproval := prep(`INSERT INTO approvals (call_id, operator, channel, at) VALUES (?,?,?,?)`)
		insDecider := prep(`INSERT OR IGNORE INTO call_deciders (operator, channel, created_at, call_seq) VALUES (?,?,?,?)`)
		insEntry := prep(`INSERT INTO audit (` + sqlq.EntryColumns + `) VALUES (?,?,?,?,?,?,?,?,?)`)
		insCheckpoint := prep(`INSERT INTO checkpoints (` + sqlq.CheckpointColumns + `) VALUES (?,?,?,?,?,?)`)
		for i := lo; i < min(lo+batch, n); i++ {
			created := t0.Add(time.Duration(i)*800*time.Millisecond + time.Duration(rng.IntN(500))*time.Millisecond)
			id := fmt.Sprintf("call_%026d", i)
			actor := fmt.Sprintf("agent:a%03d", rng.IntN(100))
			if rng.IntN(2) == 0 {
				actor = fmt.Sprintf("agent:a%03d", rng.IntN(5))
			}
			if rareActor[i] {
				actor = "agent:rare"
			}
			tool := fmt.Sprintf("tool.t%02d", rng.IntN(20))
			target := fmt.Sprintf("invoice:INV-%d", i)
			args := fmt.Sprintf(`{"amount_minor":%d,"currency":"EUR","reason_code":"duplicate"}`, 1+rng.IntN(500000))
			sum := sha256.Sum256([]byte(id))
			digest := hex.EncodeToString(sum[:])
			op := fmt.Sprintf("op:%02d", rng.IntN(12))
			if rareOp[i] {
				op = "op:rare"
			}
			channel := "web"
			if rng.IntN(100) < 15 {
				channel = "cli"
			}
			r := rng.IntN(100)
			status := "pending"
			switch {
			case r < 60:
				status = "redeemed"
			case r < 75:
				status = "denied"
			case r < 85:
				status = "expired"
			case r < 90:
				status = "cancelled"
			case r < 95:
				status = "approved"
			}
			if rareOp[i] {
				status = "denied"
			}
			type ev struct {
				kind, principal, channel string
				details                  map[string]any
			}
			evs := []ev{{audit.KindSubmitted, actor, "api", map[string]any{"tool": tool, "target": target, "audience": "payments-host",
				"digest": digest, "args": map[string]any{"amount_minor": int64(i), "currency": "EUR", "reason_code": "duplicate"},
				"rationale": "the customer was charged twice", "decide_by": created.Add(15 * time.Minute).Format(time.RFC3339Nano),
				"approvals_required": int64(1)}}}
			decided := created.Add(time.Duration(5+rng.IntN(300)) * time.Second)
			var decidedAt, grantExp, redeemedAt, outAt sql.NullInt64
			var deniedBy, deniedCh, reason, jti, kid, outStatus, outDetail sql.NullString
			approve := status == "redeemed" || status == "approved"
			if approve {
				decidedAt = sql.NullInt64{Int64: decided.UnixMilli(), Valid: true}
				jti = sql.NullString{String: fmt.Sprintf("%032x", i), Valid: true}
				kid = sql.NullString{String: "k1", Valid: true}
				grantExp = sql.NullInt64{Int64: decided.Add(time.Minute).UnixMilli(), Valid: true}
				evs = append(evs, ev{audit.KindApproved, op, channel, map[string]any{"digest": digest, "received": int64(1), "required": int64(1)}},
					ev{audit.KindGranted, "console", "api", map[string]any{"jti": jti.String, "kid": "k1", "iat": decided.Unix(), "exp": decided.Unix() + 60, "digest": digest}})
			}
			switch status {
			case "redeemed":
				redeemedAt = sql.NullInt64{Int64: decided.Add(2 * time.Second).UnixMilli(), Valid: true}
				outStatus, outDetail = sql.NullString{String: "succeeded", Valid: true}, sql.NullString{String: "refund issued", Valid: true}
				outAt = sql.NullInt64{Int64: decided.Add(3 * time.Second).UnixMilli(), Valid: true}
				evs = append(evs, ev{audit.KindRedeemed, actor, "api", map[string]any{"checks": checks, "jti": jti.String}},
					ev{audit.KindOutcome, actor, "api", map[string]any{"status": "succeeded", "detail": "refund issued"}})
			case "denied":
				decidedAt = sql.NullInt64{Int64: decided.UnixMilli(), Valid: true}
				deniedBy, deniedCh = sql.NullString{String: op, Valid: true}, sql.NullString{String: channel, Valid: true}
				reason = sql.NullString{String: "amount does not match the invoice", Valid: true}
				evs = append(evs, ev{audit.KindDenied, op, channel, map[string]any{"digest": digest, "reason": reason.String}})
			case "expired":
				decidedAt = sql.NullInt64{Int64: created.Add(15 * time.Minute).UnixMilli(), Valid: true}
				evs = append(evs, ev{audit.KindExpired, "console", "api", map[string]any{"decide_by": created.Add(15 * time.Minute).Format(time.RFC3339Nano)}})
			case "cancelled":
				decidedAt = sql.NullInt64{Int64: decided.UnixMilli(), Valid: true}
				evs = append(evs, ev{audit.KindCancelled, actor, "api", map[string]any{}})
			}
			callSeq := int64(i + 1)
			if _, err := insCall.ExecContext(ctx, callSeq, id, actor, "payments-host", tool, target, args, "the customer was charged twice",
				[]byte(args), digest, status, 1, 60000, created.UnixMilli(), created.Add(15*time.Minute).UnixMilli(), decidedAt,
				deniedBy, deniedCh, reason, jti, kid, grantExp, redeemedAt, outStatus, outDetail, outAt); err != nil {
				t.Fatal(err)
			}
			if approve {
				if _, err := insApproval.ExecContext(ctx, id, op, channel, decided.UnixMilli()); err != nil {
					t.Fatal(err)
				}
			}
			if deniedBy.Valid {
				if _, err := insDecider.ExecContext(ctx, op, channel, created.UnixMilli(), callSeq); err != nil {
					t.Fatal(err)
				}
			}
			for k, e := range evs {
				callID := id
				entry := &audit.Entry{Time: audit.FormatTime(created.Add(time.Duration(k) * time.Millisecond)), Kind: e.kind,
					CallID: callID, Principal: e.principal, Channel: e.channel, Details: e.details}
				if err := entry.Seal(seq, prev); err != nil {
					t.Fatal(err)
				}
				details, err := canonical.Encode(e.details)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := insEntry.ExecContext(ctx, entry.Seq, entry.Time, entry.Kind, entry.CallID, entry.Principal,
					entry.Channel, string(details), entry.PrevHash, entry.Hash); err != nil {
					t.Fatal(err)
				}
				seq, prev = entry.Seq, entry.Hash
				if seq%1000 == 0 {
					c, err := signer.Sign(seq, prev, created)
					if err != nil {
						t.Fatal(err)
					}
					if _, err := insCheckpoint.ExecContext(ctx, c.Seq, c.Head, c.Time, c.KID, c.PublicKey, c.Signature); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		t.Fatal(err)
	}
	return seq
}

// TestCallLookupPlans checks that the lookups of the write path read an
// index, not the table: each is inside the write lock on every submission.
func TestCallLookupPlans(t *testing.T) {
	h, _ := historyFixture(t)
	for _, tt := range []struct{ query, index string }{
		{`SELECT seq FROM calls WHERE actor = 'agent:bot' AND digest = 'ab' ORDER BY seq DESC LIMIT 1`, "calls_digest"},
		{`SELECT seq FROM calls WHERE id = 'call_x'`, "sqlite_autoindex_calls_1"},
	} {
		rows, err := h.d.SQL().Query(`EXPLAIN QUERY PLAN ` + tt.query)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		got := strings.Join(plan, "; ")
		if !strings.Contains(got, "USING INDEX "+tt.index) && !strings.Contains(got, "USING COVERING INDEX "+tt.index) ||
			strings.Contains(got, "TEMP B-TREE") {
			t.Errorf("%s: plan %q, want %s without a sort", tt.query, got, tt.index)
		}
	}
}
