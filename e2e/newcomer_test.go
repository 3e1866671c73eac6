package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// demoLogins reads DATA/demo-logins, as README says to.
func demoLogins(t *testing.T, data string) map[string]login {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(data, "demo-logins"))
	if err != nil {
		t.Fatalf("README: the logins are kept in DATA/demo-logins: %v", err)
	}
	out := map[string]login{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 {
			out[f[0]] = login{name: f[0], role: f[1], password: f[2]}
		}
	}
	return out
}

// liveText reads an element's text at once, however often the socket
// replaces it.
func (tb *tab) liveText(id string) string {
	tb.t.Helper()
	return eval[string](tb, `(() => { const e = document.querySelector('[data-testid="`+id+`"]'); return e ? e.textContent.trim() : ""; })()`)
}

// approveOpen approves the call open in the tab as a person does: waits
// for Approve to arm, presses it, and waits for the page to say so.
func (tb *tab) approveOpen() {
	tb.t.Helper()
	tb.waitFor("Approve armed", `(() => { const b = document.querySelector('[data-testid="approve"]'); return !!b && !b.disabled; })()`)
	tb.do("press Approve", waitShort, chromedp.Click(testID("approve")), chromedp.WaitVisible(testID("decision-notice")))
}

// TestNewcomerWalk follows README's paragraph on `console demo` in
// Chromium, then docs/agents.md's first step with the token the demo
// prints, and fails on any step that does not work as written: the demo
// starts and keeps its logins in DATA/demo-logins; alice logs in, opens a
// call from the queue and approves it; the banner's allowance and plan
// (waiting for review, one card on the queue) open; a deploy needs two approvers, alice
// and then bob in another browser; every event is a line in
// DATA/demo-webhooks.log; the admin finds demo/create_order awaiting review
// under Admin › Tools and MCP reviews › MCP tools; and the export line
// proposes docs/agents.md's first call.
func TestNewcomerWalk(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	data := t.TempDir()
	s := startProcess(t, data, "demo", "--addr", "127.0.0.1:0", "--data", data, "--every", "100ms")
	logins := demoLogins(t, data)
	for _, name := range []string{"alice", "bob", "audrey", "admin"} {
		if _, ok := logins[name]; !ok {
			t.Fatalf("README names the login %s; DATA/demo-logins has %v", name, logins)
		}
	}

	b := startBrowser(t, ctx)
	alice := b.window(t, "alice")
	alice.login(s.url, logins["alice"])
	alice.openQueue(s.url)
	// "Log in as alice, open a call, approve it."
	alice.waitFor("a refund and a deploy in the queue", `!!document.querySelector('article[data-tool="payments.refund"]') && !!document.querySelector('article[data-tool="releases.deploy"]')`)
	alice.do("open a refund", waitShort, chromedp.Click(chromedp.CSS(`article[data-tool="payments.refund"] [data-testid="card-decide"]`)),
		chromedp.WaitVisible(testID("call-id")))
	alice.approveOpen()
	if got := alice.liveText("status-value"); got != "approved" && got != "redeemed" {
		t.Errorf("the refund alice approved reads %q", got)
	}
	// "The demo shows an allowance alice gave: its page is in the banner."
	var allowancePath string
	for _, line := range strings.Split(s.logs.String(), "\n") {
		if _, rest, ok := strings.Cut(line, "An allowance: alice approved refund "); ok {
			if i := strings.Index(rest, s.url+"/allowances/"); i >= 0 {
				allowancePath = strings.TrimSuffix(strings.Fields(rest[i+len(s.url):])[0], ";")
			}
		}
	}
	if allowancePath == "" {
		t.Fatalf("the banner names no allowance:\n%s", s.logs.String())
	}
	alice.navigate(s.url + allowancePath)
	if got := alice.liveText("allowance-giver"); !strings.HasPrefix(got, "alice at ") {
		t.Errorf("the demo allowance's page says it was given by %q", got)
	}
	// "A plan waits for review beside it: one card at the top of the
	// queue, its page in the banner."
	var planPath string
	for _, line := range strings.Split(s.logs.String(), "\n") {
		if _, rest, ok := strings.Cut(line, "A plan waiting for review: "); ok {
			if i := strings.Index(rest, s.url+"/plans/"); i >= 0 {
				planPath = strings.Fields(rest[i+len(s.url):])[0]
			}
		}
	}
	if planPath == "" {
		t.Fatalf("the banner names no plan:\n%s", s.logs.String())
	}
	alice.openQueue(s.url)
	planID := strings.TrimPrefix(planPath, "/plans/")
	alice.do("the plan's card on the queue", waitShort, chromedp.WaitVisible(chromedp.CSS(`[data-testid="plan-card"][data-plan="`+planID+`"]`)))
	alice.navigate(s.url + planPath)
	if got := alice.liveText("plan-status"); got != "pending" {
		t.Errorf("the demo plan reads %q, want pending", got)
	}
	if n := eval[int](alice, `document.querySelectorAll('[data-testid="plan-item"]').length`); n != 3 {
		t.Errorf("the demo plan lists %d items, want 3", n)
	}
	alice.do("the plan's decision", waitShort, chromedp.WaitVisible(testID("plan-decide")))
	for _, w := range sizes {
		alice.do("set the window to "+w.name, waitShort, chromedp.EmulateViewport(w.width, w.height))
		alice.screenshot("demo-plan-" + w.name)
	}
	alice.do("back to 1280", waitShort, chromedp.EmulateViewport(1280, 900))

	// "log in as bob in another browser to give the deploy its second approval"
	alice.openQueue(s.url)
	deploy := eval[string](alice, `document.querySelector('article[data-tool="releases.deploy"]').dataset.call`)
	alice.navigate(s.url + "/calls/" + deploy)
	alice.approveOpen()
	if got := alice.liveText("quorum"); got != "1 of 2" {
		t.Errorf("after alice the deploy has %q approvals, want 1 of 2", got)
	}
	bob := b.window(t, "bob")
	bob.login(s.url, logins["bob"])
	bob.navigate(s.url + "/calls/" + deploy)
	bob.approveOpen()
	if got := bob.liveText("status-value"); got != "approved" && got != "redeemed" {
		t.Errorf("the deploy after bob reads %q, want approved", got)
	}

	// "each delivery is a line in DATA/demo-webhooks.log"
	eventually(t, 30*time.Second, "the deploy's approval in DATA/demo-webhooks.log", func() bool {
		b, _ := os.ReadFile(filepath.Join(data, "demo-webhooks.log"))
		return strings.Contains(string(b), "call.approved "+deploy)
	})

	// "log in as admin and open Admin › Tools and MCP reviews › MCP tools"
	admin := b.window(t, "admin")
	admin.login(s.url, logins["admin"])
	admin.navigate(s.url + "/admin")
	admin.do("Tools and MCP reviews", waitShort, chromedp.Click(testID("admin-nav-tools")), chromedp.WaitVisible(testID("admin-mcp")))
	admin.do("MCP tools", waitShort, chromedp.Click(testID("admin-mcp")), chromedp.WaitVisible(testID("mcp-tools")))
	rows := eval[[]string](admin, `Array.from(document.querySelectorAll('[data-testid="mcp-tool-row"]'), r => r.dataset.status + " " + r.querySelector("td").textContent.trim())`)
	found := false
	for _, r := range rows {
		found = found || r == "pending create_order"
	}
	if !found {
		t.Errorf("the MCP tools page lists %v, want create_order pending review", rows)
	}
	accessible(t, admin, "the MCP tools with one awaiting review")
	admin.do("the definition under review", waitShort,
		chromedp.Click(chromedp.CSS(`[data-testid="mcp-tool-row"][data-status="pending"] [data-testid="mcp-review-link"]`)),
		chromedp.WaitVisible(testID("mcp-definition")))
	accessible(t, admin, "an MCP tool's definition under review")

	// docs/agents.md: paste the export line, then step 1.
	checkReaderToken(t, s)
}
