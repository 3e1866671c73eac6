package console

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/policy"
)

// TestDelegationOnPages: an admin delegates to an operator on the account
// page; both people's pages list it; the operator, outside the tool's
// approvers, is offered "for adele" on the call's page and approves, and
// the page says "olivia, for adele". A second call's page, read before
// the delegation ends, approves nothing after it ended, and says what to
// do; the End button ends it.
func TestDelegationOnPages(t *testing.T) {
	e := newPeopleConsole(t)
	adele, olivia := e.browser(), e.browser()
	adele.login("adele", rolePassword)
	olivia.login("olivia", rolePassword)

	if p := olivia.post("/account/delegations", url.Values{"csrf": {olivia.csrf()}, "delegate": {"olivia"}, "for": {"1d"}}); p.status != http.StatusBadRequest ||
		!strings.Contains(p.find("account-error").Text(), "another person") {
		t.Errorf("a delegation to oneself: %d %q", p.status, p.find("account-error").Text())
	}
	if p := adele.post("/account/delegations", url.Values{"csrf": {adele.csrf()}, "delegate": {"olivia"}, "for": {"1d"}}); p.status != http.StatusOK ||
		!strings.Contains(p.find("account-notice").Text(), "olivia may approve for adele") {
		t.Fatalf("adele delegates to olivia: %d %q %q", p.status, p.find("account-notice").Text(), p.find("account-error").Text())
	}
	for who, b := range map[string]*consoleBrowser{"adele": adele, "olivia": olivia} {
		row := b.get("/account").find("delegation-row")
		if row.Length() != 1 || row.AttrOr("data-state", "") != "live" || !strings.Contains(row.Text(), "adele") || !strings.Contains(row.Text(), "olivia") {
			t.Errorf("%s's account page lists %d delegations: %q", who, row.Length(), row.Text())
		}
	}

	c := e.submitOwned(vaultAgent, `{"tool":"vault.rotate","target":"secret:db","args":{}}`)
	p := olivia.get("/calls/" + c.ID)
	choice := p.find("approve-for-choice")
	if choice.Length() != 1 || choice.AttrOr("value", "") != "adele" || p.find("not-an-approver").Length() != 0 {
		t.Fatalf("olivia's page offers approving for %d people (%q): %s", choice.Length(), choice.AttrOr("value", ""), p.find("decide").Text())
	}
	presented, _ := p.find("approve-presented").Attr("value")
	r := olivia.post("/calls/"+c.ID+"/approve", url.Values{"csrf": {olivia.csrf()}, "digest": {c.Digest}, "presented": {presented}, "for": {"adele"}})
	if r.status != http.StatusSeeOther {
		t.Fatalf("olivia approves for adele: %d %q", r.status, r.find("decision-error").Text())
	}
	shown := olivia.get("/calls/" + c.ID).find("approval")
	if got := strings.Join(strings.Fields(shown.Find(`[data-testid="approval-by"]`).Text()+shown.Find(`[data-testid="approval-for"]`).Text()), " "); got != "olivia, for adele" {
		t.Errorf("the approval reads %q, want olivia, for adele", got)
	}
	got, err := e.q.Call(context.Background(), c.ID)
	if err != nil || got.Approvals[0].For != "adele" {
		t.Fatalf("stored approval: %v %+v", err, got.Approvals)
	}
	h := olivia.get("/history")
	if got := strings.Join(strings.Fields(h.find("row-decider").First().Text()+h.find("row-decider-for").First().Text()), " "); got != "olivia, for adele" {
		t.Errorf("the history row reads %q, want olivia, for adele", got)
	}

	// The page is read; then the delegation ends; then the click.
	c2 := e.submitOwned(vaultAgent, `{"tool":"vault.rotate","target":"secret:api","args":{}}`)
	presented, _ = olivia.get("/calls/" + c2.ID).find("approve-presented").Attr("value")
	id := adele.get("/account").find("delegation-row").AttrOr("data-delegation", "")
	if p := adele.post("/account/delegations/"+id+"/end", url.Values{"csrf": {adele.csrf()}}); p.status != http.StatusOK {
		t.Fatalf("adele ends it: %d %q", p.status, p.find("account-error").Text())
	}
	r = olivia.post("/calls/"+c2.ID+"/approve", url.Values{"csrf": {olivia.csrf()}, "digest": {c2.Digest}, "presented": {presented}, "for": {"adele"}})
	if r.status != http.StatusConflict || !strings.Contains(r.find("decision-error").Text(), "Reload the page") {
		t.Errorf("approving for adele after it ended: %d %q", r.status, r.find("decision-error").Text())
	}
	if got, err := e.q.Call(context.Background(), c2.ID); err != nil || len(got.Approvals) != 0 {
		t.Errorf("after the refusal: %v, %d approvals", err, len(got.Approvals))
	}
	if p := olivia.get("/calls/" + c2.ID); p.find("approve-for-choice").Length() != 0 || p.find("not-an-approver").Length() != 1 {
		t.Errorf("after it ended the page still offers approving for adele")
	}
	if row := olivia.get("/account").find("delegation-row"); row.AttrOr("data-state", "") != "ended" {
		t.Errorf("olivia's page shows the ended delegation as %q", row.AttrOr("data-state", ""))
	}
}

