package console

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/passkey"
	"github.com/countersign/countersign/internal/policy"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/server"
)

const peopleToolsYAML = `tools:
  vault.rotate:
    description: Rotate a secret
    audience: vault-host
    target: '^secret:[a-z]+$'
    approvals: 1
    approvers: {roles: [admin]}
    args: {type: object, additionalProperties: false, properties: {}}
  funds.transfer:
    description: Move money
    audience: bank-host
    target: '^account:[0-9]+$'
    approvals: 1
    approve_with: passkey
    args: {type: object, additionalProperties: false, properties: {}}
`

// newPeopleConsole is a console over tools with a reviewer condition and a
// passkey requirement, passkeys on, and the accounts olivia (operator),
// owen (operator, owner of the agents) and adele (admin).
func newPeopleConsole(t *testing.T) *consoleEnv {
	t.Helper()
	pol, err := policy.Parse([]byte(peopleToolsYAML))
	if err != nil {
		t.Fatal(err)
	}
	e := newConsoleEnvTools(t, pol.Registry(), pol, func(cfg *envConfig) {
		pk, err := passkey.New(passkey.Config{RPID: "localhost", Origins: []string{"http://localhost"},
			Ceremonies: cfg.Accounts.Oneshots("passkey", passkey.MaxCeremonies), Now: cfg.Now})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Console.Passkeys = pk
	})
	e.addUser("olivia", account.RoleOperator, rolePassword)
	e.addUser("owen", account.RoleOperator, rolePassword)
	e.addUser("adele", account.RoleAdmin, rolePassword)
	return e
}

var (
	vaultAgent = queue.Principal{Actor: "agent:vault", Audience: "vault-host", Owners: []string{"owen"}}
	bankAgent  = queue.Principal{Actor: "agent:bank", Audience: "bank-host", Owners: []string{"owen"}}
)

// submitOwned submits as who, owners included.
func (e *consoleEnv) submitOwned(who queue.Principal, body string) *queue.Call {
	e.t.Helper()
	c, _, err := e.q.Submit(context.Background(), who, []byte(body))
	if err != nil {
		e.t.Fatalf("submit %s: %v", body, err)
	}
	return c
}

func TestOwnersCannotApproveAndAreShown(t *testing.T) {
	e := newPeopleConsole(t)
	c := e.submitOwned(vaultAgent, `{"tool":"vault.rotate","target":"secret:db","args":{}}`)
	owen := e.browser()
	owen.login("owen", rolePassword)
	q := owen.get("/")
	card := q.doc.Find(`[data-testid="call-card"][data-call="` + c.ID + `"]`)
	if !card.HasClass("owned") || card.Find(`[data-testid="card-owned"]`).Length() != 1 {
		t.Errorf("the owner's card is not highlighted: %q", card.AttrOr("class", ""))
	}
	olivia := e.browser()
	olivia.login("olivia", rolePassword)
	if oq := olivia.get("/"); oq.doc.Find(`[data-call="`+c.ID+`"].owned`).Length() != 0 {
		t.Error("another operator's card is highlighted as theirs")
	}
	p := owen.get("/calls/" + c.ID)
	if p.find("owned-by-you").Length() != 1 || p.find("approve-form").Length() != 0 {
		t.Fatalf("the owner's call page offers approving: %s", p.find("decide").Text())
	}
	if got := strings.TrimSpace(p.find("owners").Text()); got != "owen" {
		t.Errorf("owners shown = %q", got)
	}
	// Posting the approval anyway is refused by the queue's rule.
	r := owen.post("/calls/"+c.ID+"/approve", url.Values{"csrf": {owen.csrf()}, "digest": {c.Digest}, "presented": {owen.presented(c.ID)}})
	if r.status != http.StatusForbidden || !strings.Contains(r.find("decision-error").Text(), "you own the agent") {
		t.Errorf("the owner's approve = %d %q", r.status, r.find("decision-error").Text())
	}
}

