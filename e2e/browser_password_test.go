package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestBrowserMustChangePassword: after an admin sets an account's password
// with console user passwd, its login lands on the change page, which
// lays out at both sizes with no accessibility violation; once it has
// chosen its own password the queue opens.
func TestBrowserMustChangePassword(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	s := startServer(t, "")
	alice := s.addUser("alice", "operator")
	const temporary = "a temporary password"
	if out, code := runConsole(t, temporary+"\n", "user", "passwd", "alice", "--data", s.data, "--password-stdin"); code != 0 {
		t.Fatalf("console user passwd alice exited %d: %s", code, out)
	}

	b := startBrowser(t, ctx)
	op := b.window(t, "alice")
	op.navigate(s.url + "/login")
	op.do("log in with the password set for alice", waitShort,
		chromedp.SendKeys(testID("login-name"), "alice"),
		chromedp.SendKeys(testID("login-password"), temporary),
		chromedp.Click(testID("login-submit")),
		chromedp.WaitVisible(testID("password-forced")))
	if path := eval[string](op, `location.pathname`); path != "/account/password" {
		t.Fatalf("after login the page is %s, want /account/password", path)
	}
	for _, w := range sizes {
		op.do("set the window to "+w.name, waitShort, chromedp.EmulateViewport(w.width, w.height))
		if problems := eval[[]string](op, layoutProblemsJS); len(problems) > 0 {
			t.Errorf("the password page at %s px:\n  %s", w.name, strings.Join(problems, "\n  "))
		}
		op.screenshot("password-must-change-" + w.name)
		accessible(t, op, "the password page at "+w.name)
	}
	op.do("back to 1280", waitShort, chromedp.EmulateViewport(1280, 900))
	op.navigate(s.url + "/")
	if path := eval[string](op, `location.pathname`); path != "/account/password" {
		t.Errorf("the queue while marked shows %s, want /account/password", path)
	}
	op.do("choose a password", waitShort,
		chromedp.SendKeys(testID("password-current"), temporary),
		chromedp.SendKeys(testID("password-new"), alice.password),
		chromedp.SendKeys(testID("password-repeat"), alice.password),
		chromedp.Click(testID("password-submit")),
		chromedp.WaitVisible(testID("account-notice")))
	op.openQueue(s.url)
	if got := op.text(testID("whoami")); got != "alice · operator" {
		t.Errorf("whoami on the queue = %q", got)
	}
}
