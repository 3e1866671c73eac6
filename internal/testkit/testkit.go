// Package testkit is what tests across packages share: a settable clock and
// seeding of console accounts through the account.Store interface, so that
// it works the same on every store. Only tests import it.
package testkit

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
)

// Clock is a settable clock, safe for concurrent use: it stands still
// until a test moves it. Its zero value reads the zero time; NewClock
// starts it at a fixed instant. Pass its Now wherever code takes a
// func() time.Time.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock stopped at t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// Advance moves the clock forward by d (backward if d is negative) and
// returns the time it now reads.
func (c *Clock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	return c.t
}

// PasswordHash is a well-formed argon2id PHC string that no password in the
// tests matches: for accounts that decide but never log in.
const PasswordHash = "$argon2id$v=19$m=64,t=1,p=1$c2FsdHNhbHRzYWx0c2FsdA$0N6TpYgHaAKN1dFqWZq7N0N6TpYgHaAKN1dFqWZq7N0"

// SeedUsers stores enabled accounts of role for the names that do not exist
// yet, in one transaction and without audit entries, so that tests which
// count audit entries see only what they did themselves.
func SeedUsers(tb testing.TB, st account.Store, role account.Role, names ...string) {
	tb.Helper()
	if err := Seed(context.Background(), st, role, names...); err != nil {
		tb.Fatalf("seed %s accounts %v: %v", role, names, err)
	}
}

// Seed is SeedUsers for code that has no testing.TB (a helper process).
func Seed(ctx context.Context, st account.Store, role account.Role, names ...string) error {
	return st.Update(ctx, func(tx account.Tx) error {
		for _, n := range names {
			if _, err := tx.User(n); err == nil {
				continue
			}
			u := account.User{Name: n, Role: role, PasswordHash: PasswordHash, CreatedAt: time.Now().UTC().Truncate(time.Millisecond)}
			if err := tx.InsertUser(u); err != nil {
				return err
			}
		}
		return nil
	})
}
