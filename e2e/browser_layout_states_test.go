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

// boxWidths are the windows the element-box check runs in: a laptop, a
// small laptop, and the phone an on-call approver carries.
var boxWidths = []struct {
	name          string
	width, height int64
}{{"1280", 1280, 900}, {"1024", 1024, 768}, {"390", 390, 844}}

// boxProblemsJS lists every element that reaches outside its parent's
// box sideways, and every element whose content is wider than it (text
// that spills or is clipped), except where the container declares that it
// scrolls (overflow-x auto or scroll) or cuts its text with an ellipsis (a
// list row, whose call page shows all): a table that scrolls inside itself
// may be wider than its box, its cells may not be wider than the table.
// Elements taken out of the flow (fixed, absolute) and those with no box
// are skipped; form fields size their own text.
const boxProblemsJS = `(() => {
	const out = [];
	const scrolls = (el) => { const s = getComputedStyle(el); return /(auto|scroll)/.test(s.overflowX) || (s.textOverflow === "ellipsis" && s.overflowX === "hidden"); };
	const name = (e) => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") + (e.dataset && e.dataset.testid ? "[" + e.dataset.testid + "]" : "") +
		(typeof e.className === "string" && e.className.trim() ? "." + e.className.trim().split(/\s+/).join(".") : "");
	for (const el of document.querySelectorAll("body *")) {
		const r = el.getBoundingClientRect();
		if (r.width <= 1 || r.height <= 0) continue;
		const st = getComputedStyle(el);
		if (st.position === "fixed" || st.position === "absolute" || st.display === "contents") continue;
		const p = el.parentElement;
		if (p && p !== document.body && p !== document.documentElement && !scrolls(p)) {
			const pr = p.getBoundingClientRect();
			if (r.right > pr.right + 1 || r.left < pr.left - 1) {
				out.push(name(el) + " reaches " + Math.round(r.left) + "–" + Math.round(r.right) + " px outside " + name(p) + " (" + Math.round(pr.left) + "–" + Math.round(pr.right) + ")");
			}
		}
		if (["INPUT", "TEXTAREA", "SELECT", "OPTION"].includes(el.tagName) || scrolls(el)) continue;
		if (st.display !== "inline" && el.clientWidth > 0 && el.scrollWidth > el.clientWidth + 1) {
			out.push(name(el) + "'s content is " + el.scrollWidth + " px wide in " + el.clientWidth + " px");
		}
	}
	const de = document.documentElement;
	if (de.scrollWidth > de.clientWidth) out.push("the page is " + de.scrollWidth + " px wide in a " + de.clientWidth + " px window");
	return out.slice(0, 25);
})()`

