package console

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/passkey"
)

func newPasskeyEnv(t *testing.T) *consoleEnv {
	t.Helper()
	e := newConsoleEnvWith(t, func(cfg *envConfig) {
		pk, err := passkey.New(passkey.Config{RPID: "localhost", Origins: []string{"http://localhost"},
			Ceremonies: cfg.Accounts.Oneshots("passkey", passkey.MaxCeremonies), Now: cfg.Now})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Console.Passkeys = pk
	})
	e.addUser("olivia", account.RoleOperator, rolePassword)
	return e
}

func TestPasskeyRegistrationNeedsAFreshLogin(t *testing.T) {
	e := newPasskeyEnv(t)
	b := e.browser()
	b.login("olivia", rolePassword)
	acct := b.get("/account")
	if acct.find("passkey-register-form").Length() != 1 || acct.find("no-passkeys").Length() != 1 {
		t.Fatalf("a fresh login's account page offers no registration: %s", acct.body)
	}
	// The test server is reached at 127.0.0.1, not at the RP ID localhost.
	if acct.find("passkey-wrong-host").Length() != 1 {
		t.Error("the page does not say passkeys need the host name localhost")
	}
	csrf := b.csrf()
	p := b.post("/account/passkeys/begin", url.Values{"csrf": {csrf}}, "Accept", "application/json")
	var begun struct {
		Ceremony string `json:"ceremony"`
		Options  struct {
			PublicKey struct {
				Challenge string `json:"challenge"`
				RP        struct {
					ID string `json:"id"`
				} `json:"rp"`
				AuthenticatorSelection struct {
					UserVerification string `json:"userVerification"`
				} `json:"authenticatorSelection"`
			} `json:"publicKey"`
		} `json:"options"`
	}
	if err := json.Unmarshal([]byte(p.body), &begun); err != nil || p.status != http.StatusOK || begun.Ceremony == "" {
		t.Fatalf("begin = %d %s (%v)", p.status, p.body, err)
	}
	if pk := begun.Options.PublicKey; pk.RP.ID != "localhost" || pk.AuthenticatorSelection.UserVerification != "required" || pk.Challenge == "" {
		t.Errorf("options = %+v", pk)
	}
	// A made-up answer is refused and stores nothing.
	p = b.post("/account/passkeys/finish", url.Values{"csrf": {csrf}, "ceremony": {begun.Ceremony}, "name": {"key"},
		"response": {`{"id":"x"}`}}, "Accept", "application/json")
	if p.status != http.StatusBadRequest || !strings.Contains(p.body, `"code":"passkey_`) {
		t.Errorf("finish with garbage = %d %s", p.status, p.body)
	}
	// Later, the same session may no longer register.
	e.clock.Advance(FreshLogin + time.Second)
	if acct := b.get("/account"); acct.find("passkey-not-fresh").Length() != 1 || acct.find("passkey-register-form").Length() != 0 {
		t.Errorf("an old login still offers registration")
	}
	p = b.post("/account/passkeys/begin", url.Values{"csrf": {csrf}}, "Accept", "application/json")
	if p.status != http.StatusForbidden || !strings.Contains(p.body, `"code":"login_not_fresh"`) {
		t.Errorf("begin after %v = %d %s", FreshLogin, p.status, p.body)
	}
	// Logging in again is one button away, and comes back here.
	p = b.post("/account/reauth", url.Values{"csrf": {csrf}})
	if p.status != http.StatusSeeOther || p.header.Get("Location") != "/login?next=/account" {
		t.Fatalf("reauth = %d → %q", p.status, p.header.Get("Location"))
	}
	if q := b.get("/"); q.status != http.StatusSeeOther {
		t.Error("the old session survived reauth")
	}
	lp := b.get("/login?next=/account")
	token, _ := lp.doc.Find(`form[data-testid="login-form"] input[name="csrf"]`).Attr("value")
	next, _ := lp.doc.Find(`form[data-testid="login-form"] input[name="next"]`).Attr("value")
	p = b.post("/login", url.Values{"csrf": {token}, "name": {"olivia"}, "password": {rolePassword}, "next": {next}})
	if p.status != http.StatusSeeOther || p.header.Get("Location") != "/account" {
		t.Fatalf("login with next = %d → %q", p.status, p.header.Get("Location"))
	}
	if acct := b.get("/account"); acct.find("passkey-register-form").Length() != 1 {
		t.Error("a fresh login again offers no registration")
	}
	// A login never sends the browser off the console.
	fresh := e.browser()
	lp = fresh.get("/login")
	token, _ = lp.doc.Find(`form[data-testid="login-form"] input[name="csrf"]`).Attr("value")
	p = fresh.post("/login", url.Values{"csrf": {token}, "name": {"olivia"}, "password": {rolePassword}, "next": {"//evil.example/"}})
	if p.status != http.StatusSeeOther || p.header.Get("Location") != "/" {
		t.Errorf("login with an outside next → %q", p.header.Get("Location"))
	}
}

func TestPasskeysOff(t *testing.T) {
	e := newConsoleEnv(t)
	e.addUser("olivia", account.RoleOperator, rolePassword)
	b := e.browser()
	b.login("olivia", rolePassword)
	if acct := b.get("/account"); acct.find("passkeys-off").Length() != 1 {
		t.Error("the account page should say passkeys are off")
	}
	if p := b.post("/account/passkeys/begin", url.Values{"csrf": {b.csrf()}}); p.status != http.StatusNotFound {
		t.Errorf("begin with passkeys off = %d", p.status)
	}
}
