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
	"github.com/countersign/countersign/internal/testkit"
)

// The widths the console is laid out for: a laptop, and the phone an
// on-call approver carries.
var layoutWidths = []struct {
	name          string
	width, height int64
}{{"1280", 1280, 900}, {"390", 390, 844}}

// layoutProblems lists what is wrong with the page's layout at the current
// width: a page wider than the window, and words broken across lines in
// table headers, status pills, buttons, navigation and ids shortened for
// tables (agent data may wrap anywhere: it is never cut).
const layoutProblemsJS = `(() => {
	const out = [];
	const de = document.documentElement;
	if (de.scrollWidth > de.clientWidth) {
		out.push("the page is " + de.scrollWidth + " px wide in a " + de.clientWidth + " px window");
		// Name the innermost elements that reach past the window.
		const wide = Array.from(document.querySelectorAll("body *")).filter(e => {
			const r = e.getBoundingClientRect();
			return r.right > de.clientWidth + 1 && r.width > 0 &&
				!Array.from(e.children).some(c => c.getBoundingClientRect().right > de.clientWidth + 1);
		});
		for (const e of wide.slice(0, 5)) out.push("  " + e.tagName.toLowerCase() + (e.className ? "." + String(e.className).split(" ").join(".") : "") + (e.dataset.testid ? "[" + e.dataset.testid + "]" : "") + " reaches " + Math.round(e.getBoundingClientRect().right) + " px");
	}
	const words = (el) => {
		const text = el.textContent;
		const node = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
		for (let n = node.nextNode(); n; n = node.nextNode()) {
			const re = /\S+/g;
			let m;
			while ((m = re.exec(n.data)) !== null) {
				const r = document.createRange();
				r.setStart(n, m.index);
				r.setEnd(n, m.index + m[0].length);
				const rects = Array.from(r.getClientRects()).filter(x => x.width > 0);
				const lines = new Set(rects.map(x => Math.round(x.top)));
				if (lines.size > 1) out.push("the word " + JSON.stringify(m[0]) + " in " + el.tagName.toLowerCase() + (el.className ? "." + el.className.split(" ").join(".") : "") + " breaks across lines");
			}
		}
	};
	document.querySelectorAll("th, .status-pill, button, nav a, header.top *, .badge, .short-id, td time, td.mono:not(.target)").forEach(words);
	document.querySelectorAll("table").forEach(t => {
		const box = t.getBoundingClientRect();
		if (box.right > de.clientWidth + 1 && !t.closest(".scroll-x")) out.push("a table reaches " + Math.round(box.right) + " px");
	});
	return out;
})()`

// TestBrowserLayout lays out every page type at 1280 and 390 px: nothing
// is wider than the window, no word of the console's own text breaks
// across lines, and screenshots of each go to the artifacts (the ones in
// docs/screenshots are copied from there).
func TestBrowserLayout(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	s := startServer(t, "")
	alice := s.addUser("alice", "operator")
	admin := s.addUser("root", "admin")
	ids := seedBacklog(t, ctx, s)

	b := startBrowser(t, ctx)
	op := b.window(t, "alice")
	op.login(s.url, alice)
	ad := b.window(t, "admin")
	ad.login(s.url, admin)
	pages := []struct {
		name string
		tab  *tab
		path string
	}{
		{"queue", op, "/"},
		{"call", op, "/calls/" + ids.deploy},
		{"call-deceptive", op, "/calls/" + ids.mail},
		{"call-long", op, "/calls/" + ids.long},
		{"history", op, "/history"},
		{"call-decided", op, "/calls/" + ids.decided},
		{"timeline", op, "/history/calls/" + ids.decided},
		{"admin", ad, "/admin"},
		{"mcp", ad, "/admin/mcp"},
	}
	for _, w := range layoutWidths {
		for _, p := range pages {
			t.Run(p.name+" at "+w.name+" px", func(t *testing.T) {
				tb := p.tab.with(t)
				tb.do("set the window to "+w.name+" px", waitShort, chromedp.EmulateViewport(w.width, w.height))
				tb.navigate(s.url + p.path)
				tb.do("wait for the page", waitShort, chromedp.WaitVisible(chromedp.CSS("main")))
				if problems := eval[[]string](tb, layoutProblemsJS); len(problems) > 0 {
					tb.screenshot("layout-" + p.name + "-" + w.name)
					t.Errorf("%s at %s px:\n  %s", p.path, w.name, strings.Join(problems, "\n  "))
				}
				tb.screenshot(p.name + "-" + w.name)
			})
		}
	}
}

