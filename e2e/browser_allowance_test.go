package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/countersign/countersign/client"
)

// TestBrowserAllowance gives an allowance in Chromium from a pending
// refund's page: the choices, the review step with the scope in words and
// its digest, then "Approve and give". Another operator watches the queue
// meanwhile: later refunds inside the scope arrive there live, approved,
// under "Approved by allowances" (each with its own approval in the
// giver's name, and never as a pending card), with what the allowance has
// left; one above the maximum arrives as a pending card. Revoking the
// allowance on its page turns its unredeemed calls revoked on the watching
// queue, live, and the next refund waits there for a person.
func TestBrowserAllowance(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	s := startServer(t, "")
	alice := s.addUser("alice", "operator")
	bob := s.addUser("bob", "operator")
	payments := client.New(s.url, s.token("agent:billing-bot", "payments-host"), client.WithPollWait(30*time.Second))
	base := submit(t, ctx, payments, refund("INV-6100", 1200))

	b := startBrowser(t, ctx)
	watch := b.window(t, "bob")
	log := watch.captureConsole()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("bob's browser console: %q", log.matching(""))
		}
	})
	watch.login(s.url, bob)
	watch.openQueue(s.url)
	watch.mark()

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
	for _, w := range sizes {
		op.do("set the window to "+w.name, waitShort, chromedp.EmulateViewport(w.width, w.height))
		// The status column scrolls on its own beside the call: show the
		// whole offer in it.
		eval[bool](op, `(() => { const o = document.querySelector('[data-testid="allowance-offer"]'); o.scrollIntoView({block: "start"}); return true; })()`)
		if problems := eval[[]string](op, layoutProblemsJS); len(problems) > 0 {
			t.Errorf("the call page with the offer at %s px:\n  %s", w.name, strings.Join(problems, "\n  "))
		}
		op.screenshot("allowance-offer-" + w.name)
		accessible(t, op, "the call page with the offer at "+w.name)
	}
	op.do("back to 1280", waitShort, chromedp.EmulateViewport(1280, 900))
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
	for _, w := range sizes {
		op.do("set the window to "+w.name, waitShort, chromedp.EmulateViewport(w.width, w.height))
		if problems := eval[[]string](op, layoutProblemsJS); len(problems) > 0 {
			t.Errorf("the review page at %s px:\n  %s", w.name, strings.Join(problems, "\n  "))
		}
		op.screenshot("allowance-review-" + w.name)
		accessible(t, op, "the review at "+w.name)
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

	// Bob's queue: the covered refunds arrive approved, the one above the
	// maximum arrives pending.
	covered, err := payments.Submit(ctx, refund("INV-6101", 4000))
	if err != nil {
		t.Fatal(err)
	}
	if covered.Status != "approved" || len(covered.Approvals.Given) != 1 || covered.Approvals.Given[0].Method != client.MethodAllowance ||
		covered.Approvals.Given[0].By != "alice" || covered.Approvals.Given[0].Human != client.HumanFalse {
		t.Fatalf("the covered refund: %s %+v", covered.Status, covered.Approvals)
	}
	watch.do("the covered refund arrives approved", waitShort, chromedp.WaitVisible(coveredSel(covered.ID)))
	if got := watch.text(chromedp.CSS(coveredSel(covered.ID) + ` [data-testid="covered-status"]`)); got != "approved" {
		t.Errorf("the covered card's status reads %q", got)
	}
	if got := watch.text(chromedp.CSS(coveredSel(covered.ID) + ` [data-testid="covered-left"]`)); !strings.HasPrefix(got, "2 of 3 left, until ") {
		t.Errorf("the covered card says the allowance has %q", got)
	}
	second, err := payments.Submit(ctx, refund("INV-6104", 2500))
	if err != nil || second.Status != "approved" {
		t.Fatalf("the second covered refund: %+v %v", second, err)
	}
	watch.do("the second covered refund arrives", waitShort, chromedp.WaitVisible(coveredSel(second.ID)))
	if got := eval[[]string](watch, `Array.from(document.querySelectorAll('#covered-list [data-testid="covered-card"]')).map(a => a.dataset.covered)`); !slices.Equal(got, []string{second.ID, covered.ID}) {
		t.Errorf("the covered cards read %q, want the newest first: %q", got, []string{second.ID, covered.ID})
	}
	if got := watch.texts(testID("covered-left")); len(got) != 2 || !strings.HasPrefix(got[0], "1 of 3 left") || got[0] != got[1] {
		t.Errorf("the covered cards say the allowance has %q, want 1 of 3 left on each", got)
	}
	above := submit(t, ctx, payments, refund("INV-6102", 9000))
	watch.do("the refund above the maximum arrives pending", waitShort, chromedp.WaitVisible(cardSel(above.ID)))
	if n := eval[int](watch, `document.querySelectorAll('#queue-list article[data-call="`+covered.ID+`"], #queue-list article[data-call="`+second.ID+`"]').length`); n != 0 {
		t.Errorf("a covered refund is among the pending calls: %s", eval[string](watch, `document.getElementById('queue-list').outerHTML`))
	}
	// The agent redeems the first covered refund: its card says so.
	got, err := payments.Get(ctx, covered.ID)
	if err != nil {
		t.Fatal(err)
	}
	if red, err := payments.Redeem(ctx, got.Grant, got.Spec()); err != nil || !red.Accepted {
		t.Fatalf("redeem the covered refund: %+v %v", red, err)
	}
	watch.do("the covered refund is redeemed", waitShort,
		chromedp.WaitVisible(chromedp.CSS(coveredSel(covered.ID)+` [data-testid="covered-status"].redeemed`)))
	watch.checkMarked()
	for _, w := range sizes {
		watch.do("set the window to "+w.name, waitShort, chromedp.EmulateViewport(w.width, w.height))
		if problems := eval[[]string](watch, layoutProblemsJS); len(problems) > 0 {
			t.Errorf("the queue with covered calls at %s px:\n  %s", w.name, strings.Join(problems, "\n  "))
		}
		watch.screenshot("allowance-queue-" + w.name)
		accessible(t, watch, "the queue with covered calls at "+w.name)
	}
	watch.do("back to 1280", waitShort, chromedp.EmulateViewport(1280, 900))

	op.navigate(s.url + "/calls/" + covered.ID)
	op.do("the covered call's page", waitShort, chromedp.WaitVisible(testID("approval-allowance")))
	if got := strings.Join(strings.Fields(op.text(testID("approval-how"))), " "); !strings.HasPrefix(got, "covered by allowance alw_") ||
		!strings.Contains(got, "1 of 3 left") {
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
	if got := op.text(chromedp.CSS(`[data-testid="allowance"] [data-testid="allowance-uses-left"]`)); got != "2 of 3 used, 1 left" {
		t.Errorf("the allowance's card says %q", got)
	}
	for _, w := range sizes {
		op.do("set the window to "+w.name, waitShort, chromedp.EmulateViewport(w.width, w.height))
		if problems := eval[[]string](op, layoutProblemsJS); len(problems) > 0 {
			t.Errorf("the allowances page at %s px:\n  %s", w.name, strings.Join(problems, "\n  "))
		}
		op.screenshot("allowances-" + w.name)
		accessible(t, op, "the allowances at "+w.name)
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
	accessible(t, op, "an ended allowance's page")
	if got, err := payments.Get(ctx, second.ID); err != nil || got.Status != "revoked" {
		t.Errorf("the unredeemed covered refund: %v %v", got.Status, err)
	}

	// Bob's queue, live: the unredeemed covered refund is revoked, the
	// redeemed one stays redeemed, both say the allowance ended; the next
	// refund waits for a person.
	watch.do("the unredeemed covered refund turns revoked", waitShort,
		chromedp.WaitVisible(chromedp.CSS(coveredSel(second.ID)+` [data-testid="covered-status"].revoked`)))
	if got := watch.text(chromedp.CSS(coveredSel(covered.ID) + ` [data-testid="covered-status"]`)); got != "redeemed" {
		t.Errorf("the redeemed covered refund reads %q after the revocation", got)
	}
	if got := watch.texts(testID("covered-left")); len(got) != 2 || got[0] != "ended: revoked" || got[1] != "ended: revoked" {
		t.Errorf("after the revocation the covered cards say %q", got)
	}
	next := submit(t, ctx, payments, refund("INV-6103", 100))
	if next.Status != "pending" {
		t.Fatalf("after the revocation a refund is %s", next.Status)
	}
	watch.do("the next refund waits for a person", waitShort, chromedp.WaitVisible(cardSel(next.ID)))
	watch.checkMarked()
	eval[int](watch, `1`)
	if errs := log.matching("oobErrorNoTarget"); len(errs) > 0 {
		t.Errorf("htmx:oobErrorNoTarget on the watching queue, %d times: %q", len(errs), errs)
	}
	for _, kind := range []string{"error: ", "exception: "} {
		if errs := log.matching(kind); len(errs) > 0 {
			t.Errorf("console errors on the watching queue: %q", errs)
		}
	}
}

// accessible runs axe-core on the page tb shows, as
// TestBrowserAccessibility does on the other page types, in a subtest
// (skipped without axe-core, except where every test must run).
func accessible(t *testing.T, tb *tab, name string) {
	t.Helper()
	t.Run("accessibility of "+name, func(st *testing.T) {
		axe := axeSource(st)
		if violations := runAxe(tb.with(st), axe); len(violations) > 0 {
			st.Errorf("%d accessibility violations:\n  %s", len(violations), strings.Join(violations, "\n  "))
		}
	})
}

// sizes are the two window sizes screenshots are taken at.
var sizes = []struct {
	name          string
	width, height int64
}{{"1280", 1280, 900}, {"390", 390, 844}}

// coveredSel selects the card of a call an allowance approved, on the
// queue.
func coveredSel(id string) string { return `article[data-covered="` + id + `"]` }

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
