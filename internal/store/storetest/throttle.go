package storetest

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
)

// The login throttle's failed logins, kept in the store so that every
// console process on one database throttles alike.

var _ = add("accounts/login strikes", func(t *testing.T, s Stores) {
	ctx := context.Background()
	a := account.Strikes{Key: account.ThrottleKey("account", "alice"), Failures: 3, Last: t0, Forget: t0.Add(time.Hour)}
	b := account.Strikes{Key: account.ThrottleKey("addr", "192.0.2.7"), Failures: 1, Last: t0.Add(time.Second), Forget: t0.Add(2 * time.Hour)}
	keys := []string{a.Key, b.Key, account.ThrottleKey("account", "nobody")}
	if got, err := s.Accounts.LoginStrikes(ctx, keys); err != nil || len(got) != 0 {
		t.Fatalf("LoginStrikes of an empty store = %+v, %v", got, err)
	}
	accountUpdate(t, s, func(tx account.Tx) error {
		if err := tx.SetLoginStrikes(a); err != nil {
			return err
		}
		if err := tx.SetLoginStrikes(b); err != nil {
			return err
		}
		// A transaction sees its own writes.
		got, err := tx.LoginStrikes(keys)
		if err == nil && !reflect.DeepEqual(got, map[string]account.Strikes{a.Key: a, b.Key: b}) {
			t.Errorf("in the transaction: %+v", got)
		}
		return err
	})
	want := map[string]account.Strikes{a.Key: a, b.Key: b}
	if got, err := s.Accounts.LoginStrikes(ctx, keys); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("LoginStrikes = %+v, %v; want %+v", got, err, want)
	}
	if got, err := s.Accounts.LoginStrikes(ctx, nil); err != nil || len(got) != 0 {
		t.Errorf("LoginStrikes of no keys = %+v, %v", got, err)
	}
	// Setting again replaces; zero failures delete.
	a2 := a
	a2.Failures, a2.Last, a2.Forget = 4, t0.Add(time.Minute), t0.Add(time.Minute+time.Hour)
	accountUpdate(t, s, func(tx account.Tx) error { return tx.SetLoginStrikes(a2) })
	if got, _ := s.Accounts.LoginStrikes(ctx, keys); !reflect.DeepEqual(got[a.Key], a2) {
		t.Errorf("after replacing: %+v, want %+v", got[a.Key], a2)
	}
	// A rolled-back change changes nothing.
	err := s.Accounts.Update(ctx, func(tx account.Tx) error {
		if err := tx.SetLoginStrikes(account.Strikes{Key: a.Key}); err != nil {
			return err
		}
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		t.Fatalf("rolled-back Update = %v", err)
	}
	if got, _ := s.Accounts.LoginStrikes(ctx, keys); !reflect.DeepEqual(got[a.Key], a2) {
		t.Errorf("after a rolled-back delete: %+v, want %+v", got[a.Key], a2)
	}
	accountUpdate(t, s, func(tx account.Tx) error { return tx.SetLoginStrikes(account.Strikes{Key: a.Key}) })
	if got, _ := s.Accounts.LoginStrikes(ctx, keys); !reflect.DeepEqual(got, map[string]account.Strikes{b.Key: b}) {
		t.Errorf("after deleting alice's: %+v", got)
	}
	// Pruning deletes what is forgotten by then, and only that.
	accountUpdate(t, s, func(tx account.Tx) error { return tx.SetLoginStrikes(a2) })
	accountUpdate(t, s, func(tx account.Tx) error { return tx.PruneLoginStrikes(a2.Forget) })
	if got, _ := s.Accounts.LoginStrikes(ctx, keys); !reflect.DeepEqual(got, map[string]account.Strikes{b.Key: b}) {
		t.Errorf("after pruning at alice's forget time: %+v, want the address's only", got)
	}
	accountUpdate(t, s, func(tx account.Tx) error { return tx.PruneLoginStrikes(b.Forget.Add(-time.Millisecond)) })
	if got, _ := s.Accounts.LoginStrikes(ctx, keys); len(got) != 1 {
		t.Errorf("pruning before the address's forget time deleted it: %+v", got)
	}
})

// reserve is one login attempt through the service; it fails the test on
// a store error.
func reserve(t *testing.T, a *account.Service, at account.LoginAttempt) (account.LoginReservation, time.Duration) {
	t.Helper()
	r, wait, err := a.ReserveLogin(context.Background(), at)
	if err != nil {
		t.Fatalf("ReserveLogin(%+v): %v", at, err)
	}
	return r, wait
}

