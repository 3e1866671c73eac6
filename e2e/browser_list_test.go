package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/countersign/countersign/client"
)

// The list view: one line per call; j/k move, x ticks a row for the batch
// review, o opens it; a call that arrives live joins page 1 and keeps the
// ticks and what was typed in the filter; nothing overflows at 1280 or 390.
func TestBrowserListView(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	s := startServer(t, "")
	alice := s.addUser("alice", "operator")
	searches := client.New(s.url, s.token("agent:support-bot", "search-host"), client.WithPollWait(30*time.Second))
	files := client.New(s.url, s.token("agent:janitor", "files-host"), client.WithPollWait(30*time.Second))
	var first []string
	for i := 0; i < 6; i++ {
		c := submit(t, ctx, searches, client.Proposal{Tool: "search.query", Target: "index:tickets", Args: map[string]any{"query": fmt.Sprintf("checkout %d", i), "limit": 5}})
		first = append(first, c.ID)
	}
	submit(t, ctx, files, client.Proposal{Tool: "files.delete", Target: "file:/srv/shared/exports/old-1.csv", Args: map[string]any{"reason": "older than 90 days", "backup": true}})

	b := startBrowser(t, ctx)
	win := b.window(t, "alice")
	win.login(s.url, alice)
	op := win.with(t)
	op.navigate(s.url + "/?layout=list")
	op.waitLive()
	op.do("the list", waitShort, chromedp.WaitVisible(`[data-testid="rows-view"]`))
	height := eval[float64](op, `document.querySelector("#queue-list article[data-call]").getBoundingClientRect().height`)
	if height > 48 {
		t.Errorf("a row is %.0f px tall, want one line", height)
	}
	if n := eval[int](op, `document.querySelectorAll('#queue-list [data-testid="risk"]').length`); n != 7 {
		t.Errorf("%d rows show a risk, want 7", n)
	}
	op.press("j")
	op.press("j")
	op.press("x")
	if got := eval[string](op, `Array.from(document.querySelectorAll('input[data-testid="card-select"]:checked'), e => e.value).join()`); got != first[1] {
		t.Errorf("x ticked %q, want the second row %s", got, first[1])
	}
	eval[chromedp.Void](op, `document.querySelector('[data-testid="queue-actor"]').value = "half-typed"`)
	live := submit(t, ctx, searches, client.Proposal{Tool: "search.query", Target: "index:tickets", Args: map[string]any{"query": "arrived live", "limit": 5}})
	op.do("wait for the live row", waitShort, chromedp.WaitVisible(cardSel(live.ID)))
	if got := eval[string](op, `Array.from(document.querySelectorAll('input[data-testid="card-select"]:checked'), e => e.value).join()`); got != first[1] {
		t.Errorf("after a live insert the ticks are %q, want %s", got, first[1])
	}
	if got := eval[string](op, `document.querySelector('[data-testid="queue-actor"]').value`); got != "half-typed" {
		t.Errorf("after a live insert the actor field holds %q", got)
	}
	for _, w := range []struct {
		name          string
		width, height int64
	}{{"1280", 1280, 900}, {"390", 390, 844}} {
		op.do("set the window to "+w.name, waitShort, chromedp.EmulateViewport(w.width, w.height))
		if problems := eval[[]string](op, layoutProblemsJS); len(problems) > 0 {
			t.Errorf("the list view at %s px:\n  %s", w.name, strings.Join(problems, "\n  "))
		}
		op.screenshot("queue-list-" + w.name)
	}
	op.do("back to 1280", waitShort, chromedp.EmulateViewport(1280, 900))
	op.press("o")
	op.do("open the call", waitShort, chromedp.WaitVisible(testID("approve")))
	if loc := eval[string](op, `location.pathname`); loc != "/calls/"+first[1] {
		t.Errorf("o opened %s, want the selected row's call %s", loc, first[1])
	}
}
