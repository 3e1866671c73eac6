package console

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/policy"
	"github.com/countersign/countersign/internal/queue"
)

const navigationToolsYAML = `tools:
  notes.soon:
    description: Write a note due soon
    audience: notes-host
    target: '^note:[a-z0-9]+$'
    approvals: 1
    decide_within: 5m
    args: {type: object, additionalProperties: false, properties: {}}
  notes.write:
    description: Write a note
    audience: notes-host
    target: '^note:[a-z0-9]+$'
    approvals: 1
    decide_within: 10m
    args: {type: object, additionalProperties: false, properties: {}}
  notes.later:
    description: Write a note due later
    audience: notes-host
    target: '^note:[a-z0-9]+$'
    approvals: 1
    decide_within: 1h
    args: {type: object, additionalProperties: false, properties: {}}
`

// With more pending calls than a page of the queue, and the only one the
// viewer may decide behind hundreds they may not (their own), the call
// page's "Next pending call" still finds it: it reads the queue one
// keyset page by deadline at a time and stops at the page that holds it,
// so the rows it reads are those pages, not the queue.
func TestNextPendingCallReadsBoundedPages(t *testing.T) {
	pol, err := policy.Parse([]byte(navigationToolsYAML))
	if err != nil {
		t.Fatal(err)
	}
	e := newConsoleEnvTools(t, pol.Registry(), pol, nil)
	e.addUser("olivia", account.RoleOperator, rolePassword)
	submit := func(actor, tool string, i int) *queue.Call {
		return e.submitOwned(queue.Principal{Actor: actor, Audience: "notes-host"},
			fmt.Sprintf(`{"tool":%q,"target":"note:n%d","args":{}}`, tool, i))
	}
	// The one olivia may decide is the oldest call; 120 of her own fall
	// due before it, 400 after.
	want := submit("agent:scribe", "notes.write", 0)
	const soon, later = 2*queuePageSize + 20, 400
	var own *queue.Call
	for i := range soon {
		own = submit("olivia", "notes.soon", 1+i)
	}
	for i := range later {
		submit("olivia", "notes.later", 1+soon+i)
	}
	if soon+later+1 <= maxQueueCards {
		t.Fatalf("only %d pending: the test needs more than %d", soon+later+1, maxQueueCards)
	}

	b := e.browser()
	b.login("olivia", rolePassword)
	b.get("/calls/" + own.ID) // connections and the counts warm
	var pages atomic.Int64
	e.db.TraceStatements(func(q string) {
		if strings.Contains(q, "INDEXED BY calls_pending") {
			pages.Add(1)
		}
	})
	p := b.get("/calls/" + own.ID)
	e.db.TraceStatements(nil)
	if href, _ := p.find("next-pending").Attr("href"); href != "/calls/"+want.ID {
		t.Errorf("next pending call %q, want /calls/%s", href, want.ID)
	}
	// The call is on the third page by deadline: three pages read.
	if n := pages.Load(); n != 3 {
		t.Errorf("the call page read %d pages of the queue, want 3", n)
	}

	// On that call's own page nothing else is hers to decide: the search
	// gives up after maxNavigationPages pages, though the queue holds more.
	pages.Store(0)
	e.db.TraceStatements(func(q string) {
		if strings.Contains(q, "INDEXED BY calls_pending") {
			pages.Add(1)
		}
	})
	p = b.get("/calls/" + want.ID)
	e.db.TraceStatements(nil)
	if href, ok := p.find("next-pending").Attr("href"); ok {
		t.Errorf("next pending call %q, want none", href)
	}
	if n := pages.Load(); n != maxNavigationPages {
		t.Errorf("the call page read %d pages of the queue, want %d", n, maxNavigationPages)
	}
}