// TestBrowserLayoutStates lays out a named list of page states at 1280,
// 1024 and 390 px and checks every element's box against its container's
// (boxProblemsJS), and runs axe-core on each. On a phone the call's status comes before the call and
// history rows are cards that fit the window.
func TestBrowserLayoutStates(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Second)
	defer cancel()
	// The examples and a tool whose grants live one second, so that an
	// approved call whose grant ran out is on the pages every run.
	tools := toolsWith(t, `
  cache.flush:
    description: Flush a cache
    audience: cache-host
    target: '^cache:[a-z-]+$'
    grant_ttl: 1s
    args:
      type: object
      additionalProperties: false
      properties: {}
`)
	data := t.TempDir()
	s := startProcess(t, data, "serve", "--addr", "127.0.0.1:0", "--data", data, "--tools", tools, "--log-level", "warn")
	alice := s.addUser("alice", "operator")
	s.addUser("bob", "operator")
	admin := s.addUser("root", "admin")
	ids := seedBacklog(t, ctx, s)
	agent := func(actor, audience string) *client.Client {
		return client.New(s.url, s.token(actor, audience), client.WithPollWait(30*time.Second))
	}
	deploys, payments, files := agent("agent:release-bot", "deploy-host"), agent("agent:billing-bot", "payments-host"), agent("agent:janitor", "files-host")

	// A deploy decided by two approvers, redeemed, with an outcome.
	deploy := submit(t, ctx, deploys, client.Proposal{Tool: "releases.deploy", Target: "service:checkout-payments-gateway",
		Args: map[string]any{"version": "v2.31.0", "environment": "production", "change_ticket": "CHG-44001234", "canary_percent": 5,
			"notes": "Roll forward after the incident review; watch the error budget dashboard for thirty minutes."}})
	for _, who := range []string{"alice", "bob"} {
		if controlDecide(t, s, "approve", deploy.ID, who, deploy.Digest) != 200 {
			t.Fatalf("%s approves the deploy", who)
		}
	}
	got, err := deploys.Wait(ctx, deploy.ID)
	if err != nil || got.Grant == "" {
		t.Fatalf("wait for the deploy: %+v %v", got, err)
	}
	if res, err := deploys.Redeem(ctx, got.Grant, got.Spec()); err != nil || !res.Accepted {
		t.Fatalf("redeem the deploy: %+v %v", res, err)
	}
	if _, err := deploys.ReportOutcome(ctx, deploy.ID, client.OutcomeSucceeded, "deployed to 5% then 100%; error rate unchanged at 0.02%"); err != nil {
		t.Fatal(err)
	}
	// An approved flush nobody redeemed: its grant runs out.
	flusher := agent("agent:ops-bot", "cache-host")
	flush := submit(t, ctx, flusher, client.Proposal{Tool: "cache.flush", Target: "cache:sessions-eu-west", Args: map[string]any{}})
	if controlDecide(t, s, "approve", flush.ID, "alice", flush.Digest) != 200 {
		t.Fatal("alice approves the flush")
	}
	if got, err := flusher.Wait(ctx, flush.ID); err != nil || got.GrantExpiresAt.IsZero() {
		t.Fatalf("wait for the flush: %+v %v", got, err)
	} else {
		time.Sleep(time.Until(got.GrantExpiresAt.Add(time.Second)))
	}
	// A file deletion under a freeze.
	frozen := submit(t, ctx, files, client.Proposal{Tool: "files.delete", Target: "file:/srv/shared/exports/q2-customers.csv",
		Args: map[string]any{"reason": "Past retention", "backup": true}})
	if _, code := runConsole(t, "", "freeze", "--data", s.data, "--tool", "files.delete", "--reason", "storage migration in progress: no deletions until the copy is verified", "--as", "root"); code != 0 {
		t.Fatalf("freeze exited %d", code)
	}

	b := startBrowser(t, ctx)
	op := b.window(t, "alice")
	op.login(s.url, alice)
	ad := b.window(t, "admin")
	ad.login(s.url, admin)

	// An allowance given from a refund's page, and a refund it covers.
	base := submit(t, ctx, payments, refund("INV-6100", 1200))
	op.navigate(s.url + "/calls/" + base.ID)
	op.do("open the offer", waitShort, chromedp.WaitVisible(testID("allowance-offer")),
		chromedp.Click(chromedp.CSS(`[data-testid="allowance-offer"] summary`)), chromedp.WaitVisible(testID("allowance-uses")))
	op.do("choose", waitShort, chromedp.SetValue(testID("allowance-uses"), "3"),
		chromedp.SetValue(testID("allowance-target-prefix"), "invoice:INV-61"),
		chromedp.SetValue(chromedp.CSS(`[data-testid="allowance-max"][data-pointer="/amount_minor"]`), "5000"))
	op.do("review", waitShort, chromedp.Click(chromedp.CSS(`[data-testid="allowance-offer-form"] [data-testid="allowance-review"]`)),
		chromedp.WaitVisible(testID("allowance-scope")))
	reviewURL := eval[string](op, `location.pathname + location.search`)
	op.do("give", waitShort, chromedp.WaitEnabled(testID("allowance-give")), chromedp.Click(testID("allowance-give")),
		chromedp.WaitVisible(testID("allowance-notice")))
	allowancePath := eval[string](op, `location.pathname`)
	covered, err := payments.Submit(ctx, refund("INV-6101", 4000))
	if err != nil || covered.Status != "approved" {
		t.Fatalf("the covered refund: %+v %v", covered, err)
	}
	_ = reviewURL

	// A refund answered with an edit: the original reads countered.
	countered := submit(t, ctx, payments, refund("INV-7300", 40000))
	op.navigate(s.url + "/calls/" + countered.ID)
	op.do("counter a refund", waitShort,
		chromedp.WaitVisible(testID("counter-offer")),
		chromedp.Click(chromedp.CSS(`[data-testid="counter-offer"] summary`)),
		chromedp.WaitVisible(counterInput("counter-offer-form", "/amount_minor")),
		chromedp.SetValue(counterInput("counter-offer-form", "/amount_minor"), "4000"),
		chromedp.Click(chromedp.CSS(`[data-testid="counter-offer-form"] [data-testid="counter-review"]`)),
		chromedp.WaitVisible(testID("counter-diff")),
		chromedp.WaitEnabled(testID("counter-approve")), chromedp.Click(testID("counter-approve")),
		chromedp.WaitVisible(testID("decision-notice")))
	// A refund run with an outcome nobody knows: unresolved.
	lost := submit(t, ctx, payments, refund("INV-7400", 700))
	if controlDecide(t, s, "approve", lost.ID, "alice", lost.Digest) != 200 {
		t.Fatal("approve the refund whose outcome is lost")
	}
	if got, err := payments.Wait(ctx, lost.ID); err != nil || got.Grant == "" {
		t.Fatalf("wait for it: %+v %v", got, err)
	} else if res, err := payments.Redeem(ctx, got.Grant, got.Spec()); err != nil || !res.Accepted {
		t.Fatalf("redeem it: %+v %v", res, err)
	}
	if _, err := payments.ReportOutcome(ctx, lost.ID, client.OutcomeUnknown, "the payment provider timed out"); err != nil {
		t.Fatal(err)
	}
	// Two plans of report reads: one waits, one approved in the browser.
	reports := agent("agent:report-bot", "reports-host")
	plan := func(name string) *client.Plan {
		proposal := client.PlanProposal{Rationale: "Read the " + name + " reports for the quarterly summary.", Ordered: true}
		for i := range 3 {
			proposal.Items = append(proposal.Items, client.CallSpec{Tool: "reports.read", Target: fmt.Sprintf("report:%s-%02d", name, i+1),
				Args: map[string]any{"period": fmt.Sprintf("2026-%02d", i+1), "format": "csv"}})
		}
		p, err := reports.SubmitPlan(ctx, proposal)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	waiting, approved := plan("sales"), plan("costs")
	op.navigate(s.url + "/plans/" + approved.ID)
	op.do("approve a plan", waitShort, chromedp.WaitEnabled(testID("plan-approve")), chromedp.Click(testID("plan-approve")),
		chromedp.WaitVisible(testID("plan-message")))
	// A later page of the queue, in either view: after the third call.
	op.navigate(s.url + "/?layout=list")
	after := eval[string](op, `(() => { const r = document.querySelectorAll('#queue-list article[data-call]')[2]; return r.dataset.deadline + "." + r.dataset.call; })()`)
	anon := b.window(t, "anonymous")
	op.navigate(s.url + "/calls/" + flush.ID)
	if got := eval[string](op, `document.querySelector('[data-testid="status-value"]').textContent`); got != "approved — grant expired unredeemed" {
		t.Fatalf("the flush's page reads %q, want its grant expired", got)
	}

	states := []struct {
		name string
		tab  *tab
		path string
	}{
		{"queue", op, "/"},
		{"list view", op, "/?layout=list"},
		{"pending", op, "/calls/" + ids.deploy},
		{"deceptive", op, "/calls/" + ids.mail},
		{"long values", op, "/calls/" + ids.long},
		{"decided with two approvers and an outcome", op, "/calls/" + deploy.ID},
		{"frozen", op, "/calls/" + frozen.ID},
		{"covered by an allowance", op, "/calls/" + covered.ID},
		{"batch review", op, "/batch?id=" + ids.deploy + "&id=" + ids.mail},
		{"allowances", op, "/allowances"},
		{"allowance", op, allowancePath},
		{"grant expired unredeemed", op, "/calls/" + flush.ID},
		{"history", op, "/history"},
		{"timeline", op, "/history/calls/" + deploy.ID},
		{"admin", ad, "/admin"},
		{"cards, a later page", op, "/?after=" + after},
		{"list view, a later page", op, "/?layout=list&after=" + after},
		{"countered", op, "/calls/" + countered.ID},
		{"unresolved", op, "/unresolved"},
		{"unresolved call", op, "/calls/" + lost.ID},
		{"plan waiting", op, "/plans/" + waiting.ID},
		{"plan approved", op, "/plans/" + approved.ID},
		{"plan item", op, "/calls/" + waiting.Items[0].ID},
		{"account", op, "/account"},
		{"password", op, "/account/password"},
		{"tokens", op, "/account/tokens"},
		{"deliveries", ad, "/admin/deliveries"},
		{"MCP reviews", ad, "/admin/mcp"},
		{"login", anon, "/login"},
	}
	for _, w := range boxWidths {
		for _, st := range states {
			t.Run(st.name+" at "+w.name+" px", func(t *testing.T) {
				tb := st.tab.with(t)
				tb.do("set the window to "+w.name+" px", waitShort, chromedp.EmulateViewport(w.width, w.height))
				tb.navigate(s.url + st.path)
				tb.do("wait for the page", waitShort, chromedp.WaitVisible(chromedp.CSS("main")))
				if problems := eval[[]string](tb, boxProblemsJS); len(problems) > 0 {
					tb.screenshot("boxes-" + strings.ReplaceAll(st.name, " ", "-") + "-" + w.name)
					t.Errorf("%s at %s px:\n  %s", st.path, w.name, strings.Join(problems, "\n  "))
				}
				accessible(t, tb, st.name+" at "+w.name)
			})
		}
	}

	// A phone: the status before the call, history rows as cards.
	op.do("a phone", waitShort, chromedp.EmulateViewport(390, 844))
	op.navigate(s.url + "/calls/" + ids.deploy)
	order := eval[[]float64](op, `[document.querySelector('[data-testid="status-first"]').getBoundingClientRect().top,
		document.querySelector('.call-main').getBoundingClientRect().top,
		document.querySelector('[data-testid="approve-form"], [data-testid="decide"], #status').getBoundingClientRect().top]`)
	if !(order[0] < order[1] && order[1] < order[2]) {
		t.Errorf("on a phone the status line, the call and the decision are at %v px, want the status first and the decision after the call", order)
	}
	op.navigate(s.url + "/history")
	rows := eval[[]string](op, `Array.from(document.querySelectorAll('[data-testid="history-row"]'), r => {
		const b = r.getBoundingClientRect(), st = getComputedStyle(r);
		return st.display + " " + Math.round(b.width) + " " + (b.right <= document.documentElement.clientWidth ? "fits" : "overflows");
	})`)
	if len(rows) == 0 {
		t.Fatal("no history rows")
	}
	for _, r := range rows {
		if !strings.HasPrefix(r, "block ") || !strings.HasSuffix(r, " fits") {
			t.Errorf("a history row on a phone: %s, want a card (block) that fits the window", r)
		}
	}
	op.screenshot("history-cards-390")
	op.navigate(s.url + "/calls/" + ids.mail)
	op.screenshot("call-bidi-preview-390")
	op.navigate(s.url + "/")
	op.screenshot("queue-needs-you-390")
	op.navigate(s.url + "/?after=" + after)
	op.screenshot("queue-cards-paged-390")
	op.navigate(s.url + "/calls/" + deploy.ID)
	op.screenshot("call-decided-two-approvers-390")
	op.do("a laptop", waitShort, chromedp.EmulateViewport(1280, 900))
	op.navigate(s.url + "/calls/" + deploy.ID)
	op.screenshot("call-decided-two-approvers-1280")
	op.navigate(s.url + "/calls/" + ids.mail)
	op.screenshot("call-bidi-preview-1280")
	op.navigate(s.url + "/")
	op.screenshot("queue-needs-you-1280")
	op.navigate(s.url + "/?after=" + after)
	op.screenshot("queue-cards-paged-1280")
	ad.do("a laptop", waitShort, chromedp.EmulateViewport(1280, 900))
	ad.navigate(s.url + "/")
	ad.screenshot("queue-needs-you-admin-1280")
	op.navigate(s.url + "/history")
	op.screenshot("history-1280")
}