func TestApproversConditionShownAndEnforced(t *testing.T) {
	e := newPeopleConsole(t)
	c := e.submitOwned(vaultAgent, `{"tool":"vault.rotate","target":"secret:db","args":{}}`)
	olivia := e.browser()
	olivia.login("olivia", rolePassword)
	p := olivia.get("/calls/" + c.ID)
	if got := strings.Join(strings.Fields(p.find("approvers").Text()), " "); got != "only role admin, except the agent's owners" {
		t.Errorf("who can approve = %q", got)
	}
	if p.find("not-an-approver").Length() != 1 || p.find("approve").Length() != 0 || p.find("deny-form").Length() != 1 {
		t.Errorf("an operator outside the condition is offered approving, or not denying")
	}
	r := olivia.post("/calls/"+c.ID+"/approve", url.Values{"csrf": {olivia.csrf()}, "digest": {c.Digest}, "presented": {olivia.presented(c.ID)}})
	if r.status != http.StatusForbidden || !strings.Contains(r.find("decision-error").Text(), "only role admin may approve") {
		t.Errorf("approve outside the condition = %d %q", r.status, r.find("decision-error").Text())
	}
	adele := e.browser()
	adele.login("adele", rolePassword)
	if p := adele.get("/calls/" + c.ID); p.find("approve").Length() != 1 {
		t.Fatal("an admin is not offered approving")
	}
	r = adele.post("/calls/"+c.ID+"/approve", url.Values{"csrf": {adele.csrf()}, "digest": {c.Digest}, "presented": {adele.presented(c.ID)}})
	if r.status != http.StatusSeeOther {
		t.Fatalf("the admin's approve = %d %q", r.status, r.find("decision-error").Text())
	}
	got, _ := e.q.Call(context.Background(), c.ID)
	if got.Status != queue.StatusApproved {
		t.Errorf("status %s", got.Status)
	}
	p = adele.get("/calls/" + c.ID)
	if how := strings.Join(strings.Fields(p.find("approval-how").Text()), " "); how != "by click" {
		t.Errorf("approval says %q, want by click", how)
	}
}

func TestPasskeyRequiredRefusesAClick(t *testing.T) {
	e := newPeopleConsole(t)
	c := e.submitOwned(bankAgent, `{"tool":"funds.transfer","target":"account:42","args":{}}`)
	olivia := e.browser()
	olivia.login("olivia", rolePassword)
	p := olivia.get("/calls/" + c.ID)
	if p.find("passkey-required").Length() != 1 || p.find("approve").Length() != 0 || p.find("passkey-needed").Length() != 1 {
		t.Errorf("the call page of a passkey-only tool: required %d, click button %d, needed %d",
			p.find("passkey-required").Length(), p.find("approve").Length(), p.find("passkey-needed").Length())
	}
	r := olivia.post("/calls/"+c.ID+"/approve", url.Values{"csrf": {olivia.csrf()}, "digest": {c.Digest}, "presented": {olivia.presented(c.ID)}})
	if r.status != http.StatusForbidden || !strings.Contains(r.find("decision-error").Text(), "must be approved with a passkey") {
		t.Errorf("a click on a passkey-only call = %d %q", r.status, r.find("decision-error").Text())
	}
	// The command line's channel is refused too, and says what to do (the
	// control socket itself is tested through the real binary in e2e).
	_, err := e.q.Approve(context.Background(), "olivia", "cli", c.ID, c.Digest)
	if ae := server.ErrorOf(err); ae.Code != "passkey_required" || ae.Status != http.StatusForbidden {
		t.Errorf("Approve from the command line = %v (%d %s), want 403 passkey_required", err, ae.Status, ae.Code)
	}
	// Beginning a passkey approval without a passkey says what to do.
	begin := olivia.post("/calls/"+c.ID+"/passkey/begin", url.Values{"csrf": {olivia.csrf()}, "digest": {c.Digest}}, "Accept", "application/json")
	if begin.status != http.StatusConflict || !strings.Contains(begin.body, `"code":"no_passkey"`) {
		t.Errorf("begin without a passkey = %d %s", begin.status, begin.body)
	}
	// And the owner cannot begin one at all.
	owen := e.browser()
	owen.login("owen", rolePassword)
	begin = owen.post("/calls/"+c.ID+"/passkey/begin", url.Values{"csrf": {owen.csrf()}, "digest": {c.Digest}}, "Accept", "application/json")
	if begin.status != http.StatusForbidden || !strings.Contains(begin.body, `"code":"owner"`) {
		t.Errorf("the owner's begin = %d %s", begin.status, begin.body)
	}
	if got, _ := e.q.Call(context.Background(), c.ID); got.Status != queue.StatusPending {
		t.Errorf("status %s", got.Status)
	}
}

