// Package oneshot keeps short-lived, single-use values between two requests
// of one ceremony: a single-sign-on login between the redirect to the
// provider and its callback, a passkey prompt between its options and the
// authenticator's answer. A value is taken at most once, whoever asks: when
// several console replicas share a Store backed by the database, a flow
// begun on one replica finishes on any other, and never twice.
package oneshot

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// Store keeps values until they are taken or expire.
type Store interface {
	// Put keeps value under key until expires. It fails with ErrFull when
	// the store already holds its bound of unexpired values.
	Put(ctx context.Context, key string, value []byte, expires time.Time) error
	// PutOwned is Put for a value that belongs to owner (an account): the
	// owner keeps at most perOwner unexpired values, and a new one beyond
	// that evicts the owner's oldest (soonest to expire), never another
	// owner's. ErrFull still applies to the store as a whole, counted after
	// the eviction, so an owner at its bound can always replace its oldest.
	PutOwned(ctx context.Context, owner string, perOwner int, key string, value []byte, expires time.Time) error
	// Take removes the value under key and returns it with its expiry,
	// which the caller checks (so that it can tell "too old" from
	// "unknown"). It fails with ErrNotFound when nothing is kept under
	// key: never put, already taken, or pruned after it expired.
	Take(ctx context.Context, key string) (value []byte, expires time.Time, err error)
}

// Errors of a Store.
var (
	ErrNotFound = errors.New("oneshot: unknown or already used")
	ErrFull     = errors.New("oneshot: too many under way")
)

// Memory is a Store in this process's memory, bounded: for a single
// console, and for tests.
type Memory struct {
	max int
	now func() time.Time

	mu     sync.Mutex
	values map[string]entry
}

type entry struct {
	value   []byte
	expires time.Time
	owner   string
}

// NewMemory returns an empty Memory holding at most max unexpired values;
// now defaults to time.Now.
func NewMemory(max int, now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{max: max, now: now, values: map[string]entry{}}
}

// Put implements Store.
func (m *Memory) Put(_ context.Context, key string, value []byte, expires time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.put(key, entry{value: value, expires: expires}, 0)
}

// PutOwned implements Store.
func (m *Memory) PutOwned(_ context.Context, owner string, perOwner int, key string, value []byte, expires time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.put(key, entry{value: value, expires: expires, owner: owner}, perOwner)
}

// put keeps e under key; with perOwner > 0 it first evicts e's owner's
// oldest values beyond perOwner-1. The caller holds m.mu.
func (m *Memory) put(key string, e entry, perOwner int) error {
	now := m.now()
	if perOwner > 0 {
		var mine []string
		for k, have := range m.values {
			if have.owner == e.owner {
				if !now.Before(have.expires) {
					delete(m.values, k)
					continue
				}
				mine = append(mine, k)
			}
		}
		slices.SortFunc(mine, func(a, b string) int { return m.values[a].expires.Compare(m.values[b].expires) })
		for len(mine) >= perOwner {
			delete(m.values, mine[0])
			mine = mine[1:]
		}
	}
	if len(m.values) >= m.max {
		for k, have := range m.values {
			if !now.Before(have.expires) {
				delete(m.values, k)
			}
		}
	}
	if len(m.values) >= m.max {
		return ErrFull
	}
	e.value = append([]byte(nil), e.value...)
	m.values[key] = e
	return nil
}

// Take implements Store.
func (m *Memory) Take(_ context.Context, key string) ([]byte, time.Time, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.values[key]
	if !ok {
		return nil, time.Time{}, ErrNotFound
	}
	delete(m.values, key)
	return e.value, e.expires, nil
}

// Len reports how many values are held, expired ones included until they
// are pruned.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.values)
}
