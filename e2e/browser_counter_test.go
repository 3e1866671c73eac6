package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/countersign/countersign/client"
)

// counterRefunds is a refund tool whose target, amount and reason an
// operator may edit.
const counterRefunds = `tools:
  payments.refund:
    description: Refund an invoice
    audience: payments-host
    target: '^invoice:INV-[0-9]+$'
    counter: {edit: [target, /amount_minor, /reason_code]}
    args:
      type: object
      additionalProperties: false
      required: [amount_minor, currency, reason_code]
      properties:
        amount_minor: {type: integer, minimum: 1, maximum: 5000000}
        currency: {type: string, enum: [USD, EUR]}
        reason_code: {type: string, enum: [duplicate, fraud, requested]}
`

// counterInput selects the field of the member at ptr in the form form.
func counterInput(form, ptr string) chromedp.CSS {
	return chromedp.CSS(`[data-testid="` + form + `"] [data-testid="counter-input"][data-pointer="` + ptr + `"]`)
}

// TestBrowserCounter answers a refund with an edit in Chromium: the edit
// form on the call's page, an invalid edit shown again as typed with every
// problem, the review with each change and the new digest, and the
// approval. The agent's call reads countered; it accepts the counter and
// redeems it, and the counter's grant refuses the original call.
func TestBrowserCounter(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	file := filepath.Join(t.TempDir(), "tools.yaml")
	if err := os.WriteFile(file, []byte(counterRefunds), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "", "--tools", file)
	alice := s.addUser("alice", "operator")
	payments := client.New(s.url, s.token("agent:billing-bot", "payments-host"), client.WithPollWait(30*time.Second))
	orig := submit(t, ctx, payments, refund("INV-6300", 40000))

	b := startBrowser(t, ctx)
	op := b.window(t, "alice")
	log := op.captureConsole()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("alice's browser console: %q", log.matching(""))
		}
	})
	op.login(s.url, alice)
	op.navigate(s.url + "/calls/" + orig.ID)
	op.do("open the edit form", waitShort,
		chromedp.WaitVisible(testID("counter-offer")),
		chromedp.Click(chromedp.CSS(`[data-testid="counter-offer"] summary`)),
		chromedp.WaitVisible(counterInput("counter-offer-form", "/amount_minor")))
	pointers := eval[[]string](op, `Array.from(document.querySelectorAll('[data-testid="counter-offer-form"] [data-testid="counter-input"]')).map(i => i.dataset.pointer + "=" + i.value)`)
	if want := "target=invoice:INV-6300 /amount_minor=40000 /reason_code=duplicate"; strings.Join(pointers, " ") != want {
		t.Errorf("the edit form offers %q, want %q", strings.Join(pointers, " "), want)
	}
	for _, w := range sizes {
		op.do("set the window to "+w.name, waitShort, chromedp.EmulateViewport(w.width, w.height))
		eval[bool](op, `(() => { document.querySelector('[data-testid="counter-offer"]').scrollIntoView({block: "start"}); return true; })()`)
		if problems := eval[[]string](op, layoutProblemsJS); len(problems) > 0 {
			t.Errorf("the call page with the edit form at %s px:\n  %s", w.name, strings.Join(problems, "\n  "))
		}
		op.screenshot("counter-form-" + w.name)
		accessible(t, op, "the call page with the edit form at "+w.name)
	}
	op.do("back to 1280", waitShort, chromedp.EmulateViewport(1280, 900))

	op.do("type an invalid edit and review it", waitShort,
		chromedp.SetValue(counterInput("counter-offer-form", "target"), "invoice:nope"),
		chromedp.SetValue(counterInput("counter-offer-form", "/amount_minor"), "99000000"),
		chromedp.Click(chromedp.CSS(`[data-testid="counter-offer-form"] [data-testid="counter-review"]`)),
		chromedp.WaitVisible(testID("counter-problems")))
	if got := op.texts(testID("counter-problem")); len(got) != 2 {
		t.Errorf("the problems listed: %q, want one for the target and one for the amount", got)
	}
	typed := eval[[]string](op, `Array.from(document.querySelectorAll('[data-testid="counter-change-form"] [data-testid="counter-input"]')).map(i => i.value)`)
	if strings.Join(typed, " ") != "invoice:nope 99000000 duplicate" {
		t.Errorf("the form shows %q again, want what was typed", typed)
	}
	for _, w := range sizes {
		op.do("set the window to "+w.name, waitShort, chromedp.EmulateViewport(w.width, w.height))
		if problems := eval[[]string](op, layoutProblemsJS); len(problems) > 0 {
			t.Errorf("the invalid edit at %s px:\n  %s", w.name, strings.Join(problems, "\n  "))
		}
		op.screenshot("counter-problems-" + w.name)
		accessible(t, op, "the invalid edit at "+w.name)
	}
	op.do("back to 1280", waitShort, chromedp.EmulateViewport(1280, 900))

	op.do("correct it and review again", waitShort,
		chromedp.SetValue(counterInput("counter-change-form", "target"), "invoice:INV-6301"),
		chromedp.SetValue(counterInput("counter-change-form", "/amount_minor"), "4000"),
		chromedp.Click(chromedp.CSS(`[data-testid="counter-change-form"] [data-testid="counter-review"]`)),
		chromedp.WaitVisible(testID("counter-diff")))
	var diff []string
	for _, row := range eval[[]string](op, `Array.from(document.querySelectorAll('[data-testid="counter-change"]')).map(r => Array.from(r.children).map(c => c.textContent).join(" "))`) {
		diff = append(diff, strings.Join(strings.Fields(row), " "))
	}
	if want := "target invoice:INV-6300 → invoice:INV-6301 | /amount_minor 40000 → 4000"; strings.Join(diff, " | ") != want {
		t.Errorf("the diff reads %q, want %q", strings.Join(diff, " | "), want)
	}
	newDigest := ungroup(op.text(testID("counter-digest")))
	if len(newDigest) != 64 || newDigest == orig.Digest {
		t.Fatalf("the review shows the new digest %q (original %s)", newDigest, orig.Digest)
	}
	for _, w := range sizes {
		op.do("set the window to "+w.name, waitShort, chromedp.EmulateViewport(w.width, w.height))
		if problems := eval[[]string](op, layoutProblemsJS); len(problems) > 0 {
			t.Errorf("the review at %s px:\n  %s", w.name, strings.Join(problems, "\n  "))
		}
		op.screenshot("counter-review-" + w.name)
		accessible(t, op, "the review at "+w.name)
	}
	op.do("back to 1280", waitShort, chromedp.EmulateViewport(1280, 900))
	op.do("approve the edited call", waitShort,
		chromedp.WaitEnabled(testID("counter-approve")), chromedp.Click(testID("counter-approve")),
		chromedp.WaitVisible(testID("decision-notice")))

	// The agent: the original is countered, naming the counter with the
	// digest the review showed; it accepts and redeems the counter.
	got, err := payments.Get(ctx, orig.ID)
	if err != nil || got.Status != client.StatusCountered || got.CounteredBy == nil || got.CounteredBy.Digest != newDigest {
		t.Fatalf("the original: %+v %v", got, err)
	}
	if _, err := payments.Accept(ctx, orig.ID); err == nil {
		t.Error("accepting the original, not a counter, succeeded")
	}
	acc, err := payments.Accept(ctx, got.CounteredBy.ID)
	if err != nil || acc.Status != client.StatusApproved || acc.Grant == "" || acc.Digest != newDigest {
		t.Fatalf("accept the counter: %+v %v", acc, err)
	}
	if red, err := payments.Redeem(ctx, acc.Grant, orig.Spec()); err == nil && red.Accepted {
		t.Fatal("the counter's grant redeemed the original call")
	}
	var args map[string]any
	if err := json.Unmarshal(acc.Args, &args); err != nil {
		t.Fatal(err)
	}
	red, err := payments.Redeem(ctx, acc.Grant, client.CallSpec{Tool: acc.Tool, Target: acc.Target, Args: args})
	if err != nil || !red.Accepted {
		t.Fatalf("redeem the counter: %+v %v", red, err)
	}
	op.navigate(s.url + "/calls/" + orig.ID)
	op.do("the original's page", waitShort, chromedp.WaitVisible(statusIs("countered")))
	op.screenshot("counter-original-1280")
}

