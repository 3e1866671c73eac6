package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
)

const passwordHash = "$argon2id$v=19$m=64,t=1,p=1$c2FsdHNhbHRzYWx0c2FsdA$0N6TpYgHaAKN1dFqWZq7N0N6TpYgHaAKN1dFqWZq7N0"

func accountUpdate(t *testing.T, s Stores, fn func(tx account.Tx) error) {
	t.Helper()
	if err := s.Accounts.Update(context.Background(), fn); err != nil {
		t.Fatalf("Update: %v", err)
	}
}

// insertSession stores sess and returns the id hashes of the sessions it
// ended.
func insertSession(t *testing.T, s Stores, sess account.Session) []string {
	t.Helper()
	var ended []string
	accountUpdate(t, s, func(tx account.Tx) error {
		var err error
		ended, err = tx.InsertSession(sess)
		return err
	})
	return ended
}

func addUser(t *testing.T, s Stores, name string, role account.Role) account.User {
	t.Helper()
	u := account.User{Name: name, Role: role, PasswordHash: passwordHash, Kind: account.KindLocal, CreatedAt: t0}
	accountUpdate(t, s, func(tx account.Tx) error { return tx.InsertUser(u) })
	return u
}

// A password set replaces the hash and sets or clears the must-change
// mark, which reads back on the user and on its sessions.
var _ = add("accounts/set password", func(t *testing.T, s Stores) {
	ctx := context.Background()
	addUser(t, s, "alice", account.RoleOperator)
	const other = "$argon2id$v=19$m=64,t=1,p=1$b3RoZXJzYWx0b3RoZXI$0N6TpYgHaAKN1dFqWZq7N0N6TpYgHaAKN1dFqWZq7N0"
	insertSession(t, s, account.Session{IDHash: "s1", User: account.User{Name: "alice"}, CSRF: "c", Method: account.MethodPassword, CreatedAt: t0, LastSeen: t0})
	for _, must := range []bool{true, false, true} {
		accountUpdate(t, s, func(tx account.Tx) error { return tx.SetPassword("alice", other, must) })
		got, err := s.Accounts.User(ctx, "alice")
		if err != nil || got.PasswordHash != other || got.MustChangePassword != must {
			t.Errorf("User after SetPassword(must change %v) = %+v, %v", must, got, err)
		}
		sess, err := s.Accounts.Session(ctx, "s1")
		if err != nil || sess.User.MustChangePassword != must {
			t.Errorf("Session's user after SetPassword(must change %v) = %+v, %v", must, sess.User, err)
		}
	}
	err := s.Accounts.Update(ctx, func(tx account.Tx) error { return tx.SetPassword("nobody", other, false) })
	if !errors.Is(err, account.ErrUserNotFound) {
		t.Errorf("SetPassword of an unknown name: %v, want account.ErrUserNotFound", err)
	}
	addUser(t, s, "bob", account.RoleOperator)
	if got, err := s.Accounts.User(ctx, "bob"); err != nil || got.MustChangePassword {
		t.Errorf("a new account must change its password: %+v", got)
	}
})

