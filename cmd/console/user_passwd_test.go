package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/db"
)

// TestUserPasswd: for oneself (no name, or one's own) the password is
// simply replaced; for another account it is set, marked to be changed at
// the next login, and that account's sessions end; a single-sign-on account
// is refused before any password is read, saying why; each change is
// audited.
func TestUserPasswd(t *testing.T) {
	data := t.TempDir()
	for _, name := range []string{"root", "alice"} {
		if code, _, errs := userRun(t, "a long enough password\n", "user", "add", name, "--role", "admin", "--password-stdin", "--data", data); code != 0 {
			t.Fatalf("user add %s = %d: %s", name, code, errs)
		}
	}
	open := func() (*db.DB, *account.Service) {
		d, err := db.Open(filepath.Join(data, "countersign.db"))
		if err != nil {
			t.Fatal(err)
		}
		return d, account.NewService(d.Accounts(), nil)
	}
	ctx := context.Background()
	d, svc := open()
	now := time.Now()
	for _, id := range []string{"a1", "a2"} {
		if _, err := svc.CreateSession(ctx, id, "alice", "csrf", now); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := svc.CreateSession(ctx, "r1", "root", "csrf", now); err != nil {
		t.Fatal(err)
	}
	err := d.Accounts().Update(ctx, func(tx account.Tx) error {
		return tx.InsertUser(account.User{Name: "oidc:idp.example.com/00u1", Role: account.RoleOperator, Kind: account.KindOIDC,
			Issuer: "https://idp.example.com", Subject: "00u1", CreatedAt: now})
	})
	if err != nil {
		t.Fatal(err)
	}
	d.Close()

	// Oneself ($USER is root in userRun): no must-change, sessions kept.
	code, out, errs := userRun(t, "my own new password\n", "user", "passwd", "--password-stdin", "--data", data)
	if code != 0 || !strings.Contains(out, "set the password of root") || strings.Contains(out, "next login") {
		t.Fatalf("user passwd (oneself) = %d, %q, %q", code, out, errs)
	}
	if code, _, errs := userRun(t, "and once more mine\n", "user", "passwd", "root", "--password-stdin", "--data", data); code != 0 {
		t.Fatalf("user passwd root (oneself by name) = %d: %s", code, errs)
	}
	// Another account.
	code, out, errs = userRun(t, "a temporary password\n", "user", "passwd", "alice", "--password-stdin", "--data", data)
	if code != 0 || !strings.Contains(out, "must choose their own at their next login") || !strings.Contains(out, "sessions ended: 2") {
		t.Fatalf("user passwd alice = %d, %q, %q", code, out, errs)
	}
	// Refusals: single sign-on (before any password is read), unknown,
	// too short, no password on a pipe without --password-stdin.
	for _, tc := range []struct {
		stdin string
		args  []string
		want  int
		says  string
	}{
		{"", []string{"oidc:idp.example.com/00u1"}, 1, "identity provider"},
		{"a long enough password\n", []string{"nobody", "--password-stdin"}, 1, "console user list shows the accounts"},
		{"short\n", []string{"alice", "--password-stdin"}, 2, "password"},
		{"a long enough password\n", []string{"alice"}, 2, "--password-stdin"},
		{"", []string{"alice", "bob"}, 2, "usage"},
	} {
		code, _, errs := userRun(t, tc.stdin, append(append([]string{"user", "passwd"}, tc.args...), "--data", data)...)
		if code != tc.want || !strings.Contains(errs, tc.says) {
			t.Errorf("user passwd %v = %d, %q; want %d saying %q", tc.args, code, errs, tc.want, tc.says)
		}
	}

	d, svc = open()
	defer d.Close()
	root, _ := svc.UserByName(ctx, "root")
	if root.MustChangePassword || account.Verify(root.PasswordHash, "and once more mine") != nil {
		t.Errorf("root after changing their own = %+v; want the new password, no must-change", root)
	}
	if s, err := svc.Session(ctx, "r1"); err != nil || s.Revoked() {
		t.Errorf("root's own session after changing their password = %+v, %v; want live", s, err)
	}
	alice, _ := svc.UserByName(ctx, "alice")
	if !alice.MustChangePassword || account.Verify(alice.PasswordHash, "a temporary password") != nil {
		t.Errorf("alice after an admin set it = %+v; want the new password, must change", alice)
	}
	for _, id := range []string{"a1", "a2"} {
		if s, err := svc.Session(ctx, id); err != nil || !s.Revoked() || s.RevokeReason != "password_reset" {
			t.Errorf("alice's session %s = %+v, %v; want ended (password_reset)", id, s, err)
		}
	}
	var kinds []string
	rows, err := d.SQL().Query(`SELECT principal || ' ' || json_extract(details, '$.user') || ' ' || json_extract(details, '$.must_change') || ' ' || json_extract(details, '$.sessions_ended')
		FROM audit WHERE kind = 'password_set' ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		rows.Scan(&k)
		kinds = append(kinds, k)
	}
	rows.Close()
	want := []string{"cli:root root 0 0", "cli:root root 0 0", "cli:root alice 1 2"}
	if strings.Join(kinds, "|") != strings.Join(want, "|") {
		t.Errorf("audit = %q, want %q", kinds, want)
	}
}
