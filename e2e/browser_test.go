package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/countersign/countersign/internal/testkit"
)

// The browser tests drive Debian's Chromium through the DevTools protocol
// against the real console binary. Each test starts one headless Chromium
// with a fresh profile; a "window" is a separate browser context (its own
// cookies, like another person's browser) and a "tab" shares the cookies
// of the window it was opened from.

// chromiumPath is where Debian's chromium package installs the browser.
const chromiumPath = "/usr/bin/chromium"

// artifactsDir receives screenshots of each run (ignored by git).
const artifactsDir = "artifacts"

// requireChromium skips the test under -short and when Chromium is not
// installed, or fails it under CI=true, where a missing browser must not
// pass silently.
func requireChromium(tb testing.TB) {
	tb.Helper()
	if testing.Short() {
		tb.Skip("-short: the browser suite")
	}
	fi, err := os.Stat(chromiumPath)
	if err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
		return
	}
	testkit.Need(tb, fmt.Sprintf("the browser tests need Chromium at %s: install chromium (apt-get install -y chromium)", chromiumPath))
}

// browser is one headless Chromium process with a profile of its own.
type browser struct {
	ctx context.Context // the browser's first tab; parent of every window
}

// startBrowser starts Chromium. ctx bounds the browser's whole life: when
// it ends, every pending action fails and the browser is closed.
func startBrowser(t *testing.T, ctx context.Context) *browser {
	t.Helper()
	requireChromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.WindowSize(1280, 900),
	)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(func() { bcancel(); acancel() })
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return &browser{ctx: bctx}
}

// tab is one browser tab.
type tab struct {
	t    *testing.T
	name string
	ctx  context.Context
}

// window opens a tab in a new browser context, with cookies of its own.
func (b *browser) window(t *testing.T, name string) *tab {
	t.Helper()
	return openTab(t, b.ctx, name, chromedp.WithNewBrowserContext())
}

// tab opens another tab in the same browser context as tb: it shares its
// cookies, as a second tab of one person's browser does.
func (tb *tab) tab(t *testing.T, name string) *tab {
	t.Helper()
	return openTab(t, tb.ctx, name)
}

func openTab(t *testing.T, parent context.Context, name string, opts ...chromedp.ContextOption) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(parent, opts...)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("%s: open tab: %v", name, err)
	}
	return &tab{t: t, name: name, ctx: ctx}
}

// with returns the tab for use in subtest t, so that its failures are
// t's.
func (tb *tab) with(t *testing.T) *tab {
	c := *tb
	c.t = t
	return &c
}

// waitShort and waitLong bound one step: a page element, or a decision
// travelling through the server to a waiting agent.
const (
	waitShort = 10 * time.Second
	waitLong  = 20 * time.Second
)

// do runs actions with a deadline and fails the test with what was being
// done when they fail.
func (tb *tab) do(what string, d time.Duration, actions ...chromedp.Action[chromedp.Void]) {
	tb.t.Helper()
	if err := tb.try(d, actions...); err != nil {
		tb.t.Fatalf("%s: %s: %v\n%s", tb.name, what, err, tb.describe())
	}
}

// describe tells where the tab is and what it shows, for a failure
// message, and saves a screenshot of it.
func (tb *tab) describe() string {
	ctx, cancel := context.WithTimeout(tb.ctx, 5*time.Second)
	defer cancel()
	loc, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		return "(the page cannot be read: " + err.Error() + ")"
	}
	body, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
	if len(body) > 2000 {
		body = body[:2000] + "…"
	}
	if buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)); err == nil && os.MkdirAll(artifactsDir, 0o755) == nil {
		name := strings.NewReplacer("/", "_", " ", "_").Replace(tb.t.Name() + "-" + tb.name)
		os.WriteFile(filepath.Join(artifactsDir, "failed-"+name+".png"), buf, 0o644)
	}
	return "page " + loc + ":\n" + body
}

// try runs actions with a deadline and returns their error.
func (tb *tab) try(d time.Duration, actions ...chromedp.Action[chromedp.Void]) error {
	ctx, cancel := context.WithTimeout(tb.ctx, d)
	defer cancel()
	return chromedp.Do(ctx, actions...)
}

// run runs one action that returns a value, with a deadline.
func run[T any](tb *tab, what string, a chromedp.Action[T]) T {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, waitShort)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		tb.t.Fatalf("%s: %s: %v", tb.name, what, err)
	}
	return v
}

