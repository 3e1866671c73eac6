package db

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/oneshot"
	"github.com/countersign/countersign/internal/testkit"
)

// Kinds are kept apart, and a key is stored only as its hash.
func TestOneshotsKindsApartKeyHashed(t *testing.T) {
	ctx := context.Background()
	d := openTestDB(t)
	svc := accountsOf(d)
	a, b := svc.Oneshots("oidc", 10), svc.Oneshots("passkey", 10)
	if err := a.Put(ctx, "the-key", []byte("login"), time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Take(ctx, "the-key"); !errors.Is(err, oneshot.ErrNotFound) {
		t.Errorf("another kind took it: %v", err)
	}
	if n := countRows(t, d.SQL(), `SELECT COUNT(*) FROM oneshots WHERE key_hash LIKE '%the-key%'`); n != 0 {
		t.Errorf("%d rows hold the key in clear", n)
	}
	if v, _, err := a.Take(ctx, "the-key"); err != nil || string(v) != "login" {
		t.Errorf("Take = %q, %v", v, err)
	}
}

// ssoFixture is a database with one local account (alice) and a clock.
type ssoFixture struct {
	d     *DB
	svc   *account.Service
	clock *testkit.Clock
	ids   int
}

func newSSOFixture(t *testing.T) *ssoFixture {
	t.Helper()
	f := &ssoFixture{d: openTestDB(t), clock: testkit.NewClock(epoch)}
	f.svc = account.NewService(f.d.Accounts(), f.clock.Now)
	if _, err := f.svc.AddUser(context.Background(), "alice", account.RoleAdmin, testHash, "cli", audit.ChannelCLI); err != nil {
		t.Fatal(err)
	}
	return f
}

const testIssuer = "https://idp.example.com/realms/main"

func ssoLogin(sub, preferred string, role account.Role, groups ...string) account.OIDCLogin {
	return account.OIDCLogin{Principal: "oidc:idp.example.com/" + sub, Issuer: testIssuer, Subject: sub,
		PreferredUsername: preferred, DisplayName: "Name of " + sub, Email: sub + "@example.com", Groups: groups, Role: role}
}

func (f *ssoFixture) login(t *testing.T, l account.OIDCLogin) (account.User, string, error) {
	t.Helper()
	f.ids++
	id := strings.Repeat("s", 10) + string(rune('a'+f.ids%26)) + l.Subject + f.clock.Now().String()
	u, _, err := f.svc.LoginOIDC(context.Background(), l, account.NewSession{IDHash: id, CSRF: "c", IDToken: "tok-" + l.Subject})
	return u, id, err
}

func (f *ssoFixture) kinds(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, r := range auditRows(t, f.d) {
		out = append(out, r.kind)
	}
	return out
}

func TestLoginOIDCCreatesThenUpdates(t *testing.T) {
	ctx := context.Background()
	f := newSSOFixture(t)
	u, sid, err := f.login(t, ssoLogin("00u1", "bob", account.RoleOperator, "approvers"))
	if err != nil {
		t.Fatal(err)
	}
	if u.Name != "oidc:idp.example.com/00u1" || u.Kind != account.KindOIDC || u.ShortName != "bob" || u.Role != account.RoleOperator {
		t.Fatalf("user = %+v", u)
	}
	s, err := f.svc.Session(ctx, sid)
	if err != nil || s.User.Name != u.Name || s.Method != account.MethodOIDC || s.IDToken != "tok-00u1" ||
		s.User.Email != "00u1@example.com" || len(s.User.Groups) != 1 || s.User.Groups[0] != "approvers" {
		t.Fatalf("session = %+v, %v", s, err)
	}
	rows := auditRows(t, f.d)
	last := rows[len(rows)-1]
	if last.kind != audit.KindUserAdded || last.principal != u.Name || !strings.Contains(last.details, `"subject":"00u1"`) ||
		!strings.Contains(last.details, `"via":"oidc"`) {
		t.Errorf("audit = %+v", last)
	}

	// The same identity logs in again with another name and role: the
	// account is the same, updated and audited.
	f.clock.Advance(time.Second)
	u2, _, err := f.login(t, ssoLogin("00u1", "robert", account.RoleAdmin, "approvers", "sre"))
	if err != nil {
		t.Fatal(err)
	}
	if u2.Name != u.Name || u2.ShortName != "robert" || u2.Role != account.RoleAdmin || !u2.CreatedAt.Equal(u.CreatedAt) {
		t.Fatalf("after the second login = %+v", u2)
	}
	rows = auditRows(t, f.d)
	last = rows[len(rows)-1]
	if last.kind != audit.KindUserUpdated || !strings.Contains(last.details, `"previous_role":"operator"`) ||
		!strings.Contains(last.details, `"changed":["role","short_name","groups"]`) {
		t.Errorf("audit = %+v", last)
	}
	// A login that changes nothing adds no audit entry.
	n := len(rows)
	if _, _, err := f.login(t, ssoLogin("00u1", "robert", account.RoleAdmin, "approvers", "sre")); err != nil {
		t.Fatal(err)
	}
	if got := len(auditRows(t, f.d)); got != n {
		t.Errorf("audit entries %d after an unchanged login, want %d", got, n)
	}
	users, _ := f.svc.Users(ctx)
	if len(users) != 2 {
		t.Errorf("users = %d, want alice and one single-sign-on account", len(users))
	}
}

func TestLoginOIDCRoleRemovedAtNextLogin(t *testing.T) {
	ctx := context.Background()
	f := newSSOFixture(t)
	u, sid, err := f.login(t, ssoLogin("00u2", "carol", account.RoleOperator, "approvers"))
	if err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Second)
	if _, _, err := f.login(t, ssoLogin("00u2", "carol", "", "everyone")); !errors.Is(err, account.ErrNoRole) {
		t.Fatalf("login without a mapped group = %v, want ErrNoRole", err)
	}
	got, err := f.svc.UserByName(ctx, u.Name)
	if err != nil || got.Role != "" || got.CanDecide() {
		t.Fatalf("user after losing the group = %+v, %v; want no role", got, err)
	}
	if s, _ := f.svc.Session(ctx, sid); !s.Revoked() || s.RevokeReason != "no_role" {
		t.Errorf("earlier session = %+v, want ended (no_role)", s)
	}
	rows := auditRows(t, f.d)
	last := rows[len(rows)-1]
	if last.kind != audit.KindUserUpdated || !strings.Contains(last.details, `"role":""`) || !strings.Contains(last.details, `"sessions_ended":1`) {
		t.Errorf("audit = %+v", last)
	}
	// The group comes back: so does the role.
	f.clock.Advance(time.Second)
	if u, _, err := f.login(t, ssoLogin("00u2", "carol", account.RoleAuditor, "audit")); err != nil || u.Role != account.RoleAuditor {
		t.Fatalf("login with a group again = %+v, %v", u, err)
	}
	if got, _ := f.svc.UserByName(ctx, u.Name); got.Role != account.RoleAuditor {
		t.Errorf("role = %q, want auditor", got.Role)
	}
	// Someone never seen, with no role: nothing stored.
	n := len(auditRows(t, f.d))
	if _, _, err := f.login(t, ssoLogin("00u9", "dave", "")); !errors.Is(err, account.ErrNoRole) {
		t.Fatalf("unknown user with no role = %v", err)
	}
	if _, err := f.svc.UserByName(ctx, "oidc:idp.example.com/00u9"); !errors.Is(err, account.ErrUserNotFound) {
		t.Errorf("a user with no role was stored: %v", err)
	}
	if got := len(auditRows(t, f.d)); got != n {
		t.Errorf("audit grew by %d for a refused stranger", got-n)
	}
}

