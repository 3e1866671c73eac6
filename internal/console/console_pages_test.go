package console

import (
	"slices"

	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/queue"
)

// roleUsers are one account per role, all with the same password.
var roleUsers = []struct {
	name string
	role account.Role
}{
	{"olivia", account.RoleOperator},
	{"aude", account.RoleAuditor},
	{"adam", account.RoleAdmin},
}

const rolePassword = "correct horse battery"

func addRoleUsers(e *consoleEnv) {
	for _, u := range roleUsers {
		e.addUser(u.name, u.role, rolePassword)
	}
}

// blockPair makes (actor, tool) hit the retry cap.
func blockPair(t *testing.T, e *consoleEnv, actor, audience string) {
	t.Helper()
	for range queue.RetryLimit {
		_, _, err := e.q.Submit(context.Background(), queue.Principal{Actor: actor, Audience: audience},
			[]byte(`{"tool":"payments.refund","target":"invoice:INV-1","args":{"amount_minor":"a lot"}}`))
		if err == nil {
			t.Fatal("an invalid proposal was accepted")
		}
	}
}

func TestQueuePageByRole(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	older := e.submit("agent:billing-bot", "payments-host", conRefundBody)
	e.clock.Advance(5 * time.Second)
	newer := e.submit("agent:deployer", "deploy-host", conDeployBody)
	blockPair(t, e, "agent:flaky", "payments-host")

	for _, u := range roleUsers {
		t.Run(string(u.role), func(t *testing.T) {
			b := e.browser()
			b.login(u.name, rolePassword)
			p := b.get("/?sort=newest")
			if p.status != http.StatusOK {
				t.Fatalf("GET / = %d", p.status)
			}
			cards := p.find("call-card")
			if cards.Length() != 2 {
				t.Fatalf("cards = %d, want 2", cards.Length())
			}
			if got, _ := cards.First().Attr("data-call"); got != newer.ID {
				t.Errorf("first card = %s, want the newest call %s", got, newer.ID)
			}
			if got, _ := cards.Last().Attr("data-call"); got != older.ID {
				t.Errorf("last card = %s, want %s", got, older.ID)
			}
			first := cards.First()
			for id, want := range map[string]string{
				"card-tool": "releases.deploy", "card-target": "service:checkout", "card-actor": "agent:deployer",
				"card-quorum": "0 of 2 approvals", "card-countdown": "1 h 0 min left",
			} {
				if got := strings.TrimSpace(first.Find(`[data-testid="` + id + `"]`).Text()); got != want {
					t.Errorf("%s = %q, want %q", id, got, want)
				}
			}
			if dt, _ := first.Find(`[data-testid="card-countdown"]`).Attr("datetime"); dt == "" {
				t.Error("the countdown has no datetime for the script")
			}
			decide, view := p.find("card-decide").Length(), p.find("card-view").Length()
			clear := p.find("clear-form").Length()
			if p.find("block").Length() != 1 || !strings.Contains(p.find("block-actor").Text(), "agent:flaky") {
				t.Errorf("blocks = %d (%q), want the agent:flaky block", p.find("block").Length(), p.find("block-actor").Text())
			}
			if u.role.CanDecide() {
				if decide != 2 || view != 0 || clear != 1 {
					t.Errorf("decide links %d, view links %d, clear forms %d; want 2, 0, 1", decide, view, clear)
				}
			} else if decide != 0 || view != 2 || clear != 0 {
				t.Errorf("auditor: decide links %d, view links %d, clear forms %d; want 0, 2, 0", decide, view, clear)
			}
			if got := p.find("nav-admin").Length() == 1; got != (u.role == account.RoleAdmin) {
				t.Errorf("admin link shown = %v for %s", got, u.role)
			}
			if href, _ := p.find("nav-history").Attr("href"); href != "/history" {
				t.Errorf("history link = %q, want /history", href)
			}
			if p.find("connection").Length() != 1 {
				t.Error("no connection indicator")
			}
			if ws, _ := p.find("live").Attr("ws-connect"); ws != "/ws?sort=newest" {
				t.Errorf("ws-connect = %q, want /ws?sort=newest (the page's sort)", ws)
			}
			logout := p.doc.Find(`form[data-testid="logout-form"]`)
			if m, _ := logout.Attr("method"); m != "post" || logout.Find(`input[name="csrf"]`).Length() != 1 {
				t.Error("logout is not a POST form with a CSRF token")
			}
			if p.header.Get("Content-Security-Policy") == "" || p.header.Get("Cache-Control") != "no-store" {
				t.Errorf("headers: CSP %q, Cache-Control %q", p.header.Get("Content-Security-Policy"), p.header.Get("Cache-Control"))
			}
			assertNoInlineScript(t, p)
		})
	}
}

