package console

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/passkey"
)

// One account opening prompts without end keeps only its own few and
// takes no room from another; a store full of other accounts' prompts is
// answered 503 passkey_prompts_full, never 500.
func TestPasskeyPromptsBoundedPerAccount(t *testing.T) {
	e := newConsoleEnvWith(t, func(cfg *envConfig) {
		// Room for two accounts' prompts, kept in the database.
		pk, err := passkey.New(passkey.Config{RPID: "localhost", Origins: []string{"http://localhost"},
			Ceremonies: cfg.Accounts.Oneshots("passkey", 2*passkey.MaxCeremoniesPerAccount), Now: cfg.Now})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Console.Passkeys = pk
	})
	begin := func(name string) (int, string) {
		b := e.browser()
		b.login(name, rolePassword)
		csrf := b.csrf()
		var p *htmlPage
		for range 4 * passkey.MaxCeremoniesPerAccount {
			p = b.post("/account/passkeys/begin", url.Values{"csrf": {csrf}}, "Accept", "application/json")
			if p.status != http.StatusOK {
				break
			}
		}
		return p.status, p.body
	}
	for _, name := range []string{"olivia", "oscar", "otto"} {
		e.addUser(name, account.RoleOperator, rolePassword)
	}
	if status, body := begin("olivia"); status != http.StatusOK {
		t.Fatalf("olivia's prompts = %d %s, want each to replace her oldest", status, body)
	}
	if status, body := begin("oscar"); status != http.StatusOK {
		t.Fatalf("oscar's prompt after olivia's = %d %s", status, body)
	}
	status, body := begin("otto")
	if status != http.StatusServiceUnavailable || !strings.Contains(body, `"code":"passkey_prompts_full"`) ||
		!strings.Contains(body, "Try again in two minutes") {
		t.Errorf("a prompt into a full store = %d %s, want 503 passkey_prompts_full saying what to do", status, body)
	}
}
