package account

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"time"
)

// LimitPolicy shapes the backoff for one kind of key. The first Free
// failures cost nothing; after the n-th failure (n > Free) the next attempt
// must wait Base·2^(n−Free−1) after it, up to Max. Failures older than Forget are forgotten. There is
// never a permanent lockout: the wait never exceeds Max.
type LimitPolicy struct {
	Free   int
	Base   time.Duration
	Max    time.Duration
	Forget time.Duration
}

// Default policies: an account tolerates a few typos; an address, which
// several people may share, tolerates more before it slows down.
var (
	AccountPolicy = LimitPolicy{Free: 5, Base: time.Second, Max: 5 * time.Minute, Forget: time.Hour}
	AddressPolicy = LimitPolicy{Free: 20, Base: time.Second, Max: 5 * time.Minute, Forget: time.Hour}
	// DevicePolicy is the allowance of a browser that has logged in to the
	// account before (a known-device cookie): as tolerant as the account's,
	// but its own, so failures elsewhere do not use it up.
	DevicePolicy = LimitPolicy{Free: 5, Base: time.Second, Max: 5 * time.Minute, Forget: time.Hour}
)

// Strikes are the failed logins counted against one throttle key, as the
// store keeps them. Key is the hash of the key (ThrottleKey), never the
// name or address itself: a password typed into the name field is not
// kept.
type Strikes struct {
	Key      string
	Failures int
	Last     time.Time // the latest failure
	Forget   time.Time // when the failures stop counting: Last + the policy's Forget
	// Throttled says the key has used its policy's free failures: every
	// further attempt waits until they are forgotten. The store never
	// evicts a throttled key to make room for another; it keeps it until
	// Forget.
	Throttled bool
}

// DefaultThrottleRows is how many throttle keys the store keeps at most
// unless SetThrottleRows says otherwise: about 100 bytes each, so a full
// table is some tens of megabytes.
const DefaultThrottleRows = 100_000

// ErrThrottleFull is returned by ReserveLogin, with a wait, for an attempt
// that would add a throttle key while the store already keeps as many as
// it may and every one of them is throttled. The attempt is refused (no
// password is checked) rather than let a flood of fresh keys wash out
// the throttled ones; attempts whose keys are kept already are unaffected.
var ErrThrottleFull = errors.New("account: the login throttle keeps as many throttled keys as it may; refusing attempts that would add one")

func (p LimitPolicy) delay(n int) time.Duration {
	over := n - p.Free
	if over <= 0 {
		return 0
	}
	d := p.Base
	for i := 1; i < over && d < p.Max; i++ {
		d *= 2
	}
	return min(d, p.Max)
}

// Wait returns how long a key with strikes s must wait before its next
// attempt at now; zero means it may try now.
func (p LimitPolicy) Wait(s Strikes, now time.Time) time.Duration {
	if s.Failures <= 0 || now.Sub(s.Last) >= p.Forget {
		return 0
	}
	return max(s.Last.Add(p.delay(s.Failures)).Sub(now), 0)
}

// fail returns s with one more failure at now.
func (p LimitPolicy) fail(s Strikes, now time.Time) Strikes {
	if now.Sub(s.Last) >= p.Forget {
		s.Failures = 0
	}
	s.Failures++
	s.Last = now
	s.Forget = now.Add(p.Forget)
	s.Throttled = s.Failures > p.Free
	return s
}