// assertNoInlineScript checks that a page has no inline script or style,
// which the CSP would block.
func assertNoInlineScript(t *testing.T, p *htmlPage) {
	t.Helper()
	p.doc.Find("script").Each(func(_ int, s *goquerySelection) {
		if src, _ := s.Attr("src"); src == "" || strings.TrimSpace(s.Text()) != "" {
			t.Errorf("inline script: %q", s.Text())
		}
	})
	if n := p.doc.Find("[style], style").Length(); n > 0 {
		t.Errorf("%d inline styles", n)
	}
	for _, attr := range []string{"onclick", "onload", "onerror", "onsubmit", "hx-on"} {
		if n := p.doc.Find("[" + attr + "]").Length(); n > 0 {
			t.Errorf("%d elements with %s", n, attr)
		}
	}
}

func TestCallPageShowsEverything(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	call := e.submit("agent:billing-bot", "payments-host", conRefundBody)
	b := e.browser()
	b.login("olivia", rolePassword)
	p := b.get("/calls/" + call.ID)
	if p.status != http.StatusOK {
		t.Fatalf("GET call = %d", p.status)
	}
	for id, want := range map[string]string{
		"call-tool": "payments.refund", "call-target": "invoice:INV-1042", "call-actor": "agent:billing-bot",
		"call-audience": "payments-host", "status-value": "pending", "quorum": "0 of 1",
	} {
		if got := strings.TrimSpace(p.find(id).Text()); got != want {
			t.Errorf("%s = %q, want %q", id, got, want)
		}
	}
	var groups []string
	p.find("digest").Find("span").Each(func(_ int, s *goquerySelection) { groups = append(groups, s.Text()) })
	if strings.Join(groups, "") != call.Digest || len(groups) != 16 {
		t.Errorf("digest groups %q, want %s in 16 groups of four", groups, call.Digest)
	}
	for _, g := range groups {
		if len(g) != 4 {
			t.Errorf("digest group %q is not four characters", g)
		}
	}
	if got := strings.TrimSpace(p.find("rationale-label").Text()); !strings.Contains(got, "agent's own words") {
		t.Errorf("rationale label = %q", got)
	}
	if !strings.Contains(p.find("rationale").Text(), "The customer asked for a refund") {
		t.Error("rationale not shown")
	}
	money := p.doc.Find(`[data-pointer="/amount_minor"]`)
	if got := money.Find(`[data-testid="arg-money"]`).Text(); got != "USD 1,299.99" {
		t.Errorf("money = %q, want USD 1,299.99", got)
	}
	if got := money.Find(`[data-testid="arg-value"]`).Text(); got != "129999" {
		t.Errorf("raw amount = %q, want 129999", got)
	}
	notes := p.doc.Find(`[data-pointer="/notes"]`)
	if notes.Find(`[data-testid="not-bound"]`).Length() != 1 {
		t.Error("the informational notes are not labelled not bound")
	}
	// "not bound" explains itself on hover and to a screen reader.
	if title, _ := notes.Find(`[data-testid="not-bound"]`).Attr("title"); !strings.Contains(title, "without a new approval") ||
		!strings.Contains(notes.Find(`[data-testid="not-bound-why"]`).Text(), "left out of the digest") {
		t.Errorf("not bound does not explain itself: title %q", title)
	}
	if got := p.find("digest-binds").Text(); got != "An approval lets the agent run exactly this call; any change needs a new approval." {
		t.Errorf("the line under the digest = %q", got)
	}
	if p.doc.Find(`[data-pointer="/currency"] [data-testid="not-bound"]`).Length() != 0 {
		t.Error("a bound member is labelled not bound")
	}
	if got, _ := p.doc.Find(`input[data-testid="approve-digest"]`).Attr("value"); got != call.Digest {
		t.Errorf("approve form digest = %q, want %q", got, call.Digest)
	}
	btn := p.find("approve")
	if _, disabled := btn.Attr("disabled"); !disabled {
		t.Error("the approve button is not rendered disabled")
	}
	if arm, _ := btn.Attr("data-arm"); arm != "1000" {
		t.Errorf("approve data-arm = %q, want 1000", arm)
	}
	// The tool offers preset reasons, so the text is optional; the server
	// still refuses a denial with neither (TestDenyReasons).
	if p.find("deny-preset").Length() != 3 || p.find("deny-reason").Length() != 1 {
		t.Errorf("deny form: %d presets, %d reason fields; want the tool's 3 and a text", p.find("deny-preset").Length(), p.find("deny-reason").Length())
	}
	if ws, _ := p.find("live").Attr("ws-connect"); ws != "/ws?call="+call.ID {
		t.Errorf("ws-connect = %q", ws)
	}
	assertNoInlineScript(t, p)
}

