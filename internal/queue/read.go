package queue

import (
	"context"
	"time"
)

// Get returns one of the calls the principal's token submitted. Another
// token's call, of the same actor or another, is ErrNotFound.
func (s *Service) Get(ctx context.Context, who Principal, id string) (*Call, error) {
	c, err := s.store.Call(ctx, id)
	if err != nil {
		return nil, err
	}
	if !c.SubmittedByToken(who) {
		return nil, ErrNotFound
	}
	return c, nil
}

// Call returns any call, for operators and auditors.
func (s *Service) Call(ctx context.Context, id string) (*Call, error) {
	return s.store.Call(ctx, id)
}

// PageKey is where a page of pending calls starts: after the call with
// this deadline and id. The zero key starts at the first call.
type PageKey struct {
	DecideBy time.Time
	ID       string
}

// KeyOf is the key of the page that starts after call.
func KeyOf(call *Call) PageKey { return PageKey{DecideBy: call.DecideBy, ID: call.ID} }

// PendingPage lists at most limit pending calls after the key, soonest
// deadline first (ties by id).
func (s *Service) PendingPage(ctx context.Context, after PageKey, limit int) ([]*Call, error) {
	return s.store.PendingPage(ctx, after, limit)
}

// PendingCalls lists at most limit pending calls, newest first, for the
// console's queue.
func (s *Service) PendingCalls(ctx context.Context, limit int) ([]*Call, error) {
	return s.store.PendingCalls(ctx, limit)
}

// PendingCallsOf lists at most limit pending calls, newest first, of tool
// only; every tool's when tool is "".
func (s *Service) PendingCallsOf(ctx context.Context, tool string, limit int) ([]*Call, error) {
	if tool == "" {
		return s.store.PendingCalls(ctx, limit)
	}
	return s.store.PendingCallsOf(ctx, tool, limit)
}

// UnresolvedCalls lists at most limit calls that wait for a person to say
// what happened, oldest outcome first.
func (s *Service) UnresolvedCalls(ctx context.Context, limit int) ([]*Call, error) {
	return s.store.UnresolvedCalls(ctx, limit)
}

// CountUnresolved counts the calls UnresolvedCalls lists.
func (s *Service) CountUnresolved(ctx context.Context) (int, error) {
	return s.store.CountUnresolved(ctx)
}

// CountPending counts the pending calls, and those of them whose decision
// deadline is before due.
func (s *Service) CountPending(ctx context.Context, due time.Time) (all, before int, err error) {
	return s.store.CountPending(ctx, due)
}

// Blocks lists the (actor, tool) pairs blocked by the retry cap.
func (s *Service) Blocks(ctx context.Context) ([]Block, error) { return s.store.Blocks(ctx) }

// Freezes lists the freezes in force, oldest first.
func (s *Service) Freezes(ctx context.Context) ([]Freeze, error) { return s.store.Freezes(ctx) }

// Wait returns the principal's call as soon as it is no longer pending, or
// when d has passed, ctx ends or the service shuts down.
func (s *Service) Wait(ctx context.Context, who Principal, id string, d time.Duration) (*Call, error) {
	if d > MaxWait {
		d = MaxWait
	}
	ch, done := s.waiters.add(id)
	defer done()
	if !s.waitsFor(ctx, who, id, d) {
		c, err := s.Get(ctx, who, id)
		if err != nil || c.Status != StatusPending || d <= 0 {
			return c, err
		}
	}
	defer s.waiters.waiting()()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case changed := <-ch:
			if changed.Status != StatusPending {
				return changed.Clone(), nil
			}
			// A partial approval: the call is still pending; keep waiting.
			continue
		case <-timer.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.stopping:
		}
		return s.Get(context.WithoutCancel(ctx), who, id)
	}
}

// CallHead is what a long-poll checks of a call before it waits: its
// status and whose it is.
type CallHead struct {
	Status      Status
	Actor       string
	SubmittedBy string
}

// headReader is a Store that reads a call's head alone.
type headReader interface {
	CallHead(ctx context.Context, id string) (CallHead, error)
}

// waitsFor reports whether a long-poll of d for call id may wait without
// reading the whole call: the store reads its head alone, and the call is
// who's and pending. Any other answer (decided, another token's, not
// found, an error) is false, and the caller reads the call as Get does,
// which answers it. The waiter is registered before the head is read, as
// before the whole call was, so a decision after the read wakes it.
func (s *Service) waitsFor(ctx context.Context, who Principal, id string, d time.Duration) bool {
	h, ok := s.store.(headReader)
	if !ok || d <= 0 {
		return false
	}
	head, err := h.CallHead(ctx, id)
	if err != nil || head.Status != StatusPending {
		return false
	}
	c := Call{Actor: head.Actor, SubmittedBy: head.SubmittedBy}
	return c.SubmittedByToken(who)
}

// Waiting returns how many long-polls have read their call pending and
// wait for a decision.
func (s *Service) Waiting() int64 { return s.waiters.count() }

// Shutdown releases every open long-poll with the call's current state and
// stops the expiry loop.
func (s *Service) Shutdown() {
	s.stopOnce.Do(func() { close(s.stopping) })
}
