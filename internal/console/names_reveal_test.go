package console

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/reveal"
)

// insertLegacyToken stores a token whose names break today's rule, as a
// database from before the rule could hold.
func insertLegacyToken(t *testing.T, e *consoleEnv, id, actor, audience, note string) {
	t.Helper()
	tok := account.Token{ID: id, Actor: actor, Audience: audience, Note: note, CreatedAt: time.Now().UTC().Truncate(time.Millisecond)}
	if err := e.db.Accounts().Update(context.Background(), func(tx account.Tx) error {
		return tx.InsertToken(tok, account.HashToken("cst_legacy_"+id))
	}); err != nil {
		t.Fatal(err)
	}
}

// TestTokenNamesRevealedOnAdmin: a token actor with a right-to-left
// override is refused at creation, and one already stored is shown with
// the override as a visible escape in the tokens table, never raw; the
// "token created" notice and every message naming an account go through
// the revealer too.
func TestTokenNamesRevealedOnAdmin(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	b := e.browser()
	b.login("adam", rolePassword)
	tok := b.csrf()
	p := b.post("/admin/tokens", url.Values{"csrf": {tok}, "actor": {"agent:ma\u202eiler"}, "audience": {"mail-host"}})
	if p.status != http.StatusBadRequest || !strings.Contains(p.find("admin-error").Text(), "like account names") {
		t.Errorf("creating a token with a bidi actor = %d %q, want 400 naming the rule", p.status, p.find("admin-error").Text())
	}
	p = b.post("/admin/tokens", url.Values{"csrf": {tok}, "actor": {"agent:mailer"}, "audience": {"mail\u2066-host"}})
	if p.status != http.StatusBadRequest {
		t.Errorf("creating a token with a bidi audience = %d, want 400", p.status)
	}
	p = b.post("/admin/tokens", url.Values{"csrf": {tok}, "actor": {"agent:mailer"}, "audience": {"mail-host"}})
	if p.status != http.StatusOK || p.find("new-token-actor").Text() != "agent:mailer" {
		t.Fatalf("creating a good token = %d, actor %q", p.status, p.find("new-token-actor").Text())
	}

	insertLegacyToken(t, e, "tok_legacy", "agent:ma\u202eiler", "mail\u200bhost", "note \u2067x")
	p = b.get("/admin")
	if strings.ContainsAny(p.body, "\u202e\u200b\u2067") {
		t.Error("the admin page carries a raw bidi control or invisible character")
	}
	row := p.doc.Find(`[data-token="tok_legacy"]`)
	if got := row.Find(`[data-testid="token-actor"]`).Text(); got != "agent:ma[U+202E]iler" {
		t.Errorf("legacy actor shown as %q, want agent:ma[U+202E]iler", got)
	}
	if got := row.Find(`[data-testid="token-audience"]`).Text(); got != "mail[U+200B]host" {
		t.Errorf("legacy audience shown as %q", got)
	}
	if row.Find(`[data-testid="token-actor"] [data-testid="escape"]`).Length() != 1 {
		t.Error("the escape is not marked as one")
	}
	// A name from the URL in a message is revealed too.
	p = b.post("/admin/users/"+url.PathEscape("ma\u202eiler")+"/disable", url.Values{"csrf": {tok}})
	if p.status != http.StatusNotFound || strings.Contains(p.body, "\u202e") || !strings.Contains(p.find("admin-error").Text(), "[U+202E]") {
		t.Errorf("disabling a bidi name = %d, message %q, want 404 with the escape", p.status, p.find("admin-error").Text())
	}
	p = b.post("/admin/tokens/"+url.PathEscape("tok_\u202e1")+"/revoke", url.Values{"csrf": {tok}})
	if strings.Contains(p.body, "\u202e") {
		t.Error("the revoke message carries a raw bidi control")
	}
}

func TestRevealString(t *testing.T) {
	for in, want := range map[string]string{
		"agent:mailer":       "agent:mailer",
		"agent:ma\u202eiler": "agent:ma[U+202E]iler",
		"a\nb":               `a\nb`,
		"x\u200by\x00":       "x[U+200B]y[U+0000]",
		"bad\xffbyte":        "bad[0xFF]byte",
	} {
		if got := reveal.String(in); got != want {
			t.Errorf("reveal.String(%q) = %q, want %q", in, got, want)
		}
	}
}