func TestCallPageNestedArguments(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	call := e.submit("agent:mailer", "mail-host",
		`{"tool":"email.send","target":"mailbox:support@example.com","args":{"to":[{"address":"a@b.example","name":"Ann"},{"address":"c@d.example"}],"subject":"Hello","body":""}}`)
	search := e.submit("agent:search", "search-host",
		`{"tool":"search.query","target":"index:tickets","args":{"query":"refund","filter":{"status":"open","tags":["vip","billing"]},"limit":100}}`)
	b := e.browser()
	b.login("aude", rolePassword)

	p := b.get("/calls/" + call.ID)
	for ptr, want := range map[string]string{
		"/to/0/address": "a@b.example", "/to/0/name": "Ann", "/to/1/address": "c@d.example", "/subject": "Hello",
		"/body": "(empty string)",
	} {
		got := p.doc.Find(`[data-pointer="` + ptr + `"] > [data-testid="arg-value"]`).Text()
		if strings.TrimSpace(got) != want {
			t.Errorf("%s = %q, want %q", ptr, got, want)
		}
	}
	if n := p.doc.Find(`[data-pointer="/to"] > ol > li`).Length(); n != 2 {
		t.Errorf("to has %d items shown, want 2", n)
	}
	p = b.get("/calls/" + search.ID)
	for ptr, want := range map[string]string{
		"/filter/status": "open", "/filter/tags/0": "vip", "/filter/tags/1": "billing", "/limit": "100",
	} {
		got := p.doc.Find(`[data-pointer="` + ptr + `"] > [data-testid="arg-value"]`).Text()
		if strings.TrimSpace(got) != want {
			t.Errorf("%s = %q, want %q", ptr, got, want)
		}
	}
	if p.find("decide").Length() != 0 || p.find("approve-form").Length() != 0 || p.find("deny-form").Length() != 0 {
		t.Error("an auditor sees decide controls")
	}
}

func TestAuditorCannotDecide(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	call := e.submit("agent:billing-bot", "payments-host", conRefundBody)
	blockPair(t, e, "agent:flaky", "payments-host")
	b := e.browser()
	b.login("aude", rolePassword)
	tok := b.csrf()
	for _, req := range []struct {
		path string
		form map[string][]string
	}{
		{"/calls/" + call.ID + "/approve", map[string][]string{"csrf": {tok}, "digest": {call.Digest}}},
		{"/calls/" + call.ID + "/deny", map[string][]string{"csrf": {tok}, "reason": {"no"}}},
		{"/blocks/clear", map[string][]string{"csrf": {tok}, "actor": {"agent:flaky"}, "tool": {"payments.refund"}}},
		{"/admin/users", map[string][]string{"csrf": {tok}, "name": {"mallory"}, "role": {"admin"}, "password": {"0123456789ab"}}},
	} {
		if p := b.post(req.path, req.form); p.status != http.StatusForbidden {
			t.Errorf("auditor POST %s = %d, want 403", req.path, p.status)
		}
	}
	if p := b.get("/admin"); p.status != http.StatusForbidden {
		t.Errorf("auditor GET /admin = %d, want 403", p.status)
	}
	got, _ := e.q.Call(context.Background(), call.ID)
	if got.Status != queue.StatusPending || len(got.Approvals) != 0 {
		t.Errorf("after refused decisions: %s with %d approvals", got.Status, len(got.Approvals))
	}
	if blocks, _ := e.q.Blocks(context.Background()); len(blocks) != 1 {
		t.Errorf("blocks = %d, want 1 (not cleared)", len(blocks))
	}
	if _, err := accountsOf(e.db).UserByName(context.Background(), "mallory"); err == nil {
		t.Error("an auditor added an account")
	}
}