func TestLoginOIDCRefusals(t *testing.T) {
	ctx := context.Background()
	f := newSSOFixture(t)
	if _, _, err := f.login(t, ssoLogin("00u3", "erin", account.RoleOperator)); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		login account.OIDCLogin
		check func(error) bool
	}{
		{"shadows a local account", ssoLogin("00u4", "alice", account.RoleOperator),
			func(err error) bool { var se *account.ShadowError; return errors.As(err, &se) && se.Local }},
		{"shadows a local account in another case", ssoLogin("00u4", "ALICE", account.RoleOperator),
			func(err error) bool { var se *account.ShadowError; return errors.As(err, &se) && se.Local }},
		{"shadows another single-sign-on account", ssoLogin("00u4", "Erin", account.RoleOperator),
			func(err error) bool { var se *account.ShadowError; return errors.As(err, &se) && !se.Local }},
		{"principal with a space", account.OIDCLogin{Principal: "oidc:idp.example.com/a b", Issuer: testIssuer, Subject: "a b", Role: account.RoleOperator},
			func(err error) bool { return errors.Is(err, account.ErrBadPrincipal) }},
		{"principal too long", ssoLogin(strings.Repeat("x", 400), "", account.RoleOperator),
			func(err error) bool { return errors.Is(err, account.ErrBadPrincipal) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := len(auditRows(t, f.d))
			_, sid, err := f.login(t, tt.login)
			if !tt.check(err) {
				t.Fatalf("err = %v", err)
			}
			if _, err := f.svc.Session(ctx, sid); !errors.Is(err, account.ErrSessionNotFound) {
				t.Errorf("a refused login opened a session: %v", err)
			}
			if got := len(auditRows(t, f.d)); got != n {
				t.Errorf("a refused login wrote %d audit entries", got-n)
			}
		})
	}
	// A preferred_username that is not a valid name is not shown; the
	// login goes through.
	u, _, err := f.login(t, ssoLogin("00u5", "Frank Smith", account.RoleOperator))
	if err != nil || u.ShortName != "" || u.Shown() != "Name of 00u5" {
		t.Errorf("login with an unusable username = %+v, %v", u, err)
	}
	// A disabled account cannot sign on; its short name no longer blocks
	// others.
	if err := f.svc.DisableUser(ctx, "oidc:idp.example.com/00u3", "alice", audit.ChannelWeb); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.login(t, ssoLogin("00u3", "erin", account.RoleOperator)); !errors.Is(err, account.ErrLoginDisabled) {
		t.Errorf("disabled login = %v, want ErrLoginDisabled", err)
	}
	if _, _, err := f.login(t, ssoLogin("00u6", "erin", account.RoleOperator)); err != nil {
		t.Errorf("name of a disabled single-sign-on account: %v", err)
	}
	// A local account may not take a single-sign-on user's shown name.
	var se *account.ShadowError
	if _, err := f.svc.AddUser(ctx, "Erin", account.RoleOperator, testHash, "alice", audit.ChannelWeb); !errors.As(err, &se) {
		t.Errorf("AddUser(Erin) = %v, want ShadowError", err)
	}
	if _, err := f.svc.AddUser(ctx, "oidc:x", account.RoleOperator, testHash, "alice", audit.ChannelWeb); !errors.Is(err, account.ErrBadName) {
		t.Errorf("AddUser(oidc:x) = %v, want ErrBadName", err)
	}
}

