package console

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/db"
	"github.com/countersign/countersign/internal/grant"
	"github.com/countersign/countersign/internal/present"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/server"
	"github.com/countersign/countersign/internal/testkit"
	"github.com/countersign/countersign/internal/tools"
	"github.com/countersign/countersign/web/templates"
)

var (
	histBilling  = queue.Principal{Actor: "agent:billing-bot", Audience: "payments-host"}
	histDeployer = queue.Principal{Actor: "agent:deployer", Audience: "deploy-host"}
	histCleaner  = queue.Principal{Actor: "agent:cleaner", Audience: "files-host"}
)

func histRefund(invoice int, notes string) string {
	if notes != "" {
		notes = fmt.Sprintf(`,"notes":%q`, notes)
	}
	return fmt.Sprintf(`{"tool":"payments.refund","target":"invoice:INV-%d","args":{"amount_minor":%d,"currency":"USD","reason_code":"duplicate"%s},"rationale":"The customer was charged twice."}`,
		invoice, 100+invoice, notes)
}

func histDeploy(ticket int) string {
	return fmt.Sprintf(`{"tool":"releases.deploy","target":"service:checkout","args":{"version":"v1.4.2","environment":"production","change_ticket":"CHG-%04d"}}`, ticket)
}

func histDelete(name string) string {
	return fmt.Sprintf(`{"tool":"files.delete","target":"file:/srv/shared/%s","args":{"reason":"stale"}}`, name)
}

func (e *consoleEnv) submitAs(who queue.Principal, body string) *queue.Call {
	e.t.Helper()
	return e.submit(who.Actor, who.Audience, body)
}

func (e *consoleEnv) approve(op, channel string, c *queue.Call) *queue.Call {
	e.t.Helper()
	testkit.SeedUsers(e.t, e.db.Accounts(), account.RoleOperator, op)
	// As an operator who typed what the tool asks and read any warning.
	out, err := e.q.ApproveWith(context.Background(), queue.ApproveInput{Operator: op, Channel: channel, CallID: c.ID, Digest: c.Digest,
		Confirm: c.Target, AcceptWarnings: true, Presented: e.q.Present(present.PageCall, op, c)})
	if err != nil {
		e.t.Fatalf("approve %s as %s: %v", c.ID, op, err)
	}
	return out
}

func (e *consoleEnv) deny(op, channel string, c *queue.Call, reason string) {
	e.t.Helper()
	testkit.SeedUsers(e.t, e.db.Accounts(), account.RoleOperator, op)
	if _, err := e.q.Deny(context.Background(), op, channel, c.ID, reason); err != nil {
		e.t.Fatalf("deny %s as %s: %v", c.ID, op, err)
	}
}

// redeem presents the call's grant with the given target.
func (e *consoleEnv) redeem(who queue.Principal, c *queue.Call, target string) *queue.Redemption {
	e.t.Helper()
	args, err := canonical.Encode(c.Args)
	if err != nil {
		e.t.Fatal(err)
	}
	body := fmt.Sprintf(`{"grant":%q,"call":{"tool":%q,"target":%q,"args":%s}}`, c.Grant, c.Tool, target, args)
	r, err := e.q.Redeem(context.Background(), who, []byte(body))
	if err != nil {
		e.t.Fatalf("redeem %s: %v", c.ID, err)
	}
	return r
}

// histCall is a call of the filter data set with what the filters read.
type histCall struct {
	call     *queue.Call
	actor    string
	tool     string
	status   string
	deciders [][2]string // operator, channel
}

// historyFilterSet stores eight calls, ten seconds apart, with every status the
// filters tell apart, decided by three operators through two channels.
func historyFilterSet(t *testing.T, e *consoleEnv) []histCall {
	t.Helper()
	var out []histCall
	add := func(who queue.Principal, body, status string, decide func(c *queue.Call) [][2]string) {
		c := e.submitAs(who, body)
		h := histCall{call: c, actor: who.Actor, tool: c.Tool, status: status}
		if decide != nil {
			h.deciders = decide(c)
		}
		out = append(out, h)
		e.clock.Advance(10 * time.Second)
	}
	add(histBilling, histRefund(1, ""), "approved", func(c *queue.Call) [][2]string {
		e.approve("olivia", audit.ChannelWeb, c)
		return [][2]string{{"olivia", "web"}}
	})
	add(histBilling, histRefund(2, ""), "denied", func(c *queue.Call) [][2]string {
		e.deny("bob", audit.ChannelCLI, c, "not ours")
		return [][2]string{{"bob", "cli"}}
	})
	add(histDeployer, histDeploy(1234), "approved", func(c *queue.Call) [][2]string {
		e.approve("olivia", audit.ChannelWeb, c)
		e.approve("bob", audit.ChannelCLI, c)
		return [][2]string{{"olivia", "web"}, {"bob", "cli"}}
	})
	add(histDeployer, histDeploy(5678), "pending", nil)
	add(histCleaner, histDelete("a.txt"), "approved", func(c *queue.Call) [][2]string {
		e.approve("carol", audit.ChannelCLI, c)
		return [][2]string{{"carol", "cli"}}
	})
	add(histBilling, histRefund(6, ""), "pending", nil)
	add(histCleaner, histDelete("b.txt"), "denied", func(c *queue.Call) [][2]string {
		e.deny("olivia", audit.ChannelWeb, c, "keep it")
		return [][2]string{{"olivia", "web"}}
	})
	add(histBilling, histRefund(8, ""), "approved", func(c *queue.Call) [][2]string {
		e.approve("bob", audit.ChannelWeb, c)
		return [][2]string{{"bob", "web"}}
	})
	return out
}

// historyRowIDs lists the history rows' call ids in page order.
func historyRowIDs(p *htmlPage) []string {
	var ids []string
	p.find("history-row").Each(func(_ int, s *goquery.Selection) {
		id, _ := s.Attr("data-call")
		ids = append(ids, id)
	})
	return ids
}

// want lists the ids of the calls keep selects, newest first.
func wantIDsOf(calls []histCall, keep func(h histCall) bool) []string {
	var ids []string
	for i := len(calls) - 1; i >= 0; i-- {
		if keep(calls[i]) {
			ids = append(ids, calls[i].call.ID)
		}
	}
	return ids
}

// decideControlCount counts what would let someone decide on a page.
func decideControlCount(p *htmlPage) int {
	n := 0
	for _, id := range []string{"approve", "deny", "approve-form", "deny-form", "decide"} {
		n += p.find(id).Length()
	}
	return n + p.doc.Find(`form[action*="/approve"], form[action*="/deny"], form[action="/blocks/clear"]`).Length()
}

