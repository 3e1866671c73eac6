package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/countersign/countersign/client"
)

// needsCount reads one count of the navigation's "Needs you".
func (tb *tab) needsCount(which string) int {
	tb.t.Helper()
	return eval[int](tb, `Number(document.querySelector('[data-testid="needs-`+which+`"]').dataset.count)`)
}

// TestBrowserNeedsYou: the navigation counts what needs people on every
// page, and an open page's counts follow changes live, without a reload
// and without touching what the operator is typing: the deny reason
// being written keeps its text, its caret and the focus while calls come
// and go.
func TestBrowserNeedsYou(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	s := startServer(t, "")
	alice := s.addUser("alice", "operator")
	payments := client.New(s.url, s.token("agent:billing-bot", "payments-host"))
	searches := client.New(s.url, s.token("agent:support-bot", "search-host"))
	first := submit(t, ctx, payments, refund("INV-5001", 1299))

	b := startBrowser(t, ctx)
	op := b.window(t, "alice")
	op.login(s.url, alice)
	op.navigate(s.url + "/calls/" + first.ID)
	op.waitLive()
	if got := op.needsCount("pending"); got != 1 {
		t.Fatalf("the call page counts %d pending, want 1", got)
	}
	op.mark()
	const typed = "Not this invoice: the customer was refunded by hand"
	op.do("type a deny reason", waitShort,
		chromedp.SendKeys(testID("deny-reason"), typed),
		chromedp.Focus(testID("deny-reason")))
	eval[chromedp.Void](op, `(() => { const r = document.querySelector('[data-testid="deny-reason"]'); r.setSelectionRange(4, 8); })()`)

	// A search must be decided within five minutes: one more to decide,
	// and one due soon.
	q := submit(t, ctx, searches, client.Proposal{Tool: "search.query", Target: "index:tickets", Args: map[string]any{"query": "refund stuck", "limit": 5}})
	op.waitFor("two to decide, one due", `(() => {
		const n = (k) => Number(document.querySelector('[data-testid="needs-' + k + '"]').dataset.count);
		return n("pending") === 2 && n("due") === 1; })()`)
	if got := op.text(testID("needs-pending")); got != "2 to decide" {
		t.Errorf("the count reads %q, want 2 to decide", got)
	}
	// Someone else decides it: the count goes down again.
	if _, err := searches.Cancel(ctx, q.ID); err != nil {
		t.Fatal(err)
	}
	op.waitFor("one to decide, none due", `(() => {
		const n = (k) => Number(document.querySelector('[data-testid="needs-' + k + '"]').dataset.count);
		return n("pending") === 1 && n("due") === 0; })()`)
	op.checkMarked()
	state := eval[[]any](op, `(() => { const r = document.querySelector('[data-testid="deny-reason"]');
		return [r.value, document.activeElement === r, r.selectionStart, r.selectionEnd]; })()`)
	if state[0] != typed || state[1] != true || state[2] != float64(4) || state[3] != float64(8) {
		t.Errorf("the deny reason after live counts: value, focused, selection = %v; want %q kept, focused, 4-8", state, typed)
	}

	// A page without a socket counts too.
	op.navigate(s.url + "/history")
	if got := op.needsCount("pending"); got != 1 {
		t.Errorf("the history page counts %d pending, want 1", got)
	}
}
