package account

import (
	"net"
	"sync"
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

// maxKeys is how many keys the limiter keeps before it forgets keys that
// are not being throttled; keys in backoff are kept up to hardMaxKeys, so
// that a flood of fresh names or addresses cannot wash a throttled key out.
const (
	maxKeys     = 10000
	hardMaxKeys = 10 * maxKeys
)

// Limiter throttles failed logins per key (an account name or an address).
// It is safe for concurrent use.
type Limiter struct {
	policy  LimitPolicy
	mu      sync.Mutex
	keys    map[string]*strikes
	pruneAt int // prune when this many keys are held; grows while kept keys are in backoff
}

type strikes struct {
	n    int
	last time.Time
}

// NewLimiter returns a limiter with the given policy.
func NewLimiter(p LimitPolicy) *Limiter {
	return &Limiter{policy: p, keys: map[string]*strikes{}, pruneAt: maxKeys}
}

func (l *Limiter) delay(n int) time.Duration {
	over := n - l.policy.Free
	if over <= 0 {
		return 0
	}
	d := l.policy.Base
	for i := 1; i < over && d < l.policy.Max; i++ {
		d *= 2
	}
	return min(d, l.policy.Max)
}

// Wait returns how long key must wait before its next attempt; zero means
// it may try now.
func (l *Limiter) Wait(key string, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.keys[key]
	if !ok {
		return 0
	}
	if now.Sub(s.last) >= l.policy.Forget {
		delete(l.keys, key)
		return 0
	}
	return max(s.last.Add(l.delay(s.n)).Sub(now), 0)
}

// Reserve is Wait and Fail in one step: when key may try now it records
// the attempt as a failure before the password is checked and returns
// zero; otherwise it records nothing and returns the wait. Checking and
// counting under one lock is what makes the backoff hold under any
// concurrency: a burst of parallel attempts cannot all pass Wait before
// the first of them has failed. A login that succeeds gives its
// reservation back with Reset or Refund.
func (l *Limiter) Reserve(key string, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s, ok := l.keys[key]; ok && now.Sub(s.last) < l.policy.Forget {
		if wait := s.last.Add(l.delay(s.n)).Sub(now); wait > 0 {
			return wait
		}
	}
	l.fail(key, now)
	return 0
}

// Refund gives back one attempt reserved for key, when the attempt did
// not fail after all (the password was right, or another limiter refused
// it before any password was checked).
func (l *Limiter) Refund(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s, ok := l.keys[key]; ok {
		if s.n--; s.n <= 0 {
			delete(l.keys, key)
		}
	}
}

// Fail records a failed attempt by key.
func (l *Limiter) Fail(key string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fail(key, now)
}

// fail records a failure; called with mu held.
func (l *Limiter) fail(key string, now time.Time) {
	s, ok := l.keys[key]
	if !ok {
		if len(l.keys) >= l.pruneAt {
			l.prune(now)
			// Amortize: the next prune waits until the map has grown by half
			// again, so keys kept in backoff do not make every insert a scan.
			l.pruneAt = min(max(maxKeys, len(l.keys)+len(l.keys)/2), hardMaxKeys)
		}
		s = &strikes{}
		l.keys[key] = s
	} else if now.Sub(s.last) >= l.policy.Forget {
		s.n = 0
	}
	s.n++
	s.last = now
}

// Reset forgets key's failures (after a successful login).
func (l *Limiter) Reset(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.keys, key)
}

// prune drops forgotten keys, then the older half of the keys that are not
// in backoff, and only beyond hardMaxKeys the older half of the rest.
// Called with mu held.
func (l *Limiter) prune(now time.Time) {
	for k, s := range l.keys {
		if now.Sub(s.last) >= l.policy.Forget {
			delete(l.keys, k)
		}
	}
	if len(l.keys) < maxKeys {
		return
	}
	l.dropOlderHalf(now, func(s *strikes) bool { return s.n <= l.policy.Free })
	if len(l.keys) < hardMaxKeys {
		return
	}
	l.dropOlderHalf(now, func(*strikes) bool { return true })
}

// dropOlderHalf deletes the keys chosen by which whose last failure is in
// the older half of their time span.
func (l *Limiter) dropOlderHalf(now time.Time, which func(*strikes) bool) {
	var oldest time.Time
	for _, s := range l.keys {
		if which(s) && (oldest.IsZero() || s.last.Before(oldest)) {
			oldest = s.last
		}
	}
	if oldest.IsZero() {
		return
	}
	cut := oldest.Add(now.Sub(oldest) / 2)
	for k, s := range l.keys {
		if which(s) && !s.last.After(cut) {
			delete(l.keys, k)
		}
	}
}

// AddressKey is the limiter key of a client address: the address itself
// for IPv4, its /64 network for IPv6, since one client commonly holds a
// whole /64.
func AddressKey(host string) string {
	ip := net.ParseIP(host)
	if ip == nil || ip.To4() != nil {
		return host
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// Len returns how many keys the limiter remembers.
func (l *Limiter) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.keys)
}
