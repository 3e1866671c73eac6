package account_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/db"
)

// TestTokenNamesFollowAccountRule: a token's actor and audience are held to
// the account name rule, so no bidi control, invisible or look-alike
// character ever reaches a page or a terminal as a name.
func TestTokenNamesFollowAccountRule(t *testing.T) {
	d, err := db.Open(filepath.Join(t.TempDir(), "countersign.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, tc := range []struct {
		actor, audience string
		ok              bool
	}{
		{"agent:billing-bot", "payments-host", true},
		{"agent:ma\u202eiler", "mail-host", false},
		{"agent:mailer", "mail\u200b-host", false},
		{"agent:\u0440aypal", "payments-host", false}, // Cyrillic er
		{"agent:billing bot", "payments-host", false},
		{"agent:billing-bot", "payments host", false},
		{"agent:" + strings.Repeat("x", 64), "payments-host", false},
		{"-agent", "payments-host", false},
		{"policy:auto", "payments-host", false},
		{"agent:x", "console", true}, // the reserved names are actors' only
	} {
		s := account.NewService(d.Accounts(), nil)
		_, _, err := s.CreateToken(context.Background(), tc.actor, tc.audience, "", "test", "cli")
		if tc.ok && err != nil {
			t.Errorf("CreateToken(%q, %q) = %v, want success", tc.actor, tc.audience, err)
		}
		if !tc.ok && err == nil {
			t.Errorf("CreateToken(%q, %q) succeeded, want refused", tc.actor, tc.audience)
		}
		if !tc.ok && err != nil && !errors.Is(err, account.ErrTokenName) && !errors.Is(err, account.ErrReservedName) {
			t.Errorf("CreateToken(%q, %q) = %v, want account.ErrTokenName", tc.actor, tc.audience, err)
		}
	}
}