func TestEndSessionsAudited(t *testing.T) {
	ctx := context.Background()
	f := newSSOFixture(t)
	u, sid, err := f.login(t, ssoLogin("00u7", "gina", account.RoleOperator))
	if err != nil {
		t.Fatal(err)
	}
	_, sid2, _ := f.login(t, ssoLogin("00u7", "gina", account.RoleOperator))
	n, err := f.svc.EndSessions(ctx, u.Name, "alice", audit.ChannelWeb)
	if err != nil || n != 2 {
		t.Fatalf("EndSessions = %d, %v; want 2", n, err)
	}
	for _, id := range []string{sid, sid2} {
		if s, _ := f.svc.Session(ctx, id); !s.Revoked() || s.RevokeReason != "ended_by_admin" {
			t.Errorf("session %+v not ended", s)
		}
	}
	rows := auditRows(t, f.d)
	last := rows[len(rows)-1]
	if last.kind != audit.KindSessionsEnded || last.principal != "alice" || !strings.Contains(last.details, `"sessions_ended":2`) {
		t.Errorf("audit = %+v", last)
	}
	if _, err := f.svc.EndSessions(ctx, "nobody", "alice", audit.ChannelWeb); !errors.Is(err, account.ErrUserNotFound) {
		t.Errorf("EndSessions(nobody) = %v", err)
	}
}

