package db

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
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
		h.clock.advance(time.Duration(rng.IntN(2)) * time.Millisecond)
		who := agents[rng.IntN(2)]
		var c *queue.Call
		if rng.IntN(3) == 0 {
			c = h.submit(t, who, fmt.Sprintf(`{"tool":"test.dual","target":"service:s","args":{"version":"v%d"}}`, i))
		} else {
			c = h.submit(t, who, payBody(i+1))
		}
		ids = append(ids, c.ID)
		var err error
		switch rng.IntN(7) {
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
func want(calls []*queue.Call, f HistoryFilter) []string {
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
			!strings.HasPrefix(c.Digest, prefix):
			continue
		}
		out = append(out, c.ID)
	}
	return out
}

// allPages reads every page of f.
func allPages(t *testing.T, d *DB, f HistoryFilter) []string {
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
		f    HistoryFilter
	}{
		{"all", HistoryFilter{}},
		{"actor", HistoryFilter{Actor: "agent:other"}},
		{"tool", HistoryFilter{Tool: "test.dual"}},
		{"status denied", HistoryFilter{Status: "denied"}},
		{"status pending", HistoryFilter{Status: "pending"}},
		{"status redeemed", HistoryFilter{Status: "redeemed"}},
		{"status cancelled", HistoryFilter{Status: "cancelled"}},
		{"operator", HistoryFilter{Operator: "op:ann"}},
		{"operator in quorum", HistoryFilter{Operator: "op:carl"}},
		{"channel web", HistoryFilter{Channel: audit.ChannelWeb}},
		{"channel cli", HistoryFilter{Channel: audit.ChannelCLI}},
		{"operator and channel", HistoryFilter{Operator: "op:ann", Channel: audit.ChannelCLI}},
		{"operator and status", HistoryFilter{Operator: "op:bob", Status: "approved"}},
		{"actor and tool", HistoryFilter{Actor: h.agent.Actor, Tool: "test.pay"}},
		{"since", HistoryFilter{Since: mid}},
		{"until", HistoryFilter{Until: mid}},
		{"window and operator", HistoryFilter{Since: calls[70].CreatedAt, Until: calls[20].CreatedAt, Operator: "op:bob"}},
		{"digest prefix in groups", HistoryFilter{DigestPrefix: strings.ToUpper(digest[:4] + " " + digest[4:6])}},
		{"whole digest", HistoryFilter{DigestPrefix: digest}},
		{"nobody", HistoryFilter{Operator: "op:nobody"}},
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

func TestHistoryCallsAreComplete(t *testing.T) {
	h, calls := historyFixture(t)
	page, _, err := h.d.History(context.Background(), HistoryFilter{Limit: MaxHistoryLimit})
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
	for _, f := range []HistoryFilter{{Status: "done"}, {DigestPrefix: "xyz"}, {DigestPrefix: strings.Repeat("a", 65)}, {After: 12345}} {
		if _, _, err := h.d.History(context.Background(), f); !errors.Is(err, ErrFilter) {
			t.Errorf("History(%+v) error = %v, want ErrFilter", f, err)
		}
	}
	calls, next, err := h.d.History(context.Background(), HistoryFilter{})
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
	for _, f := range []HistoryFilter{{}, {Operator: "op:ann"}, {Channel: audit.ChannelWeb, Status: "approved"}, {Actor: "agent:other", Limit: 3}} {
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
	if err := h.d.ExportCalls(ctx, HistoryFilter{DigestPrefix: c.Digest}, &jb, "jsonl"); err != nil {
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
	if err := h.d.ExportCalls(ctx, HistoryFilter{}, &jb, "pdf"); !errors.Is(err, ErrFormat) {
		t.Errorf("format pdf: %v, want ErrFormat", err)
	}
}
