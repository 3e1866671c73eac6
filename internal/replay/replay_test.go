package replay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/db"
	"github.com/countersign/countersign/internal/policy"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/replay"
	"github.com/countersign/countersign/internal/testkit"
	"github.com/countersign/countersign/internal/testkit/sqlitekit"
)

// history is a real database with calls made under examples/tools.yaml
// (no rules: every call went to people).
type history struct {
	t     *testing.T
	clk   *testkit.Clock
	db    *db.DB
	q     *queue.Service
	path  string
	calls map[string]*queue.Call
}

func newHistory(t *testing.T) *history {
	// Monday 2026-11-30, 10:00 in Berlin.
	k := sqlitekit.NewQueue(t, sqlitekit.WithClock(testkit.NewClock(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC))))
	testkit.SeedUsers(t, k.DB.Accounts(), account.RoleOperator, "alice", "bob")
	return &history{t: t, clk: k.Clock, db: k.DB, q: k.Service, path: k.Path, calls: map[string]*queue.Call{}}
}

func (h *history) submit(name string, who queue.Principal, tool, target, args string) *queue.Call {
	h.t.Helper()
	h.clk.Advance(time.Minute)
	c, created, err := h.q.Submit(context.Background(), who, []byte(fmt.Sprintf(`{"tool":%q,"target":%q,"args":%s}`, tool, target, args)))
	if err != nil || !created {
		h.t.Fatalf("%s: Submit: created %v, %v", name, created, err)
	}
	h.calls[name] = c
	return c
}

func (h *history) deny(c *queue.Call, reason string) {
	h.t.Helper()
	if _, err := h.q.Deny(context.Background(), "alice", audit.ChannelWeb, c.ID, reason); err != nil {
		h.t.Fatal(err)
	}
}

func (h *history) runAndReport(c *queue.Call, who queue.Principal, status string) {
	h.t.Helper()
	ctx := context.Background()
	a, err := h.q.Approve(ctx, "alice", audit.ChannelWeb, c.ID, c.Digest)
	if err != nil {
		h.t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{"grant": a.Grant, "call": map[string]any{"tool": c.Tool, "target": c.Target, "args": c.Args}})
	r, err := h.q.Redeem(ctx, who, body)
	if err != nil || !r.Accepted {
		h.t.Fatalf("Redeem: %+v %v", r, err)
	}
	if _, err := h.q.ReportOutcome(ctx, who, c.ID, status, "the gateway timed out"); err != nil {
		h.t.Fatal(err)
	}
}

var (
	bot      = queue.Principal{Actor: "agent:billing-bot", Audience: "payments-host"}
	other    = queue.Principal{Actor: "agent:other", Audience: "payments-host"}
	janitor  = queue.Principal{Actor: "agent:janitor", Audience: "files-host"}
	stranger = queue.Principal{Actor: "agent:stranger", Audience: "files-host"}
	reporter = queue.Principal{Actor: "agent:reporter", Audience: "reports-host"}
)

func refund(amount int, currency, reason string) string {
	return fmt.Sprintf(`{"amount_minor":%d,"currency":%q,"reason_code":%q,"notes":"n"}`, amount, currency, reason)
}