var _ = add("accounts/users", func(t *testing.T, s Stores) {
	ctx := context.Background()
	bob := addUser(t, s, "bob", account.RoleAuditor)
	alice := addUser(t, s, "alice", account.RoleOperator)
	if got, err := s.Accounts.User(ctx, "alice"); err != nil || !reflect.DeepEqual(got, alice) {
		t.Errorf("User = %+v, %v; want %+v", got, err, alice)
	}
	if _, err := s.Accounts.User(ctx, "nobody"); !errors.Is(err, account.ErrUserNotFound) {
		t.Errorf("User of an unknown name: %v, want account.ErrUserNotFound", err)
	}
	err := s.Accounts.Update(ctx, func(tx account.Tx) error { return tx.InsertUser(alice) })
	if !errors.Is(err, account.ErrUserExists) {
		t.Errorf("InsertUser of a taken name: %v, want account.ErrUserExists", err)
	}
	if got, err := s.Accounts.Users(ctx); err != nil || !reflect.DeepEqual(got, []account.User{alice, bob}) {
		t.Errorf("Users = %+v, %v; want alice and bob by name", got, err)
	}
	at := t0.Add(time.Hour)
	accountUpdate(t, s, func(tx account.Tx) error { return tx.DisableUser("alice", at) })
	got, err := s.Accounts.User(ctx, "alice")
	if err != nil || !got.DisabledAt.Equal(at) || !got.Disabled() || got.CanDecide() {
		t.Errorf("User after DisableUser = %+v, %v; want disabled at %v", got, err, at)
	}
	for name, want := range map[string]error{"alice": account.ErrUserDisabled, "nobody": account.ErrUserNotFound} {
		err := s.Accounts.Update(ctx, func(tx account.Tx) error { return tx.DisableUser(name, at) })
		if !errors.Is(err, want) {
			t.Errorf("DisableUser(%s) = %v, want %v", name, err, want)
		}
	}
	// A transaction sees its own writes.
	accountUpdate(t, s, func(tx account.Tx) error {
		if err := tx.InsertUser(account.User{Name: "carol", Role: account.RoleAdmin, PasswordHash: passwordHash, CreatedAt: t0}); err != nil {
			return err
		}
		u, err := tx.User("carol")
		if err == nil && u.Role != account.RoleAdmin {
			t.Errorf("User in the inserting transaction = %+v", u)
		}
		return err
	})
})

var _ = add("accounts/sessions", func(t *testing.T, s Stores) {
	ctx := context.Background()
	alice := addUser(t, s, "alice", account.RoleOperator)
	sess := account.Session{IDHash: "h1", User: alice, CSRF: "csrf", Method: account.MethodPassword, CreatedAt: t0, LastSeen: t0}
	insertSession(t, s, sess)
	if got, err := s.Accounts.Session(ctx, "h1"); err != nil || !reflect.DeepEqual(got, sess) {
		t.Errorf("Session = %+v, %v; want %+v", got, err, sess)
	}
	if _, err := s.Accounts.Session(ctx, "none"); !errors.Is(err, account.ErrSessionNotFound) {
		t.Errorf("Session of an unknown id: %v, want account.ErrSessionNotFound", err)
	}
	err := s.Accounts.Update(ctx, func(tx account.Tx) error {
		_, err := tx.InsertSession(account.Session{IDHash: "h2", User: account.User{Name: "nobody"}, CreatedAt: t0, LastSeen: t0})
		return err
	})
	if err == nil {
		t.Error("InsertSession of an unknown user succeeded")
	}
	// Touching moves last-seen forward, never back.
	accountUpdate(t, s, func(tx account.Tx) error { return tx.TouchSession("h1", t0.Add(5*time.Minute)) })
	accountUpdate(t, s, func(tx account.Tx) error { return tx.TouchSession("h1", t0.Add(time.Minute)) })
	if got, _ := s.Accounts.Session(ctx, "h1"); !got.LastSeen.Equal(t0.Add(5 * time.Minute)) {
		t.Errorf("LastSeen = %v, want %v", got.LastSeen, t0.Add(5*time.Minute))
	}
	// Revoking keeps the first reason; a revoked session is not touched.
	accountUpdate(t, s, func(tx account.Tx) error { return tx.RevokeSession("h1", "logout", t0.Add(6*time.Minute)) })
	accountUpdate(t, s, func(tx account.Tx) error { return tx.RevokeSession("h1", "idle", t0.Add(7*time.Minute)) })
	accountUpdate(t, s, func(tx account.Tx) error { return tx.TouchSession("h1", t0.Add(8*time.Minute)) })
	got, _ := s.Accounts.Session(ctx, "h1")
	if !got.Revoked() || got.RevokeReason != "logout" || !got.RevokedAt.Equal(t0.Add(6*time.Minute)) ||
		!got.LastSeen.Equal(t0.Add(5*time.Minute)) {
		t.Errorf("Session after revoke = %+v; want revoked for logout at %v, last seen unchanged", got, t0.Add(6*time.Minute))
	}
	// Disabling ends the user's live sessions, and only those.
	for i := range 3 {
		insertSession(t, s, account.Session{IDHash: fmt.Sprint("live", i), User: alice, CreatedAt: t0, LastSeen: t0})
	}
	var ended int64
	accountUpdate(t, s, func(tx account.Tx) error {
		var err error
		ended, err = tx.RevokeUserSessions("alice", "disabled", t0.Add(time.Hour))
		return err
	})
	if ended != 3 {
		t.Errorf("RevokeUserSessions ended %d, want the 3 live ones", ended)
	}
	if got, _ := s.Accounts.Session(ctx, "live0"); got.RevokeReason != "disabled" {
		t.Errorf("session after RevokeUserSessions: %+v", got)
	}
	var pruned int64
	accountUpdate(t, s, func(tx account.Tx) error {
		var err error
		pruned, err = tx.PruneSessions(t0.Add(time.Second))
		return err
	})
	if pruned != 4 {
		t.Errorf("PruneSessions = %d, want 4", pruned)
	}
})

