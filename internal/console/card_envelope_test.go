package console

import (
	"context"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/server"
	"github.com/countersign/countersign/web/templates"
)

// TestQueueCardRendersFromEnvelope: a queue card's summary is what was
// hashed, as on the call page. An edit of the stored arguments alone in
// the SQLite file does not change the summary (and is named on the card);
// a record whose envelope, or whose columns, no longer match the digest
// shows a warning in place of a summary; and an edit cannot hide a
// look-alike character that was hashed, from the card or from the
// approval's acknowledgement.
func TestQueueCardRendersFromEnvelope(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	b := e.browser()
	b.login("olivia", rolePassword)
	card := func(id string) *goquery.Selection {
		t.Helper()
		p := b.get("/")
		if p.status != 200 {
			t.Fatalf("queue page = %d", p.status)
		}
		c := p.doc.Find(`[data-testid="call-card"][data-call="` + id + `"]`)
		if c.Length() != 1 {
			t.Fatalf("the queue shows %d cards of %s, want 1", c.Length(), id)
		}
		return c
	}
	summaryOf := func(c *goquery.Selection) map[string]string {
		got := map[string]string{}
		c.Find(`[data-testid="summary-item"]`).Each(func(_ int, it *goquery.Selection) {
			v := it.Find(`[data-testid="summary-value"]`).Text()
			if m := it.Find(`[data-testid="summary-money"]`).Text(); m != "" {
				v = m + " " + v
			}
			got[it.AttrOr("data-key", "")] = strings.TrimSpace(v)
		})
		return got
	}

	call := e.submit("agent:billing-bot", "payments-host", conRefundBody)
	before := summaryOf(card(call.ID))
	if !strings.Contains(before["amount_minor"], "129999") || before["reason_code"] != "duplicate" {
		t.Fatalf("summary before the edit = %v", before)
	}
	e.exec(`UPDATE calls SET args = ? WHERE id = ?`,
		`{"amount_minor":1,"currency":"USD","notes":"edited note","reason_code":"fraud"}`, call.ID)
	c := card(call.ID)
	if got := summaryOf(c); got["amount_minor"] != before["amount_minor"] || got["reason_code"] != "duplicate" {
		t.Errorf("summary after an edit of calls.args = %v, want what was hashed %v", got, before)
	}
	if html, _ := c.Html(); strings.Contains(html, "fraud") || strings.Contains(html, "0.01") {
		t.Errorf("the card shows the edited copy: %s", html)
	}
	if c.Find(`[data-testid="card-stored-differs"]`).Length() != 1 {
		t.Error("the card does not say that the stored copy differs from what was hashed")
	}
	if c.Find(`[data-testid="card-integrity"]`).Length() != 0 {
		t.Error("an edit of the stored copy alone is shown as a broken record")
	}
	// The pushed fragment is the same view: the hub renders cardView.
	loaded, err := e.q.Call(context.Background(), call.ID)
	if err != nil {
		t.Fatal(err)
	}
	frag, err := renderBytes(templates.CardItem(e.c.cardView(loaded, true, false, e.clock.Now()), "true"))
	if err != nil || !strings.Contains(string(frag), "129999") || strings.Contains(string(frag), "fraud") {
		t.Errorf("pushed card = %s, %v; want what was hashed", frag, err)
	}

	for name, tc := range map[string]struct{ invoice, sql string }{
		"envelope": {"7001", `UPDATE calls SET envelope = CAST(replace(CAST(envelope AS TEXT), '129999', '000001') AS BLOB) WHERE id = ?`},
		"target":   {"7002", `UPDATE calls SET target = 'invoice:INV-9999' WHERE id = ?`},
	} {
		q := tc.sql
		t.Run(name, func(t *testing.T) {
			c := e.submit("agent:billing-bot", "payments-host", strings.Replace(conRefundBody, "INV-1042", "INV-"+tc.invoice, 1))
			e.exec(q, c.ID)
			got := card(c.ID)
			if w := got.Find(`[data-testid="card-integrity"]`).Text(); !strings.Contains(w, "does not match its digest") {
				t.Errorf("tampered %s: card warning = %q, want one naming the mismatch", name, w)
			}
			if got.Find(`[data-testid="card-summary"]`).Length() != 0 {
				t.Errorf("tampered %s: the card still shows a summary", name)
			}
		})
	}

	t.Run("hidden look-alike", func(t *testing.T) {
		// Hashed with a Cyrillic a; the stored copy edited to plain ASCII.
		args := canonical.Object{{Name: "amount_minor", Value: int64(5)}, {Name: "currency", Value: "USD"},
			{Name: "reason_code", Value: "duplic\u0430te"}}
		raw := e.insertRaw("agent:billing-bot", "payments.refund", "invoice:INV-7003", args, "")
		e.exec(`UPDATE calls SET args = ? WHERE id = ?`, `{"amount_minor":5,"currency":"USD","reason_code":"duplicate"}`, raw.ID)
		got := card(raw.ID)
		if got.Find(`[data-testid="card-warning"]`).Length() != 1 {
			t.Error("the edit of the stored copy hid the look-alike character's warning from the card")
		}
		loaded, err := e.q.Call(context.Background(), raw.ID)
		if err != nil {
			t.Fatal(err)
		}
		if err := queue.Confirmation(e.q.Tools(), loaded, "", false); err == nil || server.ErrorOf(err).Code != "warning_not_acknowledged" {
			t.Errorf("Confirmation without acknowledging = %v, want warning_not_acknowledged", err)
		}
	})
}

// BenchmarkCardRender is what one queue card costs the hub for a change:
// the card's view from the stored call and its fragment rendered, once
// for every viewer of a role.
func BenchmarkCardRender(b *testing.B) {
	e := newConsoleEnv(b)
	e.submit("agent:billing-bot", "payments-host", conRefundBody)
	calls, err := e.q.PendingCalls(context.Background(), 1)
	if err != nil || len(calls) != 1 {
		b.Fatalf("PendingCalls = %d calls, %v", len(calls), err)
	}
	call, now := calls[0], e.clock.Now()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := renderBytes(templates.CardItem(e.c.cardView(call, true, false, now), "true")); err != nil {
			b.Fatal(err)
		}
	}
}
