package testkit

import (
	"sync"
	"testing"
	"time"
)

func TestClock(t *testing.T) {
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	c := NewClock(t0)
	if got := c.Now(); !got.Equal(t0) {
		t.Fatalf("Now() = %v, want %v", got, t0)
	}
	if got, want := c.Advance(90*time.Second), t0.Add(90*time.Second); !got.Equal(want) || !c.Now().Equal(want) {
		t.Fatalf("Advance(90s) = %v, Now() = %v, want %v", got, c.Now(), want)
	}
	t1 := t0.Add(-time.Hour)
	c.Set(t1)
	if got := c.Now(); !got.Equal(t1) {
		t.Fatalf("after Set, Now() = %v, want %v", got, t1)
	}
	var zero Clock
	if !zero.Now().IsZero() {
		t.Fatalf("zero Clock reads %v, want the zero time", zero.Now())
	}
}

// Readers and writers at once: under -race this fails if the clock is not
// safe for concurrent use; the final reading shows no step was lost.
func TestClockConcurrent(t *testing.T) {
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	c := NewClock(t0)
	const goroutines, steps = 8, 100
	var wg sync.WaitGroup
	for range goroutines {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for range steps {
				c.Advance(time.Second)
			}
		}()
		go func() {
			defer wg.Done()
			for range steps {
				if c.Now().Before(t0) {
					t.Error("the clock went back")
					return
				}
			}
		}()
	}
	wg.Wait()
	if got, want := c.Now(), t0.Add(goroutines*steps*time.Second); !got.Equal(want) {
		t.Fatalf("Now() = %v, want %v", got, want)
	}
}