func TestHistoryPageByRole(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	calls := historyFilterSet(t, e)
	all := wantIDsOf(calls, func(histCall) bool { return true })
	for _, u := range roleUsers {
		t.Run(string(u.role), func(t *testing.T) {
			b := e.browser()
			b.login(u.name, rolePassword)
			p := b.get("/history")
			if p.status != http.StatusOK {
				t.Fatalf("GET /history = %d", p.status)
			}
			if got := historyRowIDs(p); !slices.Equal(got, all) {
				t.Errorf("rows %v, want every call newest first %v", got, all)
			}
			if cls, _ := p.find("nav-history").Attr("class"); cls != "active" {
				t.Errorf("the History nav item has class %q, want active", cls)
			}
			if n := decideControlCount(p); n != 0 {
				t.Errorf("the history page has %d decide controls, want none", n)
			}
			for _, h := range calls {
				row := p.doc.Find(`[data-testid="history-row"][data-call="` + h.call.ID + `"]`)
				if got, _ := row.Attr("data-status"); got != h.status {
					t.Errorf("%s: status %q, want %q", h.call.ID, got, h.status)
				}
				if got := strings.TrimSpace(row.Find(`[data-testid="row-actor"]`).Text()); got != h.actor {
					t.Errorf("%s: actor %q, want %q", h.call.ID, got, h.actor)
				}
				var deciders []string
				row.Find(`[data-testid="row-decider"]`).Each(func(_ int, s *goquery.Selection) { deciders = append(deciders, s.Text()) })
				var wantDeciders []string
				for _, d := range h.deciders {
					wantDeciders = append(wantDeciders, d[0])
				}
				// Approvals made in one millisecond are listed by name.
				slices.Sort(deciders)
				slices.Sort(wantDeciders)
				if !slices.Equal(deciders, wantDeciders) {
					t.Errorf("%s: deciders %q, want %q", h.call.ID, deciders, wantDeciders)
				}
				// Each decision reads as words: "approved by bob by click",
				// "denied by olivia (web)".
				var decisions []string
				row.Find(`[data-testid="row-decision"]`).Each(func(_ int, s *goquery.Selection) {
					decisions = append(decisions, strings.Join(strings.Fields(s.Text()), " "))
				})
				for _, d := range h.deciders {
					verb, how := "approved", "("+d[1]+")"
					if h.status == "denied" {
						verb = "denied"
					}
					if verb == "approved" && d[1] == "web" {
						how = "by click"
					}
					if want := verb + " by " + d[0] + " " + how; !slices.Contains(decisions, want) {
						t.Errorf("%s: the decisions read %q, want %q among them", h.call.ID, decisions, want)
					}
				}
				href, ok := row.Find(`a[href*="` + h.call.ID + `"]`).Attr("href")
				if !ok {
					t.Fatalf("%s: no link to the call in its row", h.call.ID)
				}
				tp := b.get(href)
				if tp.status != http.StatusOK || tp.find("timeline").Length() != 1 {
					t.Fatalf("GET %s = %d, timeline %d", href, tp.status, tp.find("timeline").Length())
				}
				if got := tp.find("call-id").Text(); got != h.call.ID {
					t.Errorf("GET %s shows call %q", href, got)
				}
				if n := decideControlCount(tp); n != 0 {
					t.Errorf("the timeline of a %s call has %d decide controls, want none", h.status, n)
				}
			}
			for id, prefix := range map[string]string{
				"export-jsonl": "/history/export/audit.jsonl", "export-calls-jsonl": "/history/export/calls.jsonl",
				"export-calls-csv": "/history/export/calls.csv",
			} {
				href, _ := p.find(id).Attr("href")
				if href != prefix {
					t.Errorf("%s links to %q, want %q", id, href, prefix)
				}
				if d := b.get(href); d.status != http.StatusOK || !strings.HasPrefix(d.header.Get("Content-Disposition"), "attachment;") {
					t.Errorf("GET %s = %d, Content-Disposition %q", href, d.status, d.header.Get("Content-Disposition"))
				}
			}
		})
	}
	t.Run("anonymous", func(t *testing.T) {
		anon := e.browser()
		for _, path := range []string{"/history", "/history/calls/" + calls[0].call.ID, "/history/export/audit.jsonl", "/history/export/calls.csv"} {
			if p := anon.get(path); p.status != http.StatusSeeOther || p.header.Get("Location") != "/login" {
				t.Errorf("anonymous GET %s = %d → %q, want 303 → /login", path, p.status, p.header.Get("Location"))
			}
		}
	})
}

// An auditor reads everything and decides nothing: no controls, and
// posting a decision by hand with a valid form token is refused.
func TestHistoryAuditorCannotDecide(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	call := e.submitAs(histBilling, histRefund(42, ""))
	blockPair(t, e, "agent:flaky", "payments-host")
	b := e.browser()
	b.login("aude", rolePassword)
	for _, path := range []string{"/", "/calls/" + call.ID, "/history", "/history/calls/" + call.ID} {
		p := b.get(path)
		if p.status != http.StatusOK {
			t.Fatalf("GET %s = %d", path, p.status)
		}
		if n := decideControlCount(p); n != 0 {
			t.Errorf("GET %s: %d decide controls for an auditor, want none", path, n)
		}
	}
	csrf := b.csrf()
	for _, post := range []struct {
		path string
		form url.Values
	}{
		{"/calls/" + call.ID + "/approve", url.Values{"csrf": {csrf}, "digest": {call.Digest}}},
		{"/calls/" + call.ID + "/deny", url.Values{"csrf": {csrf}, "reason": {"no"}}},
		{"/blocks/clear", url.Values{"csrf": {csrf}, "actor": {"agent:flaky"}, "tool": {"payments.refund"}}},
	} {
		if p := b.post(post.path, post.form); p.status != http.StatusForbidden {
			t.Errorf("auditor POST %s = %d, want 403", post.path, p.status)
		}
	}
	if p := b.post("/history", url.Values{"csrf": {csrf}}); p.status != http.StatusMethodNotAllowed && p.status != http.StatusNotFound {
		t.Errorf("POST /history = %d, want 405 or 404", p.status)
	}
	got, err := e.q.Call(context.Background(), call.ID)
	if err != nil || got.Status != queue.StatusPending || len(got.Approvals) != 0 {
		t.Errorf("after the auditor's posts the call is %+v (%v), want pending without approvals", got, err)
	}
	blocks, err := e.q.Blocks(context.Background())
	if err != nil || len(blocks) != 1 {
		t.Errorf("blocks after the auditor's clear = %v (%v), want the block kept", blocks, err)
	}
}

type timelineRowView struct {
	kind, principal, channel string
	facts                    map[string]string
	checks                   []string // name=state
}

func timelineRowsOf(p *htmlPage) []timelineRowView {
	var out []timelineRowView
	p.find("timeline-entry").Each(func(_ int, s *goquery.Selection) {
		r := timelineRowView{facts: map[string]string{}}
		r.kind, _ = s.Attr("data-kind")
		r.principal = strings.TrimSpace(s.Find(`[data-testid="entry-principal"]`).Text())
		r.channel = strings.TrimSpace(s.Find(`[data-testid="entry-channel"]`).Text())
		s.Find(`[data-testid="entry-fact"]`).Each(func(_ int, f *goquery.Selection) {
			label, _ := f.Attr("data-label")
			r.facts[label] = strings.TrimSpace(f.Text())
		})
		s.Find(`[data-testid="entry-check"]`).Each(func(_ int, c *goquery.Selection) {
			name, _ := c.Attr("data-check")
			state, _ := c.Attr("data-state")
			r.checks = append(r.checks, name+"="+state)
		})
		out = append(out, r)
	})
	return out
}

