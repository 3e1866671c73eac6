package console

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
)

// boxProblems is e2e's element-box rule (boxProblemsJS in
// e2e/browser_layout_states_test.go) for the page states only this
// package can make: no element reaches outside its parent sideways or
// holds content wider than itself, except where the container scrolls
// (overflow-x auto or scroll) or cuts its text with an ellipsis.
const boxProblems = `(() => {
	const out = [];
	const scrolls = (el) => { const s = getComputedStyle(el); return /(auto|scroll)/.test(s.overflowX) || (s.textOverflow === "ellipsis" && s.overflowX === "hidden"); };
	const name = (e) => e.tagName.toLowerCase() + (e.dataset && e.dataset.testid ? "[" + e.dataset.testid + "]" : "") +
		(typeof e.className === "string" && e.className.trim() ? "." + e.className.trim().split(/\s+/).join(".") : "");
	for (const el of document.querySelectorAll("body *")) {
		const r = el.getBoundingClientRect();
		if (r.width <= 1 || r.height <= 0) continue;
		const st = getComputedStyle(el);
		if (st.position === "fixed" || st.position === "absolute" || st.display === "contents") continue;
		const p = el.parentElement;
		if (p && p !== document.body && !scrolls(p)) {
			const pr = p.getBoundingClientRect();
			if (r.right > pr.right + 1 || r.left < pr.left - 1) out.push(name(el) + " reaches outside " + name(p));
		}
		if (["INPUT", "TEXTAREA", "SELECT", "OPTION"].includes(el.tagName) || scrolls(el)) continue;
		if (st.display !== "inline" && el.clientWidth > 0 && el.scrollWidth > el.clientWidth + 1) out.push(name(el) + "'s content is wider than it");
	}
	if (document.documentElement.scrollWidth > document.documentElement.clientWidth) out.push("the page is wider than the window");
	return out.slice(0, 20);
})()`

// TestCounteredCallLayout lays out a countered call and its counter in
// Chromium at 1280, 1024 and 390 px: no element reaches outside its
// container (boxProblems), and the countered call's lifecycle names its
// counter.
func TestCounteredCallLayout(t *testing.T) {
	const chromium = "/usr/bin/chromium"
	if testing.Short() {
		t.Skip("browser test: skipped with -short")
	}
	if fi, err := os.Stat(chromium); err != nil || fi.IsDir() {
		msg := "the browser test needs Chromium at " + chromium + ": apt-get install -y chromium"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	e := newConsoleEnv(t)
	e.addUser("olivia", account.RoleOperator, rolePassword)
	ctx := context.Background()
	orig := e.submit("agent:billing-bot", "payments-host", `{"tool":"payments.refund","target":"invoice:INV-104299887766","args":{"amount_minor":250000,"currency":"USD","reason_code":"duplicate","notes":"The customer asked twice; the second charge is the duplicate, see ticket T-77812 and the card statement attached there."}}`)
	counter, err := e.q.Counter(ctx, queue.CounterInput{Operator: "olivia", Channel: audit.ChannelCLI, CallID: orig.ID,
		Digest: orig.Digest, Edits: map[string]json.RawMessage{"/amount_minor": json.RawMessage("125000")}})
	if err != nil {
		t.Fatal(err)
	}

	bctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(cancel)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.UserDataDir(t.TempDir()),
		chromedp.Headless, chromedp.NoSandbox, chromedp.NoFirstRun,
		chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-background-networking", true),
	)
	actx, acancel := chromedp.NewExecAllocator(bctx, opts...)
	tab, tcancel := chromedp.NewContext(actx)
	t.Cleanup(func() { tcancel(); acancel() })
	if err := chromedp.Do(tab,
		chromedp.Navigate(e.url+"/login"),
		chromedp.SendKeys(`[data-testid="login-name"]`, "olivia"),
		chromedp.SendKeys(`[data-testid="login-password"]`, rolePassword),
		chromedp.Click(`[data-testid="login-submit"]`),
		chromedp.WaitVisible(`[data-testid="whoami"]`),
	); err != nil {
		t.Fatalf("log in: %v", err)
	}
	for _, w := range []struct {
		width, height int64
	}{{1280, 900}, {1024, 768}, {390, 844}} {
		for _, path := range []string{"/calls/" + orig.ID, "/calls/" + counter.ID, "/history/calls/" + orig.ID} {
			var problems []string
			var status string
			if err := chromedp.Do(tab,
				chromedp.EmulateViewport(w.width, w.height),
				chromedp.Navigate(e.url+path),
				chromedp.WaitVisible(`main`),
				keep(chromedp.Evaluate[[]string](boxProblems), &problems),
				keep(chromedp.Evaluate[string](`(() => { const s = document.querySelector('[data-testid="status-value"]'); return s ? s.textContent : ""; })()`), &status),
			); err != nil {
				t.Fatalf("%s at %d px: %v", path, w.width, err)
			}
			if len(problems) > 0 {
				t.Errorf("%s at %d px:\n  %s", path, w.width, strings.Join(problems, "\n  "))
			}
			if path == "/calls/"+orig.ID && status != string(queue.StatusCountered) {
				t.Errorf("the countered call's status reads %q", status)
			}
		}
	}
}
