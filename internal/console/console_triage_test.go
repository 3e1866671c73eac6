package console

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/gorilla/websocket"

	"github.com/countersign/countersign/internal/reveal"
)

const (
	conSearchBody = `{"tool":"search.query","target":"index:tickets","args":{"query":"checkout timeout","limit":20}}`
	conFilesBody  = `{"tool":"files.delete","target":"file:/srv/shared/exports/old-1.csv","args":{"reason":"older than 90 days","backup":true}}`
)

func deployBody(version string) string {
	return `{"tool":"releases.deploy","target":"service:checkout","args":{"version":"` + version + `","environment":"production","change_ticket":"CHG-1234"}}`
}

func cardIDs(p *htmlPage) []string {
	var ids []string
	p.find("call-card").Each(func(_ int, s *goquery.Selection) {
		id, _ := s.Attr("data-call")
		ids = append(ids, id)
	})
	return ids
}

// The queue sorts by deadline unless asked otherwise, keeps calls of one
// tool, target and actor together, and filters by tool, actor, target
// text and warnings, all from the URL.
func TestQueueSortFilterGroup(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	step := func() { e.clock.Advance(time.Second) }
	deploy1 := e.submit("agent:deployer", "deploy-host", deployBody("v1.4.2")) // decide within 1 h
	step()
	refund := e.submit("agent:billing-bot", "payments-host", conRefundBody) // 15 min
	step()
	search := e.submit("agent:support-bot", "search-host", conSearchBody) // 5 min
	step()
	deploy2 := e.submit("agent:deployer", "deploy-host", deployBody("v1.4.3"))
	step()
	files := e.submit("agent:janitor", "files-host", conFilesBody) // 10 min
	step()
	mail := e.submit("agent:mailer", "mail-host", `{"tool":"email.send","target":"mailbox:billing@example.com","args":{"to":[{"address":"ops@example.com"}],"subject":"report\u202Efdp.exe","body":"hi"}}`) // 30 min

	b := e.browser()
	b.login("olivia", rolePassword)
	cases := []struct {
		query string
		want  []string
	}{
		{"", []string{search.ID, files.ID, refund.ID, mail.ID, deploy1.ID, deploy2.ID}},
		{"?sort=deadline", []string{search.ID, files.ID, refund.ID, mail.ID, deploy1.ID, deploy2.ID}},
		// The second deploy joins the first one's group, after the refund
		// in time but before it in the list.
		{"?sort=oldest", []string{deploy1.ID, deploy2.ID, refund.ID, search.ID, files.ID, mail.ID}},
		{"?sort=newest", []string{mail.ID, files.ID, deploy2.ID, deploy1.ID, search.ID, refund.ID}},
		{"?sort=tool", []string{mail.ID, files.ID, refund.ID, deploy1.ID, deploy2.ID, search.ID}},
		{"?sort=nonsense", []string{search.ID, files.ID, refund.ID, mail.ID, deploy1.ID, deploy2.ID}},
		{"?tool=releases.deploy", []string{deploy1.ID, deploy2.ID}},
		{"?actor=BILLING", []string{refund.ID}},
		{"?target=exports/old", []string{files.ID}},
		{"?warn=1", []string{mail.ID}},
		{"?tool=payments.refund&actor=deployer", nil},
		// Risk as the tools file declares it: high first, then by deadline.
		{"?sort=risk", []string{files.ID, refund.ID, mail.ID, deploy1.ID, deploy2.ID, search.ID}},
		{"?risk=medium", []string{refund.ID, mail.ID, deploy1.ID, deploy2.ID}},
		{"?risk=high", []string{files.ID}},
		{"?risk=severe", []string{search.ID, files.ID, refund.ID, mail.ID, deploy1.ID, deploy2.ID}},
		{"?effect=money", []string{refund.ID}},
		{"?effect=read-only", []string{search.ID}},
		{"?effect=production&risk=low", nil},
	}
	for _, c := range cases {
		p := b.get("/" + c.query)
		if got := cardIDs(p); !slices.Equal(got, c.want) {
			t.Errorf("GET /%s: cards %v, want %v", c.query, got, c.want)
		}
		if ws, _ := p.find("live").Attr("ws-connect"); c.query != "" && c.query != "?sort=deadline" && c.query != "?sort=nonsense" && c.query != "?risk=severe" && !strings.HasPrefix(ws, "/ws?") {
			t.Errorf("GET /%s: the socket %q does not carry the filter", c.query, ws)
		}
	}
	p := b.get("/?sort=oldest")
	g1, _ := p.doc.Find(`[data-call="` + deploy1.ID + `"]`).Attr("data-group")
	g2, _ := p.doc.Find(`[data-call="` + deploy2.ID + `"]`).Attr("data-group")
	gr, _ := p.doc.Find(`[data-call="` + refund.ID + `"]`).Attr("data-group")
	if g1 == "" || g1 != g2 || g1 == gr {
		t.Errorf("groups %q %q %q: the two deploys share one, the refund has its own", g1, g2, gr)
	}
	// Each card shows the risk and effects its tool declares.
	p = b.get("/")
	files1 := p.doc.Find(`[data-call="` + files.ID + `"]`)
	if got := files1.Find(`[data-testid="risk"]`).Text(); got != "high risk" {
		t.Errorf("files card risk %q, want high risk", got)
	}
	if got := files1.Find(`[data-testid="effect"]`).Text(); got != "destructive" {
		t.Errorf("files card effects %q, want destructive", got)
	}
	if r, _ := files1.Attr("data-risk"); r != "3" {
		t.Errorf("files card data-risk %q, want 3 for the page's script", r)
	}
	// The form shows the filter as typed.
	p = b.get("/?tool=releases.deploy&target=check&warn=1&sort=tool")
	if v, _ := p.find("queue-target").Attr("value"); v != "check" {
		t.Errorf("target field %q", v)
	}
	if _, ok := p.find("queue-warn").Attr("checked"); !ok {
		t.Error("the warnings box is not ticked")
	}
	if p.doc.Find(`[data-testid="queue-tool"] option[selected]`).Text() != "releases.deploy" {
		t.Error("the tool is not selected")
	}
	if !strings.Contains(p.find("queue-empty").Text(), "matches this filter") {
		t.Errorf("empty filtered queue says %q", p.find("queue-empty").Text())
	}
}

