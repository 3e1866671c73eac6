package console

import (
	"context"
	"reflect"
	"testing"

	"github.com/PuerkitoBio/goquery"
	"github.com/countersign/countersign/internal/canonical"
)

// TestHistoryRowWarnsFromEnvelope: a history row's deception warning reads
// the arguments the digest covers, as a queue card's does, so an edit of
// the stored copy in the SQLite file cannot hide a hashed look-alike
// character from the history; its actor, tool, target and warning are
// what a card of the same call says; and a row is cheaper than a card's
// view (it builds no summary and compares no stored copy).
func TestHistoryRowWarnsFromEnvelope(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	b := e.browser()
	b.login("olivia", rolePassword)
	row := func(id string) *goquery.Selection {
		t.Helper()
		p := b.get("/history")
		if p.status != 200 {
			t.Fatalf("history page = %d", p.status)
		}
		r := p.doc.Find(`[data-testid="history-row"][data-call="` + id + `"]`)
		if r.Length() != 1 {
			t.Fatalf("the history shows %d rows of %s, want 1", r.Length(), id)
		}
		return r
	}

	plain := e.submit("agent:billing-bot", "payments-host", conRefundBody)
	if row(plain.ID).Find(`[data-testid="row-deceptive"]`).Length() != 0 {
		t.Error("a plain call's row warns of deceptive characters")
	}
	// Hashed with a Cyrillic a; the stored copy edited to plain ASCII.
	args := canonical.Object{{Name: "amount_minor", Value: int64(5)}, {Name: "currency", Value: "USD"},
		{Name: "reason_code", Value: "duplic\u0430te"}}
	hidden := e.insertRaw("agent:billing-bot", "payments.refund", "invoice:INV-7004", args, "")
	e.exec(`UPDATE calls SET args = ? WHERE id = ?`,
		`{"amount_minor":5,"currency":"USD","reason_code":"duplicate"}`, hidden.ID)
	if row(hidden.ID).Find(`[data-testid="row-deceptive"]`).Length() != 1 {
		t.Error("the edit of the stored copy hid the hashed look-alike character's warning from the history row")
	}
	// A record whose envelope no longer matches its digest: judged by what
	// is stored, as a card is.
	broken := e.insertRaw("agent:billing-bot", "payments.refund", "invoice:INV-70\u04305", args, "")
	e.exec(`UPDATE calls SET envelope = CAST(replace(CAST(envelope AS TEXT), '"amount_minor":5', '"amount_minor":6') AS BLOB) WHERE id = ?`,
		broken.ID)
	if row(broken.ID).Find(`[data-testid="row-deceptive"]`).Length() != 1 {
		t.Error("a broken record with a look-alike target does not warn in the history")
	}
	if row(broken.ID).Find(`[data-testid="row-integrity"]`).Length() != 1 {
		t.Error("a record whose envelope no longer hashes to its digest is listed unmarked")
	}
	for _, id := range []string{plain.ID, hidden.ID} {
		if row(id).Find(`[data-testid="row-integrity"]`).Length() != 0 {
			t.Errorf("%s: a record that matches its digest is marked as edited", id)
		}
	}
	// Only the target column edited: the envelope still hashes to the
	// digest, but the row would show a target that was never hashed.
	moved := e.submit("agent:billing-bot", "payments-host", conRefundBody)
	e.exec(`UPDATE calls SET target = 'invoice:INV-9999' WHERE id = ?`, moved.ID)
	if r := row(moved.ID); r.Find(`[data-testid="row-integrity"]`).Length() != 1 {
		t.Errorf("a row whose target column was edited is listed unmarked: %q", r.Find(`[data-testid="row-target"]`).Text())
	}

	hp := &historyPages{c: e.c}
	now := e.clock.Now()
	for _, id := range []string{plain.ID, hidden.ID, broken.ID} {
		call, err := e.q.Call(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		r, card := hp.row(call, now), e.c.cardView(call, false, false, now)
		if !reflect.DeepEqual([]any{r.Actor, r.Tool, r.Target, r.Deceptive}, []any{card.Actor, card.Tool, card.Target, card.Deceptive}) {
			t.Errorf("%s: row shows %v %v %v deceptive=%v; a card shows %v %v %v deceptive=%v", id,
				r.Actor, r.Tool, r.Target, r.Deceptive, card.Actor, card.Tool, card.Target, card.Deceptive)
		}
		rowAllocs := testing.AllocsPerRun(20, func() { hp.row(call, now) })
		cardAllocs := testing.AllocsPerRun(20, func() { e.c.cardView(call, false, false, now) })
		if rowAllocs >= cardAllocs {
			t.Errorf("%s: a history row allocates %.0f times, a card's view %.0f: the row still builds a card", id, rowAllocs, cardAllocs)
		}
	}
}

// BenchmarkHistoryRow is what one row of the history page costs: the row's
// view of one stored payments.refund call (500 of them make a page).
func BenchmarkHistoryRow(b *testing.B) {
	e := newConsoleEnv(b)
	e.submit("agent:billing-bot", "payments-host", conRefundBody)
	calls, err := e.q.PendingCalls(context.Background(), 1)
	if err != nil || len(calls) != 1 {
		b.Fatalf("PendingCalls = %d calls, %v", len(calls), err)
	}
	hp, call, now := &historyPages{c: e.c}, calls[0], e.clock.Now()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		hp.row(call, now)
	}
}
