package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/countersign/countersign/client"
)

// grantPermissionsParams are the parameters of the DevTools command
// Browser.grantPermissions, which cdproto no longer generates (the
// protocol marks it deprecated in favour of Browser.setPermission) but
// Chromium still serves.
type grantPermissionsParams struct {
	Permissions []string `json:"permissions"`
	Origin      string   `json:"origin,omitempty"`
}

var grantPermissions = cdp.Command[grantPermissionsParams, cdp.Empty]{Method: "Browser.grantPermissions"}

// notificationSpy records every Notification the page creates (its
// title, body and tag, and whether the page was hidden at the time) and
// every permission request, then lets the real API do its work. It is
// installed through the DevTools protocol, so the console's CSP does not
// apply to it; the console's own scripts run unchanged.
const notificationSpy = `(() => {
	const Native = window.Notification;
	if (!Native) return;
	window.__notes = [];
	window.__asked = 0;
	const Spy = function (title, opts) {
		window.__notes.push({title: title, body: (opts && opts.body) || "", tag: (opts && opts.tag) || "", hidden: document.hidden});
		return new Native(title, opts);
	};
	Object.defineProperty(Spy, "permission", {get: () => Native.permission});
	Spy.requestPermission = function () { window.__asked++; return Native.requestPermission.apply(Native, arguments); };
	Spy.prototype = Native.prototype;
	window.Notification = Spy;
})();`

type shownNote struct {
	Title, Body, Tag string
	Hidden           bool
}

// TestBrowserNotifications: the tab title counts pending calls; the
// permission is asked only on the operator's click; a call arriving while
// the tab is hidden, and a call nearing its deadline, raise desktop
// notifications; a visible tab raises none.
func TestBrowserNotifications(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	// A tool whose calls wait 70 s, so "deadline near" (a minute before)
	// comes ten seconds after a call arrives.
	tools := filepath.Join(t.TempDir(), "tools.yaml")
	if err := os.WriteFile(tools, []byte(`tools:
  ops.restart:
    description: Restart a service
    audience: ops-host
    target: '^service:[a-z-]+$'
    approvals: 1
    grant_ttl: 60s
    decide_within: 70s
    args:
      type: object
      additionalProperties: false
      properties: {}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	s := startProcess(t, data, "serve", "--addr", "127.0.0.1:0", "--data", data, "--tools", tools, "--log-level", "warn")
	alice := s.addUser("alice", "operator")
	agent := client.New(s.url, s.token("agent:ops-bot", "ops-host"))
	restart := func(service string) *client.Call {
		c, err := agent.Submit(ctx, client.Proposal{Tool: "ops.restart", Target: "service:" + service, Args: map[string]any{}})
		if err != nil {
			t.Fatalf("submit: %v", err)
		}
		return c
	}

	b := startBrowser(t, ctx)
	// The default browser context, where the permission is granted.
	op := openTab(t, b.ctx, "alice")
	if _, err := chromedp.CallBrowser(op.ctx, grantPermissions, grantPermissionsParams{Permissions: []string{"notifications"}, Origin: s.url}); err != nil {
		t.Fatalf("Browser.grantPermissions: %v", err)
	}
	if _, err := chromedp.Call(op.ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: notificationSpy}); err != nil {
		t.Fatalf("install the notification spy: %v", err)
	}
	op.login(s.url, alice)
	op.openQueue(s.url)
	title := func() string { return eval[string](op, `document.title`) }
	waitTitle := func(want string) {
		t.Helper()
		op.do("wait for the title "+want, waitShort, poll(`document.title === `+jsString(want), waitShort))
	}
	if got := title(); got != "Queue · Countersign" {
		t.Fatalf("title with nothing pending = %q", got)
	}

	first := restart("billing")
	op.do("wait for the first card", waitShort, chromedp.WaitVisible(cardSel(first.ID)))
	waitTitle("(1) Queue · Countersign")

	if asked := eval[int](op, `window.__asked`); asked != 0 {
		t.Fatalf("the page asked for notification permission %d times before any click", asked)
	}
	op.do("enable notifications", waitShort,
		chromedp.Click(testID("notify-enable"), chromedp.NodeVisible),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="notify-enable"][data-state="on"]`)))
	if asked := eval[int](op, `window.__asked`); asked != 1 {
		t.Fatalf("permission asked %d times, want once, on the click", asked)
	}

	// A call arriving while the tab is visible raises no notification.
	second := restart("search")
	op.do("wait for the second card", waitShort, chromedp.WaitVisible(cardSel(second.ID)))
	waitTitle("(2) Queue · Countersign")
	if n := eval[int](op, `window.__notes.length`); n != 0 {
		t.Fatalf("%d notifications while the tab was visible", n)
	}

	// Minimizing the browser window hides the queue tab, as switching to
	// another application would.
	hide(t, op)
	op.do("wait until the queue tab is hidden", waitShort, poll(`document.hidden`, waitShort))

	third := restart("checkout")
	op.do("wait for a notification", waitShort, poll(`window.__notes.length >= 1`, waitShort))
	waitTitle("(3) Queue · Countersign")
	notes := eval[[]shownNote](op, `window.__notes`)
	if n := notes[0]; n.Title != "Approval needed: ops.restart" || n.Body != "service:checkout · by agent:ops-bot" || n.Tag != third.ID || !n.Hidden {
		t.Fatalf("notification %+v", n)
	}
	if p := eval[string](op, `Notification.permission`); p != "granted" {
		t.Fatalf("permission %q", p)
	}

	// Ten seconds after it arrived the third call is a minute from its
	// deadline: a second notification, "Deadline near". The first two
	// calls arrived earlier, so their reminders may come first.
	op.do("wait for the deadline notification", 30*time.Second, poll(
		`window.__notes.some(n => n.title === "Deadline near: ops.restart" && n.tag === `+jsString(third.ID)+`)`, 30*time.Second))

	// Deciding a call takes it off the count.
	if _, err := controlApprove(ctx, s.data, third.ID, "alice", third.Digest); err != nil {
		t.Fatalf("approve: %v", err)
	}
	waitTitle("(2) Queue · Countersign")
	for _, n := range eval[[]shownNote](op, `window.__notes`) {
		if !n.Hidden || strings.Contains(n.Title+n.Body, "{") {
			t.Fatalf("notification %+v", n)
		}
	}
}

// poll waits for a JavaScript condition, checking on a timer: the default
// (animation frames) never runs in a hidden tab.
func poll(expr string, d time.Duration) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(d), chromedp.WithPollingInterval(100*time.Millisecond))
}

// hide minimizes the window of tb's tab.
func hide(t *testing.T, tb *tab) {
	t.Helper()
	w, err := chromedp.CallBrowser(tb.ctx, cdpbrowser.GetWindowForTarget, cdpbrowser.GetWindowForTargetParams{TargetID: chromedp.FromContext(tb.ctx).Target.TargetID})
	if err != nil {
		t.Fatalf("find the tab's window: %v", err)
	}
	if _, err := chromedp.CallBrowser(tb.ctx, cdpbrowser.SetWindowBounds, cdpbrowser.SetWindowBoundsParams{WindowID: w.WindowID,
		Bounds: &cdpbrowser.Bounds{WindowState: cdpbrowser.WindowStateMinimized}}); err != nil {
		t.Fatalf("minimize the window: %v", err)
	}
}

func jsString(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}