// A card summarizes the arguments its tool names, money formatted as on
// the call page, and cuts a long value with its length; the call page
// shows it whole.
func TestCardSummary(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	refund := e.submit("agent:billing-bot", "payments-host", conRefundBody)
	subject := strings.Repeat("Quarterly invoice batch ", 6) + "end"
	mail := e.submit("agent:mailer", "mail-host", `{"tool":"email.send","target":"mailbox:billing@example.com","args":{"to":[{"address":"ops@example.com"},{"address":"cfo@example.com"}],"subject":"`+subject+`","body":"hi"}}`)
	b := e.browser()
	b.login("olivia", rolePassword)
	p := b.get("/")
	card := p.doc.Find(`[data-call="` + refund.ID + `"]`)
	var keys []string
	card.Find(`[data-testid="summary-item"]`).Each(func(_ int, s *goquery.Selection) {
		k, _ := s.Attr("data-key")
		keys = append(keys, k)
	})
	if !slices.Equal(keys, []string{"amount_minor", "reason_code"}) {
		t.Errorf("refund summary keys %v", keys)
	}
	if got := card.Find(`[data-testid="summary-money"]`).Text(); got != "USD 1,299.99" {
		t.Errorf("money %q, want USD 1,299.99 as on the call page", got)
	}
	callMoney := strings.TrimSpace(b.get("/calls/" + refund.ID).doc.Find(`[data-pointer="/amount_minor"] [data-testid="arg-money"]`).Text())
	if callMoney != "USD 1,299.99" {
		t.Errorf("the call page shows %q", callMoney)
	}
	if got := card.Find(`[data-key="amount_minor"] [data-testid="summary-value"]`).Text(); got != "129999" {
		t.Errorf("raw amount %q", got)
	}

	mc := p.doc.Find(`[data-call="` + mail.ID + `"]`)
	shown := mc.Find(`[data-key="subject"] [data-testid="summary-value"]`).Text()
	if shown != subject[:summaryCut] {
		t.Errorf("cut subject %q, want the first %d characters", shown, summaryCut)
	}
	if got := mc.Find(`[data-key="subject"] [data-testid="summary-cut"]`).Text(); !strings.Contains(got, fmt.Sprintf("(%d characters", len(subject))) {
		t.Errorf("cut note %q, want the length %d", got, len(subject))
	}
	if got := mc.Find(`[data-key="to"] [data-testid="summary-value"]`).Text(); got != "2 items" {
		t.Errorf("array summary %q", got)
	}
	// The call page shows the whole subject.
	cp := b.get("/calls/" + mail.ID)
	if got := cp.doc.Find(`[data-pointer="/subject"] [data-testid="arg-value"]`).Text(); got != subject {
		t.Errorf("the call page shows %q, want the whole subject", got)
	}
}