// AddressKey is the throttle key of a client address: the address itself
// for IPv4, its /64 network for IPv6, since one client commonly holds a
// whole /64.
func AddressKey(host string) string {
	ip := net.ParseIP(host)
	if ip == nil || ip.To4() != nil {
		return host
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// ThrottleKey is the stored key of a throttle: kind is "account",
// "device" or "addr".
func ThrottleKey(kind, value string) string {
	h := sha256.Sum256([]byte("countersign/login-throttle:" + kind + ":" + value))
	return hex.EncodeToString(h[:])
}

// LoginAttempt is what one password login is throttled by.
type LoginAttempt struct {
	Name    string // the account name typed, valid or not
	Device  string // the id in the browser's known-device cookie for Name, "" for none
	Address string // the client's address
}

// LoginReservation is an attempt counted as a failure before its password
// is checked; a login that succeeds gives it back with LoginSucceeded.
type LoginReservation struct {
	who  throttle // the account's or the known device's
	addr throttle
}

// throttle is one key of an attempt with its policy.
type throttle struct {
	key    string
	policy LimitPolicy
}

func (a LoginAttempt) throttles() (acct, dev, addr throttle) {
	name := a.Name
	if len(name) > MaxNameBytes {
		name = "!long" // every over-long name shares one key
	}
	acct = throttle{ThrottleKey("account", name), AccountPolicy}
	if a.Device != "" {
		dev = throttle{ThrottleKey("device", a.Device), DevicePolicy}
	}
	addr = throttle{ThrottleKey("addr", AddressKey(a.Address)), AddressPolicy}
	return acct, dev, addr
}

// plan decides an attempt from the strikes its keys have: the key it
// counts against (the known device's while the device may try, else the
// account's) and the address, or how long it must wait.
func (a LoginAttempt) plan(seen map[string]Strikes, now time.Time) (who, addr throttle, wait time.Duration) {
	acct, dev, addr := a.throttles()
	who = acct
	if dev.key != "" && dev.policy.Wait(seen[dev.key], now) == 0 {
		who = dev
	} else if w := acct.policy.Wait(seen[acct.key], now); w > 0 {
		return who, addr, w
	}
	return who, addr, addr.policy.Wait(seen[addr.key], now)
}

// ReserveLogin counts a login attempt as a failure against the account
// (or the browser's known device) and the address before any password is
// checked, and returns a zero wait; or, when either must wait, counts
// nothing and returns the wait. The check and the count are one write
// transaction, so the backoff holds however many attempts arrive at once
// on however many console replicas share the database. An attempt that
// must wait is answered from a read, without writing.
//
// The store keeps at most the service's throttle rows (SetThrottleRows).
// An attempt that adds a key when the table is full first evicts keys
// that are not throttled, those with the fewest failures and then the
// oldest first; a throttled key is never evicted, only forgotten. When
// nothing may be evicted the attempt is refused with ErrThrottleFull and
// the wait until a key is next forgotten (at most the policies' Max),
// unless its name is an enabled local account: then its account's (or
// device's) key is kept beyond the bound and a new address is not counted
// (fullRoom).
func (s *Service) ReserveLogin(ctx context.Context, a LoginAttempt) (LoginReservation, time.Duration, error) {
	now := s.now()
	acct, dev, addr := a.throttles()
	keys := []string{acct.key, addr.key}
	if dev.key != "" {
		keys = append(keys, dev.key)
	}
	seen, err := s.store.LoginStrikes(ctx, keys)
	if err != nil {
		return LoginReservation{}, 0, err
	}
	if _, _, wait := a.plan(seen, now); wait > 0 {
		return LoginReservation{}, wait, nil
	}
	var r LoginReservation
	var wait time.Duration
	err = s.store.Update(ctx, func(tx Tx) error {
		if err := tx.PruneLoginStrikes(now); err != nil {
			return err
		}
		seen, err := tx.LoginStrikes(keys)
		if err != nil {
			return err
		}
		var who, at throttle
		if who, at, wait = a.plan(seen, now); wait > 0 {
			return nil
		}
		added := 0
		for _, t := range []throttle{who, at} {
			if _, ok := seen[t.key]; !ok {
				added++
			}
		}
		if err := s.makeRoom(tx, added, keys, now); err != nil {
			var full *fullError
			if !errors.As(err, &full) {
				return err
			}
			// An account that logs in with a password is never refused for
			// want of room: its key is kept beyond the bound, and a new
			// address is then not counted (see fullRoom).
			ok, err := s.fullRoom(tx, a.Name)
			if err != nil || !ok {
				return errors.Join(full, err)
			}
			if _, kept := seen[at.key]; !kept {
				at = throttle{}
			}
		}
		for _, t := range []throttle{who, at} {
			if t.key == "" {
				continue
			}
			st := seen[t.key]
			st.Key = t.key
			if err := tx.SetLoginStrikes(t.policy.fail(st, now)); err != nil {
				return err
			}
		}
		r = LoginReservation{who: who, addr: at}
		return nil
	})
	var full *fullError
	if errors.As(err, &full) {
		return LoginReservation{}, full.wait, ErrThrottleFull
	}
	if err != nil {
		return LoginReservation{}, 0, err
	}
	return r, wait, nil
}

// fullError rolls back an attempt refused because the table is full of
// throttled keys, carrying its wait out of the transaction.
type fullError struct{ wait time.Duration }

func (e *fullError) Error() string { return ErrThrottleFull.Error() }

// makeRoom makes room in the store for added new keys, evicting keys that
// are not throttled (never one of keep, the attempt's own), or returns a
// *fullError when that cannot make enough.
func (s *Service) makeRoom(tx Tx, added int, keep []string, now time.Time) error {
	if added == 0 {
		return nil
	}
	rows, err := tx.LoginStrikesSize()
	if err != nil {
		return err
	}
	over := rows + added - s.ThrottleRows()
	if over <= 0 {
		return nil
	}
	evicted, err := tx.EvictLoginStrikes(over, keep)
	if err != nil {
		return err
	}
	if evicted >= over {
		return nil
	}
	// Full of throttled keys: the next room is made when one is forgotten.
	next, err := tx.NextLoginStrikeForget()
	if err != nil {
		return err
	}
	most := max(AccountPolicy.Max, DevicePolicy.Max, AddressPolicy.Max)
	return &fullError{wait: min(max(next.Sub(now), time.Second), most)}
}

// fullRoom reports whether an attempt on name may add its account's (or
// known device's) key to a table that is full of throttled keys: when name
// is an enabled local account, and the table holds less than twice its
// bound. Refusing it would let whoever fills the table with throttled keys
// of made-up names (six failures each, from a wide IPv6 range) shut every
// person out of the console for as long as they keep it full; the keys
// kept this way are as many as the accounts (and the known devices of
// people who logged in), and the ceiling bounds even those.
func (s *Service) fullRoom(tx Tx, name string) (bool, error) {
	u, err := tx.User(name)
	if errors.Is(err, ErrUserNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if u.Kind == KindOIDC || u.Disabled() {
		return false, nil
	}
	rows, err := tx.LoginStrikesSize()
	if err != nil {
		return false, err
	}
	return rows < 2*s.ThrottleRows(), nil
}

// SetThrottleRows bounds how many throttle keys the store keeps
// (DefaultThrottleRows when n is not positive). Set it before the service
// is used.
func (s *Service) SetThrottleRows(n int) { s.throttleRows = n }

// ThrottleRows is how many throttle keys the store keeps at most.
func (s *Service) ThrottleRows() int {
	if s.throttleRows <= 0 {
		return DefaultThrottleRows
	}
	return s.throttleRows
}

// LoginSucceeded gives a reservation back after the right password: the
// account's (or device's) failures are forgotten, and the address gets its
// one attempt back, so that people sharing an address who type their
// passwords right never slow each other down.
func (s *Service) LoginSucceeded(ctx context.Context, r LoginReservation) error {
	return s.store.Update(ctx, func(tx Tx) error {
		if err := tx.SetLoginStrikes(Strikes{Key: r.who.key}); err != nil {
			return err
		}
		return refund(tx, r.addr)
	})
}

// CancelLogin gives a reservation back whole, when no password was checked
// after all.
func (s *Service) CancelLogin(ctx context.Context, r LoginReservation) error {
	return s.store.Update(ctx, func(tx Tx) error {
		if err := refund(tx, r.who); err != nil {
			return err
		}
		return refund(tx, r.addr)
	})
}

// refund takes one failure off a key.
func refund(tx Tx, t throttle) error {
	seen, err := tx.LoginStrikes([]string{t.key})
	if err != nil {
		return err
	}
	st, ok := seen[t.key]
	if !ok {
		return nil
	}
	st.Failures--
	st.Throttled = st.Failures > t.policy.Free
	return tx.SetLoginStrikes(st)
}

// ThrottleWait returns how long the throttle of kind ("account", "device"
// or "addr") and value must wait before its next attempt.
func (s *Service) ThrottleWait(ctx context.Context, kind, value string) (time.Duration, error) {
	p, ok := map[string]LimitPolicy{"account": AccountPolicy, "device": DevicePolicy, "addr": AddressPolicy}[kind]
	if !ok {
		return 0, fmt.Errorf("account: no throttle of kind %q", kind)
	}
	if kind == "addr" {
		value = AddressKey(value)
	}
	key := ThrottleKey(kind, value)
	seen, err := s.store.LoginStrikes(ctx, []string{key})
	if err != nil {
		return 0, err
	}
	return p.Wait(seen[key], s.now()), nil
}
