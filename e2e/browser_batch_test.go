package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/countersign/countersign/client"
)

// TestBrowserBatch decides twelve calls together in Chromium: a group
// selected with "select all in this group", single boxes ticked, one card
// ticked with x; a call pushed live meanwhile takes no box away; the
// review page lists all twelve with their digests; "Approve all 12"
// approves the eleven plain ones and leaves out the one with hidden
// characters, saying why.
func TestBrowserBatch(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	s := startServer(t, "")
	alice := s.addUser("alice", "operator")
	s.addUser("bob", "operator")
	payments := client.New(s.url, s.token("agent:billing-bot", "payments-host"), client.WithPollWait(30*time.Second))

	var group, single []*client.Call
	for i := range 6 { // one invoice, six amounts: one group on the queue
		group = append(group, submit(t, ctx, payments, refund("INV-5001", 100*(i+1))))
	}
	for i := range 5 {
		single = append(single, submit(t, ctx, payments, refund(fmt.Sprintf("INV-52%02d", i), 1299)))
	}
	tricky := refund("INV-5300", 4200)
	tricky.Rationale = "refund \u202etsop rof"
	deceptive := submit(t, ctx, payments, tricky)
	plain := append(append([]*client.Call(nil), group...), single...)
	deploys := client.New(s.url, s.token("agent:release-bot", "deploy-host"), client.WithPollWait(30*time.Second))
	two := submit(t, ctx, deploys, client.Proposal{Tool: "releases.deploy", Target: "service:checkout",
		Args: map[string]any{"version": "v3.0.0", "environment": "production", "change_ticket": "CHG-5000"}})

	b := startBrowser(t, ctx)
	op := b.window(t, "alice")
	op.login(s.url, alice)
	op.openQueue(s.url)
	op.mark()

	// The group's heading ticks its six; five boxes by click; x on the
	// focused deceptive card.
	op.do("select the group", waitShort, chromedp.Click(chromedp.CSS(`[data-group-select]`)))
	for _, c := range single {
		op.do("tick "+c.ID, waitShort, chromedp.Click(chromedp.CSS(`article[data-call="`+c.ID+`"] [data-testid="card-select"]`)))
	}
	eval[chromedp.Void](op, `document.querySelector('article[data-call="`+deceptive.ID+`"] a[href^="/calls/"]').focus()`)
	op.press("x")
	checked := `Array.from(document.querySelectorAll('#queue-list [data-testid="card-select"]:checked'), e => e.value).sort().join()`
	if got := eval[int](op, `document.querySelectorAll('#queue-list [data-testid="card-select"]:checked').length`); got != 12 {
		t.Fatalf("%d calls selected, want 12", got)
	}
	if got := op.text(testID("batch-count")); got != "12 selected" {
		t.Errorf("the review button counts %q, want 12 selected", got)
	}

	before := eval[string](op, checked)

	// A ticked card that another operator's approval re-renders keeps its
	// box ticked.
	twoBox := `article[data-call="` + two.ID + `"] [data-testid="card-select"]`
	op.do("tick the deploy", waitShort, chromedp.Click(chromedp.CSS(twoBox)))
	if r, err := controlApprove(ctx, s.data, two.ID, "bob", two.Digest); err != nil || r.status != 200 {
		t.Fatalf("bob approves the deploy: %v %d %s", err, r.status, r.raw)
	}
	op.waitFor("the deploy's card shows 1 of 2", `(() => { const q = document.querySelector('article[data-call="`+two.ID+`"] [data-testid="card-quorum"]'); return !!q && q.textContent.startsWith("1 of 2"); })()`)
	if !eval[bool](op, `document.querySelector('`+twoBox+`').checked`) {
		t.Fatal("the deploy's card lost its tick when another operator's approval re-rendered it")
	}
	if got := op.text(testID("batch-count")); got != "13 selected" {
		t.Errorf("the review button counts %q, want 13 selected", got)
	}
	op.do("untick the deploy", waitShort, chromedp.Click(chromedp.CSS(twoBox)))

	// A call pushed live re-renders the list; the selection stays.
	late := submit(t, ctx, payments, refund("INV-5001", 9900))
	op.do("wait for the late call", waitShort, chromedp.WaitVisible(cardSel(late.ID)))
	op.waitFor("the group heading counts 7", `(() => { const h = document.querySelector('[data-testid="group-count"]'); return !!h && h.textContent === "7 calls"; })()`)
	if after := eval[string](op, checked); after != before {
		t.Fatalf("the live update changed the selection:\n before %s\n after  %s", before, after)
	}
	if got := eval[bool](op, `document.querySelector('[data-group-select]').indeterminate`); !got {
		t.Error("the group's box is not shown as partly ticked once a seventh call joined it")
	}
	op.checkMarked()
	op.screenshot("batch-queue-1280")
	accessible(t, op, "the queue with calls ticked for a batch")

	op.do("open the review", waitShort, chromedp.Click(testID("batch-review")), chromedp.WaitVisible(testID("batch-decide")))
	if n := eval[int](op, `document.querySelectorAll('[data-testid="batch-call"]').length`); n != 12 {
		t.Fatalf("the review page lists %d calls, want 12", n)
	}
	for _, c := range append(plain, deceptive) {
		got := ungroup(op.text(chromedp.CSS(`[data-testid="batch-call"][data-call="` + c.ID + `"] [data-testid="digest"]`)))
		if got != c.Digest {
			t.Errorf("%s: the review page shows digest %s, the agent was given %s", c.ID, got, c.Digest)
		}
	}
	if got := op.text(chromedp.CSS(`[data-call="` + deceptive.ID + `"] [data-testid="batch-drops"]`)); !strings.Contains(got, "look-alike") {
		t.Errorf("the deceptive call's notice: %q", got)
	}
	op.do("wait for Approve to arm", waitShort, chromedp.WaitEnabled(testID("batch-approve")))
	if got := op.text(testID("batch-left-out")); !strings.HasPrefix(got, "1 of these will be left out") {
		t.Errorf("the decision says %q, want that one call will be left out", got)
	}
	for _, w := range []struct {
		name          string
		width, height int64
	}{{"1280", 1280, 900}, {"390", 390, 844}} {
		op.do("set the window to "+w.name, waitShort, chromedp.EmulateViewport(w.width, w.height))
		if problems := eval[[]string](op, layoutProblemsJS); len(problems) > 0 {
			t.Errorf("the review page at %s px:\n  %s", w.name, strings.Join(problems, "\n  "))
		}
		op.screenshot("batch-review-" + w.name)
		accessible(t, op, "the batch review at "+w.name)
	}
	op.do("back to 1280", waitShort, chromedp.EmulateViewport(1280, 900))

	op.do("approve all", waitShort,
		chromedp.WaitEnabled(testID("batch-approve")),
		chromedp.Click(testID("batch-approve")),
		chromedp.WaitVisible(testID("batch-result-title")))
	if got := op.text(testID("batch-result-title")); got != "Approved 11 of 12 calls" {
		t.Errorf("result: %q", got)
	}
	why := op.text(chromedp.CSS(`[data-testid="batch-dropped-item"][data-call="` + deceptive.ID + `"] [data-testid="batch-dropped-why"]`))
	if !strings.Contains(why, "hidden or look-alike characters") || !strings.Contains(why, "decide it on its own") {
		t.Errorf("the deceptive call's reason: %q", why)
	}
	op.screenshot("batch-result-1280")
	accessible(t, op, "the batch's result")
	for _, c := range plain {
		got, err := payments.Get(ctx, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != client.StatusApproved || got.Grant == "" {
			t.Errorf("%s is %s (grant %t), want approved with its grant", c.ID, got.Status, got.Grant != "")
		}
	}
	for _, c := range []*client.Call{deceptive, late} {
		if got, err := payments.Get(ctx, c.ID); err != nil || got.Status != client.StatusPending {
			t.Errorf("%s: %v, status %s; want still pending", c.ID, err, got.Status)
		}
	}
}