func TestOperatorClearsBlock(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	blockPair(t, e, "agent:flaky", "payments-host")
	b := e.browser()
	b.login("olivia", rolePassword)
	p := b.get("/")
	form := p.doc.Find(`form[data-testid="clear-form"]`)
	actor, _ := form.Find(`input[name="actor"]`).Attr("value")
	tool, _ := form.Find(`input[name="tool"]`).Attr("value")
	tok, _ := form.Find(`input[name="csrf"]`).Attr("value")
	if actor != "agent:flaky" || tool != "payments.refund" {
		t.Fatalf("clear form carries %q, %q", actor, tool)
	}
	p = b.post("/blocks/clear", map[string][]string{"csrf": {tok}, "actor": {actor}, "tool": {tool}})
	if p.status != http.StatusSeeOther {
		t.Fatalf("clear = %d, want 303", p.status)
	}
	if blocks, _ := e.q.Blocks(context.Background()); len(blocks) != 0 {
		t.Errorf("blocks after clear = %d", len(blocks))
	}
	p = b.post("/blocks/clear", map[string][]string{"csrf": {tok}, "actor": {actor}, "tool": {tool}})
	if p.status != http.StatusNotFound || p.find("queue-error").Length() != 1 {
		t.Errorf("clearing again = %d with error %q; want 404 explained", p.status, p.find("queue-error").Text())
	}
}

func TestAdminPage(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	b := e.browser()
	b.login("adam", rolePassword)
	p := b.get("/admin")
	if p.status != http.StatusOK || p.find("user-row").Length() != 3 {
		t.Fatalf("admin page %d with %d users", p.status, p.find("user-row").Length())
	}
	tok := b.csrf()
	p = b.post("/admin/users", map[string][]string{"csrf": {tok}, "name": {"nina"}, "role": {"operator"}, "password": {"a fine password"}})
	if p.status != http.StatusOK || p.find("admin-notice").Length() != 1 {
		t.Fatalf("add user = %d: %s", p.status, p.find("admin-error").Text())
	}
	u, err := accountsOf(e.db).UserByName(context.Background(), "nina")
	if err != nil || u.Role != account.RoleOperator {
		t.Fatalf("nina = %+v, %v", u, err)
	}
	if prm, _, _, err := account.ParseHash(u.PasswordHash); err != nil || !prm.AtLeast(account.MinParams) {
		t.Errorf("stored hash params %+v, %v: want at least %+v", prm, err, account.MinParams)
	}
	for _, bad := range []map[string][]string{
		{"csrf": {tok}, "name": {"nina"}, "role": {"operator"}, "password": {"a fine password"}},
		{"csrf": {tok}, "name": {"bad name"}, "role": {"operator"}, "password": {"a fine password"}},
		{"csrf": {tok}, "name": {"zed"}, "role": {"root"}, "password": {"a fine password"}},
		{"csrf": {tok}, "name": {"zed"}, "role": {"operator"}, "password": {"short"}},
	} {
		if p := b.post("/admin/users", bad); p.status < 400 || p.find("admin-error").Length() != 1 {
			t.Errorf("add %v = %d, want an explained refusal", bad["name"], p.status)
		}
	}
	p = b.post("/admin/tokens", map[string][]string{"csrf": {tok}, "actor": {"agent:new"}, "audience": {"payments-host"}, "note": {"test"}})
	secret := strings.TrimSpace(p.find("new-token-secret").Text())
	if p.status != http.StatusOK || !strings.HasPrefix(secret, "cst_") {
		t.Fatalf("create token = %d, secret %q", p.status, secret)
	}
	tk, err := accountsOf(e.db).TokenBySecret(context.Background(), secret)
	if err != nil || tk.Actor != "agent:new" {
		t.Fatalf("token lookup = %+v, %v", tk, err)
	}
	p = b.post("/admin/tokens/"+tk.ID+"/revoke", map[string][]string{"csrf": {tok}})
	if p.status != http.StatusOK {
		t.Errorf("revoke = %d", p.status)
	}
	if _, err := accountsOf(e.db).TokenBySecret(context.Background(), secret); err == nil {
		t.Error("a revoked token still authenticates")
	}
	if p := b.post("/admin/users/adam/disable", map[string][]string{"csrf": {tok}}); p.status != http.StatusConflict {
		t.Errorf("disabling oneself = %d, want 409", p.status)
	}
}

