package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/countersign/countersign/client"
)

// TestBrowserRefusedApproval: a tool is frozen while an operator has its
// call open; pressing Approve re-shows the call in Chromium with why it
// was refused and what to do next, offers no Approve while the freeze
// holds, and keeps the deny form and the navigation.
func TestBrowserRefusedApproval(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	s := startServer(t, "")
	alice := s.addUser("alice", "operator")
	s.addUser("root", "admin")
	searches := client.New(s.url, s.token("agent:support-bot", "search-host"))
	q := submit(t, ctx, searches, client.Proposal{Tool: "search.query", Target: "index:tickets", Args: map[string]any{"query": "checkout timeout", "limit": 5}})

	b := startBrowser(t, ctx)
	op := b.window(t, "alice")
	op.login(s.url, alice)
	op.navigate(s.url + "/calls/" + q.ID)
	op.waitLive()
	op.waitFor("Approve armed", `(() => { const b = document.querySelector('[data-testid="approve"]'); return !!b && !b.disabled; })()`)
	if _, code := runConsole(t, "", "freeze", "--data", s.data, "--tool", "search.query", "--reason", "index rebuild under way", "--as", "root"); code != 0 {
		t.Fatalf("freeze exited %d", code)
	}
	op.do("press Approve", waitShort, chromedp.Click(testID("approve")), chromedp.WaitVisible(testID("decision-refused")))
	if code := eval[string](op, `document.querySelector('[data-testid="decision-refused"]').dataset.code`); code != "frozen" {
		t.Errorf("refusal code %q, want frozen", code)
	}
	if got := op.text(testID("decision-error")); !strings.Contains(got, "search.query is frozen (index rebuild under way)") {
		t.Errorf("the reason reads %q", got)
	}
	if got := op.text(testID("decision-next")); !strings.Contains(got, "What to do:") || !strings.Contains(got, "Deny the call") {
		t.Errorf("the next step reads %q", got)
	}
	if got := op.text(testID("call-id")); got != q.ID {
		t.Errorf("the page shows call %q, want %s", got, q.ID)
	}
	if n := eval[int](op, `document.querySelectorAll('[data-testid="approve"]').length`); n != 0 {
		t.Error("the re-shown page still offers Approve under the freeze")
	}
	if n := eval[int](op, `document.querySelectorAll('[data-testid="deny-reason"]').length`); n != 1 {
		t.Error("the re-shown page offers no denial")
	}
	op.screenshot("refused-frozen-1280")
	accessible(t, op, "the refused approval re-shown at 1280")
	op.do("a phone", waitShort, chromedp.EmulateViewport(390, 844))
	op.screenshot("refused-frozen-390")
	accessible(t, op, "the refused approval re-shown at 390")
}
