package console

import (
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/gorilla/websocket"

	"github.com/countersign/countersign/internal/account"
)

// needsOf reads the counts a page or a fragment shows in its navigation.
func needsOf(t *testing.T, doc *goquery.Selection) map[string]int {
	t.Helper()
	nav := doc.Find(`[data-testid="needs-you"]`)
	if nav.Length() != 1 {
		t.Fatalf("%d needs-you navigations, want 1", nav.Length())
	}
	out := map[string]int{}
	for _, k := range []string{"pending", "due", "blocked", "unresolved"} {
		s, ok := nav.Find(`[data-testid="needs-` + k + `"]`).Attr("data-count")
		if !ok {
			t.Fatalf("no %s count in %q", k, nav.Text())
		}
		out[k], _ = strconv.Atoi(s)
	}
	return out
}

// wsReadNeeds reads a socket until it is sent counts equal to want, and
// fails if they do not come.
func wsReadNeeds(t *testing.T, conn *websocket.Conn, want map[string]int) {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	var last map[string]int
	for {
		_, msg, err := conn.ReadMessage()
		if err != nil {
			t.Fatalf("waiting for the counts %v (last %v): %v", want, last, err)
		}
		doc := fragmentDoc(t, string(msg))
		if doc.Find(`[data-testid="needs-you"]`).Length() == 0 {
			continue
		}
		last = needsOf(t, doc.Selection)
		if equalCounts(last, want) {
			return
		}
	}
}

func equalCounts(a, b map[string]int) bool {
	for k, v := range b {
		if a[k] != v {
			return false
		}
	}
	return len(a) == len(b)
}

// Every page of a logged-in person counts what needs people in its
// navigation: pending calls, those due within ten minutes, blocked agents
// and unresolved outcomes. A page reads the counts as last counted (no
// statement while the console is busy) unless they are older than
// needsMaxAge; a socket's first message counts again after a change, and
// open pages are pushed new counts when something changes.
func TestNeedsYouCounts(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	e.addUser("alice", account.RoleOperator, "pw-alice")
	b := e.browser()
	b.login("olivia", rolePassword)
	zero := map[string]int{"pending": 0, "due": 0, "blocked": 0, "unresolved": 0}
	if got := needsOf(t, b.get("/history").doc.Selection); !equalCounts(got, zero) {
		t.Fatalf("an empty console counts %v", got)
	}
	search := e.submit("agent:support-bot", "search-host", conSearchBody) // due in 5 min
	e.submit("agent:billing-bot", "payments-host", conRefundBody)         // due in 15 min
	// Within needsMaxAge a page without a socket shows the counts as
	// they were last counted: reading a page costs no count.
	if got := needsOf(t, b.get("/history").doc.Selection); !equalCounts(got, zero) {
		t.Fatalf("a page within needsMaxAge counts %v, want the last count %v", got, zero)
	}
	e.clock.Advance(needsMaxAge + time.Second)
	want := map[string]int{"pending": 2, "due": 1, "blocked": 0, "unresolved": 0}
	for _, path := range []string{"/", "/history", "/account", "/unresolved", "/calls/" + search.ID} {
		if got := needsOf(t, b.get(path).doc.Selection); !equalCounts(got, want) {
			t.Errorf("%s counts %v, want %v", path, got, want)
		}
	}
	p := b.get("/")
	if txt := p.find("needs-pending").Text(); !strings.Contains(txt, "2 to decide") {
		t.Errorf("an operator reads %q, want 2 to decide", txt)
	}
	aude := e.browser()
	aude.login("aude", rolePassword)
	if txt := aude.get("/history").find("needs-pending").Text(); !strings.Contains(txt, "2 pending") {
		t.Errorf("an auditor reads %q, want 2 pending", txt)
	}

	// A page goes live: its first message counts what changed since.
	e.submit("agent:deployer", "deploy-host", conDeployBody)
	want["pending"] = 3
	callPage, first := b.mustDial("/ws?call=" + search.ID)
	if got := needsOf(t, fragmentDoc(t, first).Selection); !equalCounts(got, want) {
		t.Errorf("the call page's first message counts %v, want %v", got, want)
	}
	queuePage, _ := b.mustDial("/ws")
	auditor, _ := aude.mustDial("/ws?view=unresolved")

	// Changes are pushed to every open page, whatever it shows.
	blockPair(t, e, "agent:flaky", "payments-host")
	want["blocked"] = 1
	for _, conn := range []*websocket.Conn{callPage, queuePage, auditor} {
		wsReadNeeds(t, conn, want)
	}
	csrf := b.csrf()
	if p := b.post("/calls/"+search.ID+"/deny", url.Values{"csrf": {csrf}, "reason": {"not now"}}); p.status != 303 {
		t.Fatalf("deny: %d", p.status)
	}
	want["pending"], want["due"] = 2, 0
	wsReadNeeds(t, queuePage, want)
	e.redeemedCall("INV-77")
	e.expireLeases() // five minutes on: the refund is due within ten
	want["unresolved"], want["due"] = 1, 1
	wsReadNeeds(t, auditor, want)
}
