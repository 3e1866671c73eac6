package db

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
)

// testHash is a valid argon2id PHC string; storage does not check the
// password, only the form.
const testHash = "$argon2id$v=19$m=64,t=1,p=1$c2FsdHNhbHRzYWx0c2FsdA$0N6TpYgHaAKN1dFqWZq7N0N6TpYgHaAKN1dFqWZq7N0"

func openTestDB(t *testing.T) *DB {
	t.Helper()
	d, err := Open(filepath.Join(t.TempDir(), "countersign.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

type auditRow struct{ kind, principal, channel, details string }

func auditRows(t *testing.T, d *DB) []auditRow {
	t.Helper()
	rows, err := d.SQL().Query(`SELECT kind, principal, channel, details FROM audit ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []auditRow
	for rows.Next() {
		var r auditRow
		if err := rows.Scan(&r.kind, &r.principal, &r.channel, &r.details); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

func TestAddUserAudited(t *testing.T) {
	ctx := context.Background()
	d := openTestDB(t)
	u, err := accountsOf(d).AddUser(ctx, "alice", account.RoleOperator, testHash, "cli:root", audit.ChannelCLI)
	if err != nil {
		t.Fatal(err)
	}
	if u.Name != "alice" || u.Role != account.RoleOperator || u.Disabled() {
		t.Errorf("AddUser = %+v", u)
	}
	got, err := accountsOf(d).UserByName(ctx, "alice")
	if err != nil || got.PasswordHash != testHash || got.Role != account.RoleOperator {
		t.Errorf("UserByName = %+v, %v", got, err)
	}
	rows := auditRows(t, d)
	if len(rows) != 1 || rows[0].kind != audit.KindUserAdded || rows[0].principal != "cli:root" || rows[0].channel != "cli" ||
		!strings.Contains(rows[0].details, `"user":"alice"`) || !strings.Contains(rows[0].details, `"role":"operator"`) {
		t.Errorf("audit = %+v, want one user_added entry for alice", rows)
	}
	if _, err := accountsOf(d).AddUser(ctx, "alice", account.RoleAdmin, testHash, "x", audit.ChannelCLI); !errors.Is(err, account.ErrUserExists) {
		t.Errorf("second AddUser = %v, want account.ErrUserExists", err)
	}
	for _, bad := range []struct{ name, role, hash string }{
		{"bad name", "operator", testHash},
		{"bob", "root", testHash},
		{"bob", "operator", "plaintext"},
	} {
		if _, err := accountsOf(d).AddUser(ctx, bad.name, account.Role(bad.role), bad.hash, "x", audit.ChannelCLI); err == nil {
			t.Errorf("AddUser(%q, %q, %q) = nil error", bad.name, bad.role, bad.hash)
		}
	}
	if n := len(auditRows(t, d)); n != 1 {
		t.Errorf("audit entries after refused adds = %d, want 1", n)
	}
	if _, err := accountsOf(d).UserByName(ctx, "nobody"); !errors.Is(err, account.ErrUserNotFound) {
		t.Errorf("UserByName(nobody) = %v, want account.ErrUserNotFound", err)
	}
	if res, err := d.VerifyChain(ctx); err != nil || !res.OK {
		t.Errorf("VerifyChain = %+v, %v", res, err)
	}
}

func TestDisableUserRevokesSessions(t *testing.T) {
	ctx := context.Background()
	d := openTestDB(t)
	now := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	for _, n := range []string{"alice", "bob"} {
		if _, err := accountsOf(d).AddUser(ctx, n, account.RoleOperator, testHash, "admin", audit.ChannelWeb); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []struct{ id, user string }{{"a1", "alice"}, {"a2", "alice"}, {"b1", "bob"}} {
		if _, err := accountsOf(d).CreateSession(ctx, s.id, s.user, "csrf-"+s.id, now); err != nil {
			t.Fatal(err)
		}
	}
	if err := accountsOf(d).DisableUser(ctx, "alice", "admin", audit.ChannelWeb); err != nil {
		t.Fatal(err)
	}
	got, err := accountsOf(d).Sessions(ctx, []string{"a1", "a2", "b1", "zz"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("Sessions = %d rows, want 3", len(got))
	}
	for id, want := range map[string]bool{"a1": true, "a2": true, "b1": false} {
		s := got[id]
		if s.Revoked() != want {
			t.Errorf("session %s revoked = %v, want %v", id, s.Revoked(), want)
		}
		if want && (s.RevokeReason != "disabled" || !s.User.Disabled()) {
			t.Errorf("session %s reason %q, user disabled %v; want disabled", id, s.RevokeReason, s.User.Disabled())
		}
	}
	rows := auditRows(t, d)
	last := rows[len(rows)-1]
	if last.kind != audit.KindUserDisabled || !strings.Contains(last.details, `"sessions_ended":2`) {
		t.Errorf("last audit entry = %+v, want user_disabled with 2 sessions ended", last)
	}
	if err := accountsOf(d).DisableUser(ctx, "alice", "admin", audit.ChannelWeb); !errors.Is(err, account.ErrUserDisabled) {
		t.Errorf("second DisableUser = %v, want account.ErrUserDisabled", err)
	}
	if err := accountsOf(d).DisableUser(ctx, "nobody", "admin", audit.ChannelWeb); !errors.Is(err, account.ErrUserNotFound) {
		t.Errorf("DisableUser(nobody) = %v, want account.ErrUserNotFound", err)
	}
	if n := len(auditRows(t, d)); n != len(rows) {
		t.Errorf("refused disables wrote audit entries: %d, want %d", n, len(rows))
	}
}

func TestSessionLifecycle(t *testing.T) {
	ctx := context.Background()
	d := openTestDB(t)
	now := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	if _, err := accountsOf(d).AddUser(ctx, "carol", account.RoleAuditor, testHash, "admin", audit.ChannelCLI); err != nil {
		t.Fatal(err)
	}
	if _, err := accountsOf(d).CreateSession(ctx, "h1", "carol", "tok", now); err != nil {
		t.Fatal(err)
	}
	if _, err := accountsOf(d).CreateSession(ctx, "h1", "carol", "tok", now); err == nil {
		t.Error("a second session with the same id was accepted")
	}
	if _, err := accountsOf(d).CreateSession(ctx, "h2", "nobody", "tok", now); err == nil {
		t.Error("a session for an unknown user was accepted")
	}
	if err := accountsOf(d).TouchSession(ctx, "h1", now.Add(5*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := accountsOf(d).TouchSession(ctx, "h1", now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	s, err := accountsOf(d).Session(ctx, "h1")
	if err != nil {
		t.Fatal(err)
	}
	if !s.LastSeen.Equal(now.Add(5*time.Minute)) || !s.CreatedAt.Equal(now) || s.CSRF != "tok" || s.User.Role != account.RoleAuditor {
		t.Errorf("Session = %+v", s)
	}
	if err := accountsOf(d).RevokeSession(ctx, "h1", "logout", now.Add(6*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := accountsOf(d).RevokeSession(ctx, "h1", "idle", now.Add(7*time.Minute)); err != nil {
		t.Fatal(err)
	}
	s, _ = accountsOf(d).Session(ctx, "h1")
	if !s.Revoked() || s.RevokeReason != "logout" || !s.RevokedAt.Equal(now.Add(6*time.Minute)) {
		t.Errorf("after revoke: %+v, want revoked by logout at +6m", s)
	}
	if err := accountsOf(d).TouchSession(ctx, "h1", now.Add(8*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if s2, _ := accountsOf(d).Session(ctx, "h1"); !s2.LastSeen.Equal(s.LastSeen) {
		t.Error("touching a revoked session moved last_seen")
	}
	if _, err := accountsOf(d).Session(ctx, "nope"); !errors.Is(err, account.ErrSessionNotFound) {
		t.Errorf("Session(nope) = %v, want account.ErrSessionNotFound", err)
	}
	n, err := accountsOf(d).PruneSessions(ctx, now.Add(time.Second))
	if err != nil || n != 1 {
		t.Errorf("PruneSessions = %d, %v; want 1", n, err)
	}
}

func TestSessionsManyIDs(t *testing.T) {
	ctx := context.Background()
	d := openTestDB(t)
	now := time.Now()
	if _, err := accountsOf(d).AddUser(ctx, "dave", account.RoleOperator, testHash, "admin", audit.ChannelCLI); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 450 {
		id := strings.Repeat("x", i%5) + time.Duration(i).String()
		ids = append(ids, id)
		if _, err := accountsOf(d).CreateSession(ctx, id, "dave", "t", now); err != nil {
			t.Fatal(err)
		}
	}
	got, err := accountsOf(d).Sessions(ctx, ids)
	if err != nil || len(got) != len(ids) {
		t.Errorf("Sessions(450 ids) = %d, %v; want 450", len(got), err)
	}
}

func TestConsoleSecretStable(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "countersign.db")
	d, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	a, err := accountsOf(d).ConsoleSecret(ctx, "cookie-hash", 32)
	if err != nil || len(a) != 32 {
		t.Fatalf("ConsoleSecret = %d bytes, %v", len(a), err)
	}
	b, _ := accountsOf(d).ConsoleSecret(ctx, "cookie-block", 32)
	if bytes.Equal(a, b) {
		t.Error("two secrets are equal")
	}
	d.Close()
	d, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	again, _ := accountsOf(d).ConsoleSecret(ctx, "cookie-hash", 32)
	if !bytes.Equal(a, again) {
		t.Error("the secret changed after reopening the database")
	}
}