const tierToolsYAML = `tools:
  vault.rotate:
    description: Rotate a secret
    audience: vault-host
    target: '^secret:[a-z]+$'
    approvals: 1
    decide_within: 1h
    approvers: {roles: [admin]}
    escalate:
      - {after: 10m, add_roles: [operator]}
    args: {type: object, additionalProperties: false, properties: {}}
`

// TestEscalationPushedLive: an operator watches a call only admins may
// approve; when it reaches its tier, the page is pushed over its socket
// with the approve form and the wider condition, and the operator's
// approval is accepted.
func TestEscalationPushedLive(t *testing.T) {
	pol, err := policy.Parse([]byte(tierToolsYAML))
	if err != nil {
		t.Fatal(err)
	}
	e := newConsoleEnvTools(t, pol.Registry(), pol, nil)
	e.addUser("olivia", account.RoleOperator, rolePassword)
	c := e.submitOwned(vaultAgent, `{"tool":"vault.rotate","target":"secret:db","args":{}}`)
	olivia := e.browser()
	olivia.login("olivia", rolePassword)
	if p := olivia.get("/calls/" + c.ID); p.find("not-an-approver").Length() != 1 || p.find("approve-form").Length() != 0 {
		t.Fatalf("before the tier the page offers approving: %s", p.find("decide").Text())
	}
	if tier := olivia.get("/calls/" + c.ID).find("tier"); tier.Length() != 1 || tier.AttrOr("data-reached", "") != "false" ||
		!strings.Contains(tier.Text(), "adds role operator to who can approve") {
		t.Errorf("the page shows the tier as %q (reached %q)", tier.Text(), tier.AttrOr("data-reached", ""))
	}
	ws, _ := olivia.mustDial("/ws?call=" + c.ID)
	e.clock.Advance(10 * time.Minute)
	if _, err := e.q.EscalateDue(context.Background()); err != nil {
		t.Fatal(err)
	}
	msg := wsReadUntil(t, ws, `data-testid="approve-form"`)
	doc := fragmentDoc(t, msg)
	if got := strings.Join(strings.Fields(doc.Find(`[data-testid="approvers"]`).Last().Text()), " "); !strings.Contains(got, "roles admin, operator") {
		t.Errorf("the pushed page says who can approve: %q", got)
	}
	if tier := doc.Find(`[data-testid="tier"]`).Last(); tier.AttrOr("data-reached", "") != "true" {
		t.Errorf("the pushed page shows the tier not reached: %q", tier.Text())
	}
	presented, _ := doc.Find(`[data-testid="approve-presented"]`).Last().Attr("value")
	r := olivia.post("/calls/"+c.ID+"/approve", url.Values{"csrf": {olivia.csrf()}, "digest": {c.Digest}, "presented": {presented}})
	if r.status != http.StatusSeeOther {
		t.Fatalf("olivia approves after the tier: %d %q", r.status, r.find("decision-error").Text())
	}
}

// TestDelegationByAdminAndDisabling: an admin gives a delegation on an
// operator's behalf; an operator cannot give one for someone else;
// disabling the delegator on the admin page ends it on the record, with
// its audit entry, and the delegate is no longer offered to approve for
// them.
func TestDelegationByAdminAndDisabling(t *testing.T) {
	e := newPeopleConsole(t)
	e.addUser("omar", account.RoleOperator, rolePassword)
	adele, olivia := e.browser(), e.browser()
	adele.login("adele", rolePassword)
	olivia.login("olivia", rolePassword)
	if p := olivia.post("/account/delegations", url.Values{"csrf": {olivia.csrf()}, "delegator": {"owen"}, "delegate": {"olivia"}, "for": {"1d"}}); p.status != http.StatusForbidden {
		t.Errorf("an operator gives owen's delegation: %d %q", p.status, p.find("account-error").Text())
	}
	if p := adele.post("/account/delegations", url.Values{"csrf": {adele.csrf()}, "delegator": {"omar"}, "delegate": {"olivia"}, "for": {"8h"}}); p.status != http.StatusOK ||
		!strings.Contains(p.find("account-notice").Text(), "olivia may approve for omar") {
		t.Fatalf("adele for omar: %d %q %q", p.status, p.find("account-notice").Text(), p.find("account-error").Text())
	}
	if row := olivia.get("/account").find("delegation-row"); row.AttrOr("data-state", "") != "live" || !strings.Contains(row.Text(), "omar") {
		t.Fatalf("olivia's page: %q", row.Text())
	}
	if p := adele.post("/admin/users/omar/disable", url.Values{"csrf": {adele.csrf()}}); p.status != http.StatusOK {
		t.Fatalf("disable omar: %d", p.status)
	}
	if row := olivia.get("/account").find("delegation-row"); row.AttrOr("data-state", "") != "account_disabled" ||
		!strings.Contains(row.Find(`[data-testid="delegation-state"]`).Text(), "an account was disabled") {
		t.Errorf("after omar was disabled olivia's page shows %q: %q", row.AttrOr("data-state", ""), row.Text())
	}
	var reason string
	if err := e.db.SQL().QueryRow(`SELECT json_extract(details, '$.reason') FROM audit WHERE kind = 'delegation_ended'`).Scan(&reason); err != nil || reason != "account_disabled" {
		t.Errorf("the delegation_ended entry: %q, %v", reason, err)
	}
}
