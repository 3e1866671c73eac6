package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/countersign/countersign/client"
)

// TestBrowserAllowance gives an allowance in Chromium from a pending
// refund's page: the choices, the review step with the scope in words and
// its digest, then "Approve and give". Later refunds inside the scope never
// reach the queue (they arrive approved, each with its own approval in the
// operator's name); one above the maximum does, live. Revoking it on its
// page makes the next refund wait for a person again.
func TestBrowserAllowance(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	s := startServer(t, "")
	alice := s.addUser("alice", "operator")
	payments := client.New(s.url, s.token("agent:billing-bot", "payments-host"), client.WithPollWait(30*time.Second))
	base := submit(t, ctx, payments, refund("INV-6100", 1200))

	b := startBrowser(t, ctx)
	op := b.window(t, "alice")
	op.login(s.url, alice)
	op.navigate(s.url + "/calls/" + base.ID)
	op.do("open the offer", waitShort,
		chromedp.WaitVisible(testID("allowance-offer")),
		chromedp.Click(chromedp.CSS(`[data-testid="allowance-offer"] summary`)),
		chromedp.WaitVisible(testID("allowance-uses")))
	op.do("choose", waitShort,
		chromedp.SetValue(testID("allowance-uses"), "3"),
		chromedp.SetValue(testID("allowance-target-prefix"), "invoice:INV-61"),
		chromedp.SetValue(chromedp.CSS(`[data-testid="allowance-max"][data-pointer="/amount_minor"]`), "5000"))
	op.screenshot("allowance-offer-1280")
	op.do("review", waitShort, chromedp.Click(chromedp.CSS(`[data-testid="allowance-offer-form"] [data-testid="allowance-review"]`)),
		chromedp.WaitVisible(testID("allowance-scope")))
	words := op.text(testID("allowance-words"))
	for _, want := range []string{"3", "agent:billing-bot", "invoice:INV-61", "50.00"} {
		if !strings.Contains(words, want) {
			t.Errorf("the scope in words %q does not say %q", words, want)
		}
	}
	if got := ungroup(op.text(chromedp.CSS(`[data-testid="allowance-base"] [data-testid="digest"]`))); got != base.Digest {
		t.Errorf("the review shows digest %s, the agent was given %s", got, base.Digest)
	}
	for _, w := range []struct {
		name          string
		width, height int64
	}{{"1280", 1280, 900}, {"390", 390, 844}} {
		op.do("set the window to "+w.name, waitShort, chromedp.EmulateViewport(w.width, w.height))
		if problems := eval[[]string](op, layoutProblemsJS); len(problems) > 0 {
			t.Errorf("the review page at %s px:\n  %s", w.name, strings.Join(problems, "\n  "))
		}
		op.screenshot("allowance-review-" + w.name)
	}
	op.do("back to 1280", waitShort, chromedp.EmulateViewport(1280, 900))
	op.do("give", waitShort, chromedp.WaitEnabled(testID("allowance-give")), chromedp.Click(testID("allowance-give")),
		chromedp.WaitVisible(testID("allowance-notice")))
	if got := op.text(testID("allowance-uses-left")); !strings.Contains(got, "3 left") {
		t.Errorf("the allowance's page says %q", got)
	}
	if got, err := payments.Get(ctx, base.ID); err != nil || got.Status != "approved" {
		t.Fatalf("the base call: %v %v", got, err)
	}

	op.openQueue(s.url)
	op.mark()
	covered, err := payments.Submit(ctx, refund("INV-6101", 4000))
	if err != nil {
		t.Fatal(err)
	}
	above := submit(t, ctx, payments, refund("INV-6102", 9000))
	if covered.Status != "approved" || len(covered.Approvals.Given) != 1 || covered.Approvals.Given[0].Method != client.MethodAllowance ||
		covered.Approvals.Given[0].By != "alice" || covered.Approvals.Given[0].Human != client.HumanFalse {
		t.Fatalf("the covered refund: %s %+v", covered.Status, covered.Approvals)
	}
	op.do("the refund above the maximum arrives", waitShort, chromedp.WaitVisible(cardSel(above.ID)))
	if n := eval[int](op, `document.querySelectorAll('article[data-call="`+covered.ID+`"]').length`); n != 0 {
		t.Error("the covered refund is on the queue")
	}
	op.checkMarked()

	op.navigate(s.url + "/calls/" + covered.ID)
	op.do("the covered call's page", waitShort, chromedp.WaitVisible(testID("approval-allowance")))
	if got := op.text(testID("approval-allowance-left")); !strings.Contains(got, "2 of 3 left") {
		t.Errorf("the covered call's page says %q", got)
	}
	if problems := eval[[]string](op, layoutProblemsJS); len(problems) > 0 {
		t.Errorf("the covered call's page:\n  %s", strings.Join(problems, "\n  "))
	}
	clipped := eval[[]string](op, `(() => { const dl = document.querySelector('[data-testid="approval-allowance"]').closest('dl'); const box = dl.getBoundingClientRect();
		return Array.from(dl.querySelectorAll('*')).filter(e => e.getBoundingClientRect().right > box.right + 1).map(e => e.tagName + ' ' + e.textContent.trim().slice(0, 40)); })()`)
	if len(clipped) > 0 {
		t.Errorf("these run out of the status box: %q", clipped)
	}
	op.screenshot("allowance-covered-call-1280")

	op.navigate(s.url + "/allowances")
	op.do("the allowances page", waitShort, chromedp.WaitVisible(testID("allowance")))
	for _, w := range []struct {
		name          string
		width, height int64
	}{{"1280", 1280, 900}, {"390", 390, 844}} {
		op.do("set the window to "+w.name, waitShort, chromedp.EmulateViewport(w.width, w.height))
		if problems := eval[[]string](op, layoutProblemsJS); len(problems) > 0 {
			t.Errorf("the allowances page at %s px:\n  %s", w.name, strings.Join(problems, "\n  "))
		}
		op.screenshot("allowances-" + w.name)
	}
	op.do("back to 1280", waitShort, chromedp.EmulateViewport(1280, 900))
	op.do("open it", waitShort, chromedp.Click(chromedp.CSS(`[data-testid="allowance"] h3 a`)), chromedp.WaitVisible(testID("allowance-revoke-form")))
	op.do("revoke", waitShort,
		chromedp.SendKeys(testID("allowance-revoke-reason"), "enough for today"),
		chromedp.Click(testID("allowance-revoke")),
		chromedp.WaitVisible(testID("allowance-ended")))
	if got := op.text(testID("allowance-state")); got != "ended: revoked" {
		t.Errorf("after revoking, the state reads %q", got)
	}
	if got, err := payments.Get(ctx, covered.ID); err != nil || got.Status != "revoked" {
		t.Errorf("the covered refund's unredeemed grant: %v %v", got.Status, err)
	}
	op.openQueue(s.url)
	next := submit(t, ctx, payments, refund("INV-6103", 100))
	if next.Status != "pending" {
		t.Fatalf("after the revocation a refund is %s", next.Status)
	}
	op.do("the next refund waits for a person", waitShort, chromedp.WaitVisible(cardSel(next.ID)))
}