// A login beyond account.MaxSessionsPerAccount ends that account's oldest
// live sessions, in its own transaction, and no other account's.
var _ = add("accounts/sessions are bounded per account, the oldest ended", func(t *testing.T, s Stores) {
	ctx := context.Background()
	alice, bob := addUser(t, s, "alice", account.RoleOperator), addUser(t, s, "bob", account.RoleOperator)
	for i := range 3 {
		insertSession(t, s, account.Session{IDHash: fmt.Sprint("bob", i), User: bob, CreatedAt: t0, LastSeen: t0})
	}
	const logins = 2*account.MaxSessionsPerAccount + 1
	endedAt := map[string]time.Time{}
	for i := range logins {
		at := t0.Add(time.Duration(i) * time.Second)
		id := fmt.Sprintf("alice%02d", i)
		for _, e := range insertSession(t, s, account.Session{IDHash: id, User: alice, CreatedAt: at, LastSeen: at}) {
			if _, ok := endedAt[e]; ok || e == id {
				t.Errorf("login %s ended %s again", id, e)
			}
			endedAt[e] = at
		}
	}
	if len(endedAt) != logins-account.MaxSessionsPerAccount {
		t.Errorf("logins ended %d sessions, want %d", len(endedAt), logins-account.MaxSessionsPerAccount)
	}
	for i := range logins {
		id := fmt.Sprintf("alice%02d", i)
		got, err := s.Accounts.Session(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if i >= logins-account.MaxSessionsPerAccount {
			if got.Revoked() {
				t.Errorf("session %s (one of the newest %d) ended: %+v", id, account.MaxSessionsPerAccount, got)
			}
			continue
		}
		// The oldest is ended by the login that makes one too many.
		want := t0.Add(time.Duration(i+account.MaxSessionsPerAccount) * time.Second)
		if !got.Revoked() || got.RevokeReason != account.SessionLimitReason || !got.RevokedAt.Equal(want) || !endedAt[id].Equal(want) {
			t.Errorf("session %s = revoked at %v for %q (returned at %v); want ended at %v for %q",
				id, got.RevokedAt, got.RevokeReason, endedAt[id], want, account.SessionLimitReason)
		}
	}
	for i := range 3 {
		if got, _ := s.Accounts.Session(ctx, fmt.Sprint("bob", i)); got.Revoked() {
			t.Errorf("bob's session %d ended by alice's logins: %+v", i, got)
		}
	}
})

var _ = add("accounts/many sessions at once", func(t *testing.T, s Stores) {
	ctx := context.Background()
	dave := addUser(t, s, "dave", account.RoleOperator)
	var want []string
	accountUpdate(t, s, func(tx account.Tx) error {
		for i := range 450 {
			id := fmt.Sprintf("s%03d", i)
			want = append(want, id)
			if _, err := tx.InsertSession(account.Session{IDHash: id, User: dave, CreatedAt: t0, LastSeen: t0}); err != nil {
				return err
			}
		}
		return nil
	})
	got, err := s.Accounts.Sessions(ctx, append(want, "unknown"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("Sessions found %d, want %d (unknown ids left out)", len(got), len(want))
	}
	for _, id := range want {
		if got[id].User.Name != "dave" {
			t.Fatalf("Sessions[%s] = %+v", id, got[id])
		}
	}
})

var _ = add("accounts/tokens", func(t *testing.T, s Stores) {
	ctx := context.Background()
	older := account.Token{ID: "tok_1", Actor: "agent:a", Audience: "pay-host", Note: "n", CreatedAt: t0}
	newer := account.Token{ID: "tok_2", Actor: "agent:b", Audience: "files-host", CreatedAt: t0.Add(time.Second)}
	accountUpdate(t, s, func(tx account.Tx) error {
		if err := tx.InsertToken(older, "hash-1"); err != nil {
			return err
		}
		return tx.InsertToken(newer, "hash-2")
	})
	if got, err := s.Accounts.TokenByHash(ctx, "hash-1"); err != nil || !reflect.DeepEqual(got, older) {
		t.Errorf("TokenByHash = %+v, %v; want %+v", got, err, older)
	}
	if got, err := s.Accounts.Tokens(ctx); err != nil || len(got) != 2 || got[0].ID != "tok_2" {
		t.Errorf("Tokens = %+v, %v; want newest first", got, err)
	}
	accountUpdate(t, s, func(tx account.Tx) error { return tx.RevokeToken("tok_1", t0.Add(time.Minute)) })
	if _, err := s.Accounts.TokenByHash(ctx, "hash-1"); !errors.Is(err, account.ErrTokenNotFound) {
		t.Errorf("TokenByHash of a revoked token: %v, want account.ErrTokenNotFound", err)
	}
	for _, id := range []string{"tok_1", "tok_none"} {
		err := s.Accounts.Update(ctx, func(tx account.Tx) error { return tx.RevokeToken(id, t0) })
		if !errors.Is(err, account.ErrTokenNotFound) {
			t.Errorf("RevokeToken(%s) = %v, want account.ErrTokenNotFound", id, err)
		}
	}
	got, _ := s.Accounts.Tokens(ctx)
	if len(got) != 2 || !got[1].RevokedAt.Equal(t0.Add(time.Minute)) {
		t.Errorf("Tokens after revoke = %+v; the revoked one is listed with its time", got)
	}
})

var _ = add("accounts/console secrets", func(t *testing.T, s Stores) {
	ctx := context.Background()
	err := s.Accounts.Update(ctx, func(tx account.Tx) error {
		_, err := tx.Secret("cookie-hash")
		return err
	})
	if !errors.Is(err, account.ErrSecretNotFound) {
		t.Fatalf("Secret before it is set: %v, want account.ErrSecretNotFound", err)
	}
	accountUpdate(t, s, func(tx account.Tx) error { return tx.InsertSecret("cookie-hash", []byte{1, 2, 3}) })
	accountUpdate(t, s, func(tx account.Tx) error {
		v, err := tx.Secret("cookie-hash")
		if err == nil && string(v) != "\x01\x02\x03" {
			t.Errorf("Secret = %v", v)
		}
		return err
	})
	if err := s.Accounts.Update(ctx, func(tx account.Tx) error { return tx.InsertSecret("cookie-hash", []byte{9}) }); err == nil {
		t.Error("a second InsertSecret of one name succeeded; a secret never changes once set")
	}
})

var _ = add("accounts/a password login is recorded as the account's last login", func(t *testing.T, s Stores) {
	ctx := context.Background()
	addUser(t, s, "alice", account.RoleOperator)
	addUser(t, s, "bob", account.RoleOperator)
	a := account.NewService(s.Accounts, func() time.Time { return t0 })
	at := t0.Add(90 * time.Minute)
	if _, err := a.CreateSession(ctx, "h-alice", "alice", "csrf", at); err != nil {
		t.Fatal(err)
	}
	users, err := a.Users(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range users {
		switch {
		case u.Name == "alice" && !u.LastLoginAt.Equal(at):
			t.Errorf("alice's last login = %v, want %v", u.LastLoginAt, at)
		case u.Name == "bob" && !u.LastLoginAt.IsZero():
			t.Errorf("bob never logged in, last login %v", u.LastLoginAt)
		}
	}
})
