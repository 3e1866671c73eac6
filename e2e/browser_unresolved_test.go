package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/countersign/countersign/client"
)

// TestBrowserUnresolved: an executor that cannot tell whether its call ran
// reports unknown; the call appears on the open Unresolved page without a
// reload, an operator resolves it there, and the agent reads the
// resolution on the call.
func TestBrowserUnresolved(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	s := startServer(t, "")
	s.addUser("alice", "operator")
	bob := s.addUser("bob", "operator")
	payments := client.New(s.url, s.token("agent:billing-bot", "payments-host"), client.WithPollWait(30*time.Second))

	b := startBrowser(t, ctx)
	op := b.window(t, "bob")
	op.login(s.url, bob)
	op.navigate(s.url + "/unresolved")
	op.waitLive()
	op.mark()
	if got := op.text(testID("unresolved-count")); got != "0" {
		t.Fatalf("unresolved count %q before any call, want 0", got)
	}

	// The agent's side: proposed, approved by alice, redeemed, and the
	// executor loses its connection after sending the refund.
	call := submit(t, ctx, payments, refund("INV-7001", 1999))
	if r, err := controlApprove(ctx, s.data, call.ID, "alice", call.Digest); err != nil || r.status != http.StatusOK {
		t.Fatalf("approve through the control socket: %v %d %s", err, r.status, r.raw)
	}
	approved, err := payments.Wait(ctx, call.ID)
	if err != nil || approved.Status != client.StatusApproved {
		t.Fatalf("wait: %v %+v", err, approved)
	}
	res, err := payments.Redeem(ctx, approved.Grant, approved.Spec())
	if err != nil || !res.Accepted || res.Envelope == "" || res.LeaseUntil.IsZero() {
		t.Fatalf("redeem: %v %+v", err, res)
	}
	if _, err := payments.ReportOutcome(ctx, call.ID, client.OutcomeUnknown, "the bank's API timed out after the request was sent"); err != nil {
		t.Fatal(err)
	}

	card := `article[data-unresolved="` + call.ID + `"]`
	op.do("wait for the pushed card", waitShort, chromedp.WaitVisible(chromedp.CSS(card)))
	op.checkMarked()
	if got := op.text(testID("unresolved-count")); got != "1" {
		t.Errorf("unresolved count %q, want 1", got)
	}
	if got := op.text(chromedp.CSS(card + ` [data-testid="unresolved-outcome"]`)); !strings.Contains(got, "unknown") {
		t.Errorf("the card says %q, want the unknown outcome", got)
	}
	if got := op.text(chromedp.CSS(card + ` [data-testid="unresolved-detail"]`)); !strings.Contains(got, "timed out") {
		t.Errorf("the executor's words on the card: %q", got)
	}
	op.screenshot("unresolved-card")
	accessible(t, op, "the unresolved outcomes with a card")

	// Resolved there: not executed, with a note and a link to the evidence.
	form := card + ` [data-testid="resolve-form"] `
	op.do("resolve the call", waitLong,
		chromedp.Click(chromedp.CSS(form+`[data-testid="verdict-not-executed"]`), chromedp.NodeVisible),
		chromedp.SendKeys(chromedp.CSS(form+`[data-testid="resolve-note"]`), "The bank's ledger has no refund for INV-7001."),
		chromedp.SendKeys(chromedp.CSS(form+`[data-testid="resolve-evidence"]`), "https://bank.example/ledger?invoice=INV-7001"),
		chromedp.WaitEnabled(chromedp.CSS(form+`[data-testid="resolve"]`)),
		chromedp.Click(chromedp.CSS(form+`[data-testid="resolve"]`)),
		chromedp.WaitVisible(testID("unresolved-notice")),
		chromedp.WaitNotPresent(chromedp.CSS(card)),
	)
	if got := op.text(testID("unresolved-count")); got != "0" {
		t.Errorf("unresolved count %q after the resolution, want 0", got)
	}

	// The agent sees what the person found.
	got, err := payments.Get(ctx, call.ID)
	if err != nil {
		t.Fatal(err)
	}
	if r := got.Resolution; r == nil || r.Verdict != "not_executed" || r.By != "bob" ||
		r.Note != "The bank's ledger has no refund for INV-7001." || r.Evidence != "https://bank.example/ledger?invoice=INV-7001" {
		t.Fatalf("the agent reads resolution %+v", got.Resolution)
	}

	// The call's timeline shows the lifecycle as separate facts.
	op.navigate(s.url + "/history/calls/" + call.ID)
	kinds := eval[[]string](op, `Array.from(document.querySelectorAll('[data-testid="life-step"]'), e => e.dataset.kind)`)
	if w := "proposed decided granted redeemed outcome resolved proof"; strings.Join(kinds, " ") != w {
		t.Errorf("lifecycle %v, want %s", kinds, w)
	}
	href := eval[string](op, `(() => { const a = document.querySelector('a[href^="https://bank.example"]'); return a ? a.getAttribute("href") : ""; })()`)
	if href != "" {
		t.Errorf("the timeline links the evidence as %q; it should show it as text", href)
	}
	op.navigate(s.url + "/calls/" + call.ID)
	if got := eval[string](op, `document.querySelector('[data-testid="resolution-evidence-link"]').getAttribute("href")`); got != "https://bank.example/ledger?invoice=INV-7001" {
		t.Errorf("evidence link %q", got)
	}
	op.screenshot("call-resolved")
	accessible(t, op, "a resolved call")
}
