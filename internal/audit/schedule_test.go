package audit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// memTrail is an in-memory CheckpointStore: a head that the test moves,
// and the checkpoints signed so far. Its clock is the test's.
type memTrail struct {
	mu          sync.Mutex
	now         func() time.Time
	seq         int64
	checkpoints []Checkpoint
	headErr     error
	latestErr   error
	signErr     error
	signs       int // calls of Checkpoint
}

func (m *memTrail) head(seq int64) string { return fmt.Sprintf("%064x", seq) }

func (m *memTrail) AuditHead(context.Context) (int64, string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.headErr != nil {
		return 0, "", m.headErr
	}
	if m.seq == 0 {
		return 0, GenesisHash, nil
	}
	return m.seq, m.head(m.seq), nil
}

func (m *memTrail) LatestCheckpoint(context.Context) (Checkpoint, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.latestErr != nil {
		return Checkpoint{}, m.latestErr
	}
	if len(m.checkpoints) == 0 {
		return Checkpoint{}, ErrNoCheckpoint
	}
	return m.checkpoints[len(m.checkpoints)-1], nil
}

func (m *memTrail) Checkpoint(_ context.Context, signer *Signer) (Checkpoint, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.signs++
	if m.signErr != nil {
		return Checkpoint{}, m.signErr
	}
	if m.seq == 0 {
		return Checkpoint{}, ErrNoCheckpoint
	}
	if n := len(m.checkpoints); n > 0 && m.checkpoints[n-1].Seq == m.seq {
		return m.checkpoints[n-1], nil
	}
	c, err := signer.Sign(m.seq, m.head(m.seq), m.now())
	if err != nil {
		return Checkpoint{}, err
	}
	m.checkpoints = append(m.checkpoints, c)
	return c, nil
}

func (m *memTrail) set(f func(m *memTrail)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f(m)
}

// latest is the newest checkpoint's seq, 0 for none.
func (m *memTrail) latest() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.checkpoints) == 0 {
		return 0
	}
	return m.checkpoints[len(m.checkpoints)-1].Seq
}

type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func newScheduler(t *testing.T, interval time.Duration, every int64) (*Scheduler, *memTrail, *testClock, *lockedBuffer) {
	t.Helper()
	clock := &testClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	trail := &memTrail{now: clock.now}
	logs := &lockedBuffer{}
	s := &Scheduler{
		Store:    trail,
		Signer:   testSigner(t),
		Interval: interval,
		Every:    every,
		Log:      slog.New(slog.NewTextHandler(logs, nil)),
		Now:      clock.now,
	}
	return s, trail, clock, logs
}

func TestSchedulerEveryAndInterval(t *testing.T) {
	ctx := context.Background()
	s, trail, clock, _ := newScheduler(t, time.Hour, 5)
	check := func(step string, want int64) {
		t.Helper()
		s.Tick(ctx)
		if got := trail.latest(); got != want {
			t.Fatalf("%s: newest checkpoint at %d, want %d", step, got, want)
		}
	}
	check("empty trail", 0)
	trail.set(func(m *memTrail) { m.seq = 1 })
	check("first entry, no checkpoint yet", 1)
	clock.advance(time.Second)
	trail.set(func(m *memTrail) { m.seq = 5 })
	check("four entries since, a second later", 1)
	trail.set(func(m *memTrail) { m.seq = 6 })
	check("five entries since", 6)
	clock.advance(time.Hour - time.Second)
	check("interval almost passed, head unchanged", 6)
	trail.set(func(m *memTrail) { m.seq = 7 })
	check("one entry, interval not yet passed", 6)
	clock.advance(time.Second)
	check("interval passed, head moved", 7)
	clock.advance(2 * time.Hour)
	check("interval passed, head unchanged", 7)
	if trail.signs != 3 {
		t.Errorf("signed %d times, want 3", trail.signs)
	}
}

// TestSchedulerCountsFromStoredCheckpoint: a checkpoint signed elsewhere
// (another replica, the checkpoint command) restarts the count and the
// interval; the scheduler does not sign again before it is due.
func TestSchedulerCountsFromStoredCheckpoint(t *testing.T) {
	ctx := context.Background()
	s, trail, clock, _ := newScheduler(t, time.Hour, 5)
	trail.set(func(m *memTrail) { m.seq = 5 })
	s.Tick(ctx)
	if trail.latest() != 5 {
		t.Fatalf("newest checkpoint at %d, want 5", trail.latest())
	}
	// Another signer covers entry 8, at minute 30.
	clock.advance(30 * time.Minute)
	other := &Scheduler{Store: trail, Signer: testSigner(t), Now: clock.now}
	trail.set(func(m *memTrail) { m.seq = 8 })
	other.Final(ctx)
	if trail.latest() != 8 {
		t.Fatalf("other signer: newest checkpoint at %d, want 8", trail.latest())
	}
	// Entry 10 is five past 5 but two past 8; an hour after 5 but only
	// half an hour after 8.
	clock.advance(30 * time.Minute)
	trail.set(func(m *memTrail) { m.seq = 10 })
	s.Tick(ctx)
	if got := trail.latest(); got != 8 {
		t.Errorf("signed at %d, though the newest checkpoint (8) is 2 entries and 30 minutes old", got)
	}
	trail.set(func(m *memTrail) { m.seq = 13 })
	s.Tick(ctx)
	if got := trail.latest(); got != 13 {
		t.Errorf("newest checkpoint at %d, want 13: five entries since 8", got)
	}
}