// The live updates of a queue page respect its filter: a call the filter
// keeps out is never pushed to it.
func TestQueueSocketRespectsFilter(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	b := e.browser()
	b.login("olivia", rolePassword)
	filtered, first := b.mustDial("/ws?tool=payments.refund")
	all, _ := b.mustDial("/ws")
	if strings.Contains(first, "call-card") {
		t.Fatalf("the first message of an empty queue holds a card: %s", first)
	}
	deploy := e.submit("agent:deployer", "deploy-host", conDeployBody)
	refund := e.submit("agent:billing-bot", "payments-host", conRefundBody)
	wsReadUntil(t, all, deploy.ID)
	msg := wsReadUntil(t, filtered, refund.ID)
	if strings.Contains(msg, deploy.ID) {
		t.Errorf("the filtered socket got the deploy: %s", msg)
	}
	// Deciding the deploy removes it from the unfiltered page only; the
	// filtered one hears of the refund's decision.
	csrf := b.csrf()
	if p := b.post("/calls/"+refund.ID+"/deny", map[string][]string{"csrf": {csrf}, "reason": {"no"}}); p.status != 303 {
		t.Fatalf("deny: %d", p.status)
	}
	msg = wsReadUntil(t, filtered, "call-"+refund.ID)
	if strings.Contains(msg, deploy.ID) {
		t.Errorf("the filtered socket got the deploy: %s", msg)
	}
	// A reconnect's snapshot is the filtered queue too.
	again, snap := b.mustDial("/ws?tool=releases.deploy")
	_ = again
	if !strings.Contains(snap, deploy.ID) || strings.Contains(snap, refund.ID) {
		t.Errorf("snapshot of the deploy filter: %s", snap)
	}
}

func TestCutText(t *testing.T) {
	in := reveal.Of("ab\u202Ecdef")
	got, n, cut := cutText(in, 3)
	var shown strings.Builder
	for _, s := range got.Segs {
		shown.WriteString(s.S)
	}
	if n != 7 || !cut || shown.String() != "ab[U+202E]" {
		t.Errorf("cutText = %q, %d, %v; want the escape kept whole", shown.String(), n, cut)
	}
	if _, n, cut := cutText(reveal.Of("short"), 60); cut || n != 5 {
		t.Errorf("short text cut: %d %v", n, cut)
	}
}