// A call stored without validation (a tampered database, a future schema)
// holding markup in every field renders as inert text.
func TestHostileCallRendersAsText(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	payloads := []string{
		`<script>alert(1)</script>`,
		`<img src=x onerror=alert(2)>`,
		`javascript:alert(3)`,
		`"><svg onload=alert(4)>`,
		`'><iframe srcdoc="<script>alert(5)</script>">`,
	}
	args := canonical.Object{}
	for i, pl := range payloads {
		args = append(args, canonical.Member{Name: pl, Value: pl + string(rune('a'+i))})
	}
	args, err := canonical.NewObject(args...)
	if err != nil {
		t.Fatal(err)
	}
	nested, _ := canonical.NewObject(canonical.Member{Name: "href", Value: payloads[2]})
	args = append(args, canonical.Member{Name: "~link", Value: []any{nested, payloads[3]}})
	call := e.insertRaw(payloads[3], "x.y", payloads[0], args, payloads[1])

	for _, who := range []string{"olivia", "aude"} {
		b := e.browser()
		b.login(who, rolePassword)
		for _, path := range []string{"/", "/calls/" + call.ID} {
			p := b.get(path)
			if p.status != http.StatusOK {
				t.Fatalf("%s as %s = %d", path, who, p.status)
			}
			if n := p.doc.Find("script").Length(); n != 5 {
				t.Errorf("%s: %d script elements, want the 5 static ones", path, n)
			}
			if n := p.doc.Find("img, svg, iframe").Length(); n != 0 {
				t.Errorf("%s: %d injected elements", path, n)
			}
			p.doc.Find("*").Each(func(_ int, s *goquerySelection) {
				for _, a := range s.Nodes[0].Attr {
					if strings.HasPrefix(a.Key, "on") {
						t.Errorf("%s: injected handler %s=%q", path, a.Key, a.Val)
					}
					if (a.Key == "href" || a.Key == "src" || a.Key == "action") && strings.Contains(strings.ToLower(a.Val), "javascript:") {
						t.Errorf("%s: javascript URL in %s", path, a.Key)
					}
				}
			})
			for _, pl := range payloads[:4] {
				if !strings.Contains(p.doc.Text(), pl) && path != "/" {
					t.Errorf("%s: payload %q is not shown as text", path, pl)
				}
			}
			if path == "/" {
				if got := p.find("card-target").Text(); got != payloads[0] {
					t.Errorf("card target = %q, want the payload as text", got)
				}
				if got := p.find("card-actor").Text(); got != payloads[3] {
					t.Errorf("card actor = %q, want the payload as text", got)
				}
			}
		}
	}
	b := e.browser()
	b.login("olivia", rolePassword)
	p := b.get("/calls/" + call.ID)
	if got := p.find("call-target").Text(); got != payloads[0] {
		t.Errorf("target = %q", got)
	}
	if got := p.doc.Find(`.rationale .agent`).Text(); got != payloads[1] {
		t.Errorf("rationale = %q", got)
	}
	keys := map[string]bool{}
	p.find("arg-key").Each(func(_ int, s *goquerySelection) { keys[s.Text()] = true })
	for _, pl := range payloads {
		if !keys[pl] {
			t.Errorf("key %q not shown as text (keys %v)", pl, keys)
		}
	}
	if got := p.doc.Find(`[data-pointer="/~0link/0/href"] > [data-testid="arg-value"]`).Text(); got != payloads[2] {
		t.Errorf("nested javascript: value = %q", got)
	}
	// Every approve on this page is bound to the stored digest. The call's
	// tool (x.y) is in no tools file, so nothing approves it: the page
	// says so and offers only a denial.
	p.doc.Find(`input[name="digest"]`).Each(func(_ int, sel *goquerySelection) {
		if d, _ := sel.Attr("value"); d != call.Digest {
			t.Errorf("approve digest = %q, want %q", d, call.Digest)
		}
	})
	if p.find("tool-changed").Length() != 1 || p.find("approve-form").Length() != 0 || p.find("deny-form").Length() != 1 {
		t.Errorf("a call of an unknown tool: tool-changed notice %d, approve forms %d, deny forms %d; want 1, 0, 1",
			p.find("tool-changed").Length(), p.find("approve-form").Length(), p.find("deny-form").Length())
	}
}