var _ = add("accounts/login throttle through the service", func(t *testing.T, s Stores) {
	ctx := context.Background()
	w := newBareWorld(t, s)
	h := w.open(t)
	alice := account.LoginAttempt{Name: "alice", Address: "192.0.2.7"}
	p := account.AccountPolicy
	for i := range p.Free + 1 {
		if _, wait := reserve(t, h.a, alice); wait != 0 {
			t.Fatalf("attempt %d waits %v, want none within the allowance", i+1, wait)
		}
	}
	if _, wait := reserve(t, h.a, alice); wait != p.Base {
		t.Fatalf("attempt after the allowance waits %v, want %v", wait, p.Base)
	}
	// Another name from the same address is not held back by alice's.
	if _, wait := reserve(t, h.a, account.LoginAttempt{Name: "bob", Address: "192.0.2.7"}); wait != 0 {
		t.Errorf("bob from alice's address waits %v", wait)
	}
	// A known device of alice's has its own allowance.
	dev := account.LoginAttempt{Name: "alice", Device: "d1", Address: "198.51.100.1"}
	r, wait := reserve(t, h.a, dev)
	if wait != 0 {
		t.Fatalf("alice's known device waits %v while her account backs off", wait)
	}
	if err := h.a.LoginSucceeded(ctx, r); err != nil {
		t.Fatal(err)
	}
	if got, _ := h.a.ThrottleWait(ctx, "account", "alice"); got != p.Base {
		t.Errorf("a device's success gave back the account's failures: wait %v, want %v", got, p.Base)
	}
	// Once the wait is over, a success forgets the account's failures and
	// gives the address back its attempt.
	w.clock.Add(p.Base)
	r, wait = reserve(t, h.a, alice)
	if wait != 0 {
		t.Fatalf("after the wait: %v", wait)
	}
	if err := h.a.LoginSucceeded(ctx, r); err != nil {
		t.Fatal(err)
	}
	if got, _ := h.a.ThrottleWait(ctx, "account", "alice"); got != 0 {
		t.Errorf("account wait after success = %v", got)
	}
	seen, err := s.Accounts.LoginStrikes(ctx, []string{account.ThrottleKey("addr", "192.0.2.7")})
	if err != nil || seen[account.ThrottleKey("addr", "192.0.2.7")].Failures != p.Free+2 {
		t.Errorf("address strikes after %d failures and a success: %+v, %v", p.Free+2, seen, err)
	}
	// A cancelled reservation gives back both.
	carol := account.LoginAttempt{Name: "carol", Address: "2001:db8:1:2::9"}
	r, _ = reserve(t, h.a, carol)
	if err := h.a.CancelLogin(ctx, r); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Accounts.LoginStrikes(ctx, []string{account.ThrottleKey("account", "carol"), account.ThrottleKey("addr", "2001:db8:1:2::/64")}); len(got) != 0 {
		t.Errorf("after CancelLogin: %+v, want nothing kept", got)
	}
	// An address backs off across names; its /64 is one address.
	ap := account.AddressPolicy
	for i := range ap.Free + 1 {
		at := account.LoginAttempt{Name: string(rune('a'+i%26)) + "-guess", Address: "2001:db8:7:7::" + string(rune('1'+i%9))}
		if _, wait := reserve(t, h.a, at); wait != 0 {
			t.Fatalf("address attempt %d waits %v", i+1, wait)
		}
	}
	if _, wait := reserve(t, h.a, account.LoginAttempt{Name: "dave", Address: "2001:db8:7:7::ffff"}); wait != ap.Base {
		t.Errorf("the /64 after its allowance waits %v, want %v", wait, ap.Base)
	}
	// Everything is forgotten after Forget, and pruned by the next attempt.
	w.clock.Add(time.Hour + time.Second)
	if _, wait := reserve(t, h.a, account.LoginAttempt{Name: "erin", Address: "203.0.113.1"}); wait != 0 {
		t.Errorf("after Forget: %v", wait)
	}
	if got, _ := s.Accounts.LoginStrikes(ctx, []string{account.ThrottleKey("account", "alice"), account.ThrottleKey("addr", "192.0.2.7")}); len(got) != 0 {
		t.Errorf("forgotten strikes kept: %+v", got)
	}
})

// The check and the count of an attempt are one transaction: many
// attempts at one instant on several handles, as several console replicas
// would make them, get exactly the policy's allowance between them.
var _ = add("race/login attempts across handles: the policy's allowance", func(t *testing.T, s Stores) {
	w := newBareWorld(t, s)
	hs := handles(t, w, 4)
	const attempts = 100
	for round, at := range []account.LoginAttempt{
		{Name: "alice", Address: "192.0.2.7"},                // the account's allowance
		{Name: "bob", Device: "dev-1", Address: "192.0.2.8"}, // the device's
	} {
		var passed, waited atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range attempts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, wait, err := hs[i%len(hs)].a.ReserveLogin(context.Background(), at)
				switch {
				case err != nil:
					t.Errorf("ReserveLogin: %v", err)
				case wait == 0:
					passed.Add(1)
				default:
					waited.Add(1)
				}
			}()
		}
		close(start)
		wg.Wait()
		allowed := int64(account.AccountPolicy.Free + 1)
		if at.Device != "" {
			// The device's allowance, then the account's.
			allowed += int64(account.DevicePolicy.Free + 1)
		}
		if passed.Load() != allowed || waited.Load() != attempts-allowed {
			t.Errorf("round %d: %d attempts passed and %d waited, want %d and %d", round, passed.Load(), waited.Load(), allowed, attempts-allowed)
		}
	}
})