func TestHistoryTimeline(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	call := e.submitAs(histBilling, histRefund(1042, "customer was charged twice"))
	approved := e.approve("olivia", audit.ChannelWeb, call)
	if r := e.redeem(histBilling, approved, "invoice:INV-9999"); r.Accepted || r.Reason != "target_mismatch" {
		t.Fatalf("redeeming for another target: %+v", r)
	}
	if r := e.redeem(histBilling, approved, approved.Target); !r.Accepted {
		t.Fatalf("redeem: %+v", r)
	}
	if r := e.redeem(histBilling, approved, approved.Target); r.Accepted || r.Reason != "replayed" {
		t.Fatalf("second redemption: %+v", r)
	}
	if _, err := e.q.ReportOutcome(context.Background(), histBilling, call.ID, "succeeded", "refund re-1042 issued"); err != nil {
		t.Fatal(err)
	}
	deploy := e.submitAs(histDeployer, histDeploy(1234))
	e.approve("olivia", audit.ChannelWeb, deploy)
	e.approve("bob", audit.ChannelCLI, deploy)
	denied := e.submitAs(histCleaner, histDelete("c.txt"))
	e.deny("olivia", audit.ChannelWeb, denied, "keep it: finance needs it")

	b := e.browser()
	b.login("aude", rolePassword)
	// The call's page says the outcome and the agent's detail as one phrase.
	if cp := b.get("/calls/" + call.ID); strings.Join(strings.Fields(cp.find("outcome").Text()), " ") != "succeeded: refund re-1042 issued" {
		t.Errorf("the call page's outcome reads %q", cp.find("outcome").Text())
	}
	p := b.get("/history/calls/" + call.ID)
	if p.status != http.StatusOK {
		t.Fatalf("GET timeline = %d", p.status)
	}
	rows := timelineRowsOf(p)
	var kinds []string
	for _, r := range rows {
		kinds = append(kinds, r.kind)
	}
	if wantKinds := []string{"submitted", "approved", "granted", "redemption_refused", "redeemed", "redemption_refused", "outcome"}; !slices.Equal(kinds, wantKinds) {
		t.Fatalf("timeline kinds %q, want %q", kinds, wantKinds)
	}
	allOK := []string{"shape=ok", "signature=ok", "claims=ok", "actor=ok", "audience=ok", "tool=ok", "target=ok", "digest=ok", "time=ok", "status=ok", "nonce=ok"}
	mismatch := []string{"shape=ok", "signature=ok", "claims=ok", "actor=ok", "audience=ok", "tool=ok", "target=failed",
		"digest=not-reached", "time=not-reached", "status=not-reached", "nonce=not-reached"}
	replayed := append(append([]string(nil), allOK[:10]...), "nonce=failed")
	expires := approved.GrantExpiresAt.UTC().Format("2006-01-02 15:04:05 UTC")
	checks := []struct {
		principal, channel string
		facts              map[string]string
		checks             []string
	}{
		{"agent:billing-bot", "api", map[string]string{"Digest": call.Digest, "Approvals required": "1",
			"Decide by": call.DecideBy.UTC().Format("2006-01-02 15:04:05 UTC")}, nil},
		{"olivia", "web", map[string]string{"Approvals": "1 of 1", "Digest approved": call.Digest}, nil},
		{"console", "api", map[string]string{"Key id": approved.GrantKID, "Grant id": approved.GrantJTI, "Expires": expires, "Digest": call.Digest}, nil},
		{"agent:billing-bot", "api", map[string]string{"Reason": "target_mismatch", "Grant id": approved.GrantJTI}, mismatch},
		{"agent:billing-bot", "api", map[string]string{"Grant id": approved.GrantJTI}, allOK},
		{"agent:billing-bot", "api", map[string]string{"Reason": "replayed", "Grant id": approved.GrantJTI}, replayed},
		{"agent:billing-bot", "api", map[string]string{"Status": "succeeded", "Detail": "refund re-1042 issued"}, nil},
	}
	for i, w := range checks {
		r := rows[i]
		if r.principal != w.principal || r.channel != w.channel {
			t.Errorf("%s entry by %q via %q, want %q via %q", r.kind, r.principal, r.channel, w.principal, w.channel)
		}
		for label, v := range w.facts {
			if r.facts[label] != v {
				t.Errorf("%s entry: %s = %q, want %q", r.kind, label, r.facts[label], v)
			}
		}
		if _, ok := r.facts["Warning"]; ok {
			t.Errorf("%s entry warns: %s", r.kind, r.facts["Warning"])
		}
		if !slices.Equal(r.checks, w.checks) {
			t.Errorf("%s entry checks %q, want %q", r.kind, r.checks, w.checks)
		}
	}
	// The proposal, as hashed, with the call page's components.
	if got := strings.Join(strings.Fields(p.find("digest").Text()), ""); got != call.Digest {
		t.Errorf("proposal digest %q, want %q", got, call.Digest)
	}
	for ptr, v := range map[string]string{"/amount_minor": "1142", "/currency": "USD", "/notes": "customer was charged twice"} {
		if got := p.doc.Find(`[data-pointer="` + ptr + `"] [data-testid="arg-value"]`).Text(); strings.TrimSpace(got) != v {
			t.Errorf("argument %s shows %q, want %q", ptr, got, v)
		}
	}
	if p.doc.Find(`[data-pointer="/notes"] [data-testid="not-bound"]`).Length() != 1 {
		t.Error("the informational notes are not labelled as not bound")
	}
	if got := p.find("call-target").Text(); strings.TrimSpace(got) != "invoice:INV-1042" {
		t.Errorf("target %q", got)
	}
	if !strings.Contains(p.find("rationale").Text(), "The customer was charged twice.") {
		t.Errorf("rationale %q", p.find("rationale").Text())
	}

	t.Run("two approvers", func(t *testing.T) {
		rows := timelineRowsOf(b.get("/history/calls/" + deploy.ID))
		var got []string
		for _, r := range rows {
			got = append(got, r.kind+":"+r.principal+":"+r.channel+":"+r.facts["Approvals"])
		}
		wantRows := []string{"submitted:agent:deployer:api:", "approved:olivia:web:1 of 2", "approved:bob:cli:2 of 2", "granted:console:api:"}
		if !slices.Equal(got, wantRows) {
			t.Errorf("timeline %q, want %q", got, wantRows)
		}
	})
	t.Run("denied", func(t *testing.T) {
		rows := timelineRowsOf(b.get("/history/calls/" + denied.ID))
		if len(rows) != 2 || rows[1].kind != "denied" || rows[1].principal != "olivia" || rows[1].channel != "web" ||
			rows[1].facts["Reason"] != "keep it: finance needs it" || rows[1].facts["Digest denied"] != denied.Digest {
			t.Errorf("timeline %+v, want submitted then denied by olivia via web with the reason", rows)
		}
	})
	t.Run("unknown call", func(t *testing.T) {
		p := b.get("/history/calls/call_nosuchcall")
		if p.status != http.StatusNotFound || p.find("error-status").Length() != 1 {
			t.Errorf("GET unknown timeline = %d, error view %d", p.status, p.find("error-status").Length())
		}
	})
}