func TestLongValueShownWhole(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	long := strings.Repeat("0123456789abcdef", 640) // 10 KiB
	body := `{"tool":"email.send","target":"mailbox:ops@example.com","args":{"to":[{"address":"x@y.example"}],"subject":"s","body":"` + long + `"}}`
	call := e.submit("agent:mailer", "mail-host", body)
	b := e.browser()
	b.login("olivia", rolePassword)
	p := b.get("/calls/" + call.ID)
	got := p.doc.Find(`[data-pointer="/body"] > [data-testid="arg-long"] > [data-testid="arg-value"]`).Text()
	if got != long {
		t.Errorf("a 10 KiB value shows %d bytes, want %d, unchanged", len(got), len(long))
	}
	// It is collapsed (by the page's script) with its length and a "show
	// all"; the whole value is in the page.
	if n, _ := p.doc.Find(`[data-pointer="/body"] [data-testid="arg-long"]`).Attr("data-length"); n != "10240" {
		t.Errorf("the long value's length reads %q, want 10240", n)
	}
	if !strings.Contains(p.doc.Find(`[data-pointer="/body"] [data-testid="show-all"]`).Text(), "10240 characters") {
		t.Error("no show-all with the length")
	}
	// Short members come before the long one.
	var order []string
	p.doc.Find(`[data-testid="args"] > ul > li`).Each(func(_ int, s *goquery.Selection) {
		ptr, _ := s.Attr("data-pointer")
		order = append(order, ptr)
	})
	if !slices.Equal(order, []string{"/subject", "/to", "/body"}) {
		t.Errorf("member order %v, want the short subject, the array, then the long body", order)
	}
	if !strings.Contains(e.cssForTest(), "overflow-wrap: anywhere") {
		t.Error("the stylesheet does not wrap long values")
	}
}

func TestConsoleErrorPages(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	b := e.browser()
	b.login("olivia", rolePassword)
	for _, path := range []string{"/calls/call_nosuchcall", "/no/such/page", "/history/calls/call_nosuchcall"} {
		p := b.get(path)
		if p.status != http.StatusNotFound {
			t.Errorf("GET %s = %d, want 404", path, p.status)
		}
		if !strings.HasPrefix(p.header.Get("Content-Type"), "text/html") || p.find("error-status").Length() != 1 {
			t.Errorf("GET %s: %s page without the error view", path, p.header.Get("Content-Type"))
		}
		for _, h := range []string{"Content-Security-Policy", "X-Frame-Options", "X-Content-Type-Options", "Referrer-Policy"} {
			if p.header.Get(h) == "" {
				t.Errorf("GET %s: no %s header", path, h)
			}
		}
		if p.find("nav").Length() != 1 {
			t.Errorf("GET %s: the error page has no navigation for a logged-in user", path)
		}
	}
	if p := b.get("/calls/x/approve"); p.status != http.StatusMethodNotAllowed && p.status != http.StatusNotFound {
		t.Errorf("GET on a decide route = %d, want 405 or 404", p.status)
	}
	anon := e.browser()
	if p := anon.get("/calls/whatever"); p.status != http.StatusSeeOther || p.header.Get("Location") != "/login" {
		t.Errorf("anonymous GET call = %d → %q, want 303 → /login", p.status, p.header.Get("Location"))
	}
	p := anon.get("/static/nope.js")
	if p.status != http.StatusNotFound || p.header.Get("Content-Security-Policy") == "" {
		t.Errorf("missing asset = %d, CSP %q", p.status, p.header.Get("Content-Security-Policy"))
	}
}

