package queue

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/countersign/countersign/internal/audit"
)

// expire moves a pending call to expired inside tx.
func (s *Service) expire(tx Tx, c *Call, emit func(Event)) error {
	c.Status = StatusExpired
	c.DecidedAt = s.now()
	if err := tx.UpdateCall(c); err != nil {
		return err
	}
	if err := tx.Append(s.entry(audit.KindExpired, c, "console", audit.ChannelAPI, map[string]any{
		"decide_by": formatTime(c.DecideBy)})); err != nil {
		return err
	}
	emit(Event{Kind: audit.KindExpired, Call: c})
	return nil
}

// SweepLocker is a Store that several servers share (replicas on one
// PostgreSQL database): ExpireDue sweeps only while it holds the store's
// sweep lock, so one server at a time expires calls and the others find
// nothing left to do.
type SweepLocker interface {
	// TrySweep takes the sweep lock without waiting; false means another
	// server holds it. release gives it back.
	TrySweep(ctx context.Context) (release func(), ok bool, err error)
}

// ExpireDue expires every pending call whose deadline has passed, each in its
// own transaction, and returns how many it expired. On a store shared by
// several servers it does so only while holding the sweep lock, and does
// nothing when another server holds it.
func (s *Service) ExpireDue(ctx context.Context) (int, error) {
	n, _, err := s.expireDue(ctx)
	return n, err
}

// expireDue is ExpireDue, also reporting whether another server held the
// sweep lock.
func (s *Service) expireDue(ctx context.Context) (n int, elsewhere bool, err error) {
	if sl, ok := s.store.(SweepLocker); ok {
		release, got, err := sl.TrySweep(ctx)
		if err != nil {
			return 0, false, err
		}
		if !got {
			return 0, true, nil
		}
		defer release()
	}
	n, err = s.sweep(ctx)
	if err != nil {
		return n, false, err
	}
	_, err = s.EscalateDue(ctx)
	return n, false, err
}

func (s *Service) sweep(ctx context.Context) (int, error) {
	ids, err := s.store.DueCalls(ctx, s.now(), 500)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		err := s.update(ctx, func(tx Tx, emit func(Event)) error {
			c, err := tx.Call(id)
			if err != nil {
				return err
			}
			if c.Status != StatusPending || s.now().Before(c.DecideBy) {
				return nil // decided meanwhile
			}
			n++
			return s.expire(tx, c, emit)
		})
		if err != nil {
			return n, err
		}
	}
	return n, s.sweepPlans(ctx)
}

// sweepPlans expires the plans whose time ran out, each in its own
// transaction, with their items not yet minted.
func (s *Service) sweepPlans(ctx context.Context) error {
	ids, err := s.store.DuePlans(ctx, s.now(), 100)
	if err != nil {
		return err
	}
	for _, id := range ids {
		err := s.update(ctx, func(tx Tx, emit func(Event)) error {
			p, items, err := s.loadPlan(tx, id)
			if err != nil {
				return err
			}
			now := s.now()
			if p.Status == PlanPending && now.Before(p.DecideBy) || p.Status == PlanApproved && now.Before(p.ValidUntil) ||
				p.Status.Final() {
				return nil // decided meanwhile
			}
			return s.endPlan(tx, p, items, PlanExpired, "console", audit.ChannelAPI, "", emit)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// wakesBefore reports whether the expiry loop will wake by itself before
// deadline. While the loop is computing its next wake (wakeAt 0) the answer
// is no, so a new call kicks it and is never missed.
func (s *Service) wakesBefore(deadline time.Time) bool {
	w := s.wakeAt.Load()
	return w != 0 && w <= deadline.UnixMilli()
}

func (s *Service) kickExpiry() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Run expires calls and plans at their deadlines until ctx ends or Shutdown is called.
// It sleeps until the earliest deadline, escalation tier or plan deadline
// (or a new submission), with no polling in between. When ctx ends it shuts the queue down, releasing
// every open long-poll with its call's current state: whoever runs the
// queue owns its end.
//
// Run also ends executors' leases when they lapse (see runLeases), on a
// loop of its own that it waits for before returning.
func (s *Service) Run(ctx context.Context) {
	leases := make(chan struct{})
	go func() { defer close(leases); s.runLeases(ctx) }()
	defer func() { <-leases }()
	for {
		s.wakeAt.Store(0)
		_, elsewhere, err := s.expireDue(ctx)
		if err != nil && ctx.Err() == nil {
			s.log.Error("expire due calls", slog.Any("error", err))
		}
		wait := time.Minute
		if next, ok, err := s.store.NextDeadline(ctx); err == nil && ok {
			wait = max(next.Sub(s.now()), 0) + 5*time.Millisecond
		}
		if next, ok, err := s.store.NextEscalation(ctx); err == nil && ok {
			wait = min(wait, max(next.Sub(s.now()), 0)+5*time.Millisecond)
		}
		if next, ok, err := s.store.NextPlanDeadline(ctx); err == nil && ok {
			wait = min(wait, max(next.Sub(s.now()), 0)+5*time.Millisecond)
		}
		if elsewhere {
			// Another server is sweeping: what is due now is its to expire;
			// look again in a while rather than spin on its lock.
			wait = max(wait, time.Second)
		}
		if wait > time.Minute {
			wait = time.Minute
		}
		s.wakeAt.Store(s.now().Add(wait).UnixMilli())
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			s.Shutdown()
			return
		case <-s.stopping:
			t.Stop()
			return
		case <-s.kick:
		case <-t.C:
		}
		t.Stop()
	}
}

// waiters wakes long-polls when their call changes. Each waiter is a
// one-slot channel that holds the newest committed state of the call: a
// wake replaces a value the waiter has not read yet, so a grant that
// follows a partial approval is never lost. Waking never blocks.
type waiters struct {
	mu sync.Mutex
	m  map[string]map[chan *Call]struct{}
	n  atomic.Int64
}

func (w *waiters) add(id string) (<-chan *Call, func()) {
	ch := make(chan *Call, 1)
	w.mu.Lock()
	set := w.m[id]
	if set == nil {
		set = map[chan *Call]struct{}{}
		w.m[id] = set
	}
	set[ch] = struct{}{}
	w.mu.Unlock()
	return ch, func() {
		w.mu.Lock()
		delete(set, ch)
		if len(set) == 0 && len(w.m[id]) == 0 {
			delete(w.m, id)
		}
		w.mu.Unlock()
	}
}

// waiting counts a long-poll that has read its call pending and waits for
// a decision, until the returned function is called.
func (w *waiters) waiting() func() {
	w.n.Add(1)
	return func() { w.n.Add(-1) }
}

// wake hands c, a committed snapshot that nobody else modifies, to every
// waiter on its id.
func (w *waiters) wake(c *Call) {
	w.mu.Lock()
	for ch := range w.m[c.ID] {
		// Only wake sends, under w.mu, so after a drain the send succeeds.
		// Commits can publish out of order; a decided state is never
		// replaced by an earlier pending one (decisions are final).
		select {
		case held := <-ch:
			if held.Status != StatusPending && c.Status == StatusPending {
				c = held
			}
		default:
		}
		ch <- c
	}
	w.mu.Unlock()
}

func (w *waiters) count() int64 { return w.n.Load() }
