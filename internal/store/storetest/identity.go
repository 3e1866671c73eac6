package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/oneshot"
	"github.com/countersign/countersign/internal/oneshot/oneshottest"
)

func ssoUser(sub, short string, role account.Role) account.User {
	return account.User{Name: "oidc:idp.example.com/" + sub, Role: role, Kind: account.KindOIDC,
		Issuer: "https://idp.example.com", Subject: sub, ShortName: short, DisplayName: "Name " + sub,
		Email: sub + "@example.com", Groups: []string{"approvers", "everyone"}, CreatedAt: t0, LastLoginAt: t0}
}

var _ = add("accounts/single sign-on users", func(t *testing.T, s Stores) {
	ctx := context.Background()
	bob := ssoUser("00u1", "Bob", account.RoleOperator)
	addUser(t, s, "alice", account.RoleAdmin)
	accountUpdate(t, s, func(tx account.Tx) error { return tx.InsertUser(bob) })
	if got, err := s.Accounts.User(ctx, bob.Name); err != nil || !reflect.DeepEqual(got, bob) {
		t.Errorf("User = %+v, %v; want %+v", got, err, bob)
	}
	accountUpdate(t, s, func(tx account.Tx) error {
		got, err := tx.UserByIdentity(bob.Issuer, bob.Subject)
		if err != nil || !reflect.DeepEqual(got, bob) {
			t.Errorf("UserByIdentity = %+v, %v", got, err)
		}
		if _, err := tx.UserByIdentity(bob.Issuer, "00u2"); !errors.Is(err, account.ErrUserNotFound) {
			t.Errorf("UserByIdentity of another subject = %v, want ErrUserNotFound", err)
		}
		if _, err := tx.UserByIdentity("https://other.example.com", bob.Subject); !errors.Is(err, account.ErrUserNotFound) {
			t.Errorf("UserByIdentity at another issuer = %v, want ErrUserNotFound", err)
		}
		// Names and short names, ignoring case.
		for name, want := range map[string][]string{
			"bob": {bob.Name}, "BOB": {bob.Name}, "Alice": {"alice"}, "carol": nil, bob.Name: {bob.Name},
		} {
			us, err := tx.UsersNamed(name)
			var got []string
			for _, u := range us {
				got = append(got, u.Name)
			}
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("UsersNamed(%q) = %v, %v; want %v", name, got, err, want)
			}
		}
		return nil
	})
	// One identity is one account, whatever name it would come under.
	twin := bob
	twin.Name = "oidc:moved.example.com/00u1"
	if err := s.Accounts.Update(ctx, func(tx account.Tx) error { return tx.InsertUser(twin) }); !errors.Is(err, account.ErrUserExists) {
		t.Errorf("InsertUser of an identity already stored = %v, want ErrUserExists", err)
	}

	// A login refreshes what the provider says; no role, then a role again.
	later := t0.Add(time.Hour)
	upd := bob
	upd.ShortName, upd.DisplayName, upd.Email, upd.Groups, upd.LastLoginAt = "robert", "Robert", "r@example.com", []string{"sre"}, later
	upd.Role = ""
	accountUpdate(t, s, func(tx account.Tx) error { return tx.UpdateOIDCUser(upd) })
	got, err := s.Accounts.User(ctx, bob.Name)
	if err != nil || !reflect.DeepEqual(got, upd) || got.CanDecide() {
		t.Errorf("after a login with no role: %+v, %v; want %+v", got, err, upd)
	}
	upd.Role, upd.Groups = account.RoleAdmin, nil
	accountUpdate(t, s, func(tx account.Tx) error { return tx.UpdateOIDCUser(upd) })
	if got, err := s.Accounts.User(ctx, bob.Name); err != nil || !reflect.DeepEqual(got, upd) {
		t.Errorf("after a login as admin: %+v, %v; want %+v", got, err, upd)
	}
	for _, name := range []string{"alice", "oidc:idp.example.com/nobody"} {
		u := upd
		u.Name = name
		if err := s.Accounts.Update(ctx, func(tx account.Tx) error { return tx.UpdateOIDCUser(u) }); !errors.Is(err, account.ErrUserNotFound) {
			t.Errorf("UpdateOIDCUser(%s) = %v, want ErrUserNotFound (only single-sign-on accounts)", name, err)
		}
	}

	// The WebAuthn handle, kept for good.
	handle := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	accountUpdate(t, s, func(tx account.Tx) error { return tx.SetUserHandle(bob.Name, handle) })
	if got, _ := s.Accounts.User(ctx, bob.Name); !reflect.DeepEqual(got.Handle, handle) {
		t.Errorf("Handle = %x, want %x", got.Handle, handle)
	}
	if err := s.Accounts.Update(ctx, func(tx account.Tx) error { return tx.SetUserHandle("nobody", handle) }); !errors.Is(err, account.ErrUserNotFound) {
		t.Errorf("SetUserHandle(nobody) = %v", err)
	}

	// A session remembers how it logged in, and the ID token for logout.
	sess := account.Session{IDHash: "sso1", User: upd, CSRF: "c", Method: account.MethodOIDC, IDToken: "eyJ.x.y",
		CreatedAt: later, LastSeen: later}
	sess.User.Handle = handle
	insertSession(t, s, sess)
	if got, err := s.Accounts.Session(ctx, "sso1"); err != nil || !reflect.DeepEqual(got, sess) {
		t.Errorf("Session = %+v, %v; want %+v", got, err, sess)
	}
})

