package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
)

// TestTokenListRevealsNames: console token create refuses a bidi actor, and
// console token list shows a stored one as a visible escape, so a line of
// the listing cannot read backwards.
func TestTokenListRevealsNames(t *testing.T) {
	data := t.TempDir()
	if code, _, errs := userRun(t, "", "token", "create", "--actor", "agent:ma\u202eiler", "--audience", "mail-host", "--data", data); code != 1 || !strings.Contains(errs, "name rule") {
		t.Errorf("token create with a bidi actor = %d: %s", code, errs)
	}
	if code, _, errs := userRun(t, "", "token", "create", "--actor", "agent:mailer", "--audience", "mail-host", "--data", data); code != 0 {
		t.Fatalf("token create = %d: %s", code, errs)
	}
	d, err := openStore(context.Background(), data, "")
	if err != nil {
		t.Fatal(err)
	}
	tok := account.Token{ID: "tok_legacy", Actor: "agent:ma\u202eiler", Audience: "mail-host", Note: "\u2067note", CreatedAt: time.Now().UTC()}
	if err := d.accounts.Update(context.Background(), func(tx account.Tx) error {
		return tx.InsertToken(tok, account.HashToken("cst_legacy"))
	}); err != nil {
		t.Fatal(err)
	}
	d.Close()
	code, out, errs := userRun(t, "", "token", "list", "--data", data)
	if code != 0 {
		t.Fatalf("token list = %d: %s", code, errs)
	}
	if strings.ContainsAny(out, "\u202e\u2067") {
		t.Errorf("token list prints a raw bidi control:\n%s", out)
	}
	if !strings.Contains(out, "agent:ma[U+202E]iler") || !strings.Contains(out, "[U+2067]note") {
		t.Errorf("token list does not show the escapes:\n%s", out)
	}
}