func TestHistoryFilters(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	calls := historyFilterSet(t, e)
	b := e.browser()
	b.login("aude", rolePassword)
	at := func(i int) time.Time { return calls[i].call.CreatedAt.UTC() }
	decided := func(h histCall, op, ch string) bool {
		for _, d := range h.deciders {
			if (op == "" || d[0] == op) && (ch == "" || d[1] == ch) {
				return true
			}
		}
		return false
	}
	d5 := calls[4].call.Digest
	cases := []struct {
		name  string
		query url.Values
		keep  func(h histCall) bool
	}{
		{"no filter", url.Values{}, func(histCall) bool { return true }},
		{"actor", url.Values{"actor": {"agent:billing-bot"}}, func(h histCall) bool { return h.actor == "agent:billing-bot" }},
		{"tool", url.Values{"tool": {"files.delete"}}, func(h histCall) bool { return h.tool == "files.delete" }},
		{"status pending", url.Values{"status": {"pending"}}, func(h histCall) bool { return h.status == "pending" }},
		{"status denied", url.Values{"status": {"denied"}}, func(h histCall) bool { return h.status == "denied" }},
		{"operator", url.Values{"operator": {"olivia"}}, func(h histCall) bool { return decided(h, "olivia", "") }},
		{"channel", url.Values{"channel": {"cli"}}, func(h histCall) bool { return decided(h, "", "cli") }},
		{"operator and channel", url.Values{"operator": {"bob"}, "channel": {"web"}}, func(h histCall) bool { return decided(h, "bob", "web") }},
		{"actor and status", url.Values{"actor": {"agent:billing-bot"}, "status": {"approved"}}, func(h histCall) bool {
			return h.actor == "agent:billing-bot" && h.status == "approved"
		}},
		{"since and until", url.Values{"since": {at(2).Format("2006-01-02T15:04:05")}, "until": {at(5).Format(time.RFC3339)}}, func(h histCall) bool {
			return !h.call.CreatedAt.Before(at(2)) && h.call.CreatedAt.Before(at(5))
		}},
		{"since only, with a zone", url.Values{"since": {at(6).In(time.FixedZone("", 2*3600)).Format(time.RFC3339)}}, func(h histCall) bool {
			return !h.call.CreatedAt.Before(at(6))
		}},
		{"until only, to the millisecond", url.Values{"until": {at(1).Add(time.Millisecond).Format("2006-01-02T15:04:05.000")}}, func(h histCall) bool {
			return !h.call.CreatedAt.After(at(1))
		}},
		{"until a date", url.Values{"until": {at(0).Format("2006-01-02")}}, func(histCall) bool { return false }},
		{"digest prefix in groups, upper case", url.Values{"digest": {strings.ToUpper(d5[:4] + " " + d5[4:8])}}, func(h histCall) bool {
			return strings.HasPrefix(h.call.Digest, d5[:8])
		}},
		{"whole digest", url.Values{"digest": {d5}}, func(h histCall) bool { return h.call.Digest == d5 }},
		{"tool and time", url.Values{"tool": {"payments.refund"}, "since": {at(1).Format(time.RFC3339)}}, func(h histCall) bool {
			return h.tool == "payments.refund" && !h.call.CreatedAt.Before(at(1))
		}},
		{"nobody", url.Values{"actor": {"agent:nobody"}}, func(histCall) bool { return false }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			wantIDs := wantIDsOf(calls, c.keep)
			if c.name != "no filter" && c.name != "nobody" && c.name != "until a date" && (len(wantIDs) == 0 || len(wantIDs) == len(calls)) {
				t.Fatalf("the case keeps %d of %d calls: it does not show that the filter narrows", len(wantIDs), len(calls))
			}
			p := b.get(withQuery("/history", c.query))
			if p.status != http.StatusOK {
				t.Fatalf("GET = %d: %s", p.status, p.find("history-error").Text())
			}
			if got := historyRowIDs(p); !slices.Equal(got, wantIDs) {
				t.Errorf("rows %v, want %v", got, wantIDs)
			}
			if len(wantIDs) == 0 && p.find("history-empty").Length() != 1 {
				t.Error("no rows and no empty message")
			}
			// The form shows the filter, and submitting it as a browser
			// would gives the same page: the URL round-trips.
			form := url.Values{}
			p.doc.Find(`form[data-testid="history-filter"] input[name]`).Each(func(_ int, s *goquery.Selection) {
				name, _ := s.Attr("name")
				v, _ := s.Attr("value")
				form.Set(name, v)
			})
			p.doc.Find(`form[data-testid="history-filter"] select[name]`).Each(func(_ int, s *goquery.Selection) {
				name, _ := s.Attr("name")
				v, _ := s.Find("option[selected]").Attr("value")
				form.Set(name, v)
			})
			for k := range c.query {
				if form.Get(k) != strings.TrimSpace(c.query.Get(k)) {
					t.Errorf("the form shows %s=%q, want %q", k, form.Get(k), c.query.Get(k))
				}
			}
			if got := historyRowIDs(b.get(withQuery("/history", form))); !slices.Equal(got, wantIDs) {
				t.Errorf("the form submitted again gives rows %v, want %v", got, wantIDs)
			}
			// The calls export holds exactly the same calls.
			href, _ := p.find("export-calls-jsonl").Attr("href")
			ex := b.get(href)
			var exported []string
			for line := range strings.Lines(ex.body) {
				v, err := canonical.Parse([]byte(strings.TrimSuffix(line, "\n")))
				if err != nil {
					t.Fatalf("export line %q: %v", line, err)
				}
				id, _ := canonical.Lookup(v, "/id")
				exported = append(exported, id.(string))
			}
			if !slices.Equal(exported, wantIDs) {
				t.Errorf("the calls export for the filter holds %v, want %v", exported, wantIDs)
			}
		})
	}
	t.Run("invalid filters", func(t *testing.T) {
		for _, q := range []string{"status=bogus", "channel=carrier-pigeon", "digest=xyz", "digest=" + strings.Repeat("a", 65),
			"since=yesterday", "until=2025-13-01", "since=2025-03-02&until=2025-03-01", "after=abc", "after=-3",
			"after=999999999", "limit=0", "limit=100000"} {
			p := b.get("/history?" + q)
			if p.status != http.StatusBadRequest || p.find("history-error").Length() != 1 || p.find("history-row").Length() != 0 {
				t.Errorf("GET /history?%s = %d, error %q, %d rows; want 400 with the error and no rows",
					q, p.status, p.find("history-error").Text(), p.find("history-row").Length())
			}
			if q != "after=999999999" {
				if x := b.get("/history/export/calls.csv?" + q); x.status != http.StatusBadRequest || x.header.Get("Content-Disposition") != "" {
					t.Errorf("export with %s = %d, Content-Disposition %q; want 400 and no attachment", q, x.status, x.header.Get("Content-Disposition"))
				}
			}
		}
	})
}

func TestParseHistoryQueryRoundTrip(t *testing.T) {
	cases := []url.Values{
		{},
		{"actor": {"agent:x y"}, "tool": {"a.b"}, "status": {"denied"}},
		{"operator": {"o&p=q"}, "channel": {"web"}, "digest": {"ab CD 12"}},
		{"since": {"2025-03-01"}, "until": {"2025-03-02T10:00:00+02:00"}, "after": {"17"}, "limit": {"5"}},
		{"actor": {"  padded  "}, "since": {"2025-03-01T12:00:00.250"}},
	}
	for _, q := range cases {
		hq, err := parseHistoryQuery(q)
		if err != nil {
			t.Fatalf("parse %v: %v", q, err)
		}
		again, err := parseHistoryQuery(hq.values(true))
		if err != nil {
			t.Fatalf("parse %v again: %v", hq.values(true), err)
		}
		if fmt.Sprint(again.filter) != fmt.Sprint(hq.filter) || again.form != hq.form || again.limit != hq.limit {
			t.Errorf("%v → %v: filter %+v, want %+v", q, hq.values(true), again.filter, hq.filter)
		}
	}
	hq, _ := parseHistoryQuery(url.Values{"since": {"2025-03-01T12:00:00+02:00"}, "digest": {"AB cd"}})
	if want := time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC); !hq.filter.Since.Equal(want) || hq.filter.DigestPrefix != "abcd" {
		t.Errorf("since %v, digest %q; want %v and abcd", hq.filter.Since, hq.filter.DigestPrefix, want)
	}
}