// TestBrowserCounterFormSurvivesAPush: what an operator typed in the open
// "Approve with an edit" form stays, open and filled in, when another
// operator's approval re-renders the call's status live.
func TestBrowserCounterFormSurvivesAPush(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	file := filepath.Join(t.TempDir(), "tools.yaml")
	if err := os.WriteFile(file, []byte(strings.Replace(counterRefunds, "    counter:", "    approvals: 2\n    counter:", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "", "--tools", file)
	alice := s.addUser("alice", "operator")
	s.addUser("bob", "operator")
	payments := client.New(s.url, s.token("agent:billing-bot", "payments-host"))
	call := submit(t, ctx, payments, refund("INV-6400", 40000))
	if call.Approvals.Required != 2 {
		t.Fatalf("the refund needs %d approvals, want 2 (the tools file was not the test's)", call.Approvals.Required)
	}
	b := startBrowser(t, ctx)
	op := b.window(t, "alice")
	op.login(s.url, alice)
	op.navigate(s.url + "/calls/" + call.ID)
	op.waitLive()
	op.do("open the edit form and type", waitShort,
		chromedp.Click(chromedp.CSS(`[data-testid="counter-offer"] summary`)),
		chromedp.WaitVisible(counterInput("counter-offer-form", "/amount_minor")),
		chromedp.SetValue(counterInput("counter-offer-form", "/amount_minor"), "4000"))
	if r, err := controlApprove(ctx, s.data, call.ID, "bob", call.Digest); err != nil || r.status != 200 {
		t.Fatalf("bob approves: %v %d %s", err, r.status, r.raw)
	}
	op.waitFor("the status shows bob's approval", `(() => { const d = document.querySelector('[data-testid="approval-by"]'); return !!d && d.textContent.includes("bob"); })()`)
	if open := eval[bool](op, `document.querySelector('[data-testid="counter-offer"]').open`); !open {
		t.Error("the edit form closed when the status was pushed")
	}
	if got := eval[string](op, `document.querySelector('[data-testid="counter-offer-form"] [data-pointer="/amount_minor"]').value`); got != "4000" {
		t.Errorf("the amount reads %q after the push, want what was typed: 4000", got)
	}
}
