package console

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/policy"
	"github.com/countersign/countersign/internal/queue"
)

// allowanceTools are three tools that opt into allowances: refunds one
// operator approves, payouts that need two, and key rotations only an
// admin approves, each typing the key's name.
const allowanceTools = `tools:
  payments.refund:
    description: Refund an invoice
    audience: payments-host
    target: '^invoice:INV-[0-9]+$'
    display:
      money: {amount: /amount_minor, currency: /currency}
    allowance: {max_uses: 20, max_for: 1h, vary: [target, /amount_minor]}
    args:
      type: object
      additionalProperties: false
      required: [amount_minor, currency]
      properties:
        amount_minor: {type: integer, minimum: 1, maximum: 5000000}
        currency: {type: string, enum: [USD, EUR]}
  payments.payout:
    description: Pay a supplier
    audience: payments-host
    target: '^supplier:[a-z]+$'
    approvals: 2
    allowance: {max_uses: 10, max_for: 1h, vary: [/amount_minor]}
    args:
      type: object
      additionalProperties: false
      required: [amount_minor]
      properties:
        amount_minor: {type: integer, minimum: 1, maximum: 900000}
  keys.rotate:
    description: Rotate a signing key
    audience: vault-host
    target: '^key:[a-z-]+$'
    approvers: {roles: [admin]}
    confirm: target
    allowance: {max_uses: 5, max_for: 30m, vary: [target]}
    args:
      type: object
      additionalProperties: false
      required: [why]
      properties:
        why: {type: string, enum: [schedule, leak]}
`

// newAllowanceEnv is a console over allowanceTools, its queue's Config
// adjusted (adjust may be nil), with one user per role (olivia, aude,
// adam) and a second operator, oscar.
func newAllowanceEnv(t *testing.T, adjust func(*queue.Config)) *consoleEnv {
	t.Helper()
	pol, err := policy.Parse([]byte(allowanceTools))
	if err != nil {
		t.Fatal(err)
	}
	e := newConsoleEnvQueueConfig(t, pol.Registry(), pol, adjust, nil)
	addRoleUsers(e)
	e.addUser("oscar", account.RoleOperator, rolePassword)
	return e
}

// give gives an allowance from call's page in b with choices (and extra
// fields posted with the give, such as confirm), and returns its id.
func give(t *testing.T, b *consoleBrowser, call *queue.Call, choices url.Values, extra url.Values) string {
	t.Helper()
	_, f := giveForm(t, b, call, choices)
	for k, v := range extra {
		f[k] = v
	}
	p := b.post("/calls/"+call.ID+"/allowance", f)
	loc := p.header.Get("Location")
	if p.status != http.StatusSeeOther || !strings.HasPrefix(loc, "/allowances/alw_") {
		t.Fatalf("give: %d %q %q", p.status, loc, p.find("allowance-error").Text())
	}
	return strings.TrimPrefix(strings.Split(loc, "?")[0], "/allowances/")
}

// card is allowance id's card on a list page.
func card(p *htmlPage, id string) *goquerySelection {
	return p.doc.Find(`[data-testid="allowance"][data-allowance="` + id + `"]`)
}

func cardText(s *goquerySelection, testid string) string {
	return strings.Join(strings.Fields(s.Find(`[data-testid="`+testid+`"]`).Text()), " ")
}

var hexDigest = regexp.MustCompile(`^[0-9a-f]{64}$`)