func TestHistoryPagination(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	var all []*queue.Call
	for i := range 23 {
		who := histBilling
		body := histRefund(100+i, "")
		if i%3 == 0 {
			who, body = histCleaner, histDelete(fmt.Sprintf("f%d.txt", i))
		}
		all = append(all, e.submitAs(who, body))
		// Runs of calls share a millisecond, so that pages split ties
		// on the call's sequence number.
		if i%4 == 3 {
			e.clock.Advance(time.Second)
		}
	}
	b := e.browser()
	b.login("aude", rolePassword)
	walk := func(t *testing.T, start string, during func(page int)) (ids []string, pages int) {
		t.Helper()
		next := start
		for pages = 0; next != ""; pages++ {
			if pages > 30 {
				t.Fatal("the pages do not end")
			}
			p := b.get(next)
			if p.status != http.StatusOK {
				t.Fatalf("GET %s = %d: %s", next, p.status, p.find("history-error").Text())
			}
			ids = append(ids, historyRowIDs(p)...)
			if pages > 0 {
				if href, _ := p.find("page-newest").Attr("href"); href != strings.SplitN(start, "#", 2)[0] {
					t.Errorf("page %d: newest link %q, want %q", pages+1, href, start)
				}
			} else if p.find("page-newest").Length() != 0 {
				t.Error("the first page links to the newest page")
			}
			next, _ = p.find("page-older").Attr("href")
			if next != "" {
				u, _ := url.Parse(next)
				if u.Query().Get("after") == "" || u.Query().Get("limit") != "5" {
					t.Errorf("older link %q does not carry the cursor and page size", next)
				}
			}
			if during != nil {
				during(pages)
			}
		}
		return ids, pages
	}
	newestFirst := func(keep func(c *queue.Call) bool) []string {
		var ids []string
		for i := len(all) - 1; i >= 0; i-- {
			if keep(all[i]) {
				ids = append(ids, all[i].ID)
			}
		}
		return ids
	}
	t.Run("every call once, in order", func(t *testing.T) {
		ids, pages := walk(t, "/history?limit=5", nil)
		if wantIDs := newestFirst(func(*queue.Call) bool { return true }); !slices.Equal(ids, wantIDs) {
			t.Errorf("paged ids\n%v\nwant\n%v", ids, wantIDs)
		}
		if pages != 5 {
			t.Errorf("%d pages, want 5", pages)
		}
	})
	t.Run("filtered", func(t *testing.T) {
		ids, _ := walk(t, "/history?actor=agent%3Abilling-bot&limit=5", nil)
		if wantIDs := newestFirst(func(c *queue.Call) bool { return c.Actor == "agent:billing-bot" }); !slices.Equal(ids, wantIDs) {
			t.Errorf("paged ids\n%v\nwant\n%v", ids, wantIDs)
		}
	})
	t.Run("calls arriving while paging", func(t *testing.T) {
		// New calls land on the newest page; the older pages go on where
		// they were, without repeating or skipping a call.
		var added []string
		ids, _ := walk(t, "/history?limit=5", func(page int) {
			if page < 3 {
				added = append(added, e.submitAs(histBilling, histRefund(900+page, "")).ID)
			}
		})
		wantIDs := newestFirst(func(*queue.Call) bool { return true })
		if !slices.Equal(ids, wantIDs) {
			t.Errorf("paged ids\n%v\nwant\n%v", ids, wantIDs)
		}
		p := b.get("/history?limit=5")
		if got := historyRowIDs(p); !slices.Contains(got, added[0]) {
			t.Errorf("the newest page %v does not show the call added while paging", got)
		}
	})
}

// Agent text on the history and timeline pages is text: payloads in the
// arguments, rationale, target, actor, tool, a denial's reason and an
// outcome's detail run nothing and add no element.
func TestHistoryXSSInert(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	payloads := []string{
		`<script>alert(1)</script>`,
		`"><img src=x onerror=alert(2)>`,
		`</td></tr></table><svg onload=alert(3)>`,
		`javascript:alert(4)`,
		`{{ .x }} ${alert(5)} <iframe src="//evil">`,
	}
	joined := strings.Join(payloads, " ")
	args, err := canonical.NewObject(
		canonical.Member{Name: "note", Value: joined},
		canonical.Member{Name: `<b onmouseover=alert(6)>key</b>`, Value: []any{payloads[1], int64(7)}},
	)
	if err != nil {
		t.Fatal(err)
	}
	call := e.insertRaw("agent:"+payloads[1], "x.y", "file:"+payloads[0], args, "because "+joined)
	e.deny("olivia", audit.ChannelWeb, call, "no: "+joined)

	b := e.browser()
	b.login("aude", rolePassword)
	for _, path := range []string{"/history", "/history/calls/" + call.ID, "/history?actor=" + url.QueryEscape("agent:"+payloads[1])} {
		p := b.get(path)
		if p.status != http.StatusOK {
			t.Fatalf("GET %s = %d", path, p.status)
		}
		if n := p.doc.Find("img, svg, iframe, b").Length(); n != 0 {
			t.Errorf("GET %s: %d elements injected from agent text", path, n)
		}
		p.doc.Find("script").Each(func(_ int, s *goquery.Selection) {
			if src, _ := s.Attr("src"); !strings.HasPrefix(src, "/static/") || strings.TrimSpace(s.Text()) != "" {
				t.Errorf("GET %s: a script that is not the console's: %s", path, goquery.NewDocumentFromNode(s.Get(0)).Text())
			}
		})
		p.doc.Find("*").Each(func(_ int, s *goquery.Selection) {
			for _, a := range s.Get(0).Attr {
				if strings.HasPrefix(a.Key, "on") {
					t.Errorf("GET %s: an event handler attribute %s=%q", path, a.Key, a.Val)
				}
				if (a.Key == "href" || a.Key == "src") && strings.Contains(strings.ToLower(a.Val), "javascript:") {
					t.Errorf("GET %s: a javascript: URL in %s", path, a.Key)
				}
			}
		})
		if strings.Contains(p.body, "<script>alert") || strings.Contains(p.body, "<img src=x") {
			t.Errorf("GET %s: a raw payload in the page", path)
		}
	}
	p := b.get("/history/calls/" + call.ID)
	text := p.find("timeline").Text()
	if !strings.Contains(text, "no: "+payloads[0]) {
		t.Errorf("the denial reason is not shown as text: %q", text)
	}
	if got := p.doc.Find(`[data-pointer="/note"] > [data-testid="arg-value"]`).Text(); strings.TrimSpace(got) != joined {
		t.Errorf("the argument shows %q, want the payloads as text", got)
	}
	if !strings.Contains(p.find("rationale").Text(), "because "+payloads[0]) {
		t.Errorf("the rationale is not shown as text: %q", p.find("rationale").Text())
	}
}

// exportRecorder is a response writer that keeps every write's size and
// what the headers were when the first bytes went out.
type exportRecorder struct {
	header      http.Header
	status      int
	writes      []int
	flushes     int
	firstHeader http.Header
	body        bytes.Buffer
}

func newExportRecorder() *exportRecorder { return &exportRecorder{header: http.Header{}} }

func (w *exportRecorder) Header() http.Header { return w.header }

func (w *exportRecorder) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
		w.firstHeader = w.header.Clone()
	}
}

func (w *exportRecorder) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	w.writes = append(w.writes, len(p))
	return w.body.Write(p)
}