func TestIntegersShownExactly(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	args, _ := canonical.NewObject(
		canonical.Member{Name: "max", Value: int64(9007199254740991)},
		canonical.Member{Name: "min", Value: int64(-9007199254740991)},
		canonical.Member{Name: "zero", Value: int64(0)},
		canonical.Member{Name: "t", Value: true},
		canonical.Member{Name: "n", Value: nil},
		canonical.Member{Name: "s", Value: "9007199254740993"},
	)
	call := e.insertRaw("agent:x", "x.y", "t:1", args, "")
	b := e.browser()
	b.login("olivia", rolePassword)
	p := b.get("/calls/" + call.ID)
	for ptr, want := range map[string]string{
		"/max": "9007199254740991", "/min": "-9007199254740991", "/zero": "0", "/t": "true", "/n": "null",
		"/s": "9007199254740993",
	} {
		got := p.doc.Find(`[data-pointer="` + ptr + `"] > [data-testid="arg-value"]`).Text()
		if strings.TrimSpace(got) != want {
			t.Errorf("%s = %q, want %q", ptr, got, want)
		}
	}
	if kind := p.doc.Find(`[data-pointer="/s"] .kind`).Text(); kind != "string" {
		t.Errorf("a numeric string is labelled %q, want string", kind)
	}
	if p.find("tool-unknown").Length() != 1 {
		t.Error("a call of a tool that is not in the tools file is not marked")
	}
}

// Each page, for each role: who may open it and which controls it shows.
func TestPagesPerRole(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	call := e.submit("agent:billing-bot", "payments-host", conRefundBody)
	tests := []struct {
		user                      string
		adminStatus               int
		decide, approve, adminNav bool
	}{
		{"olivia", http.StatusForbidden, true, true, false},
		{"aude", http.StatusForbidden, false, false, false},
		{"adam", http.StatusOK, true, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.user, func(t *testing.T) {
			b := e.browser()
			b.login(tt.user, rolePassword)
			if p := b.get("/admin"); p.status != tt.adminStatus {
				t.Errorf("GET /admin = %d, want %d", p.status, tt.adminStatus)
			}
			p := b.get("/calls/" + call.ID)
			if p.status != http.StatusOK {
				t.Fatalf("GET call = %d", p.status)
			}
			if got := p.find("decide").Length() == 1; got != tt.decide {
				t.Errorf("decide controls shown = %v, want %v", got, tt.decide)
			}
			if got := p.find("approve-form").Length() == 1; got != tt.approve {
				t.Errorf("approve form shown = %v, want %v", got, tt.approve)
			}
			if got := p.find("nav-admin").Length() == 1; got != tt.adminNav {
				t.Errorf("admin link shown = %v, want %v", got, tt.adminNav)
			}
			if got := strings.TrimSpace(p.find("whoami").Text()); !strings.HasPrefix(got, tt.user) {
				t.Errorf("whoami = %q", got)
			}
			if p := b.get("/login"); p.status != http.StatusSeeOther {
				t.Errorf("GET /login while logged in = %d, want 303 to the queue", p.status)
			}
		})
	}
	anon := e.browser()
	p := anon.get("/login")
	if p.status != http.StatusOK || p.find("login-form").Length() != 1 || p.find("nav").Length() != 0 {
		t.Errorf("login page: %d, form %d, nav %d", p.status, p.find("login-form").Length(), p.find("nav").Length())
	}
	assertNoInlineScript(t, p)
	for _, path := range []string{"/", "/admin", "/calls/" + call.ID} {
		if p := anon.get(path); p.status != http.StatusSeeOther || p.header.Get("Location") != "/login" {
			t.Errorf("anonymous GET %s = %d → %q, want 303 → /login", path, p.status, p.header.Get("Location"))
		}
	}
}