// The list view shows one page of pending calls by deadline, one line per
// call with its selection box for a batch review and no decision button,
// and links to the next page, which starts where the first ended.
func TestQueueListViewPages(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	const n = queuePageSize + 5
	var ids []string
	for i := 0; i < n; i++ {
		c := e.submit(fmt.Sprintf("agent:bot-%d", i%5), "search-host",
			fmt.Sprintf(`{"tool":"search.query","target":"index:tickets","args":{"query":"q%d","limit":20}}`, i))
		ids = append(ids, c.ID)
		e.clock.Advance(time.Second)
	}
	b := e.browser()
	b.login("olivia", rolePassword)
	p := b.get("/?layout=list")
	if p.find("rows-view").Length() != 1 {
		t.Fatal("the list view is not a list")
	}
	first := cardIDs(p)
	if !slices.Equal(first, ids[:queuePageSize]) {
		t.Errorf("page 1 = %d calls %v, want the %d soonest deadlines in order", len(first), first, queuePageSize)
	}
	if p.find("card-select").Length() != queuePageSize {
		t.Errorf("%d selection boxes on page 1, want one a row", p.find("card-select").Length())
	}
	if p.find("approve").Length() != 0 {
		t.Error("a row offers Approve")
	}
	next, ok := p.find("next-page").Attr("href")
	if !ok || !strings.Contains(next, "layout=list") {
		t.Fatalf("next page link %q", next)
	}
	p = b.get(next)
	if got := cardIDs(p); !slices.Equal(got, ids[queuePageSize:]) {
		t.Errorf("page 2 = %v, want %v", got, ids[queuePageSize:])
	}
	if p.find("next-page").Length() != 0 {
		t.Error("the last page links to a next one")
	}
	// A malformed key is the first page.
	if got := cardIDs(b.get("/?layout=list&after=nonsense")); !slices.Equal(got, first) {
		t.Errorf("a malformed key shows %d calls", len(got))
	}
}

// A call that arrives lands where the order by deadline puts it on the
// first and on the last page of the list view; a page in the middle takes
// no row (its following pages would shift) and is told a call arrived
// instead, as is a page the call does not belong on.
func TestQueueListLivePlacement(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	for i := 0; i < 2*queuePageSize+5; i++ { // deploys: decided within an hour
		e.submit("agent:deployer", "deploy-host", deployBody(fmt.Sprintf("v1.%d.0", i)))
		e.clock.Advance(time.Second)
	}
	b := e.browser()
	b.login("olivia", rolePassword)
	socketOf := func(p *htmlPage) string {
		t.Helper()
		ws, ok := p.doc.Find("main[ws-connect]").Attr("ws-connect")
		if !ok {
			t.Fatal("the list page has no socket")
		}
		return ws
	}
	var sockets []string
	path := "/?layout=list"
	for page := 0; page < 3; page++ {
		p := b.get(path)
		sockets = append(sockets, socketOf(p))
		path, _ = p.find("next-page").Attr("href")
	}
	if path != "" {
		t.Fatalf("a fourth page follows: %s", path)
	}
	for i, want := range []struct{ after, upto bool }{{false, true}, {true, true}, {true, false}} {
		if got := strings.Contains(sockets[i], "after="); got != want.after {
			t.Errorf("page %d's socket %s: after %v, want %v", i+1, sockets[i], got, want.after)
		}
		if got := strings.Contains(sockets[i], "upto="); got != want.upto {
			t.Errorf("page %d's socket %s: upto %v, want %v", i+1, sockets[i], got, want.upto)
		}
	}
	first, _ := b.mustDial(sockets[0])
	middle, _ := b.mustDial(sockets[1])
	last, _ := b.mustDial(sockets[2])

	row := func(id string) string { return `data-call="` + id + `"` }
	counted := func(id string) string { return `<data value="` + id + `">` }
	check := func(conn *websocket.Conn, name, id string, takes bool) {
		t.Helper()
		want, not := counted(id), row(id)
		if takes {
			want, not = not, want
		}
		if msg := wsReadUntil(t, conn, want); strings.Contains(msg, not) {
			t.Errorf("%s page: got both the row and the count of %s: %s", name, id, msg)
		}
	}
	// A search must be decided within five minutes: first in the list.
	soon := e.submit("agent:support-bot", "search-host", conSearchBody)
	check(first, "first", soon.ID, true)
	check(middle, "middle", soon.ID, false)
	check(last, "last", soon.ID, false)
	// Another deploy is decided last of all: the last page's.
	late := e.submit("agent:deployer", "deploy-host", deployBody("v9.9.9"))
	check(first, "first", late.ID, false)
	check(middle, "middle", late.ID, false)
	check(last, "last", late.ID, true)
}