func TestPasskeysStored(t *testing.T) {
	ctx := context.Background()
	f := newSSOFixture(t)
	h, err := f.svc.UserHandle(ctx, "alice")
	if err != nil || len(h) != 32 {
		t.Fatalf("UserHandle = %x, %v", h, err)
	}
	if h2, _ := f.svc.UserHandle(ctx, "alice"); !bytes.Equal(h, h2) {
		t.Error("the user handle changed between calls")
	}
	pk := account.Passkey{ID: []byte{1, 2, 3}, User: "alice", Name: "laptop", PublicKey: []byte{9, 9}, SignCount: 4,
		Record: []byte(`{"id":"AQID"}`), CreatedAt: f.clock.Now()}
	if err := f.svc.AddPasskey(ctx, pk, audit.ChannelWeb); err != nil {
		t.Fatal(err)
	}
	if err := f.svc.AddPasskey(ctx, pk, audit.ChannelWeb); err == nil {
		t.Error("the same credential registered twice")
	}
	got, err := f.svc.Passkeys(ctx, "alice")
	if err != nil || len(got) != 1 || got[0].Name != "laptop" || got[0].SignCount != 4 || !bytes.Equal(got[0].PublicKey, pk.PublicKey) ||
		string(got[0].Record) != string(pk.Record) {
		t.Fatalf("Passkeys = %+v, %v", got, err)
	}
	if _, _, err := f.login(t, ssoLogin("00u8", "hank", account.RoleOperator)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.RemovePasskey(ctx, "oidc:idp.example.com/00u8", pk.ID, "hank", audit.ChannelWeb); !errors.Is(err, account.ErrPasskeyNotFound) {
		t.Errorf("removing another user's passkey = %v, want ErrPasskeyNotFound", err)
	}
	if _, err := f.svc.RemovePasskey(ctx, "alice", pk.ID, "alice", audit.ChannelWeb); err != nil {
		t.Fatal(err)
	}
	if got, _ := f.svc.Passkeys(ctx, "alice"); len(got) != 0 {
		t.Errorf("after removal: %+v", got)
	}
	kinds := f.kinds(t)
	if !strings.Contains(strings.Join(kinds, ","), "passkey_registered,user_added,passkey_removed") {
		t.Errorf("audit kinds = %v", kinds)
	}
	rows := auditRows(t, f.d)
	for _, r := range rows {
		if r.kind == audit.KindPasskeyAdded && (!strings.Contains(r.details, `"public_key":"CQk"`) || !strings.Contains(r.details, `"credential_id":"AQID"`)) {
			t.Errorf("registration entry = %s", r.details)
		}
	}
	if res, err := f.d.VerifyChain(ctx); err != nil || !res.OK {
		t.Errorf("VerifyChain = %+v, %v", res, err)
	}
}

// A provider that calls someone by a reserved name cannot make them pass
// for a rule or for the console.
func TestLoginOIDCReservedNames(t *testing.T) {
	f := newSSOFixture(t)
	for _, name := range []string{"console", "Console", "policy:auto-refunds", "system:expiry"} {
		_, _, err := f.login(t, ssoLogin("00r-"+strings.NewReplacer(":", "-").Replace(name), name, account.RoleOperator))
		if !errors.Is(err, account.ErrReservedName) {
			t.Errorf("login as %q = %v, want ErrReservedName", name, err)
		}
	}
}

// TestSetPasswordRefusesSingleSignOn: a single-sign-on account has no
// password here, whoever asks; nothing is written or audited.
func TestSetPasswordRefusesSingleSignOn(t *testing.T) {
	ctx := context.Background()
	f := newSSOFixture(t)
	u, sid, err := f.login(t, ssoLogin("00u8", "hana", account.RoleOperator))
	if err != nil {
		t.Fatal(err)
	}
	hash, err := account.Hash("a long enough password")
	if err != nil {
		t.Fatal(err)
	}
	before := len(auditRows(t, f.d))
	for _, self := range []bool{true, false} {
		if _, err := f.svc.SetPassword(ctx, u.Name, hash, self, "alice", audit.ChannelWeb); !errors.Is(err, account.ErrSSOPassword) {
			t.Errorf("SetPassword of a single-sign-on account (self %v) = %v, want ErrSSOPassword", self, err)
		}
	}
	if got, _ := f.svc.UserByName(ctx, u.Name); got.PasswordHash != "" || got.MustChangePassword {
		t.Errorf("single-sign-on account after a refused password = %+v", got)
	}
	if s, _ := f.svc.Session(ctx, sid); s.Revoked() {
		t.Errorf("a refused password ended the session: %+v", s)
	}
	if n := len(auditRows(t, f.d)); n != before {
		t.Errorf("a refused password was audited: %d rows, want %d", n, before)
	}
}
