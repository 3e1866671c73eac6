package audit_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/testkit"
)

// fakeChainStore is a ChainStore whose verification the test controls.
type fakeChainStore struct {
	mu      sync.Mutex
	head    int64
	cp      int64
	result  audit.VerifyResult
	err     error
	gate    chan struct{} // when set, VerifyChain waits for it
	started chan struct{}
	runs    atomic.Int32
}

func (f *fakeChainStore) VerifyChain(ctx context.Context) (audit.VerifyResult, error) {
	f.runs.Add(1)
	f.mu.Lock()
	gate, started := f.gate, f.started
	f.mu.Unlock()
	if started != nil {
		started <- struct{}{}
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return audit.VerifyResult{}, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.result, f.err
}

func (f *fakeChainStore) AuditHead(context.Context) (int64, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.head, "", nil
}

func (f *fakeChainStore) LatestCheckpoint(context.Context) (audit.Checkpoint, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cp == 0 {
		return audit.Checkpoint{}, audit.ErrNoCheckpoint
	}
	return audit.Checkpoint{Seq: f.cp}, nil
}

func (f *fakeChainStore) set(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn()
}

// The chain's verification never holds up a reader: it runs in the
// background, when due, at most every audit.MinVerifyGap (or ten times its
// duration), and again when the trail or its checkpoints move or the
// result is audit.MaxVerifyAge old. Every step waits for the loop's own report
// of what it did with a request, never for time to pass.
func TestWatcherCadence(t *testing.T) {
	clock := testkit.NewClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	f := &fakeChainStore{head: 10, gate: make(chan struct{}), started: make(chan struct{}, 10),
		result: audit.VerifyResult{OK: true, Count: 10}}
	w := audit.NewWatcher(f, clock.Now, slog.New(slog.NewTextHandler(io.Discard, nil)))
	handled := make(chan bool, 10)
	audit.OnHandled(w, func(verified bool) { handled <- verified })
	if s := w.Status(); s.State != "pending" || s.Running {
		t.Fatalf("before Run: %+v", s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	defer func() { cancel(); <-done }()

	runs := func() int32 { return f.runs.Load() }
	// expect sends a request and waits for the loop's answer.
	expect := func(what string, verified bool) {
		t.Helper()
		if !w.Request(clock.Now()) {
			t.Fatalf("%s: the request was not taken", what)
		}
		if verified {
			<-f.started
		}
		if got := <-handled; got != verified {
			t.Fatalf("%s: verified %t, want %t", what, got, verified)
		}
	}

	// The first verification runs at start; while it is blocked the
	// status answers at once.
	<-f.started
	if s := w.Status(); s.State != "pending" || !s.Running {
		t.Errorf("while running: %+v, want pending and running", s)
	}
	if w.Request(clock.Now()) {
		t.Error("a request was taken while a verification runs")
	}
	close(f.gate)
	if !<-handled {
		t.Fatal("the first request did not verify")
	}
	if s := w.Status(); s.State != "verified" || s.Count != 10 || s.Running || !s.At.Equal(clock.Now()) {
		t.Errorf("after the first run: %+v", s)
	}
	f.set(func() { f.gate = nil })

	// Too soon: nothing is even asked, although the head moved.
	f.set(func() { f.head = 11 })
	clock.Advance(audit.MinVerifyGap / 2)
	if w.Request(clock.Now()) {
		t.Error("a request within the gap was taken")
	}
	// Past the gap and the head moved: it runs.
	clock.Advance(audit.MinVerifyGap)
	expect("past the gap, head moved", true)
	// Past the gap but nothing moved: it does not run.
	clock.Advance(2 * audit.MinVerifyGap)
	expect("past the gap, nothing moved", false)
	if runs() != 2 {
		t.Errorf("%d runs, want 2", runs())
	}
	// A new checkpoint moves it.
	f.set(func() { f.cp = 11 })
	expect("a new checkpoint", true)
	// Nothing moved, but the result is old: an entry may have been
	// altered in place.
	clock.Advance(audit.MaxVerifyAge)
	f.set(func() {
		f.result = audit.VerifyResult{OK: false, Count: 4, Err: &audit.BreakError{Seq: 5, Reason: "hash does not match"}}
	})
	expect("an old result", true)
	if s := w.Status(); s.State != "broken" || s.BadSeq != 5 || s.Reason != "hash does not match" || runs() != 4 {
		t.Errorf("after tampering: %+v, %d runs", s, runs())
	}
	// A slow verification spaces the next one out to ten times its length.
	audit.SetLastTook(w, 10*time.Minute)
	f.set(func() { f.head = 12 })
	clock.Advance(30 * time.Minute)
	if w.Request(clock.Now()) {
		t.Error("a request 30 min after a 10 min verification was taken")
	}
	clock.Advance(71 * time.Minute)
	expect("101 min after a 10 min verification", true)
	if runs() != 5 {
		t.Errorf("%d runs, want 5", runs())
	}
	// A database that cannot be read is an error, tried again when asked.
	f.set(func() { f.err = context.DeadlineExceeded })
	clock.Advance(audit.MaxVerifyAge)
	expect("an unreadable database", true)
	if s := w.Status(); s.State != "error" {
		t.Errorf("after a read error: %+v", s)
	}
}