func (w *exportRecorder) Flush() { w.flushes++ }

// runExport calls an export handler directly with a recording writer.
// asViewer makes ec a request of the logged-in account name.
func asViewer(ec echo.Context, name string) echo.Context {
	ec.Set(viewerKey, &viewer{user: account.User{Name: name}})
	return ec
}

func runExport(t *testing.T, e *consoleEnv, h echo.HandlerFunc, target string) *exportRecorder {
	t.Helper()
	w := newExportRecorder()
	req := httptest.NewRequest(http.MethodGet, target, nil)
	ec := asViewer(echo.New().NewContext(req, w), "aude")
	if err := h(ec); err != nil {
		t.Fatalf("GET %s: %v", target, err)
	}
	return w
}

func TestHistoryExportsStream(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	// The accounts were added on the real clock, a moment after the test
	// clock's time: move past them so the trail's times rise with its
	// entries and a time range cuts it where expected.
	e.clock.Advance(5 * time.Second)
	notes := strings.Repeat("n", 480)
	const n = 400
	for i := range n {
		c := e.submitAs(histBilling, histRefund(10_000+i, notes))
		if i%2 == 0 {
			e.approve("olivia", audit.ChannelWeb, c)
		}
	}
	h := newHistoryPages(e.c)
	head, headHash, err := e.db.AuditHead(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	exports := []struct {
		name, target, ctype, file string
		h                         echo.HandlerFunc
		rows                      int
	}{
		{"calls JSONL", "/history/export/calls.jsonl", "application/x-ndjson", "countersign-calls-", h.exportCalls("jsonl"), n},
		{"calls CSV", "/history/export/calls.csv", "text/csv", "countersign-calls-", h.exportCalls("csv"), n + 1},
		{"audit JSONL", "/history/export/audit.jsonl", "application/x-ndjson", "countersign-audit-", h.exportAudit, int(head) + 1},
	}
	for _, x := range exports {
		t.Run(x.name, func(t *testing.T) {
			w := runExport(t, e, x.h, x.target)
			total := w.body.Len()
			if total < 256<<10 {
				t.Fatalf("the export is %d bytes: too small to show streaming", total)
			}
			// Streamed: many writes, none larger than the export's buffer,
			// rather than one write of a body built in memory.
			if len(w.writes) < total/(64<<10) || slices.Max(w.writes) > 64<<10 {
				t.Errorf("%d bytes in %d writes, largest %d; want writes of at most 64 KiB", total, len(w.writes), slices.Max(w.writes))
			}
			if w.status != http.StatusOK || !strings.HasPrefix(w.firstHeader.Get("Content-Type"), x.ctype) {
				t.Errorf("status %d, Content-Type %q before the first write", w.status, w.firstHeader.Get("Content-Type"))
			}
			cd := w.firstHeader.Get("Content-Disposition")
			if !strings.HasPrefix(cd, `attachment; filename="`+x.file) {
				t.Errorf("Content-Disposition %q before the first write", cd)
			}
			if lines := strings.Count(w.body.String(), "\n"); lines < x.rows {
				t.Errorf("%d lines, want at least %d", lines, x.rows)
			}
		})
	}
	t.Run("the audit export verifies", func(t *testing.T) {
		w := runExport(t, e, h.exportAudit, "/history/export/audit.jsonl")
		rep, err := audit.VerifyExport(bytes.NewReader(w.body.Bytes()), audit.VerifyOptions{})
		if err != nil {
			t.Fatalf("VerifyExport: %v", err)
		}
		if rep.Count != head || rep.Head != headHash {
			t.Errorf("verified %d entries to %s, want %d to %s", rep.Count, rep.Head, head, headHash)
		}
		altered := bytes.Replace(w.body.Bytes(), []byte(`"received":1`), []byte(`"received":2`), 1)
		if bytes.Equal(altered, w.body.Bytes()) {
			t.Fatal("no approval in the export to alter")
		}
		var be *audit.BreakError
		if _, err := audit.VerifyExport(bytes.NewReader(altered), audit.VerifyOptions{}); !errors.As(err, &be) {
			t.Errorf("an altered export verifies: %v", err)
		}
	})
	t.Run("the audit export for a time range verifies", func(t *testing.T) {
		since := e.clock.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
		until := e.clock.Now().Add(time.Hour).UTC().Format(time.RFC3339)
		w := runExport(t, e, h.exportAudit, "/history/export/audit.jsonl?since="+since+"&until="+until+"&actor=ignored")
		rep, err := audit.VerifyExport(bytes.NewReader(w.body.Bytes()), audit.VerifyOptions{})
		if err != nil || rep.Count != head || rep.Header == nil || rep.Header.Since == "" || rep.Header.Until == "" {
			t.Errorf("range export: %+v, %+v, %v", rep, rep.Header, err)
		}
	})
	t.Run("an empty export is a file", func(t *testing.T) {
		w := runExport(t, e, h.exportCalls("jsonl"), "/history/export/calls.jsonl?actor=agent:nobody")
		if w.status != http.StatusOK || w.body.Len() != 0 || !strings.HasPrefix(w.firstHeader.Get("Content-Disposition"), "attachment;") {
			t.Errorf("status %d, %d bytes, Content-Disposition %q", w.status, w.body.Len(), w.firstHeader.Get("Content-Disposition"))
		}
	})
	t.Run("exports at once are bounded, per account and in all", func(t *testing.T) {
		refused := func(name, want string) {
			t.Helper()
			req := httptest.NewRequest(http.MethodGet, "/history/export/audit.jsonl", nil)
			w := newExportRecorder()
			err := h.exportAudit(asViewer(echo.New().NewContext(req, w), name))
			if ae := server.ErrorOf(err); ae.Status != http.StatusTooManyRequests || ae.Code != "exports_busy" ||
				!strings.Contains(ae.Message, want) || w.status != 0 {
				t.Errorf("%s's export beyond the bound: %v (%+v), %d bytes written", name, err, ae, w.body.Len())
			}
		}
		hold := func(name string) func() {
			t.Helper()
			r, err := h.acquireExport(asViewer(echo.New().NewContext(httptest.NewRequest(http.MethodGet, "/", nil), newExportRecorder()), name))
			if err != nil {
				t.Fatalf("%s's first export: %v", name, err)
			}
			return r
		}
		aude := hold("aude")
		refused("aude", "one of your exports")
		olivia := hold("olivia") // another account is not held back by aude's
		refused("adam", fmt.Sprintf("%d exports", maxExports))
		aude()
		olivia()
		if w := runExport(t, e, h.exportAudit, "/history/export/audit.jsonl"); w.status != http.StatusOK {
			t.Errorf("export after the others finished = %d", w.status)
		}
	})
	t.Run("a failure after the first bytes aborts the download", func(t *testing.T) {
		req := httptest.NewRequest(http.MethodGet, "/history/export/audit.jsonl", nil)
		ctx, cancel := context.WithCancel(req.Context())
		w := &cancelAfterWrites{exportRecorder: newExportRecorder(), after: 2, cancel: cancel}
		ec := asViewer(echo.New().NewContext(req.WithContext(ctx), w), "aude")
		defer func() {
			if r := recover(); r != http.ErrAbortHandler {
				t.Errorf("recovered %v, want http.ErrAbortHandler", r)
			}
		}()
		err := h.exportAudit(ec)
		t.Errorf("the export returned %v after its client went away, want an aborted response", err)
	})
}

// cancelAfterWrites cancels the request after a number of writes, as a client
// that goes away mid-download does.
type cancelAfterWrites struct {
	*exportRecorder
	after  int
	cancel func()
}

func (w *cancelAfterWrites) Write(p []byte) (int, error) {
	if len(w.writes)+1 >= w.after {
		w.cancel()
	}
	return w.exportRecorder.Write(p)
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The history page shows the real chain's state: verified with its
// checkpoint, then the first bad entry once an entry is altered.
func TestHistoryChainStatus(t *testing.T) {
	// The session outlives the hour the test moves the clock by.
	e := newConsoleEnv(t, func(cc *Config) { cc.IdleTimeout = 24 * time.Hour })
	addRoleUsers(e)
	historyFilterSet(t, e)
	_, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := e.db.Checkpoint(context.Background(), audit.NewSigner(priv))
	if err != nil {
		t.Fatal(err)
	}
	b := e.browser()
	b.login("aude", rolePassword)
	state := func() (string, string) {
		p := b.get("/history")
		s := p.find("chain-status")
		st, _ := s.Attr("data-state")
		return st, strings.Join(strings.Fields(s.Find(`[data-testid="chain-detail"]`).Text()), " ")
	}
	var st, detail string
	head, _, _ := e.db.AuditHead(context.Background())
	// The console verified the empty trail when it started; a page view
	// asks for a newer run, which covers every entry.
	waitUntil(t, "the chain to verify", func() bool {
		st, detail = state()
		return st == "verified" && strings.HasPrefix(detail, fmt.Sprintf("up to entry %d ", head))
	})
	wantDetail := fmt.Sprintf("up to entry %d (the newest entry) at %s; newest signed checkpoint matched: entry %d (1 in all).",
		head, e.clock.Now().UTC().Format("2006-01-02 15:04:05 UTC"), cp.Seq)
	if detail != wantDetail {
		t.Errorf("chain detail %q, want %q", detail, wantDetail)
	}
	// The metrics say the same: 1 while the chain verifies.
	chainMetric := func() string {
		res, err := http.Get(e.url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		for _, line := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(line, "countersign_audit_verified ") {
				return line
			}
		}
		return ""
	}
	if got := chainMetric(); got != "countersign_audit_verified 1" {
		t.Errorf("metric %q, want countersign_audit_verified 1", got)
	}
	if _, err := e.db.SQL().Exec(`DROP TRIGGER audit_no_update`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.SQL().Exec(`UPDATE audit SET details = replace(details, 'not ours', 'NOT ours') WHERE kind = 'denied'`); err != nil {
		t.Fatal(err)
	}
	var bad int64
	if err := e.db.SQL().QueryRow(`SELECT MIN(seq) FROM audit WHERE kind = 'denied'`).Scan(&bad); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(audit.MaxVerifyAge + time.Minute)
	waitUntil(t, "the alteration to be found", func() bool { st, detail = state(); return st == "broken" })
	if want := fmt.Sprintf("first bad entry %d:", bad); !strings.HasPrefix(detail, want) {
		t.Errorf("chain detail %q, want it to start with %q", detail, want)
	}
	if got := chainMetric(); got != "countersign_audit_verified 0" {
		t.Errorf("metric %q, want countersign_audit_verified 0 (docs/alerts.yaml alerts on it)", got)
	}
}

// Each state of the chain reads as what it is.
func TestHistoryChainStatusText(t *testing.T) {
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name string
		s    templates.ChainStatus
		want string
	}{
		{"verified to the newest entry", templates.ChainStatus{State: "verified", Count: 9, Head: 9, CheckpointSeq: 8, Checkpoints: 2, At: at},
			"up to entry 9 (the newest entry) at 2025-03-01 12:00:00 UTC; newest signed checkpoint matched: entry 8 (2 in all)."},
		{"verified, trail grown since", templates.ChainStatus{State: "verified", Count: 5, Head: 9, At: at},
			"up to entry 5 (the trail now ends at entry 9; the entries after 5 are checked on a later run) at 2025-03-01 12:00:00 UTC; no checkpoint has been signed yet (one is signed every few minutes while the trail grows)."},
		{"broken at an entry", templates.ChainStatus{State: "broken", BadSeq: 57, Reason: "hash does not match", At: at},
			"first bad entry 57: hash does not match (checked 2025-03-01 12:00:00 UTC)"},
		{"broken checkpoint", templates.ChainStatus{State: "broken", Reason: "checkpoint 40: bad signature", At: at},
			"checkpoint 40: bad signature (checked 2025-03-01 12:00:00 UTC)"},
		{"unreadable", templates.ChainStatus{State: "error", Reason: "the database could not be read", At: at},
			"the trail could not be read at 2025-03-01 12:00:00 UTC: the database could not be read"},
		{"first run", templates.ChainStatus{State: "pending", Running: true},
			"the first check of the audit chain has not finished yet; reload the page in a few seconds."},
		{"empty trail", templates.ChainStatus{State: "verified", At: at},
			"the trail is empty: nothing has been recorded yet (checked 2025-03-01 12:00:00 UTC)."},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := templates.HistoryPage(templates.HistoryView{Chain: c.s}).Render(context.Background(), &buf); err != nil {
				t.Fatal(err)
			}
			doc, err := goquery.NewDocumentFromReader(&buf)
			if err != nil {
				t.Fatal(err)
			}
			s := doc.Find(`[data-testid="chain-status"]`)
			if st, _ := s.Attr("data-state"); st != c.s.State {
				t.Errorf("data-state %q, want %q", st, c.s.State)
			}
			if got := strings.Join(strings.Fields(s.Find(`[data-testid="chain-detail"]`).Text()), " "); got != c.want {
				t.Errorf("detail %q, want %q", got, c.want)
			}
		})
	}
}

