package console

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestBrowserSSOLogoutReachesTheProvider logs out of a single-sign-on
// session in Chromium: the logout form's redirect to the provider's
// end_session_endpoint must be allowed by the console's
// Content-Security-Policy, so that the provider's session ends too and the
// browser comes back to the login page.
func TestBrowserSSOLogoutReachesTheProvider(t *testing.T) {
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
	e := newSSOEnv(t, LocalAll)
	if !strings.HasPrefix(e.idp.EndSession, e.idp.Addr()) {
		t.Fatalf("the provider advertises %q, not its own end-session endpoint", e.idp.EndSession)
	}
	e.idp.User("00u-lou", "lou", "lou@example.com", "approvers")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.UserDataDir(t.TempDir()),
		chromedp.Headless, chromedp.NoSandbox, chromedp.NoFirstRun,
		chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-background-networking", true),
	)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(func() { bcancel(); acancel() })

	var whoami, landed string
	if err := chromedp.Do(bctx,
		chromedp.Navigate(e.url+ssoLoginPath),
		chromedp.WaitVisible(`[data-testid="whoami"]`),
		keep(chromedp.Text(`[data-testid="whoami"]`), &whoami),
	); err != nil {
		t.Fatalf("single sign-on in the browser: %v", err)
	}
	if strings.TrimSpace(whoami) != "lou · operator" {
		t.Fatalf("signed in as %q", whoami)
	}
	lctx, lcancel := context.WithTimeout(bctx, 15*time.Second)
	defer lcancel()
	if err := chromedp.Do(lctx,
		chromedp.Click(`[data-testid="logout"]`),
		chromedp.WaitVisible(`[data-testid="sso-login"]`),
		keep(chromedp.Location(), &landed),
	); err != nil {
		var body string
		_ = chromedp.Do(bctx, keep(chromedp.Location(), &landed), keep(chromedp.Text("body"), &body))
		t.Logf("page: %s", body)
		t.Fatalf("log out in the browser: %v (at %q, provider logouts %v)", err, landed, e.idp.Logouts())
	}
	if !strings.HasPrefix(landed, e.url+"/login") {
		t.Errorf("after logging out the browser is at %q, want the console's login page", landed)
	}
	logouts := e.idp.Logouts()
	if len(logouts) != 1 || logouts[0].Get("id_token_hint") == "" || logouts[0].Get("post_logout_redirect_uri") != e.url+"/login" {
		t.Errorf("the provider's end-session endpoint saw %v, want one logout with the hint", logouts)
	}
}

// keep runs a for its value and keeps it in *dst.
func keep[T any](a chromedp.Action[T], dst *T) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		v, err := a(ctx, t)
		*dst = v
		return err
	})
}