// TestReplayKnownAnswers replays a seeded history through
// examples/policy.yaml, whose answers for each call are known.
func TestReplayKnownAnswers(t *testing.T) {
	h := newHistory(t)
	old := h.submit("old", bot, "payments.refund", "invoice:INV-1", refund(1000, "USD", "duplicate"))
	h.deny(old, "before the window")
	since := h.clk.Now().Add(30 * time.Second)

	// payments.refund: 7 calls.
	h.deny(h.submit("denied-small", bot, "payments.refund", "invoice:INV-2", refund(1000, "USD", "duplicate")), "customer already refunded")
	h.runAndReport(h.submit("failed-small", bot, "payments.refund", "invoice:INV-3", refund(3000, "EUR", "requested")), bot, "failed")
	h.runAndReport(h.submit("ok-small", bot, "payments.refund", "invoice:INV-4", refund(2000, "USD", "requested")), bot, "succeeded")
	h.runAndReport(h.submit("failed-other-actor", other, "payments.refund", "invoice:INV-5", refund(1000, "USD", "duplicate")), other, "failed")
	h.submit("too-large", bot, "payments.refund", "invoice:INV-6", refund(2000000, "USD", "requested"))
	h.deny(h.submit("fraud-small", bot, "payments.refund", "invoice:INV-7", refund(100, "USD", "fraud")), "not fraud")
	h.submit("jpy", bot, "payments.refund", "invoice:INV-8", refund(100, "JPY", "duplicate"))
	// files.delete: 3 calls; one uses a member the new schema dropped.
	h.submit("stranger-delete", stranger, "files.delete", "file:/srv/shared/tmp/a", `{"reason":"old"}`)
	h.submit("janitor-delete", janitor, "files.delete", "file:/srv/shared/tmp/b", `{"reason":"old"}`)
	h.submit("janitor-backup", janitor, "files.delete", "file:/srv/shared/tmp/c", `{"reason":"old","backup":true}`)
	// reports.read is not in the new file.
	h.submit("report", reporter, "reports.read", "report:monthly", `{"period":"2026-10"}`)

	pol, err := policy.Load("../../examples/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	seqBefore, headBefore, _ := h.db.AuditHead(context.Background())
	ro, err := db.OpenReadOnly(h.path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	var streamed []replay.Flagged
	rep, err := replay.Run(context.Background(), ro, pol, since, replay.Options{OnFlagged: func(f replay.Flagged) { streamed = append(streamed, f) }})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Calls != 11 {
		t.Fatalf("replayed %d calls, want 11 (the one before --since left out)", rep.Calls)
	}
	want := map[string]struct {
		calls, unchanged int64
		changes          map[replay.Change]int64
	}{
		"payments.refund": {7, 4, map[replay.Change]int64{{From: replay.Ask, To: replay.Approve}: 3}},
		"files.delete":    {3, 0, map[replay.Change]int64{{From: replay.Ask, To: replay.Deny}: 1, {From: replay.Ask, To: replay.Refused}: 1}},
		"reports.read":    {1, 0, map[replay.Change]int64{{From: replay.Ask, To: replay.Refused}: 1}},
	}
	// too-large is ask→deny as well.
	want["payments.refund"].changes[replay.Change{From: replay.Ask, To: replay.Deny}] = 1
	// payments.refund: denied-small, failed-small, ok-small → approve;
	// too-large → deny; failed-other-actor, fraud-small, jpy unchanged.
	wantRefund := want["payments.refund"]
	wantRefund.unchanged = 3
	want["payments.refund"] = wantRefund
	// files.delete: stranger → deny, janitor → ask (unchanged), backup → refused.
	wantFiles := want["files.delete"]
	wantFiles.unchanged = 1
	want["files.delete"] = wantFiles
	if len(rep.Tools) != len(want) {
		t.Fatalf("tools %d, want %d", len(rep.Tools), len(want))
	}
	for _, tr := range rep.Tools {
		w, ok := want[tr.Tool]
		if !ok {
			t.Fatalf("unexpected tool %s", tr.Tool)
		}
		if tr.Calls != w.calls || tr.Unchanged != w.unchanged || len(tr.Changes) != len(w.changes) {
			t.Errorf("%s: calls %d unchanged %d changes %v; want %d %d %v", tr.Tool, tr.Calls, tr.Unchanged, tr.Changes, w.calls, w.unchanged, w.changes)
			continue
		}
		for ch, n := range w.changes {
			if tr.Changes[ch] != n {
				t.Errorf("%s %s = %d, want %d", tr.Tool, ch, tr.Changes[ch], n)
			}
		}
	}
	// Flagged: the small refund a person denied and the one reported
	// failed; not the failed one from another actor (still asks), not the
	// denied fraud claim (still asks two people).
	if rep.FlaggedTotal != 2 || len(rep.Flagged) != 2 || len(streamed) != 2 {
		t.Fatalf("flagged %d (%d listed, %d streamed), want 2: %+v", rep.FlaggedTotal, len(rep.Flagged), len(streamed), rep.Flagged)
	}
	if f := rep.Flagged[0]; f.CallID != h.calls["denied-small"].ID || f.Rule != "small-refunds" || f.Why != "denied by alice: customer already refunded" {
		t.Errorf("flagged[0] = %+v", f)
	}
	if f := rep.Flagged[1]; f.CallID != h.calls["failed-small"].ID || f.Why != "reported failed: the gateway timed out" {
		t.Errorf("flagged[1] = %+v", f)
	}
	// Read-only: nothing was written.
	seqAfter, headAfter, _ := h.db.AuditHead(context.Background())
	if seqAfter != seqBefore || headAfter != headBefore {
		t.Errorf("the audit head moved from %d to %d", seqBefore, seqAfter)
	}

	// MaxFlagged bounds the list, not the count.
	rep, err = replay.Run(context.Background(), ro, pol, since, replay.Options{MaxFlagged: 1})
	if err != nil || rep.FlaggedTotal != 2 || len(rep.Flagged) != 1 {
		t.Fatalf("MaxFlagged 1: total %d listed %d, %v", rep.FlaggedTotal, len(rep.Flagged), err)
	}
}

// A call decided by a rule before replays as approve or deny: replaying the
// same rules changes nothing.
func TestBefore(t *testing.T) {
	byRule := &queue.Call{Approvals: []queue.Approval{{Operator: "policy:small-refunds"}}}
	deniedByRule := &queue.Call{Denial: &queue.Denial{By: "policy:too-large"}}
	byPerson := &queue.Call{Denial: &queue.Denial{By: "alice"}}
	for c, want := range map[*queue.Call]replay.Outcome{byRule: replay.Approve, deniedByRule: replay.Deny, byPerson: replay.Ask, {}: replay.Ask} {
		if got := replay.Before(c); got != want {
			t.Errorf("Before(%+v) = %s, want %s", c, got, want)
		}
	}
}