// backlog names the calls seedBacklog proposed.
type backlog struct {
	deploy, mail, long, decided string
}

// seedBacklog proposes a working day's kinds of calls: refunds, deploys of
// one service (a group), a deceptive email, a file deletion that asks for
// its target, a 19 KB email body, and a decided, redeemed call.
func seedBacklog(t *testing.T, ctx context.Context, s *server) backlog {
	t.Helper()
	agent := func(actor, audience string) *client.Client {
		return client.New(s.url, s.token(actor, audience), client.WithPollWait(30*time.Second))
	}
	payments, deploys, mail, files := agent("agent:billing-bot", "payments-host"), agent("agent:release-bot", "deploy-host"),
		agent("agent:mailer", "mail-host"), agent("agent:janitor", "files-host")
	var out backlog
	for i, amount := range []int{1299, 250000, 99} {
		submit(t, ctx, payments, refund("INV-"+string(rune('7'+i))+"001", amount))
	}
	for _, v := range []string{"v1.4.2", "v1.4.3", "v1.5.0"} {
		c := submit(t, ctx, deploys, client.Proposal{Tool: "releases.deploy", Target: "service:checkout",
			Args: map[string]any{"version": v, "environment": "production", "change_ticket": "CHG-4400", "canary_percent": 10}})
		out.deploy = c.ID
	}
	out.mail = submit(t, ctx, mail, client.Proposal{Tool: "email.send", Target: "mailbox:billing@example.com",
		Args: map[string]any{"to": []any{map[string]any{"address": "ops@example.com", "name": "Ops\u200bTeam"}},
			"subject": "Invoice 7100 attached: report\u202Efdp.exe", "body": "Please find the invoice attached."}}).ID
	submit(t, ctx, files, client.Proposal{Tool: "files.delete", Target: "file:/srv/shared/exports/old-2026-q3-customer-export.csv",
		Args: map[string]any{"reason": "Export older than the 90-day retention", "backup": true}})
	out.long = submit(t, ctx, mail, client.Proposal{Tool: "email.send", Target: "mailbox:reports@example.com",
		Args: map[string]any{"to": []any{map[string]any{"address": "cfo@example.com"}}, "subject": "Monthly numbers",
			"body": longBody(19 * 1024)}}).ID
	// One call approved, redeemed and reported, for the timeline.
	done := submit(t, ctx, payments, refund("INV-9999", 500))
	r := controlDecide(t, s, "approve", done.ID, "alice", done.Digest)
	if r != 200 {
		t.Fatalf("approve %s from the shell: %d", done.ID, r)
	}
	got, err := payments.Wait(ctx, done.ID)
	if err != nil || got.Grant == "" {
		t.Fatalf("wait: %+v %v", got, err)
	}
	if res, err := payments.Redeem(ctx, got.Grant, got.Spec()); err != nil || !res.Accepted {
		t.Fatalf("redeem: %+v %v", res, err)
	}
	if _, err := payments.ReportOutcome(ctx, done.ID, client.OutcomeSucceeded, "refunded"); err != nil {
		t.Fatal(err)
	}
	out.decided = done.ID
	return out
}

// longBody is n bytes of readable text in lines.
func longBody(n int) string {
	line := "Line of the monthly report: revenue, refunds, chargebacks and the notes the finance team asked for.\n"
	return strings.Repeat(line, n/len(line)+1)[:n]
}

// controlDecide decides a call through `console approve`, as an operator
// at the shell, and returns 200 on success.
func controlDecide(t *testing.T, s *server, action, id, operator, digest string) int {
	t.Helper()
	_, code := runConsole(t, "", action, id, "--as", operator, "--digest", digest, "--data", s.data)
	if code != 0 {
		return 500
	}
	return 200
}

