package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestBrowserEvidencePackForm: the admin page's evidence pack form, with
// the last month proposed, lays out at both sizes with no accessibility
// violation.
func TestBrowserEvidencePackForm(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	s := startServer(t, "")
	root := s.addUser("root", "admin")
	b := startBrowser(t, ctx)
	admin := b.window(t, "root")
	admin.login(s.url, root)
	admin.navigate(s.url + "/admin#evidence")
	admin.do("see the evidence pack form", waitShort, chromedp.WaitVisible(testID("evidence-pack")))
	today := time.Now().UTC().Format(time.DateOnly)
	if got := eval[string](admin, `document.querySelector('[data-testid="pack-until"]').value`); got != today {
		t.Errorf("the form proposes the period up to %q, want today %q", got, today)
	}
	for _, w := range sizes {
		admin.do("set the window to "+w.name, waitShort, chromedp.EmulateViewport(w.width, w.height),
			chromedp.ScrollIntoView(testID("evidence-pack-form")))
		if problems := eval[[]string](admin, layoutProblemsJS); len(problems) > 0 {
			t.Errorf("the admin page at %s px:\n  %s", w.name, strings.Join(problems, "\n  "))
		}
		admin.screenshot("admin-evidence-pack-" + w.name)
		accessible(t, admin, "the admin page at "+w.name)
	}
}
