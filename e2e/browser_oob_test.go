package e2e

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/countersign/countersign/client"
)

// consoleLog collects what a tab's pages write to the browser console.
type consoleLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *consoleLog) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, s)
}

func (l *consoleLog) matching(sub string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, s := range l.lines {
		if strings.Contains(s, sub) {
			out = append(out, s)
		}
	}
	return out
}

// captureConsole records every console message and uncaught exception of
// the tab's pages.
func (tb *tab) captureConsole() *consoleLog {
	tb.t.Helper()
	log := &consoleLog{}
	err := chromedp.Listen(tb.ctx, func(ev any) {
		switch e := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			var parts []string
			for _, a := range e.Args {
				parts = append(parts, strings.Trim(string(a.Value), `"`)+a.Description)
			}
			log.add(string(e.Type) + ": " + strings.Join(parts, " "))
		case *runtime.EventExceptionThrown:
			log.add("exception: " + e.ExceptionDetails.Text)
		}
	})
	if err != nil {
		tb.t.Fatalf("%s: listen to the console: %v", tb.name, err)
	}
	ctx, cancel := context.WithTimeout(tb.ctx, waitShort)
	defer cancel()
	if _, err := chromedp.Call(ctx, runtime.Enable, cdp.Empty{}); err != nil {
		tb.t.Fatalf("%s: enable the runtime domain: %v", tb.name, err)
	}
	return log
}

// TestBrowserNoOOBErrorForNewCalls: live updates swap only into elements
// the page has. New calls, a partial approval, decisions and retry blocks
// pushed to an open queue leave no htmx:oobErrorNoTarget (nor any other
// error) in Chromium's console, and each card appears once.
func TestBrowserNoOOBErrorForNewCalls(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	s := startServer(t, "")
	alice := s.addUser("alice", "operator")
	payments := client.New(s.url, s.token("agent:billing-bot", "payments-host"))
	deploys := client.New(s.url, s.token("agent:release-bot", "deploy-host"))

	b := startBrowser(t, ctx)
	op := b.window(t, "alice")
	log := op.captureConsole()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("browser console: %q", log.matching(""))
		}
	})
	op.login(s.url, alice)
	op.openQueue(s.url)

	var calls []*client.Call
	for i, inv := range []string{"INV-5001", "INV-5002", "INV-5003"} {
		c := submit(t, ctx, payments, refund(inv, 100+i))
		op.do("wait for the card of "+inv, waitShort, chromedp.WaitVisible(cardSel(c.ID)))
		calls = append(calls, c)
	}
	deploy := submit(t, ctx, deploys, client.Proposal{Tool: "releases.deploy", Target: "service:checkout",
		Args: map[string]any{"version": "v1.4.2", "environment": "production", "change_ticket": "CHG-1234", "canary_percent": 10}})
	op.do("wait for the deploy card", waitShort, chromedp.WaitVisible(cardSel(deploy.ID)))

	// A partial approval of the deploy (two are needed) updates its card;
	// decisions remove the refunds' cards.
	if out, code := runConsole(t, "", "approve", deploy.ID, "--as", "alice", "--digest", deploy.Digest, "--data", s.data); code != 0 {
		t.Fatalf("approve the deploy: %s", out)
	}
	op.do("wait for the partial approval", waitShort,
		chromedp.WaitVisible(chromedp.CSS(`article[data-call="`+deploy.ID+`"] [data-testid="card-quorum"]`)))
	for _, c := range calls[:2] {
		if out, code := runConsole(t, "", "approve", c.ID, "--as", "alice", "--digest", c.Digest, "--data", s.data); code != 0 {
			t.Fatalf("approve: %s", out)
		}
		op.do("wait for the decided card to go", waitShort, chromedp.WaitNotPresent(cardSel(c.ID)))
	}
	// A block pushed to the queue.
	for range 3 {
		payments.Submit(ctx, client.Proposal{Tool: "payments.refund", Target: "invoice:INV-1", Args: map[string]any{"nope": 1}})
	}
	op.do("wait for the block", waitShort, chromedp.WaitVisible(testID("block")))

	if n := eval[int](op, `document.querySelectorAll('article[data-call="`+calls[2].ID+`"]').length`); n != 1 {
		t.Errorf("the card of %s is on the page %d times, want once", calls[2].ID, n)
	}
	// Console messages arrive asynchronously: a last round trip through the
	// page makes sure those of the swaps above have been delivered.
	eval[int](op, `1`)
	if errs := log.matching("oobErrorNoTarget"); len(errs) > 0 {
		t.Errorf("htmx:oobErrorNoTarget in the console, %d times: %q", len(errs), errs)
	}
	for _, kind := range []string{"error: ", "exception: "} {
		if errs := log.matching(kind); len(errs) > 0 {
			t.Errorf("console errors: %q", errs)
		}
	}
}

// TestBrowserLiveSwapKeepsWhatIsTyped: while an operator writes on a call's
// page (a comment, the typed confirmation, a deny reason), another
// operator's approval swaps the page's decision part; every character
// written before and after the swap is still there, in order, and the
// cursor stays in the field being written.
func TestBrowserLiveSwapKeepsWhatIsTyped(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	s := startServer(t, "")
	alice := s.addUser("alice", "operator")
	s.addUser("bob", "operator")
	deploys := client.New(s.url, s.token("agent:release-bot", "deploy-host"))

	b := startBrowser(t, ctx)
	op := b.window(t, "alice")
	op.login(s.url, alice)
	call := submit(t, ctx, deploys, client.Proposal{Tool: "releases.deploy", Target: "service:checkout",
		Args: map[string]any{"version": "v1.4.2", "environment": "production", "change_ticket": "CHG-20417", "canary_percent": 10}})
	op.navigate(s.url + "/calls/" + call.ID)
	op.waitLive()

	const (
		commentBefore, commentAfter = "Checked the change ticket; ", "canary first."
		reasonBefore, reasonAfter   = "Already deployed under CHG-20416; ", "ask the release lead."
	)
	op.do("write before the update", waitShort,
		chromedp.SendKeys(testID("approve-comment"), commentBefore),
		chromedp.SendKeys(testID("deny-reason"), reasonBefore))

	// Bob approves from the command line: the call page's decision part is
	// pushed again, now saying 1 of 2.
	if out, code := runConsole(t, "", "approve", call.ID, "--as", "bob", "--digest", call.Digest, "--data", s.data); code != 0 {
		t.Fatalf("bob's approval: %s", out)
	}
	op.do("wait for the pushed update", waitShort,
		discard(chromedp.Poll[bool](`document.querySelector('[data-testid="quorum"]').textContent.trim() === "1 of 2"`, chromedp.WithPollingInterval(50*time.Millisecond))))

	if got := eval[string](op, `document.activeElement ? document.activeElement.getAttribute("data-testid") || "" : ""`); got != "deny-reason" {
		t.Errorf("focus after the update is on %q, want the deny reason being written", got)
	}
	// The keys go to whatever has the focus now, as a person's would.
	op.do("write on after the update", waitShort, chromedp.KeyEvent(reasonAfter))
	op.do("and in the comment", waitShort, chromedp.SendKeys(testID("approve-comment"), commentAfter))

	if got := eval[string](op, `document.querySelector('[data-testid="deny-reason"]').value`); got != reasonBefore+reasonAfter {
		t.Errorf("deny reason reads %q, want %q", got, reasonBefore+reasonAfter)
	}
	if got := eval[string](op, `document.querySelector('[data-testid="approve-comment"]').value`); got != commentBefore+commentAfter {
		t.Errorf("comment reads %q, want %q", got, commentBefore+commentAfter)
	}
}
