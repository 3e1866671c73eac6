// Package oneshottest is the conformance suite every oneshot.Store must
// pass: the in-memory one and the database's.
package oneshottest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/oneshot"
)

// NewStore returns an empty store bounded to max unexpired values, reading
// the time from now.
type NewStore func(t *testing.T, max int, now func() time.Time) oneshot.Store

// Run runs the suite against stores made by newStore.
func Run(t *testing.T, newStore NewStore) {
	ctx := context.Background()
	var clock atomic.Int64
	clock.Store(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli())
	now := func() time.Time { return time.UnixMilli(clock.Load()).UTC() }
	later := func(d time.Duration) time.Time { return now().Add(d) }

	t.Run("taken once", func(t *testing.T) {
		s := newStore(t, 10, now)
		exp := later(time.Minute)
		if err := s.Put(ctx, "k1", []byte("v1"), exp); err != nil {
			t.Fatal(err)
		}
		v, gotExp, err := s.Take(ctx, "k1")
		if err != nil || string(v) != "v1" || !gotExp.Equal(exp) {
			t.Fatalf("Take = %q, %v, %v; want v1, %v", v, gotExp, err, exp)
		}
		if _, _, err := s.Take(ctx, "k1"); !errors.Is(err, oneshot.ErrNotFound) {
			t.Errorf("second Take = %v, want ErrNotFound", err)
		}
	})
	t.Run("unknown", func(t *testing.T) {
		s := newStore(t, 10, now)
		if _, _, err := s.Take(ctx, "never"); !errors.Is(err, oneshot.ErrNotFound) {
			t.Errorf("Take(never) = %v, want ErrNotFound", err)
		}
	})
	t.Run("keys apart", func(t *testing.T) {
		s := newStore(t, 10, now)
		for i := range 3 {
			if err := s.Put(ctx, fmt.Sprint("k", i), []byte{byte(i)}, later(time.Minute)); err != nil {
				t.Fatal(err)
			}
		}
		for _, i := range []int{2, 0, 1} {
			v, _, err := s.Take(ctx, fmt.Sprint("k", i))
			if err != nil || len(v) != 1 || v[0] != byte(i) {
				t.Errorf("Take(k%d) = %v, %v", i, v, err)
			}
		}
	})
	t.Run("expired value still reported with its expiry", func(t *testing.T) {
		s := newStore(t, 10, now)
		exp := later(time.Second)
		if err := s.Put(ctx, "old", []byte("x"), exp); err != nil {
			t.Fatal(err)
		}
		clock.Add(2000)
		v, gotExp, err := s.Take(ctx, "old")
		switch {
		case errors.Is(err, oneshot.ErrNotFound):
			// Pruned: also a correct answer.
		case err != nil:
			t.Fatal(err)
		case string(v) != "x" || !gotExp.Equal(exp) || now().Before(gotExp):
			t.Errorf("Take = %q, %v; want x, %v (in the past)", v, gotExp, exp)
		}
	})
	t.Run("bounded, expired values make room", func(t *testing.T) {
		s := newStore(t, 3, now)
		for i := range 3 {
			if err := s.Put(ctx, fmt.Sprint("b", i), []byte("x"), later(time.Second)); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Put(ctx, "b3", []byte("x"), later(time.Second)); !errors.Is(err, oneshot.ErrFull) {
			t.Fatalf("Put past the bound = %v, want ErrFull", err)
		}
		clock.Add(2000)
		if err := s.Put(ctx, "b4", []byte("x"), later(time.Second)); err != nil {
			t.Errorf("Put after the others expired = %v, want room", err)
		}
	})
	t.Run("an owner's bound evicts its own oldest, never another's", func(t *testing.T) {
		s := newStore(t, 100, now)
		if err := s.PutOwned(ctx, "bob", 3, "bob0", []byte("b"), later(time.Minute)); err != nil {
			t.Fatal(err)
		}
		for i := range 20 {
			// Later keys expire later: the oldest is the first put.
			if err := s.PutOwned(ctx, "ann", 3, fmt.Sprint("ann", i), []byte{byte(i)}, later(time.Minute+time.Duration(i)*time.Second)); err != nil {
				t.Fatalf("PutOwned ann%d = %v: an owner past its bound replaces its oldest", i, err)
			}
		}
		for i := range 17 {
			if _, _, err := s.Take(ctx, fmt.Sprint("ann", i)); !errors.Is(err, oneshot.ErrNotFound) {
				t.Errorf("Take(ann%d) = %v, want ErrNotFound (evicted)", i, err)
			}
		}
		for i := 17; i < 20; i++ {
			if v, _, err := s.Take(ctx, fmt.Sprint("ann", i)); err != nil || len(v) != 1 || v[0] != byte(i) {
				t.Errorf("Take(ann%d) = %v, %v: the newest are kept", i, v, err)
			}
		}
		if v, _, err := s.Take(ctx, "bob0"); err != nil || string(v) != "b" {
			t.Errorf("Take(bob0) = %q, %v: another owner's value was evicted", v, err)
		}
	})
	t.Run("a full store refuses a new owner, and lets a full owner replace", func(t *testing.T) {
		s := newStore(t, 4, now)
		for i := range 2 {
			if err := s.PutOwned(ctx, "ann", 2, fmt.Sprint("a", i), []byte("x"), later(time.Minute+time.Duration(i)*time.Second)); err != nil {
				t.Fatal(err)
			}
			if err := s.PutOwned(ctx, "bob", 2, fmt.Sprint("b", i), []byte("x"), later(time.Minute+time.Duration(i)*time.Second)); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.PutOwned(ctx, "cat", 2, "c0", []byte("x"), later(time.Minute)); !errors.Is(err, oneshot.ErrFull) {
			t.Fatalf("PutOwned into a full store = %v, want ErrFull", err)
		}
		if err := s.PutOwned(ctx, "ann", 2, "a2", []byte("x"), later(2*time.Minute)); err != nil {
			t.Errorf("PutOwned by an owner at its bound in a full store = %v, want its oldest replaced", err)
		}
		if _, _, err := s.Take(ctx, "a0"); !errors.Is(err, oneshot.ErrNotFound) {
			t.Errorf("Take(a0) = %v, want ErrNotFound (replaced)", err)
		}
		clock.Add(5 * 60 * 1000)
		if err := s.PutOwned(ctx, "cat", 2, "c1", []byte("x"), later(time.Minute)); err != nil {
			t.Errorf("PutOwned after the others expired = %v, want room", err)
		}
	})
	t.Run("concurrent takes: exactly one wins", func(t *testing.T) {
		s := newStore(t, 100, now)
		for round := range 5 {
			key := fmt.Sprint("race", round)
			if err := s.Put(ctx, key, []byte("x"), later(time.Minute)); err != nil {
				t.Fatal(err)
			}
			var wins atomic.Int32
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, _, err := s.Take(ctx, key)
					switch {
					case err == nil:
						wins.Add(1)
					case !errors.Is(err, oneshot.ErrNotFound):
						errs <- err
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Errorf("Take: %v", err)
			}
			if n := wins.Load(); n != 1 {
				t.Fatalf("round %d: %d takes won, want exactly 1", round, n)
			}
		}
	})
}
