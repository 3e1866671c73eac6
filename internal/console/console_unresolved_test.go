package console

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/tools"
)

// agentBilling is the principal of the calls these tests redeem.
var agentBilling = queue.Principal{Actor: "agent:billing", Audience: "payments-host", TokenID: "tok_billing"}

// redeemedCall submits a refund, has alice approve it and redeems it.
func (e *consoleEnv) redeemedCall(invoice string) *queue.Call {
	e.t.Helper()
	ctx := context.Background()
	body := `{"tool":"payments.refund","target":"invoice:` + invoice + `","args":{"amount_minor":1299,"currency":"USD","reason_code":"duplicate"}}`
	c, _, err := e.q.Submit(ctx, agentBilling, []byte(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if c, err = e.q.Approve(ctx, "alice", audit.ChannelCLI, c.ID, c.Digest); err != nil {
		e.t.Fatal(err)
	}
	r, err := e.q.Redeem(ctx, agentBilling, []byte(`{"grant":"`+c.Grant+`","call":{"tool":"payments.refund","target":"invoice:`+invoice+
		`","args":{"amount_minor":1299,"currency":"USD","reason_code":"duplicate"}}}`))
	if err != nil || !r.Accepted {
		e.t.Fatalf("redeem: %v %+v", err, r)
	}
	return r.Call
}

// expireLeases moves the clock past every lease and sweeps.
func (e *consoleEnv) expireLeases() {
	e.t.Helper()
	e.clock.Advance(tools.DefaultOutcomeWithin + time.Second)
	if _, err := e.q.ExpireLeases(context.Background()); err != nil {
		e.t.Fatal(err)
	}
}

func TestUnresolvedPage(t *testing.T) {
	e := newConsoleEnv(t)
	ctx := context.Background()
	e.addUser("alice", account.RoleOperator, "pw-alice")
	e.addUser("bob", account.RoleOperator, "pw-bob")
	e.addUser("agent:billing", account.RoleOperator, "pw-self")
	e.addUser("audrey", account.RoleAuditor, "pw-audrey")
	expired := e.redeemedCall("INV-1")
	unknown := e.redeemedCall("INV-2")
	succeeded := e.redeemedCall("INV-3")
	open := e.redeemedCall("INV-4")
	if _, err := e.q.ReportOutcome(ctx, agentBilling, unknown.ID, queue.OutcomeUnknown, "the bank timed out \u202e"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.q.ReportOutcome(ctx, agentBilling, succeeded.ID, queue.OutcomeSucceeded, ""); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(tools.DefaultOutcomeWithin + time.Second)
	if _, err := e.q.Heartbeat(ctx, agentBilling, open.ID, 0); err == nil {
		t.Fatal("a heartbeat after the lease end was accepted")
	}
	if _, err := e.q.ExpireLeases(ctx); err != nil {
		t.Fatal(err)
	}

	bob := e.browser()
	bob.login("bob", "pw-bob")
	p := bob.get("/unresolved")
	if p.status != http.StatusOK {
		t.Fatalf("GET /unresolved: %d", p.status)
	}
	cards := p.find("unresolved-card")
	var got []string
	cards.Each(func(_ int, s *goquerySelection) {
		id, _ := s.Attr("data-unresolved")
		got = append(got, id)
	})
	// Oldest outcome first: the unknown was reported before the leases
	// lapsed; the other two lapsed at the same time, in the order they
	// were made.
	if want := []string{unknown.ID, expired.ID, open.ID}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("unresolved cards %v, want %v", got, want)
	}
	if n := p.find("unresolved-count").Text(); n != "3" {
		t.Errorf("count %q, want 3", n)
	}
	if p.find("resolve-form").Length() != 3 {
		t.Errorf("bob sees %d resolve forms, want 3", p.find("resolve-form").Length())
	}
	if tok := p.find("unresolved-token").First().Text(); tok != "tok_billing" {
		t.Errorf("token %q, want tok_billing", tok)
	}
	if d := p.find("unresolved-detail").Text(); !strings.Contains(d, "[U+202E]") {
		t.Errorf("the executor's detail %q is not revealed", d)
	}
	if p.find("nav-unresolved").Length() != 1 {
		t.Error("no Unresolved item in the navigation")
	}

	self := e.browser()
	self.login("agent:billing", "pw-self")
	if sp := self.get("/unresolved"); sp.find("resolve-form").Length() != 0 || sp.find("own-call").Length() != 3 {
		t.Errorf("the call's actor sees %d forms and %d own-call notes, want 0 and 3", sp.find("resolve-form").Length(), sp.find("own-call").Length())
	}
	audrey := e.browser()
	audrey.login("audrey", "pw-audrey")
	if ap := audrey.get("/unresolved"); ap.status != http.StatusOK || ap.find("resolve-form").Length() != 0 || ap.find("unresolved-card").Length() != 3 {
		t.Errorf("the auditor: status %d, %d forms, %d cards", ap.status, ap.find("resolve-form").Length(), ap.find("unresolved-card").Length())
	}
	if rp := audrey.post("/calls/"+expired.ID+"/resolve", url.Values{"csrf": {audrey.csrf()}, "verdict": {"executed"}, "note": {"x"}}); rp.status != http.StatusForbidden {
		t.Errorf("an auditor's resolution: %d, want 403", rp.status)
	}
	if rp := self.post("/calls/"+expired.ID+"/resolve", url.Values{"csrf": {self.csrf()}, "verdict": {"executed"}, "note": {"x"}}); rp.status != http.StatusForbidden {
		t.Errorf("the actor's own resolution: %d, want 403", rp.status)
	}

	// Refused: the form comes back with what was typed and why.
	csrf := bob.csrf()
	bad := bob.post("/calls/"+expired.ID+"/resolve", url.Values{"csrf": {csrf}, "verdict": {"executed"},
		"note": {"the refund is in the ledger"}, "evidence": {"javascript:alert(1)"}, "from": {"unresolved"}})
	if bad.status != http.StatusBadRequest || !strings.Contains(bad.find("unresolved-error").Text(), "http or https") {
		t.Fatalf("javascript evidence: %d %q", bad.status, bad.find("unresolved-error").Text())
	}
	form := bad.doc.Find(`[data-unresolved="` + expired.ID + `"] [data-testid="resolve-form"]`)
	if note := form.Find(`[data-testid="resolve-note"]`).Text(); note != "the refund is in the ledger" {
		t.Errorf("the typed note is gone: %q", note)
	}
	if e.loadCall(expired.ID).Resolution != nil {
		t.Fatal("a refused resolution was stored")
	}

	ok := bob.post("/calls/"+expired.ID+"/resolve", url.Values{"csrf": {csrf}, "verdict": {"not_executed"},
		"note": {"no refund <b>in</b> the ledger"}, "evidence": {"https://ledger.example/refunds?inv=INV-1&x=\"1\""}, "from": {"unresolved"}})
	if ok.status != http.StatusSeeOther || ok.header.Get("Location") != "/unresolved?notice=resolved" {
		t.Fatalf("resolve: %d %q %s", ok.status, ok.header.Get("Location"), ok.find("unresolved-error").Text())
	}
	r := e.loadCall(expired.ID).Resolution
	if r == nil || r.Verdict != "not_executed" || r.By != "bob" || r.Channel != audit.ChannelWeb {
		t.Fatalf("stored resolution %+v", r)
	}
	again := bob.post("/calls/"+expired.ID+"/resolve", url.Values{"csrf": {csrf}, "verdict": {"executed"}, "note": {"x"}, "from": {"call"}})
	if again.status != http.StatusConflict || again.find("decision-error").Length() != 1 {
		t.Errorf("a second resolution: %d", again.status)
	}
	if n := bob.get("/unresolved").find("unresolved-card").Length(); n != 2 {
		t.Errorf("%d cards after the resolution, want 2", n)
	}

	// The call's page shows the resolution, the evidence as text and as a
	// link with exactly that address.
	cp := bob.get("/calls/" + expired.ID)
	if cp.find("resolution-verdict").Length() != 1 || !strings.Contains(cp.find("resolution-note").Text(), "no refund <b>in</b> the ledger") {
		t.Errorf("call page resolution: %q", cp.find("resolution").Text())
	}
	if strings.Contains(cp.body, "<b>in</b>") {
		t.Error("the note was rendered as HTML")
	}
	href, _ := cp.find("resolution-evidence-link").Attr("href")
	if href != `https://ledger.example/refunds?inv=INV-1&x="1"` || cp.find("resolution-evidence-link").AttrOr("rel", "") != "noopener noreferrer nofollow" {
		t.Errorf("evidence link %q", href)
	}
	// A call page resolves too, and goes back to the call.
	rp := bob.post("/calls/"+unknown.ID+"/resolve", url.Values{"csrf": {csrf}, "verdict": {"executed"}, "note": {"bank statement"}, "from": {"call"}})
	if rp.status != http.StatusSeeOther || rp.header.Get("Location") != "/calls/"+unknown.ID+"?notice=resolved" {
		t.Errorf("resolve from the call page: %d %q", rp.status, rp.header.Get("Location"))
	}
	if cp := bob.get("/calls/" + unknown.ID); cp.find("resolution-evidence").Length() != 0 || cp.find("unresolved").Length() != 0 {
		t.Error("a resolution without evidence shows an evidence line, or the call still reads unresolved")
	}
}

// TestEvidenceLinkOnlyWhenSafe: a stored evidence that is not an http(s)
// URL (written around the queue) is shown as text, never as a link.
func TestEvidenceLinkOnlyWhenSafe(t *testing.T) {
	e := newConsoleEnv(t)
	e.addUser("alice", account.RoleOperator, "pw-alice")
	e.addUser("bob", account.RoleOperator, "pw-bob")
	c := e.redeemedCall("INV-9")
	e.expireLeases()
	if _, err := e.q.Resolve(context.Background(), "bob", audit.ChannelWeb, c.ID, "executed", "seen", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.SQL().Exec(`DROP TRIGGER calls_resolution_final`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.SQL().Exec(`UPDATE calls SET resolution_evidence = 'javascript:alert(1)' WHERE id = ?`, c.ID); err != nil {
		t.Fatal(err)
	}
	b := e.browser()
	b.login("bob", "pw-bob")
	p := b.get("/calls/" + c.ID)
	if p.find("resolution-evidence-text").Text() != "javascript:alert(1)" || p.find("resolution-evidence-link").Length() != 0 {
		t.Errorf("unsafe evidence: text %q, %d links", p.find("resolution-evidence-text").Text(), p.find("resolution-evidence-link").Length())
	}
	if strings.Contains(p.body, `href="javascript`) {
		t.Error("a javascript: link is on the page")
	}
}

// TestUnresolvedLive: the Unresolved page's socket gets a call when its
// lease expires or its executor reports unknown, and loses it when it is
// resolved or a late report comes.
func TestUnresolvedLive(t *testing.T) {
	e := newConsoleEnv(t)
	ctx := context.Background()
	e.addUser("alice", account.RoleOperator, "pw-alice")
	e.addUser("bob", account.RoleOperator, "pw-bob")
	b := e.browser()
	b.login("bob", "pw-bob")
	conn, first := b.mustDial("/ws?view=unresolved")
	if !strings.Contains(first, `id="unresolved-list"`) {
		t.Fatalf("first message %q, want the list", first)
	}
	if _, _, err := b.dial("/ws?view=nope", e.url); err == nil {
		t.Error("an unknown view was accepted")
	}
	c1 := e.redeemedCall("INV-1")
	c2 := e.redeemedCall("INV-2")
	if _, err := e.q.ReportOutcome(ctx, agentBilling, c2.ID, queue.OutcomeUnknown, "?"); err != nil {
		t.Fatal(err)
	}
	msg := wsReadUntil(t, conn, `data-unresolved="`+c2.ID+`"`)
	if doc := fragmentDoc(t, msg); doc.Find(`[data-testid="resolve-form"]`).Length() != 1 {
		t.Errorf("the pushed card has no resolve form: %s", msg)
	}
	e.expireLeases()
	wsReadUntil(t, conn, `data-unresolved="`+c1.ID+`"`)
	if _, err := e.q.ReportOutcome(ctx, agentBilling, c1.ID, queue.OutcomeSucceeded, "late"); err != nil {
		t.Fatal(err)
	}
	wsReadUntil(t, conn, `id="unresolved-`+c1.ID+`" hx-swap-oob="delete"`)
	if _, err := e.q.Resolve(ctx, "alice", audit.ChannelWeb, c2.ID, "executed", "seen", ""); err != nil {
		t.Fatal(err)
	}
	wsReadUntil(t, conn, `id="unresolved-`+c2.ID+`" hx-swap-oob="delete"`)
}

func TestTimelineLifecycle(t *testing.T) {
	e := newConsoleEnv(t)
	ctx := context.Background()
	e.addUser("alice", account.RoleOperator, "pw-alice")
	e.addUser("bob", account.RoleOperator, "pw-bob")
	c := e.redeemedCall("INV-1")
	for range 2 {
		e.clock.Advance(time.Second)
		if _, err := e.q.Heartbeat(ctx, agentBilling, c.ID, 0); err != nil {
			t.Fatal(err)
		}
	}
	e.expireLeases()
	if _, err := e.q.Resolve(ctx, "bob", audit.ChannelWeb, c.ID, "executed", "in the ledger", "https://ledger.example/1"); err != nil {
		t.Fatal(err)
	}
	denied := e.submit("agent:billing", "payments-host", `{"tool":"payments.refund","target":"invoice:INV-2","args":{"amount_minor":5,"currency":"USD","reason_code":"duplicate"}}`)
	if _, err := e.q.Deny(ctx, "bob", audit.ChannelWeb, denied.ID, "not this one"); err != nil {
		t.Fatal(err)
	}
	b := e.browser()
	b.login("bob", "pw-bob")
	steps := func(id string) (kinds []string, p *htmlPage) {
		p = b.get("/history/calls/" + id)
		p.find("life-step").Each(func(_ int, s *goquerySelection) { kinds = append(kinds, s.AttrOr("data-kind", "")) })
		return kinds, p
	}
	kinds, p := steps(c.ID)
	if w := "proposed decided granted redeemed lease_extended lease_expired resolved proof"; strings.Join(kinds, " ") != w {
		t.Errorf("lifecycle %v, want %s", kinds, w)
	}
	facts := map[string]string{}
	p.find("life-fact").Each(func(_ int, s *goquerySelection) { facts[s.AttrOr("data-label", "")] += s.Text() + "|" })
	for label, want := range map[string]string{"Token": "tok_billing", "Checks": "11 of 11 passed", "Heartbeats": "2",
		"How": "from the command line", "Note": "in the ledger"} {
		if !strings.Contains(facts[label], want) {
			t.Errorf("fact %s = %q, want it to hold %q", label, facts[label], want)
		}
	}
	kinds, p = steps(denied.ID)
	if w := "proposed decided not_redeemed proof"; strings.Join(kinds, " ") != w {
		t.Errorf("denied lifecycle %v, want %s", kinds, w)
	}
	if title := p.doc.Find(`[data-kind="not_redeemed"] [data-testid="life-title"]`).Text(); !strings.Contains(title, "No redemption was accepted") {
		t.Errorf("denied call: %q", title)
	}
	// A countered call says it can never run, naming its counter.
	countered := e.submit("agent:billing", "payments-host", `{"tool":"payments.refund","target":"invoice:INV-4","args":{"amount_minor":900,"currency":"USD","reason_code":"duplicate"}}`)
	counter, err := e.q.Counter(ctx, queue.CounterInput{Operator: "alice", Channel: audit.ChannelCLI, CallID: countered.ID,
		Digest: countered.Digest, Edits: map[string]json.RawMessage{"/amount_minor": json.RawMessage("90")}})
	if err != nil {
		t.Fatal(err)
	}
	kinds, p = steps(countered.ID)
	if why := p.doc.Find(`[data-kind="not_redeemed"] [data-label="Why"]`).Text(); !strings.Contains(why, "answered it with an edited call ("+counter.ID+")") {
		t.Errorf("countered call: %v %q", kinds, why)
	}
	// A revoked grant: the redemption tried after it is refused, and the
	// call says no redemption was accepted.
	revoked := e.submit("agent:billing", "payments-host", `{"tool":"payments.refund","target":"invoice:INV-3","args":{"amount_minor":7,"currency":"USD","reason_code":"duplicate"}}`)
	approved, err := e.q.Approve(ctx, "alice", audit.ChannelCLI, revoked.ID, revoked.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.q.RevokeGrant(ctx, "bob", audit.ChannelWeb, revoked.ID, "wrong invoice"); err != nil {
		t.Fatal(err)
	}
	if r, err := e.q.Redeem(ctx, agentBilling, []byte(`{"grant":"`+approved.Grant+`","call":{"tool":"payments.refund","target":"invoice:INV-3","args":{"amount_minor":7,"currency":"USD","reason_code":"duplicate"}}}`)); err != nil || r.Accepted {
		t.Fatalf("redeem a revoked grant: %v %+v", err, r)
	}
	kinds, p = steps(revoked.ID)
	if w := "proposed decided granted revoked refused not_redeemed proof"; strings.Join(kinds, " ") != w {
		t.Errorf("revoked lifecycle %v, want %s", kinds, w)
	}
	if why := p.doc.Find(`[data-kind="not_redeemed"] [data-label="Why"]`).Text(); !strings.Contains(why, "revoked") {
		t.Errorf("revoked call: why %q", why)
	}
}

func TestHistoryOutcomeFilterAndMetrics(t *testing.T) {
	e := newConsoleEnv(t)
	ctx := context.Background()
	e.addUser("alice", account.RoleOperator, "pw-alice")
	e.addUser("bob", account.RoleOperator, "pw-bob")
	c1 := e.redeemedCall("INV-1")
	c2 := e.redeemedCall("INV-2")
	if _, err := e.q.ReportOutcome(ctx, agentBilling, c2.ID, queue.OutcomeSucceeded, ""); err != nil {
		t.Fatal(err)
	}
	e.expireLeases()
	b := e.browser()
	b.login("bob", "pw-bob")
	p := b.get("/history?outcome=unresolved")
	if rows := p.find("history-row"); rows.Length() != 1 || rows.AttrOr("data-call", "") != c1.ID || p.find("row-outcome").Text() != "lease_expired" {
		t.Errorf("unresolved history: %d rows", rows.Length())
	}
	if bad := b.get("/history?outcome=ran"); bad.status != http.StatusBadRequest {
		t.Errorf("an unknown outcome filter: %d", bad.status)
	}
	metrics := func() string {
		res, err := http.Get(e.url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return string(body)
	}
	m := metrics()
	for _, want := range []string{"countersign_unresolved_calls 1", "countersign_leases_expired_total 1",
		`countersign_outcomes_total{late="false",status="succeeded"} 1`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if _, err := e.q.Resolve(ctx, "bob", audit.ChannelWeb, c1.ID, "not_executed", "checked", ""); err != nil {
		t.Fatal(err)
	}
	m = metrics()
	for _, want := range []string{"countersign_unresolved_calls 0", `countersign_resolutions_total{verdict="not_executed"} 1`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if p := b.get("/history?outcome=not_executed"); p.find("row-verdict").Text() != "resolved: not_executed" {
		t.Errorf("verdict column %q", p.find("row-verdict").Text())
	}
}

func (e *consoleEnv) loadCall(id string) *queue.Call {
	e.t.Helper()
	c, err := e.q.Call(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// TestOwnersDoNotResolveInTheConsole: an owner of the agent sees no
// resolve form on the Unresolved page or the call page, says why, and a
// resolution posted anyway is refused 403 owner.
func TestOwnersDoNotResolveInTheConsole(t *testing.T) {
	e := newConsoleEnv(t)
	ctx := context.Background()
	e.addUser("alice", account.RoleOperator, "pw-alice")
	e.addUser("olga", account.RoleOperator, "pw-olga")
	owned := queue.Principal{Actor: agentBilling.Actor, Audience: agentBilling.Audience, TokenID: "tok_owned", Owners: []string{"olga"}}
	body := `{"tool":"payments.refund","target":"invoice:INV-9","args":{"amount_minor":1299,"currency":"USD","reason_code":"duplicate"}}`
	c, _, err := e.q.Submit(ctx, owned, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if c, err = e.q.Approve(ctx, "alice", audit.ChannelCLI, c.ID, c.Digest); err != nil {
		t.Fatal(err)
	}
	r, err := e.q.Redeem(ctx, owned, []byte(`{"grant":"`+c.Grant+`","call":`+body+`}`))
	if err != nil || !r.Accepted {
		t.Fatalf("redeem: %v %+v", err, r)
	}
	e.expireLeases()

	olga := e.browser()
	olga.login("olga", "pw-olga")
	p := olga.get("/unresolved")
	if p.find("unresolved-card").Length() != 1 || p.find("resolve-form").Length() != 0 || p.find("owned-by-you").Length() != 1 {
		t.Errorf("the owner sees %d cards, %d forms, %d owner notes; want 1, 0, 1",
			p.find("unresolved-card").Length(), p.find("resolve-form").Length(), p.find("owned-by-you").Length())
	}
	cp := olga.get("/calls/" + c.ID)
	if cp.find("resolve-form").Length() != 0 || cp.find("owned-by-you-resolve").Length() != 1 {
		t.Errorf("the owner's call page: %d forms, %d owner notes; want 0, 1", cp.find("resolve-form").Length(), cp.find("owned-by-you-resolve").Length())
	}
	rp := olga.post("/calls/"+c.ID+"/resolve", url.Values{"csrf": {olga.csrf()}, "verdict": {"not_executed"}, "note": {"not in the ledger"}})
	if rp.status != http.StatusForbidden || !strings.Contains(rp.body, "cannot resolve it") {
		t.Errorf("the owner's resolution: %d %q, want 403 owner", rp.status, rp.body)
	}
	if got, _ := e.q.Call(ctx, c.ID); got.Resolution != nil {
		t.Errorf("the owner's resolution was recorded: %+v", got.Resolution)
	}
	alice := e.browser()
	alice.login("alice", "pw-alice")
	if ap := alice.get("/unresolved"); ap.find("resolve-form").Length() != 1 {
		t.Errorf("another operator sees %d forms, want 1", ap.find("resolve-form").Length())
	}
}
