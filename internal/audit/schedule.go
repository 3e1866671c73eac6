package audit

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// CheckpointStore is what the checkpoint scheduler needs of a database.
type CheckpointStore interface {
	// AuditHead returns the newest entry's sequence number and hash (0 when
	// the trail is empty).
	AuditHead(ctx context.Context) (seq int64, head string, err error)
	// LatestCheckpoint returns the newest stored checkpoint, whoever signed
	// it; ErrNoCheckpoint when there is none.
	LatestCheckpoint(ctx context.Context) (Checkpoint, error)
	// Checkpoint signs and stores the current head, or returns the newest
	// checkpoint when it already covers the head; ErrNoCheckpoint for an
	// empty trail.
	Checkpoint(ctx context.Context, signer *Signer) (Checkpoint, error)
}

// Scheduler decides when to sign a checkpoint of the audit trail: whenever
// the trail has grown by Every entries since the newest checkpoint, or when
// Interval has passed since it and the head has moved; and once more when
// the run ends, so a clean stop leaves the head signed.
//
// Each look reads the newest checkpoint from the database instead of
// remembering the last one this process signed. The database is the truth:
// another replica, or an operator's "audit checkpoint" command, may have
// signed since; counting from a remembered checkpoint would sign again too
// early, and a process that started after a long pause would wait a whole
// Interval. The extra read is one indexed row a second.
//
// A failure is logged and retried after a pause (30 seconds, or Interval if
// shorter); it never stops the run.
type Scheduler struct {
	Store    CheckpointStore
	Signer   *Signer
	Interval time.Duration    // 5 minutes when zero
	Every    int64            // 1000 when zero
	Log      *slog.Logger     // slog.Default() when nil
	Now      func() time.Time // time.Now when nil

	failedAt time.Time
}

// RunCheckpoints runs a Scheduler over store until ctx ends.
func RunCheckpoints(ctx context.Context, store CheckpointStore, signer *Signer, interval time.Duration, every int64, log *slog.Logger) {
	s := &Scheduler{Store: store, Signer: signer, Interval: interval, Every: every, Log: log}
	s.Run(ctx)
}

func (s *Scheduler) defaults() {
	if s.Interval <= 0 {
		s.Interval = 5 * time.Minute
	}
	if s.Every <= 0 {
		s.Every = 1000
	}
	if s.Log == nil {
		s.Log = slog.Default()
	}
	if s.Now == nil {
		s.Now = time.Now
	}
}

// Run looks at the head about once a second (or every Interval, if
// shorter) and signs when due, until ctx ends; then it signs a moved head
// once more, within 5 seconds, and returns.
func (s *Scheduler) Run(ctx context.Context) {
	s.defaults()
	t := time.NewTicker(min(time.Second, s.Interval))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			s.Final(fctx)
			cancel()
			return
		case <-t.C:
			s.Tick(ctx)
		}
	}
}

// Tick is one look: it signs a checkpoint if one is due, unless a failure
// happened less than the retry pause ago.
func (s *Scheduler) Tick(ctx context.Context) {
	s.defaults()
	if !s.failedAt.IsZero() && s.Now().Sub(s.failedAt) < min(30*time.Second, s.Interval) {
		return
	}
	if s.due(ctx, false) {
		s.take(ctx)
	}
}

// Final signs the head if any entry is not yet covered by a checkpoint,
// whatever the count and the time; the run calls it on its way out.
func (s *Scheduler) Final(ctx context.Context) {
	s.defaults()
	if s.due(ctx, true) {
		s.take(ctx)
	}
}

func (s *Scheduler) due(ctx context.Context, final bool) bool {
	seq, _, err := s.Store.AuditHead(ctx)
	if err != nil {
		s.fail(ctx, "audit head", err)
		return false
	}
	var lastSeq int64
	var lastAt time.Time
	switch c, err := s.Store.LatestCheckpoint(ctx); {
	case err == nil:
		lastSeq = c.Seq
		// A time that does not parse counts as long ago: sign soon.
		lastAt, _ = time.Parse(time.RFC3339Nano, c.Time)
	case !errors.Is(err, ErrNoCheckpoint):
		s.fail(ctx, "audit latest checkpoint", err)
		return false
	}
	if seq <= lastSeq {
		return false
	}
	return final || seq-lastSeq >= s.Every || s.Now().Sub(lastAt) >= s.Interval
}

func (s *Scheduler) take(ctx context.Context) {
	c, err := s.Store.Checkpoint(ctx, s.Signer)
	if errors.Is(err, ErrNoCheckpoint) {
		return
	}
	if err != nil {
		s.fail(ctx, "audit checkpoint", err)
		return
	}
	s.failedAt = time.Time{}
	s.Log.Debug("audit checkpoint", slog.Int64("seq", c.Seq), slog.String("head", c.Head))
}

func (s *Scheduler) fail(ctx context.Context, what string, err error) {
	if ctx.Err() == nil {
		s.Log.Error(what, slog.Any("error", err))
	}
	s.failedAt = s.Now()
}