// TestHistoryScale times the history pages over HTTP, as a logged-in
// auditor, on a database built by the db package's scale test (one
// million calls, about 3.8 million audit entries), and streams the calls
// export through the real server:
//
//	COUNTERSIGN_SCALE=1 COUNTERSIGN_SCALE_DIR=/tmp/scale go test -run TestScale -timeout 60m ./internal/db/
//	cp /tmp/scale/scale-1000000.db /tmp/hist/
//	COUNTERSIGN_HISTORY_DB=/tmp/hist/scale-1000000.db go test -run TestHistoryScale -v -timeout 30m ./internal/server/
//
// It adds an account to that database, so give it a copy.
func TestHistoryScale(t *testing.T) {
	path := os.Getenv("COUNTERSIGN_HISTORY_DB")
	if path == "" {
		t.Skip("set COUNTERSIGN_HISTORY_DB to a copy of the db scale test's database")
	}
	e := openConsoleEnvAt(t, path)
	start := time.Now()
	name := fmt.Sprintf("auditor-%d", time.Now().Unix())
	e.addUser(name, account.RoleAuditor, rolePassword)
	b := e.browser()
	b.login(name, rolePassword)
	t.Logf("server up and logged in after %v", time.Since(start).Round(time.Millisecond))

	first := b.get("/history")
	older, _ := first.find("page-older").Attr("href")
	ids := historyRowIDs(first)
	if len(ids) != 50 || older == "" {
		t.Fatalf("first page: %d rows, older %q", len(ids), older)
	}
	var digest string
	first.find("history-row").First().Find(`[data-testid="row-digest"]`).Each(func(_ int, s *goquery.Selection) {
		digest, _ = s.Attr("title")
	})
	var ms int64
	if err := e.db.SQL().QueryRow(`SELECT created_at FROM calls WHERE seq = (SELECT MAX(seq) / 2 FROM calls)`).Scan(&ms); err != nil {
		t.Fatal(err)
	}
	mid := time.UnixMilli(ms).UTC()
	pages := []struct{ name, path string }{
		{"first page, no filter", "/history"},
		{"second page (older link)", older},
		{"actor (a busy one)", "/history?actor=agent:a000"},
		{"actor (20 calls in all)", "/history?actor=agent:rare"},
		{"tool", "/history?tool=tool.t07"},
		{"status denied", "/history?status=denied"},
		{"operator", "/history?operator=op:03"},
		{"operator and channel", "/history?operator=op:05&channel=cli"},
		{"actor and tool", "/history?actor=agent:a001&tool=tool.t03"},
		{"one day, mid-history", "/history?since=" + mid.Format(time.RFC3339) + "&until=" + mid.Add(24*time.Hour).Format(time.RFC3339)},
		{"digest prefix (4 hex)", "/history?digest=" + digest[:4]},
		{"timeline of a call", "/history/calls/" + ids[7]},
	}
	measure := func(when string) {
		for _, p := range pages {
			var times []time.Duration
			var rows int
			for i := range 12 {
				t0 := time.Now()
				pg := b.get(p.path)
				el := time.Since(t0)
				if pg.status != http.StatusOK {
					t.Fatalf("%s: GET %s = %d %s", p.name, p.path, pg.status, pg.find("history-error").Text())
				}
				rows = pg.find("history-row").Length() + pg.find("timeline-entry").Length()
				if i > 0 {
					times = append(times, el)
				}
			}
			slices.Sort(times)
			t.Logf("%-24s %-28s %3d rows  median %8v  max %8v", when, p.name, rows, times[len(times)/2].Round(10*time.Microsecond),
				times[len(times)-1].Round(10*time.Microsecond))
			if rows == 0 {
				t.Errorf("%s: no rows; the case measures nothing", p.name)
			}
		}
	}
	chain := func() (string, string) {
		s := b.get("/history").find("chain-status")
		st, _ := s.Attr("data-state")
		return st, strings.Join(strings.Fields(s.Text()), " ")
	}
	st, text := chain()
	t.Logf("chain at the first page: %s (%s)", st, text)
	measure("while verifying")
	deadline := time.Now().Add(10 * time.Minute)
	for st, text = chain(); st != "verified"; st, text = chain() {
		if time.Now().After(deadline) || st == "broken" || st == "error" {
			t.Fatalf("chain: %s (%s)", st, text)
		}
		time.Sleep(time.Second)
	}
	t.Logf("chain after %v: %s", time.Since(start).Round(time.Second), text)
	measure("verification idle")

	// The calls export through the real server, whose write timeout is
	// shorter than the export: each write extends the deadline.
	client := &http.Client{Jar: b.jar}
	req, _ := http.NewRequest(http.MethodGet, e.url+"/history/export/calls.jsonl", nil)
	t0 := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	cw := &lineCounter{}
	if _, err := io.Copy(cw, resp.Body); err != nil {
		t.Fatalf("the export broke off after %d lines, %v: %v", cw.lines, time.Since(t0), err)
	}
	el := time.Since(t0)
	var calls int64
	_ = e.db.SQL().QueryRow(`SELECT COUNT(*) FROM calls`).Scan(&calls)
	t.Logf("calls export JSONL over HTTP: %d lines, %d MiB in %v (%.0f lines/s)", cw.lines, cw.bytes>>20, el.Round(time.Second), float64(cw.lines)/el.Seconds())
	if cw.lines != calls {
		t.Errorf("exported %d calls, want %d", cw.lines, calls)
	}
}

