package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
)

// The login throttle's failed logins, kept in the store so that every
// console process on one database throttles alike.

var _ = add("accounts/login strikes", func(t *testing.T, s Stores) {
	ctx := context.Background()
	a := account.Strikes{Key: account.ThrottleKey("account", "alice"), Failures: 7, Last: t0, Forget: t0.Add(time.Hour), Throttled: true}
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
	a2.Failures, a2.Last, a2.Forget, a2.Throttled = 4, t0.Add(time.Minute), t0.Add(time.Minute+time.Hour), false
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
	w.clock.Advance(p.Base)
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
	w.clock.Advance(time.Hour + time.Second)
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

// strikesSize is the number of keys the store says it keeps.
func strikesSize(t *testing.T, s Stores) int {
	t.Helper()
	var n int
	accountUpdate(t, s, func(tx account.Tx) error {
		var err error
		n, err = tx.LoginStrikesSize()
		return err
	})
	return n
}

// The number of keys kept is kept by the store through every way a row
// comes and goes; eviction takes keys that are not throttled, fewest
// failures first, then the oldest, never one it is told to keep.
var _ = add("accounts/login strikes: size and eviction", func(t *testing.T, s Stores) {
	ctx := context.Background()
	key := func(n string) string { return account.ThrottleKey("account", n) }
	throttled := account.Strikes{Key: key("held"), Failures: 6, Last: t0, Forget: t0.Add(3 * time.Hour), Throttled: true}
	old1 := account.Strikes{Key: key("old1"), Failures: 1, Last: t0, Forget: t0.Add(time.Hour)}
	new1 := account.Strikes{Key: key("new1"), Failures: 1, Last: t0.Add(time.Second), Forget: t0.Add(time.Second + time.Hour)}
	older2 := account.Strikes{Key: key("older2"), Failures: 2, Last: t0.Add(-time.Minute), Forget: t0.Add(time.Hour - time.Minute)}
	all := []string{throttled.Key, old1.Key, new1.Key, older2.Key}
	var next time.Time
	accountUpdate(t, s, func(tx account.Tx) error {
		n, err := tx.LoginStrikesSize()
		if err != nil || n != 0 {
			t.Errorf("size of an empty table = %d, %v", n, err)
		}
		if next, err = tx.NextLoginStrikeForget(); err != nil || !next.IsZero() {
			t.Errorf("next forget of an empty table = %v, %v; want the zero time", next, err)
		}
		return err
	})
	accountUpdate(t, s, func(tx account.Tx) error {
		for _, st := range []account.Strikes{throttled, old1, new1, older2} {
			if err := tx.SetLoginStrikes(st); err != nil {
				return err
			}
		}
		// Replacing a key's strikes adds no row.
		return tx.SetLoginStrikes(old1)
	})
	if n := strikesSize(t, s); n != 4 {
		t.Fatalf("size after four keys (one set twice) = %d", n)
	}
	accountUpdate(t, s, func(tx account.Tx) error {
		var err error
		next, err = tx.NextLoginStrikeForget()
		return err
	})
	if !next.Equal(older2.Forget) {
		t.Errorf("next forget = %v, want %v (the earliest)", next, older2.Forget)
	}
	// A rolled-back eviction changes nothing, the size included.
	err := s.Accounts.Update(ctx, func(tx account.Tx) error {
		if n, err := tx.EvictLoginStrikes(10, nil); err != nil || n != 3 {
			t.Errorf("evicting 10 of 3 evictable keys = %d, %v", n, err)
		}
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		t.Fatalf("rolled-back Update = %v", err)
	}
	if n := strikesSize(t, s); n != 4 {
		t.Fatalf("size after a rolled-back eviction = %d, want 4", n)
	}
	evict := func(n int, keep ...string) []string {
		t.Helper()
		before, err := s.Accounts.LoginStrikes(ctx, all)
		if err != nil {
			t.Fatal(err)
		}
		var got int
		accountUpdate(t, s, func(tx account.Tx) error {
			got, err = tx.EvictLoginStrikes(n, keep)
			return err
		})
		after, err := s.Accounts.LoginStrikes(ctx, all)
		if err != nil {
			t.Fatal(err)
		}
		var gone []string
		for _, k := range all {
			if _, ok := before[k]; ok {
				if _, still := after[k]; !still {
					gone = append(gone, k)
				}
			}
		}
		if got != len(gone) {
			t.Errorf("EvictLoginStrikes said %d, but %d keys went", got, len(gone))
		}
		if size := strikesSize(t, s); size != len(after) {
			t.Errorf("size after eviction = %d, want %d", size, len(after))
		}
		return gone
	}
	// The fewest failures first, the oldest of those first.
	if gone := evict(1); !reflect.DeepEqual(gone, []string{old1.Key}) {
		t.Errorf("evicting one took %v, want old1's", gone)
	}
	// A key to keep is passed over.
	if gone := evict(1, new1.Key); !reflect.DeepEqual(gone, []string{older2.Key}) {
		t.Errorf("evicting one but new1 took %v, want older2's", gone)
	}
	// A throttled key is never evicted.
	if gone := evict(5); !reflect.DeepEqual(gone, []string{new1.Key}) {
		t.Errorf("evicting five took %v, want new1's only (the other is throttled)", gone)
	}
	if gone := evict(5); len(gone) != 0 {
		t.Errorf("evicting from a table of throttled keys took %v", gone)
	}
	// Deleting and pruning count too.
	accountUpdate(t, s, func(tx account.Tx) error {
		for _, st := range []account.Strikes{old1, new1} {
			if err := tx.SetLoginStrikes(st); err != nil {
				return err
			}
		}
		return tx.SetLoginStrikes(account.Strikes{Key: old1.Key})
	})
	if n := strikesSize(t, s); n != 2 {
		t.Errorf("size after adding two and deleting one = %d, want 2", n)
	}
	accountUpdate(t, s, func(tx account.Tx) error { return tx.PruneLoginStrikes(new1.Forget) })
	if n := strikesSize(t, s); n != 1 {
		t.Errorf("size after pruning new1's = %d, want 1 (the throttled key, forgotten later)", n)
	}
	accountUpdate(t, s, func(tx account.Tx) error { return tx.PruneLoginStrikes(throttled.Forget) })
	if n := strikesSize(t, s); n != 0 {
		t.Errorf("size after pruning everything = %d", n)
	}
})

// freshAttempt is the i-th attempt of a flood: a new name from a new IPv6
// /64 each time, as an attacker with a wide range makes them.
func freshAttempt(i int) account.LoginAttempt {
	return account.LoginAttempt{Name: fmt.Sprintf("flood-%d", i), Address: fmt.Sprintf("2001:db8:%x:%x::1", i>>16, i&0xffff)}
}

// floodKeys are the throttle keys of the first n flood attempts.
func floodKeys(n int) []string {
	var keys []string
	for i := range n {
		a := freshAttempt(i)
		keys = append(keys, account.ThrottleKey("account", a.Name), account.ThrottleKey("addr", account.AddressKey(a.Address)))
	}
	return keys
}

// A flood of fresh keys fills the table and evicts its own kind: the
// table stays bounded, a throttled key keeps its wait, and a key near its
// allowance (more failures than any flood key) keeps its count.
var _ = add("accounts/login throttle: a flood of fresh keys is bounded and washes out no throttled key", func(t *testing.T, s Stores) {
	ctx := context.Background()
	w := newBareWorld(t, s)
	h := w.open(t)
	const rows = 20
	h.a.SetThrottleRows(rows)
	p := account.AccountPolicy
	alice := account.LoginAttempt{Name: "alice", Address: "192.0.2.7"}
	for range p.Free + 1 {
		reserve(t, h.a, alice)
	}
	held, _ := h.a.ThrottleWait(ctx, "account", "alice")
	if held != p.Base {
		t.Fatalf("alice waits %v after %d failures, want %v", held, p.Free+1, p.Base)
	}
	bob := account.LoginAttempt{Name: "bob", Address: "192.0.2.8"}
	for range p.Free - 1 {
		reserve(t, h.a, bob)
	}
	const flood = 10 * rows
	for i := range flood {
		if _, wait := reserve(t, h.a, freshAttempt(i)); wait != 0 {
			t.Fatalf("flood attempt %d waits %v: fresh keys should evict each other", i, wait)
		}
		if n := strikesSize(t, s); n > rows {
			t.Fatalf("after flood attempt %d the table keeps %d keys, more than %d", i, n, rows)
		}
	}
	// The rows really are bounded: of every key the flood made, few are left.
	kept, err := s.Accounts.LoginStrikes(ctx, floodKeys(flood))
	if err != nil {
		t.Fatal(err)
	}
	if len(kept) > rows-4 {
		t.Errorf("%d flood keys kept besides alice's and bob's four, want at most %d", len(kept), rows-4)
	}
	if got, _ := h.a.ThrottleWait(ctx, "account", "alice"); got != held {
		t.Errorf("after the flood alice waits %v, want %v: the flood washed her strikes out", got, held)
	}
	if _, wait := reserve(t, h.a, alice); wait != held {
		t.Errorf("alice's next attempt waits %v, want %v", wait, held)
	}
	// Bob's count was kept: his allowance has one attempt left, then he waits.
	if _, wait := reserve(t, h.a, bob); wait != 0 {
		t.Errorf("bob's last free attempt waits %v", wait)
	}
	reserve(t, h.a, bob)
	if _, wait := reserve(t, h.a, bob); wait != p.Base {
		t.Errorf("bob after his allowance waits %v, want %v: the flood reset his count", wait, p.Base)
	}
	// Then the flood throttles keys of its own (each name used up, from
	// fresh addresses) until the table holds nothing else that may go:
	// attempts that would add a key are refused, and alice's strikes stay.
	refused := 0
	for i := range 2 * rows {
		for j := range p.Free + 1 {
			at := freshAttempt(flood + i*(p.Free+1) + j)
			at.Name = fmt.Sprintf("used-up-%d", i)
			_, wait, err := h.a.ReserveLogin(ctx, at)
			switch {
			case errors.Is(err, account.ErrThrottleFull):
				refused++
			case err != nil:
				t.Fatal(err)
			case wait != 0:
				t.Fatalf("attempt %d of %s waits %v", j+1, at.Name, wait)
			}
			if n := strikesSize(t, s); n > rows {
				t.Fatalf("the table keeps %d keys, more than %d", n, rows)
			}
		}
	}
	if refused == 0 {
		t.Error("a table full of throttled keys refused nothing")
	}
	if got, _ := h.a.ThrottleWait(ctx, "account", "alice"); got != held {
		t.Errorf("after the flood of used-up names alice waits %v, want %v: her strikes were washed out", got, held)
	}
})

// When every key kept is throttled, an attempt that would add a key is
// refused (fail closed), with a wait, and changes nothing; attempts on
// keys kept already go on; room comes back when keys are forgotten.
var _ = add("accounts/login throttle: a table full of throttled keys refuses new keys", func(t *testing.T, s Stores) {
	ctx := context.Background()
	w := newBareWorld(t, s)
	h := w.open(t)
	h.a.SetThrottleRows(3)
	p, ap := account.AccountPolicy, account.AddressPolicy
	// alice and bob from one address: two throttled accounts and an
	// address with 12 failures (not throttled yet), three keys in all.
	from := "192.0.2.7"
	for _, name := range []string{"alice", "bob"} {
		for range p.Free + 1 {
			if _, wait := reserve(t, h.a, account.LoginAttempt{Name: name, Address: from}); wait != 0 {
				t.Fatalf("%s waits %v within the allowance", name, wait)
			}
		}
	}
	if n := strikesSize(t, s); n != 3 {
		t.Fatalf("size = %d, want 3 (alice, bob, the address)", n)
	}
	// carol from another address: two new keys; the address is evictable
	// but one row is not enough. Refused, and nothing changes.
	before, err := s.Accounts.LoginStrikes(ctx, []string{account.ThrottleKey("addr", from)})
	if err != nil {
		t.Fatal(err)
	}
	carol := account.LoginAttempt{Name: "carol", Address: "198.51.100.9"}
	_, wait, err := h.a.ReserveLogin(ctx, carol)
	if !errors.Is(err, account.ErrThrottleFull) || wait <= 0 || wait > p.Max {
		t.Fatalf("carol on a full table: wait %v, %v; want ErrThrottleFull with a wait of at most %v", wait, err, p.Max)
	}
	after, err := s.Accounts.LoginStrikes(ctx, []string{account.ThrottleKey("addr", from)})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(before, after) {
		t.Errorf("a refused attempt changed the table: %+v, then %+v", before, after)
	}
	// A fresh name from the kept address needs one row, and the only
	// evictable key is the attempt's own address: refused.
	if _, _, err := h.a.ReserveLogin(ctx, account.LoginAttempt{Name: "dave", Address: from}); !errors.Is(err, account.ErrThrottleFull) {
		t.Errorf("dave from the kept address: %v, want ErrThrottleFull", err)
	}
	// Attempts on kept keys go on: alice after her wait.
	w.clock.Advance(p.Base)
	if _, wait := reserve(t, h.a, account.LoginAttempt{Name: "alice", Address: from}); wait != 0 {
		t.Errorf("alice after her wait, on a full table: waits %v", wait)
	}
	// The address, used up, is throttled too: now every key is.
	for i := 0; ; i++ {
		if i > ap.Free {
			t.Fatal("the address never became throttled")
		}
		seen, err := s.Accounts.LoginStrikes(ctx, []string{account.ThrottleKey("addr", from)})
		if err != nil {
			t.Fatal(err)
		}
		if seen[account.ThrottleKey("addr", from)].Throttled {
			break
		}
		w.clock.Advance(p.Max)
		reserve(t, h.a, account.LoginAttempt{Name: "bob", Address: from})
	}
	if _, _, err := h.a.ReserveLogin(ctx, carol); !errors.Is(err, account.ErrThrottleFull) {
		t.Errorf("carol on a table of throttled keys: %v, want ErrThrottleFull", err)
	}
	if n := strikesSize(t, s); n != 3 {
		t.Errorf("size = %d, want 3", n)
	}
	// Once the keys are forgotten, they are pruned and carol may try.
	w.clock.Advance(p.Forget + time.Second)
	if _, wait := reserve(t, h.a, carol); wait != 0 {
		t.Errorf("carol after everything was forgotten waits %v", wait)
	}
	if n := strikesSize(t, s); n != 2 {
		t.Errorf("size after the prune and carol's attempt = %d, want 2", n)
	}
})

// A table full of throttled keys never refuses an enabled local account:
// its own key is kept beyond the bound (at most twice it) and a new
// address is not counted; a disabled account and a name that is no
// account are refused as before.
var _ = add("accounts/login throttle: a full table still admits an enabled local account", func(t *testing.T, s Stores) {
	ctx := context.Background()
	w := newBareWorld(t, s)
	h := w.open(t)
	h.a.SetThrottleRows(2)
	pw, err := account.HashWith("correct horse battery", account.MinParams)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"erin", "gone"} {
		if _, err := h.a.AddUser(ctx, name, account.RoleOperator, pw, "admin", audit.ChannelCLI); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.a.DisableUser(ctx, "gone", "admin", audit.ChannelCLI); err != nil {
		t.Fatal(err)
	}
	p := account.AccountPolicy
	for range p.Free + 1 {
		if _, wait := reserve(t, h.a, account.LoginAttempt{Name: "made-up", Address: "192.0.2.7"}); wait != 0 {
			t.Fatalf("made-up waits %v within the allowance", wait)
		}
	}
	for _, name := range []string{"made-up-too", "gone"} {
		if _, _, err := h.a.ReserveLogin(ctx, account.LoginAttempt{Name: name, Address: "198.51.100.9"}); !errors.Is(err, account.ErrThrottleFull) {
			t.Errorf("%s on a full table: %v, want ErrThrottleFull", name, err)
		}
	}
	erin := account.LoginAttempt{Name: "erin", Address: "198.51.100.10"}
	if _, wait := reserve(t, h.a, erin); wait != 0 {
		t.Fatalf("erin on a full table waits %v", wait)
	}
	if got, _ := h.a.ThrottleWait(ctx, "addr", erin.Address); got != 0 {
		t.Errorf("erin's new address waits %v", got)
	}
	if seen, err := s.Accounts.LoginStrikes(ctx, []string{account.ThrottleKey("account", "erin"), account.ThrottleKey("addr", erin.Address)}); err != nil {
		t.Fatal(err)
	} else if seen[account.ThrottleKey("account", "erin")].Failures != 1 || len(seen) != 1 {
		t.Errorf("kept for erin: %+v, want her account's key with one failure and not her new address", seen)
	}
	// Her backoff holds beyond the bound.
	for range p.Free {
		reserve(t, h.a, erin)
	}
	if _, wait := reserve(t, h.a, erin); wait != p.Base {
		t.Errorf("erin after her free failures waits %v, want %v", wait, p.Base)
	}
	if got, _ := h.a.ThrottleWait(ctx, "account", "made-up"); got <= 0 {
		t.Error("the made-up name's throttled key was evicted")
	}
	if n := strikesSize(t, s); n > 2*2 {
		t.Errorf("the table keeps %d keys, more than twice its bound", n)
	}
})

// The bound holds when attempts race on several handles, as they do on
// several console replicas: every fresh attempt is let through by
// evicting another fresh key, the table never holds more than its rows,
// and the throttled key is never evicted.
var _ = add("race/login flood across handles: the table stays bounded", func(t *testing.T, s Stores) {
	ctx := context.Background()
	w := newBareWorld(t, s)
	hs := handles(t, w, 4)
	const rows = 16
	for _, h := range hs {
		h.a.SetThrottleRows(rows)
	}
	alice := account.LoginAttempt{Name: "alice", Address: "192.0.2.7"}
	for range account.AccountPolicy.Free + 1 {
		reserve(t, hs[0].a, alice)
	}
	const attempts = 120
	var wg sync.WaitGroup
	var refused atomic.Int64
	start := make(chan struct{})
	for i := range attempts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, wait, err := hs[i%len(hs)].a.ReserveLogin(ctx, freshAttempt(i))
			if err != nil || wait != 0 {
				refused.Add(1)
				t.Errorf("flood attempt %d: wait %v, %v", i, wait, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if n := strikesSize(t, s); n > rows {
		t.Errorf("the table keeps %d keys, more than %d", n, rows)
	}
	kept, err := s.Accounts.LoginStrikes(ctx, floodKeys(attempts))
	if err != nil {
		t.Fatal(err)
	}
	if len(kept) > rows-2 {
		t.Errorf("%d flood keys kept besides alice's two, want at most %d", len(kept), rows-2)
	}
	if got, _ := hs[1].a.ThrottleWait(ctx, "account", "alice"); got != account.AccountPolicy.Base {
		t.Errorf("after the flood alice waits %v, want %v", got, account.AccountPolicy.Base)
	}
})
