package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/countersign/countersign/client"
)

// TestBrowserPlan: an agent proposes a plan of eight report reads; the
// queue shows one card for it, not eight; the plan's page shows every item
// with its digest and the plan digest; one approval in Chromium approves
// the plan, and the agent mints, redeems and reports each item in turn.
func TestBrowserPlan(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	s := startServer(t, "")
	alice := s.addUser("alice", "operator")
	reader := client.New(s.url, s.token("agent:report-bot", "reports-host"))

	proposal := client.PlanProposal{Rationale: "Read the eight monthly reports for the quarterly summary.", Ordered: true}
	for i := range 8 {
		proposal.Items = append(proposal.Items, client.CallSpec{Tool: "reports.read", Target: fmt.Sprintf("report:sales-%02d", i+1),
			Args: map[string]any{"period": fmt.Sprintf("2026-%02d", i+1), "format": "csv"}})
	}
	b := startBrowser(t, ctx)
	op := b.window(t, "alice")
	op.login(s.url, alice)
	op.openQueue(s.url)
	op.mark()

	// The plan's card arrives on the open queue through its socket.
	plan, err := reader.SubmitPlan(ctx, proposal)
	if err != nil {
		t.Fatal(err)
	}
	op.do("wait for the plan's card", waitShort, chromedp.WaitVisible(chromedp.CSS(`[data-testid="plan-card"][data-plan="`+plan.ID+`"]`)))
	op.checkMarked()
	if n := eval[int](op, `document.querySelectorAll('[data-testid="plan-card"]').length`); n != 1 {
		t.Fatalf("the queue shows %d plan cards, want 1", n)
	}
	if n := eval[int](op, `document.querySelectorAll('#queue-list article[data-call]').length`); n != 0 {
		t.Fatalf("the queue shows %d call cards for the plan's items, want none", n)
	}
	for _, w := range sizes {
		op.do("set the window to "+w.name, waitShort, chromedp.EmulateViewport(w.width, w.height))
		op.screenshot("plan-queue-" + w.name)
	}
	op.do("back to 1280", waitShort, chromedp.EmulateViewport(1280, 900))

	op.do("open the plan", waitShort, chromedp.Click(testID("plan-card-link")), chromedp.WaitVisible(testID("plan-decide")))
	if n := eval[int](op, `document.querySelectorAll('[data-testid="plan-item"]').length`); n != 8 {
		t.Fatalf("the plan page lists %d items, want 8", n)
	}
	for _, it := range plan.Items {
		got := ungroup(op.text(chromedp.CSS(`[data-testid="plan-item"][data-call="` + it.ID + `"] [data-testid="digest"]`)))
		if got != it.Digest {
			t.Errorf("%s: the plan page shows digest %s, the agent was given %s", it.ID, got, it.Digest)
		}
	}
	if got := ungroup(op.text(testID("plan-digest"))); got != plan.Digest {
		t.Errorf("the plan page shows plan digest %s, the agent was given %s", got, plan.Digest)
	}
	op.do("wait for Approve to arm", waitShort, chromedp.WaitEnabled(testID("plan-approve")))
	for _, w := range sizes {
		op.do("set the window to "+w.name, waitShort, chromedp.EmulateViewport(w.width, w.height))
		if problems := eval[[]string](op, layoutProblemsJS); len(problems) > 0 {
			t.Errorf("the plan page at %s px:\n  %s", w.name, strings.Join(problems, "\n  "))
		}
		op.screenshot("plan-" + w.name)
		// The decision at the foot of the page, as the approver sees it.
		shot := run(op, "screenshot the decision", chromedp.Screenshot(testID("plan-decide-area")))
		if err := os.WriteFile(filepath.Join(artifactsDir, "plan-decide-"+w.name+".png"), shot, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	op.do("back to 1280", waitShort, chromedp.EmulateViewport(1280, 900))
	accessible(t, op, "the plan page")

	op.do("approve the plan", waitShort,
		chromedp.WaitEnabled(testID("plan-approve")),
		chromedp.Click(testID("plan-approve")),
		chromedp.WaitVisible(testID("plan-message")))
	if got := op.text(testID("plan-status")); got != "approved" {
		t.Fatalf("after approving, the plan is %q", got)
	}

	p, err := reader.WaitPlan(ctx, plan.ID, 100*time.Millisecond)
	if err != nil || p.Status != client.PlanApproved {
		t.Fatalf("WaitPlan: %v", err)
	}
	for n := range p.Items {
		item, err := reader.MintItem(ctx, p.ID, n)
		if err != nil {
			t.Fatalf("mint item %d: %v", n, err)
		}
		r, err := reader.Redeem(ctx, item.Grant, item.Spec())
		if err != nil || !r.Accepted {
			t.Fatalf("redeem item %d: %v %+v", n, err, r)
		}
		if _, err := reader.ReportOutcome(ctx, item.ID, "succeeded", ""); err != nil {
			t.Fatalf("outcome of item %d: %v", n, err)
		}
	}
	done, err := reader.GetPlan(ctx, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range done.Items {
		if it.Status != client.StatusRedeemed || len(it.Approvals.Given) != 1 || it.Approvals.Given[0].Method != "plan" ||
			it.Approvals.Given[0].Human != "true" || it.Approvals.Given[0].Presented == nil || it.Approvals.Given[0].Presented.Page != "plan" {
			t.Fatalf("item %s after the run: %s, approvals %+v", it.ID, it.Status, it.Approvals.Given)
		}
	}
	op.navigate(s.url + "/plans/" + p.ID)
	if n := eval[int](op, `document.querySelectorAll('[data-testid="plan-item-state"]').length`); n != 8 {
		t.Fatalf("%d item states shown", n)
	}
	if states := op.texts(testID("plan-item-state")); strings.Join(states, ",") != strings.Repeat("redeemed,", 7)+"redeemed" {
		t.Errorf("the plan page shows item states %v", states)
	}
	op.screenshot("plan-done-1280")
}