// TestBrowserAccessibility runs axe-core (the pinned copy in e2e/axe,
// installed with npm ci) on every page type and fails on any violation.
func TestBrowserAccessibility(t *testing.T) {
	requireChromium(t)
	axe := axeSource(t)
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	s := startServer(t, "")
	alice := s.addUser("alice", "operator")
	admin := s.addUser("root", "admin")
	ids := seedBacklog(t, ctx, s)

	b := startBrowser(t, ctx)
	anon := b.window(t, "anonymous")
	op := b.window(t, "alice")
	op.login(s.url, alice)
	ad := b.window(t, "admin")
	ad.login(s.url, admin)
	pages := []struct {
		name string
		tab  *tab
		path string
	}{
		{"login", anon, "/login"},
		{"queue", op, "/"},
		{"queue filtered", op, "/?tool=releases.deploy&sort=oldest"},
		{"list view", op, "/?layout=list"},
		{"list view by risk", op, "/?layout=list&risk=medium"},
		{"call", op, "/calls/" + ids.deploy},
		{"call with warnings", op, "/calls/" + ids.mail},
		{"call with a long value", op, "/calls/" + ids.long},
		{"decided call", op, "/calls/" + ids.decided},
		{"history", op, "/history"},
		{"history with a bad filter", op, "/history?since=yesterday"},
		{"call-decided", op, "/calls/" + ids.decided},
		{"timeline", op, "/history/calls/" + ids.decided},
		{"account", op, "/account"},
		{"operator tokens", op, "/account/tokens"},
		{"error", op, "/calls/call_nonexistent"},
		{"admin", ad, "/admin"},
		{"deliveries", ad, "/admin/deliveries"},
		{"MCP review", ad, "/admin/mcp"},
	}
	for _, w := range layoutWidths {
		for _, p := range pages {
			t.Run(p.name+" at "+w.name+" px", func(t *testing.T) {
				tb := p.tab.with(t)
				tb.do("set the window", waitShort, chromedp.EmulateViewport(w.width, w.height))
				tb.navigate(s.url + p.path)
				tb.do("wait for the page", waitShort, chromedp.WaitVisible(chromedp.CSS("main")))
				if violations := runAxe(tb, axe); len(violations) > 0 {
					tb.screenshot("a11y-" + strings.ReplaceAll(p.name, " ", "-") + "-" + w.name)
					t.Errorf("%s: %d accessibility violations:\n  %s", p.path, len(violations), strings.Join(violations, "\n  "))
				}
			})
		}
	}
}

// axeSource reads axe-core from e2e/axe/node_modules: skipped without it
// locally, failed under CI=true.
func axeSource(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("axe", "node_modules", "axe-core", "axe.min.js"))
	if err != nil {
		testkit.Need(t, "the accessibility check needs axe-core: run make npm-deps (npm ci in e2e/axe) ("+err.Error()+")")
	}
	return string(b)
}

// runAxe injects axe-core into the page (through the DevTools protocol,
// so the console's Content-Security-Policy does not apply to it) and
// lists every violation of the WCAG 2.x A and AA rules and best practices.
func runAxe(tb *tab, src string) []string {
	tb.t.Helper()
	eval[chromedp.Void](tb, src+";void 0")
	js := `axe.run(document, {resultTypes: ["violations"]}).then(r => JSON.stringify(r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 5).map(n => n.target.join(" ") + " " + (n.failureSummary || "").split("\n").join(" "))}))))`
	raw := eval[string](tb, js)
	var vs []struct {
		ID, Impact, Help string
		Nodes            []string
	}
	if err := json.Unmarshal([]byte(raw), &vs); err != nil {
		tb.t.Fatalf("axe result: %v: %s", err, raw)
	}
	var out []string
	for _, v := range vs {
		out = append(out, v.ID+" ("+v.Impact+"): "+v.Help+"\n      "+strings.Join(v.Nodes, "\n      "))
	}
	return out
}