type lineCounter struct{ lines, bytes int64 }

func (c *lineCounter) Write(p []byte) (int, error) {
	c.lines += int64(bytes.Count(p, []byte{'\n'}))
	c.bytes += int64(len(p))
	return len(p), nil
}

// openConsoleEnvAt is newConsoleEnv on an existing database file, on the
// real clock (env.clock is not the console's clock here).
func openConsoleEnvAt(tb testing.TB, path string) *consoleEnv {
	tb.Helper()
	d, err := db.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	clock := newConsoleClock()
	reg, err := tools.Load("../../examples/tools.yaml")
	if err != nil {
		tb.Fatal(err)
	}
	keys, err := grant.OpenKeyring(filepath.Join(tb.TempDir(), "keys"), "countersign", time.Now)
	if err != nil {
		tb.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	q := queue.NewService(queue.Config{Store: d.Store(), Tools: reg, Signer: keys, Now: time.Now, Logger: log})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv, c, done, ran, cancel := serveStack(tb, ln, server.Config{Queue: q, Accounts: account.NewService(d.Accounts(), time.Now), Audit: d, Ping: d.Ping,
		Keys: keys, Logger: log, Now: time.Now, PublicURL: "http://" + ln.Addr().String()}, Config{PublicURL: "http://" + ln.Addr().String()}, d.Store())
	env := &consoleEnv{t: tb, clock: clock, db: d, q: q, srv: srv, c: c, url: "http://" + ln.Addr().String()}
	var once sync.Once
	env.stop = func() {
		once.Do(func() {
			cancel()
			q.Shutdown()
			if err := <-done; err != nil {
				tb.Errorf("Serve: %v", err)
			}
			<-ran
			d.Close()
		})
	}
	tb.Cleanup(env.stop)
	return env
}

// smallBufferListener shrinks each accepted connection's send buffer, so
// that a slow reader makes the server's writes wait.
type smallBufferListener struct{ net.Listener }

func (l smallBufferListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4 << 10)
	}
	return c, err
}

// An export runs for as long as the client keeps reading, past the
// server's write timeout: each write moves the deadline on.
func TestHistoryExportOutlivesWriteTimeout(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	e.clock.Advance(5 * time.Second)
	notes := strings.Repeat("w", 480)
	for i := range 150 {
		e.submitAs(histBilling, histRefund(20_000+i, notes))
	}
	b := e.browser()
	b.login("aude", rolePassword)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	const writeTimeout = 300 * time.Millisecond
	hs := &http.Server{Handler: e.srv.Handler(), WriteTimeout: writeTimeout}
	go hs.Serve(smallBufferListener{ln})
	defer hs.Close()

	dialer := &net.Dialer{}
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(4 << 10)
		}
		return c, err
	}}}
	req, _ := http.NewRequest(http.MethodGet, "http://"+ln.Addr().String()+"/history/export/audit.jsonl", nil)
	req.Header.Set("Cookie", b.cookieHeader())
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body bytes.Buffer
	buf := make([]byte, 8<<10)
	var readErr error
	for {
		n, err := resp.Body.Read(buf)
		body.Write(buf[:n])
		if err != nil {
			if err != io.EOF {
				readErr = err
			}
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	el := time.Since(start)
	if el < 2*writeTimeout {
		t.Fatalf("the download took %v: too fast to outlast the %v write timeout", el, writeTimeout)
	}
	if readErr != nil {
		t.Fatalf("the download broke off after %d bytes and %v: %v", body.Len(), el, readErr)
	}
	rep, err := audit.VerifyExport(&body, audit.VerifyOptions{})
	head, _, _ := e.db.AuditHead(context.Background())
	if err != nil || rep.Count != head {
		t.Errorf("the export read over %v verifies %d of %d entries: %v", el, rep.Count, head, err)
	}
}