// twoApproverRefunds is a refund tool that needs two approvers and opts
// into allowances.
const twoApproverRefunds = `tools:
  payments.refund:
    description: Refund an invoice
    audience: payments-host
    target: '^invoice:INV-[0-9]+$'
    approvals: 2
    args:
      type: object
      additionalProperties: false
      required: [amount_minor, currency, reason_code]
      properties:
        amount_minor: {type: integer, minimum: 1, maximum: 5000000}
        currency: {type: string, enum: [USD, EUR]}
        reason_code: {type: string, enum: [duplicate, fraud, requested]}
    allowance: {max_uses: 20, max_for: 1h, vary: [target, /amount_minor]}
`

// TestBrowserAllowanceOfferSurvivesAPush: what an operator chose in the
// open "Approve this and more like it" form stays, open and filled in,
// when another operator's approval re-renders the call's status live.
func TestBrowserAllowanceOfferSurvivesAPush(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	file := filepath.Join(t.TempDir(), "tools.yaml")
	if err := os.WriteFile(file, []byte(twoApproverRefunds), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "", "--tools", file)
	alice := s.addUser("alice", "operator")
	s.addUser("bob", "operator")
	payments := client.New(s.url, s.token("agent:billing-bot", "payments-host"), client.WithPollWait(30*time.Second))
	call := submit(t, ctx, payments, refund("INV-6200", 1200))
	if call.Approvals.Required != 2 {
		t.Fatalf("the refund needs %d approvals, want 2 (the tools file was not the test's)", call.Approvals.Required)
	}
	b := startBrowser(t, ctx)
	op := b.window(t, "alice")
	op.login(s.url, alice)
	op.navigate(s.url + "/calls/" + call.ID)
	op.waitLive()
	op.do("open the offer and choose", waitShort,
		chromedp.Click(chromedp.CSS(`[data-testid="allowance-offer"] summary`)),
		chromedp.WaitVisible(testID("allowance-uses")),
		chromedp.SetValue(testID("allowance-uses"), "7"))
	if r, err := controlApprove(ctx, s.data, call.ID, "bob", call.Digest); err != nil || r.status != 200 {
		t.Fatalf("bob approves: %v %d %s", err, r.status, r.raw)
	}
	op.waitFor("the status shows 1 of 2", `(() => { const d = document.querySelector('[data-testid="approval-by"]'); return !!d && d.textContent.includes("bob"); })()`)
	if open := eval[bool](op, `document.querySelector('[data-testid="allowance-offer"]').open`); !open {
		t.Error("the offer closed when the status was pushed")
	}
	if got := eval[string](op, `document.querySelector('[data-testid="allowance-uses"]').value`); got != "7" {
		t.Errorf("how many reads %q after the push, want what was typed: 7", got)
	}
}