var _ = add("accounts/passkeys", func(t *testing.T, s Stores) {
	ctx := context.Background()
	addUser(t, s, "alice", account.RoleOperator)
	addUser(t, s, "bob", account.RoleOperator)
	k1 := account.Passkey{ID: []byte{1, 1}, User: "alice", Name: "laptop", PublicKey: []byte{0xa5, 1, 2}, SignCount: 7,
		Record: []byte(`{"id":"AQE"}`), CreatedAt: t0}
	k2 := account.Passkey{ID: []byte{2, 2}, User: "alice", Name: "YubiKey 5C", PublicKey: []byte{0xa5, 3}, SignCount: 0,
		Record: []byte(`{"id":"AgI"}`), CreatedAt: t0.Add(time.Minute)}
	accountUpdate(t, s, func(tx account.Tx) error {
		if err := tx.InsertPasskey(k2); err != nil {
			return err
		}
		return tx.InsertPasskey(k1)
	})
	if got, err := s.Accounts.Passkeys(ctx, "alice"); err != nil || !reflect.DeepEqual(got, []account.Passkey{k1, k2}) {
		t.Errorf("Passkeys = %+v, %v; want both, oldest first", got, err)
	}
	if got, err := s.Accounts.Passkeys(ctx, "bob"); err != nil || len(got) != 0 {
		t.Errorf("bob's passkeys = %+v, %v", got, err)
	}
	taken := k1
	taken.User = "bob"
	if err := s.Accounts.Update(ctx, func(tx account.Tx) error { return tx.InsertPasskey(taken) }); !errors.Is(err, account.ErrPasskeyTaken) {
		t.Errorf("a credential registered twice = %v, want ErrPasskeyTaken", err)
	}
	for _, c := range []struct {
		user string
		id   []byte
	}{{"bob", k1.ID}, {"alice", []byte{9}}} {
		err := s.Accounts.Update(ctx, func(tx account.Tx) error { _, err := tx.DeletePasskey(c.user, c.id); return err })
		if !errors.Is(err, account.ErrPasskeyNotFound) {
			t.Errorf("DeletePasskey(%s, %x) = %v, want ErrPasskeyNotFound", c.user, c.id, err)
		}
	}
	accountUpdate(t, s, func(tx account.Tx) error {
		got, err := tx.DeletePasskey("alice", k1.ID)
		if err == nil && !reflect.DeepEqual(got, k1) {
			t.Errorf("DeletePasskey returned %+v", got)
		}
		left, _ := tx.Passkeys("alice")
		if !reflect.DeepEqual(left, []account.Passkey{k2}) {
			t.Errorf("in the transaction, left %+v", left)
		}
		return err
	})
	// A rolled-back removal removes nothing.
	_ = s.Accounts.Update(ctx, func(tx account.Tx) error {
		if _, err := tx.DeletePasskey("alice", k2.ID); err != nil {
			return err
		}
		return errRollback
	})
	if got, _ := s.Accounts.Passkeys(ctx, "alice"); !reflect.DeepEqual(got, []account.Passkey{k2}) {
		t.Errorf("after a rolled-back removal: %+v", got)
	}
})

var oneshotKinds atomic.Int64

var _ = add("accounts/oneshots", func(t *testing.T, s Stores) {
	oneshottest.Run(t, func(t *testing.T, max int, now func() time.Time) oneshot.Store {
		// Each subtest its own kind, so they share the database and
		// nothing else.
		return account.NewService(s.Accounts, now).Oneshots(fmt.Sprint("k", oneshotKinds.Add(1)), max)
	})
})

// An account holds at most account.MaxPasskeys passkeys: one more is
// refused with nothing stored, and another account's are not counted.
var _ = add("accounts/passkeys are bounded per account", func(t *testing.T, s Stores) {
	ctx := context.Background()
	a := account.NewService(s.Accounts, func() time.Time { return t0 })
	addUser(t, s, "alice", account.RoleOperator)
	addUser(t, s, "bob", account.RoleOperator)
	key := func(user string, i int) account.Passkey {
		return account.Passkey{ID: []byte(fmt.Sprintf("%s-%d", user, i)), User: user, Name: fmt.Sprint("key ", i),
			PublicKey: []byte{0xa5, byte(i)}, Record: []byte(`{}`), CreatedAt: t0}
	}
	if err := a.AddPasskey(ctx, key("bob", 0), audit.ChannelWeb); err != nil {
		t.Fatal(err)
	}
	for i := range account.MaxPasskeys {
		if err := a.AddPasskey(ctx, key("alice", i), audit.ChannelWeb); err != nil {
			t.Fatalf("alice's passkey %d: %v", i+1, err)
		}
	}
	if err := a.AddPasskey(ctx, key("alice", account.MaxPasskeys), audit.ChannelWeb); !errors.Is(err, account.ErrTooManyPasskeys) {
		t.Errorf("alice's passkey %d = %v, want account.ErrTooManyPasskeys", account.MaxPasskeys+1, err)
	}
	if got, err := s.Accounts.Passkeys(ctx, "alice"); err != nil || len(got) != account.MaxPasskeys {
		t.Errorf("alice's passkeys = %d, %v; want %d", len(got), err, account.MaxPasskeys)
	}
	if err := a.AddPasskey(ctx, key("bob", 1), audit.ChannelWeb); err != nil {
		t.Errorf("bob's second passkey: %v", err)
	}
})