func TestTokenOwnersOnTheAdminPage(t *testing.T) {
	e := newPeopleConsole(t)
	adele := e.browser()
	adele.login("adele", rolePassword)
	r := adele.post("/admin/tokens", url.Values{"csrf": {adele.csrf()}, "actor": {"agent:x"}, "audience": {"x-host"},
		"owners": {"owen, team:payments"}})
	if r.status != http.StatusOK || r.find("new-token").Length() != 1 {
		t.Fatalf("create token = %d %q", r.status, r.find("admin-error").Text())
	}
	if got := strings.TrimSpace(r.doc.Find(`[data-testid="token-owners"]`).First().Text()); got != "owen, team:payments, adele" {
		t.Errorf("owners listed = %q", got)
	}
	toks, _ := e.c.cfg.Accounts.Tokens(context.Background())
	if len(toks) != 1 || strings.Join(toks[0].Owners, "|") != "owen|team:payments|adele" {
		t.Errorf("stored owners = %v", toks)
	}
	r = adele.post("/admin/tokens", url.Values{"csrf": {adele.csrf()}, "actor": {"agent:y"}, "audience": {"x-host"}, "owners": {"bad name"}})
	if r.status != http.StatusBadRequest || !strings.Contains(r.find("admin-error").Text(), "team:GROUP") {
		t.Errorf("a bad owner = %d %q", r.status, r.find("admin-error").Text())
	}
}

// TestTokenCreatorOwnsTheAgent: the admin who makes a token in the console
// is shown its secret and can run the agent with it, so they are one of its
// owners and do not approve its calls; another admin does.
func TestTokenCreatorOwnsTheAgent(t *testing.T) {
	e := newPeopleConsole(t)
	e.addUser("ada", account.RoleAdmin, rolePassword)
	adele := e.browser()
	adele.login("adele", rolePassword)
	r := adele.post("/admin/tokens", url.Values{"csrf": {adele.csrf()}, "actor": {"agent:v"}, "audience": {"vault-host"}})
	if r.status != http.StatusOK || r.find("new-token").Length() != 1 {
		t.Fatalf("create token = %d %q", r.status, r.find("admin-error").Text())
	}
	toks, _ := e.c.cfg.Accounts.Tokens(context.Background())
	if len(toks) != 1 || strings.Join(toks[0].Owners, "|") != "adele" {
		t.Fatalf("stored owners = %v, want the creator", toks[0].Owners)
	}
	tok := toks[0]
	who := queue.Principal{Actor: tok.Actor, Audience: tok.Audience, TokenID: tok.ID, Owners: tok.Owners}
	c, _, err := e.q.Submit(context.Background(), who, []byte(`{"tool":"vault.rotate","target":"secret:kv","args":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	p := adele.post("/calls/"+c.ID+"/approve", url.Values{"csrf": {adele.csrf()}, "digest": {c.Digest}, "presented": {adele.presented(c.ID)}})
	if p.status != http.StatusForbidden {
		t.Errorf("the creator's approval = %d, want 403 owner", p.status)
	}
	ada := e.browser()
	ada.login("ada", rolePassword)
	if p := ada.post("/calls/"+c.ID+"/approve", url.Values{"csrf": {ada.csrf()}, "digest": {c.Digest}, "presented": {ada.presented(c.ID)}}); p.status != http.StatusSeeOther {
		t.Errorf("another admin's approval = %d, want 303", p.status)
	}
}
