package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/client"
)

// TestBrowserListLivePages: with three pages of pending calls in the list
// view, a call that arrives lands in place on the first page when the
// deadline order puts it there, and the page in the middle takes no row
// but says how many calls arrived, with a link to the first page.
func TestBrowserListLivePages(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	s := startServer(t, "")
	alice := s.addUser("alice", "operator")
	deploys := client.New(s.url, s.token("agent:release-bot", "deploy-host"))
	searches := client.New(s.url, s.token("agent:support-bot", "search-host"))
	for i := range 105 { // decided within an hour: three pages of 50
		submit(t, ctx, deploys, client.Proposal{Tool: "releases.deploy", Target: "service:checkout",
			Args: map[string]any{"version": fmt.Sprintf("v3.%d.0", i), "environment": "production", "change_ticket": "CHG-4400"}})
	}
	b := startBrowser(t, ctx)
	first := b.window(t, "first page")
	first.login(s.url, alice)
	first.navigate(s.url + "/?layout=list")
	first.waitLive()
	next := eval[string](first, `document.querySelector('[data-testid="next-page"]').getAttribute("href")`)
	middle := first.tab(t, "middle page")
	middle.navigate(s.url + next)
	middle.waitLive()
	middle.mark()
	before := len(middle.queueOrder())

	// A search must be decided within five minutes: the first row.
	q := submit(t, ctx, searches, client.Proposal{Tool: "search.query", Target: "index:tickets", Args: map[string]any{"query": "checkout timeout", "limit": 5}})
	first.waitFor("the search first on page 1", `(() => { const r = document.querySelector("#queue-list article[data-call]"); return !!r && r.dataset.call === `+jsString(q.ID)+`; })()`)
	middle.waitFor("the middle page says a call arrived", `(() => { const n = document.querySelector('[data-testid="new-rows"]'); return !!n && !n.hidden; })()`)
	if got := middle.text(testID("new-rows-count")); got != "1 new call" {
		t.Errorf("the middle page says %q, want 1 new call", got)
	}
	if got := len(middle.queueOrder()); got != before || strings.Contains(strings.Join(middle.queueOrder(), " "), q.ID) {
		t.Errorf("the middle page has %d rows (was %d) or took the new call", got, before)
	}
	if href := eval[string](middle, `document.querySelector('[data-testid="new-rows-first"]').getAttribute("href")`); !strings.Contains(href, "layout=list") || strings.Contains(href, "after=") {
		t.Errorf("the middle page's link %q does not lead to the first page", href)
	}
	middle.checkMarked()
	middle.screenshot("queue-list-new-rows-1280")
	accessible(t, middle, "a middle page of the list told of new calls")
}