// A scheduler started over a database whose newest checkpoint is old signs
// a moved head at its first look, not an interval later.
func TestSchedulerStartsFromStoredTime(t *testing.T) {
	ctx := context.Background()
	s, trail, clock, _ := newScheduler(t, time.Hour, 1000)
	trail.set(func(m *memTrail) { m.seq = 3 })
	s.Final(ctx)
	clock.advance(2 * time.Hour)
	trail.set(func(m *memTrail) { m.seq = 4 })
	restarted := &Scheduler{Store: trail, Signer: s.Signer, Interval: time.Hour, Every: 1000, Log: s.Log, Now: clock.now}
	restarted.Tick(ctx)
	if got := trail.latest(); got != 4 {
		t.Errorf("newest checkpoint at %d, want 4", got)
	}
}

func TestSchedulerFinal(t *testing.T) {
	ctx := context.Background()
	s, trail, _, _ := newScheduler(t, time.Hour, 1000)
	s.Final(ctx)
	if trail.signs != 0 {
		t.Errorf("empty trail: signed %d times", trail.signs)
	}
	trail.set(func(m *memTrail) { m.seq = 2 })
	s.Final(ctx)
	if trail.latest() != 2 {
		t.Fatalf("newest checkpoint at %d, want 2", trail.latest())
	}
	s.Final(ctx)
	if trail.signs != 1 {
		t.Errorf("head already covered: signed %d times, want 1", trail.signs)
	}
	trail.set(func(m *memTrail) { m.seq = 3 })
	s.Final(ctx)
	if trail.latest() != 3 {
		t.Errorf("one entry past the checkpoint: newest at %d, want 3", trail.latest())
	}
}

func TestSchedulerFailures(t *testing.T) {
	boom := errors.New("disk on fire")
	for _, tc := range []struct {
		name string
		fail func(m *memTrail, err error)
		log  string
	}{
		{"head", func(m *memTrail, err error) { m.headErr = err }, "audit head"},
		{"latest checkpoint", func(m *memTrail, err error) { m.latestErr = err }, "audit latest checkpoint"},
		{"sign", func(m *memTrail, err error) { m.signErr = err }, "audit checkpoint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s, trail, clock, logs := newScheduler(t, time.Hour, 1)
			trail.set(func(m *memTrail) { m.seq = 1; tc.fail(m, boom) })
			s.Tick(ctx)
			if !strings.Contains(logs.String(), tc.log) || !strings.Contains(logs.String(), boom.Error()) {
				t.Errorf("log = %q, want %q with the error", logs.String(), tc.log)
			}
			signs := trail.signs
			trail.set(func(m *memTrail) { tc.fail(m, nil) })
			// Within the pause the scheduler does not look again.
			clock.advance(29 * time.Second)
			s.Tick(ctx)
			if trail.signs != signs || trail.latest() != 0 {
				t.Errorf("looked again %v after a failure: signs %d, newest %d", 29*time.Second, trail.signs, trail.latest())
			}
			clock.advance(time.Second)
			s.Tick(ctx)
			if trail.latest() != 1 {
				t.Errorf("after the pause: newest checkpoint at %d, want 1", trail.latest())
			}
		})
	}
}

// Run looks on its own and signs the head on its way out.
func TestSchedulerRun(t *testing.T) {
	s, trail, _, _ := newScheduler(t, time.Hour, 2)
	s.Now = time.Now
	trail.now = time.Now
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	trail.set(func(m *memTrail) { m.seq = 2 })
	deadline := time.Now().Add(10 * time.Second)
	for trail.latest() != 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if trail.latest() != 2 {
		t.Fatalf("Run: newest checkpoint at %d, want 2", trail.latest())
	}
	trail.set(func(m *memTrail) { m.seq = 3 })
	cancel()
	<-done
	if trail.latest() != 3 {
		t.Errorf("after Run ended: newest checkpoint at %d, want 3", trail.latest())
	}
}