// TestAllowancesList: the list shows each allowance with its scope in
// words, digest, giver, confirmers, uses left, until and state; the
// revocation is offered to whom may revoke, and asks for a reason; a
// refused revocation says why; one without the session's CSRF token
// changes nothing; an auditor reads the list, with nothing to do.
func TestAllowancesList(t *testing.T) {
	e := newAllowanceEnv(t, nil)
	refund := e.submit("agent:billing-bot", "payments-host", `{"tool":"payments.refund","target":"invoice:INV-5001","args":{"amount_minor":1200,"currency":"USD"}}`)
	rotate := e.submit("agent:ops-bot", "vault-host", `{"tool":"keys.rotate","target":"key:signing","args":{"why":"schedule"}}`)
	olivia, adam, aude := e.browser(), e.browser(), e.browser()
	olivia.login("olivia", rolePassword)
	adam.login("adam", rolePassword)
	aude.login("aude", rolePassword)
	refundID := give(t, olivia, refund, url.Values{"uses": {"2"}, "minutes": {"30"}, "max:/amount_minor": {"5000"}}, nil)
	rotateID := give(t, adam, rotate, url.Values{"uses": {"3"}, "minutes": {"20"}}, url.Values{"confirm": {"key:signing"}})

	list := olivia.get("/allowances")
	if list.status != http.StatusOK || list.find("nav-allowances").Length() != 1 {
		t.Fatalf("the list: %d, nav link %d", list.status, list.find("nav-allowances").Length())
	}
	stored, err := e.q.Allowance(context.Background(), refundID)
	if err != nil {
		t.Fatal(err)
	}
	c := card(list, refundID)
	for testid, want := range map[string]string{
		"allowance-state":        "live",
		"allowance-uses-left":    "0 of 2 used, 2 left",
		"allowance-giver":        "olivia at",
		"allowance-confirmers":   "olivia (1 of 1 needed)",
		"allowance-scope-digest": stored.ScopeDigest,
		"allowance-words":        "up to 2 payments.refund calls by agent:billing-bot",
	} {
		if got := cardText(c, testid); !strings.Contains(got, want) {
			t.Errorf("the refund allowance's %s reads %q, want %q in it", testid, got, want)
		}
	}
	if !hexDigest.MatchString(cardText(c, "allowance-scope-digest")) {
		t.Errorf("the scope digest is shown as %q", cardText(c, "allowance-scope-digest"))
	}
	if c.Find(`[data-testid="allowance-until"] time`).Length() != 1 {
		t.Error("the card does not say until when")
	}
	if c.Find(`[data-testid="allowance-revoke-form"]`).Length() != 1 {
		t.Error("its giver is not offered the revocation")
	}
	if card(list, rotateID).Find(`[data-testid="allowance-revoke-form"]`).Length() != 0 {
		t.Error("an operator who may not approve key rotations is offered to revoke an allowance of them")
	}
	if got := card(adam.get("/allowances"), refundID).Find(`[data-testid="allowance-revoke-form"]`).Length(); got != 1 {
		t.Error("an admin is not offered the revocation")
	}
	if p := olivia.get("/allowances/" + rotateID); p.find("allowance-no-revoke").Length() != 1 {
		t.Error("the allowance's page does not say who revokes it")
	}

	// Refused: not someone who may revoke it. The page says why, and
	// what was typed stays.
	p := olivia.post("/allowances/"+rotateID+"/revoke", url.Values{"csrf": {olivia.csrf()}, "reason": {"not needed"}})
	if p.status != http.StatusForbidden || !strings.Contains(p.find("allowance-error").Text(), "giver") {
		t.Errorf("a revocation by an operator of another tool: %d %q", p.status, p.find("allowance-error").Text())
	}
	if got := p.find("allowance-revoke-reason").Text(); got != "" {
		t.Errorf("a page without the revocation form has a reason field: %q", got)
	}
	p = adam.post("/allowances/"+rotateID+"/revoke", url.Values{"csrf": {adam.csrf()}, "reason": {"  "}})
	if p.find("allowance-error").Length() != 1 || p.find("allowance-revoke-form").Length() != 1 {
		t.Errorf("a revocation without a reason: %d %q", p.status, p.find("allowance-error").Text())
	}
	// Without the session's CSRF token nothing changes.
	if p := adam.post("/allowances/"+rotateID+"/revoke", url.Values{"reason": {"x"}}); p.status != http.StatusForbidden {
		t.Errorf("a revocation without the CSRF token: %d", p.status)
	}
	if a, _ := e.q.Allowance(context.Background(), rotateID); a.Ended() {
		t.Fatalf("refused revocations ended the allowance: %s", a.EndReason)
	}

	// An auditor reads them, and is offered nothing to do.
	if p := aude.get("/allowances"); p.status != http.StatusOK || p.find("allowance").Length() != 2 || p.find("allowance-revoke-form").Length() != 0 {
		t.Errorf("an auditor's list: %d, %d allowances, %d revoke forms", p.status, p.find("allowance").Length(), p.find("allowance-revoke-form").Length())
	}
	if p := aude.post("/allowances/"+rotateID+"/revoke", url.Values{"csrf": {aude.csrf()}, "reason": {"audit"}}); p.status != http.StatusForbidden {
		t.Errorf("an auditor's revocation: %d", p.status)
	}

	// Revoked from the list's own form.
	form := c.Find(`[data-testid="allowance-revoke-form"]`)
	action, _ := form.Attr("action")
	csrf, _ := form.Find(`input[name="csrf"]`).Attr("value")
	if p := olivia.post(action, url.Values{"csrf": {csrf}, "reason": {"the duplicates are refunded"}}); p.status != http.StatusSeeOther {
		t.Fatalf("revoke from the list: %d %q", p.status, p.find("allowance-error").Text())
	}
	list = olivia.get("/allowances")
	c = card(list, refundID)
	if got := cardText(c, "allowance-state"); got != "ended: revoked" {
		t.Errorf("after its revocation the card's state reads %q", got)
	}
	if !strings.Contains(cardText(c, "allowance-ended"), "olivia") || c.Find(`[data-testid="allowance-revoke-form"]`).Length() != 0 {
		t.Errorf("the ended card: %q, revoke forms %d", cardText(c, "allowance-ended"), c.Find(`[data-testid="allowance-revoke-form"]`).Length())
	}

	if aude.get("/").find("nav-allowances").Length() != 1 || adam.get("/").find("nav-allowances").Length() != 1 {
		t.Error("the navigation does not link the allowances for an auditor or an admin")
	}
}
