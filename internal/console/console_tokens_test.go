package console

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
)

// TestOperatorTokensPage: a person makes their own operator token after a
// fresh login, sees its secret once, finds it listed (never its secret
// again), revokes it, and cannot revoke another person's; a sixth live
// token is refused; an old login is sent to log in again first.
func TestOperatorTokensPage(t *testing.T) {
	e := newConsoleEnv(t)
	e.addUser("olivia", account.RoleOperator, rolePassword)
	e.addUser("bob", account.RoleOperator, rolePassword)
	b := e.browser()
	b.login("olivia", rolePassword)
	if acct := b.get("/account"); acct.find("optokens-link").Length() != 1 {
		t.Error("the account page has no link to the operator tokens")
	}
	p := b.get("/account/tokens")
	if p.status != http.StatusOK || p.find("no-optokens").Length() != 1 || p.find("optoken-form").Length() != 1 || p.find("optoken-api-off").Length() != 1 {
		t.Fatalf("the tokens page of a fresh login: %d %s", p.status, p.body)
	}
	csrf := b.csrf()
	p = b.post("/account/tokens", url.Values{"csrf": {csrf}, "scope": {"decide"}, "days": {"30"}, "note": {"terminal"}})
	secret := strings.TrimSpace(p.find("optoken-secret").Text())
	if p.status != http.StatusOK || !strings.HasPrefix(secret, account.OperatorTokenPrefix) || p.find("optoken-new-scope").Text() != "decide" {
		t.Fatalf("make a token: %d %s", p.status, p.body)
	}
	tok, u, err := e.c.accounts.OperatorBySecret(context.Background(), secret)
	if err != nil || u.Name != "olivia" || tok.Scope != account.ScopeDecide || !tok.ExpiresAt.Equal(tok.CreatedAt.Add(30*24*time.Hour)) {
		t.Fatalf("the token made: %+v %v", tok, err)
	}
	list := b.get("/account/tokens")
	if list.find("optoken-row").Length() != 1 || strings.Contains(list.body, secret) || list.find("optoken-secret").Length() != 0 {
		t.Errorf("the list after making one shows %d rows, secret shown again: %t", list.find("optoken-row").Length(), strings.Contains(list.body, secret))
	}
	for _, bad := range []url.Values{
		{"scope": {"admin"}, "days": {"7"}},
		{"scope": {"read"}, "days": {"31"}},
		{"scope": {"read"}, "days": {"0"}},
	} {
		bad.Set("csrf", csrf)
		if p := b.post("/account/tokens", bad); p.status != http.StatusBadRequest || p.find("optoken-error").Length() != 1 {
			t.Errorf("make with %v: %d", bad, p.status)
		}
	}
	// Another person cannot revoke it.
	other := e.browser()
	other.login("bob", rolePassword)
	if p := other.post("/account/tokens/revoke", url.Values{"csrf": {other.csrf()}, "id": {tok.ID}}); p.status != http.StatusNotFound {
		t.Errorf("bob revoking olivia's token: %d", p.status)
	}
	if _, _, err := e.c.accounts.OperatorBySecret(context.Background(), secret); err != nil {
		t.Fatalf("the token after bob tried: %v", err)
	}
	// Four more, then a sixth is refused.
	for range account.MaxOperatorTokensPerAccount - 1 {
		if p := b.post("/account/tokens", url.Values{"csrf": {csrf}, "scope": {"read"}, "days": {"1"}}); p.status != http.StatusOK {
			t.Fatalf("make: %d", p.status)
		}
	}
	if full := b.get("/account/tokens"); full.find("optoken-full").Length() != 1 || full.find("optoken-form").Length() != 0 {
		t.Error("the page of a full account offers to make a token")
	}
	if p := b.post("/account/tokens", url.Values{"csrf": {csrf}, "scope": {"read"}, "days": {"1"}}); p.status != http.StatusConflict {
		t.Errorf("a sixth token: %d", p.status)
	}
	p = b.post("/account/tokens/revoke", url.Values{"csrf": {csrf}, "id": {tok.ID}})
	if p.status != http.StatusOK || p.find("optoken-notice").Length() != 1 {
		t.Fatalf("revoke: %d %s", p.status, p.body)
	}
	if _, _, err := e.c.accounts.OperatorBySecret(context.Background(), secret); err == nil {
		t.Error("a revoked token still works")
	}
	// An old login is asked to log in again.
	e.clock.Advance(FreshLogin + time.Second)
	if p := b.get("/account/tokens"); p.find("optoken-not-fresh").Length() != 1 || p.find("optoken-form").Length() != 0 {
		t.Error("an old login is offered the form")
	}
	if p := b.post("/account/tokens", url.Values{"csrf": {csrf}, "scope": {"read"}, "days": {"1"}}); p.status != http.StatusForbidden {
		t.Errorf("make after %v: %d", FreshLogin, p.status)
	}
	p = b.post("/account/tokens/reauth", url.Values{"csrf": {csrf}})
	if p.status != http.StatusSeeOther || p.header.Get("Location") != "/login?next=/account/tokens" {
		t.Errorf("reauth = %d → %q", p.status, p.header.Get("Location"))
	}
	// An auditor makes none.
	e.addUser("audrey", account.RoleAuditor, rolePassword)
	aud := e.browser()
	aud.login("audrey", rolePassword)
	if p := aud.get("/account/tokens"); p.find("optoken-not-decider").Length() != 1 || p.find("optoken-form").Length() != 0 {
		t.Error("an auditor is offered the form")
	}
	if p := aud.post("/account/tokens", url.Values{"csrf": {aud.csrf()}, "scope": {"read"}, "days": {"1"}}); p.status != http.StatusForbidden {
		t.Errorf("an auditor making a token: %d", p.status)
	}
	// Without CSRF nothing is made.
	if p := other.post("/account/tokens", url.Values{"scope": {"read"}, "days": {"1"}}); p.status == http.StatusOK {
		t.Errorf("make without csrf: %d", p.status)
	}
}

// TestApprovalThroughTheAPIShown: a call approved through the operator API
// says so on its page, and that nothing proves a person read it.
func TestApprovalThroughTheAPIShown(t *testing.T) {
	e := newConsoleEnv(t)
	e.addUser("olivia", account.RoleOperator, rolePassword)
	c := e.submit("agent:billing-bot", "payments-host",
		`{"tool":"payments.refund","target":"invoice:INV-42","args":{"amount_minor":1299,"currency":"USD","reason_code":"duplicate"}}`)
	if _, err := e.q.ApproveWith(context.Background(), queue.ApproveInput{Operator: "olivia", Channel: audit.ChannelAPI, CallID: c.ID,
		Digest: c.Digest, Listed: e.q.ListingToken("olivia", c)}); err != nil {
		t.Fatal(err)
	}
	b := e.browser()
	b.login("olivia", rolePassword)
	p := b.get("/calls/" + c.ID)
	if how := strings.TrimSpace(p.find("approval-how").Text()); !strings.HasPrefix(how, "through the operator API") {
		t.Errorf("the approval reads %q", how)
	}
	if p.find("approval-unattested").Length() != 1 {
		t.Error("the page does not say nothing proves what the approver was shown")
	}
}