// eval evaluates a JavaScript expression in the page and decodes its value.
func eval[T any](tb *tab, js string) T {
	tb.t.Helper()
	return run(tb, "evaluate "+js, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
}

// testID is the CSS selector of elements with a data-testid.
func testID(id string) chromedp.CSS { return chromedp.CSS(`[data-testid="` + id + `"]`) }

// text is the text content of the first visible element matching sel,
// without surrounding white space.
func (tb *tab) text(sel chromedp.CSS) string {
	tb.t.Helper()
	return strings.TrimSpace(run(tb, "read text of "+string(sel), chromedp.TextContent(sel, chromedp.NodeVisible)))
}

// texts is the text content of every element matching sel, in document
// order, read without waiting.
func (tb *tab) texts(sel chromedp.CSS) []string {
	tb.t.Helper()
	s, _ := json.Marshal(string(sel))
	return eval[[]string](tb, `Array.from(document.querySelectorAll(`+string(s)+`), e => e.textContent.trim())`)
}

// navigate loads a page and waits for its document to load.
func (tb *tab) navigate(url string) {
	tb.t.Helper()
	tb.do("navigate to "+url, waitShort, chromedp.Navigate(url))
}

// login logs in through the login form and waits for the queue page.
func (tb *tab) login(base string, l login) {
	tb.t.Helper()
	tb.navigate(base + "/login")
	tb.do("log in as "+l.name, waitShort,
		chromedp.SendKeys(testID("login-name"), l.name),
		chromedp.SendKeys(testID("login-password"), l.password),
		chromedp.Click(testID("login-submit")),
		chromedp.WaitVisible(testID("whoami")),
	)
	if got, want := tb.text(testID("whoami")), l.name+" · "+l.role; got != want {
		tb.t.Fatalf("%s: after login whoami = %q, want %q", tb.name, got, want)
	}
}

// waitLive waits until the page's socket is open: the connection
// indicator says live.
func (tb *tab) waitLive() {
	tb.t.Helper()
	tb.do("wait for the live connection", waitShort, chromedp.WaitVisible(chromedp.CSS(`#conn[data-state="live"]`)))
}

// openQueue loads the queue page and waits for its socket.
func (tb *tab) openQueue(base string) {
	tb.t.Helper()
	tb.navigate(base + "/")
	tb.waitLive()
}

// mark sets a value on the page's window; it survives any change made by
// the socket and disappears if the page is reloaded or left.
func (tb *tab) mark() {
	tb.t.Helper()
	eval[chromedp.Void](tb, `window.__marker = 1`)
}

// checkMarked fails the test unless the page still has the mark: the page
// was not reloaded since mark.
func (tb *tab) checkMarked() {
	tb.t.Helper()
	if got := eval[int](tb, `window.__marker === 1 ? 1 : 0`); got != 1 {
		tb.t.Fatalf("%s: the page was reloaded or left (window.__marker is gone)", tb.name)
	}
}

// cardSel selects the queue card of a call.
func cardSel(id string) chromedp.CSS { return chromedp.CSS(`article[data-call="` + id + `"]`) }

// recordSockets makes every page later loaded in the tab log its
// WebSockets' lives in window.__ws ("open", "error", "close:CODE"). The
// script is installed through the DevTools protocol, so the console's
// Content-Security-Policy does not apply to it.
func (tb *tab) recordSockets() {
	tb.t.Helper()
	const js = `(() => {
	const Native = window.WebSocket;
	window.__ws = [];
	const Logged = function (url, protocols) {
		const ws = protocols === undefined ? new Native(url) : new Native(url, protocols);
		ws.addEventListener("open", () => window.__ws.push("open"));
		ws.addEventListener("error", () => window.__ws.push("error"));
		ws.addEventListener("close", (e) => window.__ws.push("close:" + e.code));
		return ws;
	};
	Logged.prototype = Native.prototype;
	for (const k of ["CONNECTING", "OPEN", "CLOSING", "CLOSED"]) Logged[k] = Native[k];
	window.WebSocket = Logged;
})();`
	ctx, cancel := context.WithTimeout(tb.ctx, waitShort)
	defer cancel()
	if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: js}); err != nil {
		tb.t.Fatalf("%s: install the socket recorder: %v", tb.name, err)
	}
}

// screenshot saves the whole page as artifacts/NAME.png.
func (tb *tab) screenshot(name string) {
	tb.t.Helper()
	buf := run(tb, "screenshot", chromedp.FullScreenshot(100))
	if err := os.MkdirAll(artifactsDir, 0o755); err != nil {
		tb.t.Fatal(err)
	}
	p := filepath.Join(artifactsDir, name+".png")
	if err := os.WriteFile(p, buf, 0o644); err != nil {
		tb.t.Fatal(err)
	}
	tb.t.Logf("screenshot %s", p)
}

// ungroup removes the spaces that group a digest for reading.
func ungroup(s string) string { return strings.Join(strings.Fields(s), "") }

// discard turns an action that returns a value into one that returns none,
// so it can run among others with do.
func discard[T any](a chromedp.Action[T]) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := a(ctx, t)
		return chromedp.Void{}, err
	}
}
