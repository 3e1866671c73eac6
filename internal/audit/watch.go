package audit

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// ChainStore is what watching the stored chain reads; every Trail is one.
type ChainStore interface {
	VerifyChain(ctx context.Context) (VerifyResult, error)
	AuditHead(ctx context.Context) (int64, string, error)
	LatestCheckpoint(ctx context.Context) (Checkpoint, error)
}

// ChainStatus is the newest result of verifying the stored chain.
type ChainStatus struct {
	// State is "verified", "broken", "error" (the database could not be
	// read) or "pending" (no verification has finished yet).
	State string
	// Count entries verified; CheckpointSeq is the newest signed
	// checkpoint they matched (0 when none), of Checkpoints in all.
	Count         int64
	CheckpointSeq int64
	Checkpoints   int
	// BadSeq is the first bad entry (0 when the damage is not one entry);
	// Reason says what is wrong.
	BadSeq int64
	Reason string
	// At is when the verification finished; Took how long it ran.
	At   time.Time
	Took time.Duration
	// Running is set while a newer verification is under way.
	Running bool
}

// Verification cadence. Verifying reads the whole trail (about 40 s for
// four million entries), so it runs in the background: once at start,
// then only when asked (the history is looked at), and never more often
// than every MinVerifyGap or ten times its own duration, whichever is
// longer, which keeps it under a tenth of one core. It runs again when the
// trail or its checkpoints have moved, and every MaxVerifyAge in any case,
// since an entry altered in place moves neither.
const (
	MinVerifyGap = 5 * time.Second
	MaxVerifyAge = time.Hour
)

// Watcher verifies the stored chain in the background and keeps the newest
// result. Its loop runs in Run, which its owner starts.
type Watcher struct {
	store ChainStore
	now   func() time.Time
	log   *slog.Logger
	kick  chan struct{}
	// handled, when set (by tests), is called after each request the loop
	// takes, with whether it verified.
	handled func(verified bool)

	mu      sync.Mutex
	last    ChainStatus
	head    int64 // the trail's head when last verified
	cpSeq   int64 // the newest checkpoint when last verified
	running bool
}

// NewWatcher returns a watcher of store's chain; the first verification
// runs once Run starts.
func NewWatcher(store ChainStore, now func() time.Time, log *slog.Logger) *Watcher {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.Default()
	}
	w := &Watcher{store: store, now: now, log: log, kick: make(chan struct{}, 1), last: ChainStatus{State: "pending"}}
	w.kick <- struct{}{}
	return w
}

// Status returns the newest result.
func (w *Watcher) Status() ChainStatus {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.last
	s.Running = w.running
	return s
}

// gap is how long a result stands before another run may start.
func (w *Watcher) gap() time.Duration { return max(MinVerifyGap, 10*w.last.Took) }

// Request asks for a verification if the newest result may be renewed, and
// reports whether it asked. It never waits; the loop verifies only if the
// trail or its checkpoints moved, or the result is MaxVerifyAge old.
func (w *Watcher) Request(now time.Time) bool {
	w.mu.Lock()
	ready := !w.running && (w.last.At.IsZero() || now.Sub(w.last.At) >= w.gap())
	w.mu.Unlock()
	if !ready {
		return false
	}
	select {
	case w.kick <- struct{}{}:
	default:
	}
	return true
}

// Run verifies when asked and due, until ctx ends.
func (w *Watcher) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
		}
		verified := w.verifyIfDue(ctx)
		if w.handled != nil && ctx.Err() == nil {
			w.handled(verified)
		}
	}
}

// verifyIfDue verifies the chain unless the newest result still stands:
// too recent, or nothing has moved and it is younger than MaxVerifyAge.
func (w *Watcher) verifyIfDue(ctx context.Context) bool {
	head, _, err := w.store.AuditHead(ctx)
	if err != nil && ctx.Err() != nil {
		return false
	}
	cpSeq := int64(0)
	if cp, cerr := w.store.LatestCheckpoint(ctx); cerr == nil {
		cpSeq = cp.Seq
	}
	now := w.now()
	w.mu.Lock()
	due := w.last.At.IsZero() || w.last.State == "error" || err != nil ||
		(now.Sub(w.last.At) >= w.gap() && (head != w.head || cpSeq != w.cpSeq || now.Sub(w.last.At) >= MaxVerifyAge))
	if due {
		w.running = true
	}
	w.mu.Unlock()
	if due {
		w.verify(ctx, head, cpSeq)
	}
	return due
}

func (w *Watcher) verify(ctx context.Context, head, cpSeq int64) {
	start := time.Now()
	res, err := w.store.VerifyChain(ctx)
	took := time.Since(start)
	if ctx.Err() != nil {
		w.mu.Lock()
		w.running = false
		w.mu.Unlock()
		return
	}
	st := ChainStatus{At: w.now(), Took: took}
	switch {
	case err != nil:
		st.State, st.Reason = "error", "the database could not be read"
		w.log.Error("audit chain verification could not read the database", slog.Any("error", err))
	case res.OK:
		st.State, st.Count, st.CheckpointSeq, st.Checkpoints = "verified", res.Count, res.CheckpointSeq, res.Checkpoints
	default:
		st.State, st.Count = "broken", res.Count
		var be *BreakError
		if errors.As(res.Err, &be) {
			st.BadSeq = be.Seq
		}
		st.Reason = ReasonOf(res.Err)
	}
	w.mu.Lock()
	prev := w.last.State
	w.last, w.head, w.cpSeq, w.running = st, head, cpSeq, false
	w.mu.Unlock()
	if st.State == "broken" && prev != "broken" {
		w.log.Error("the audit chain does not verify", slog.Int64("first_bad_entry", st.BadSeq), slog.String("reason", st.Reason))
	}
}
