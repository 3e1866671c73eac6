package queue

import (
	"testing"
	"time"
)

// TestWaiterKeepsTheDecision: events of two commits can be published out of
// order; a waiter holding the decided call must not be handed the earlier
// pending state instead.
func TestWaiterKeepsTheDecision(t *testing.T) {
	w := waiters{m: map[string]map[chan *Call]struct{}{}}
	ch, done := w.add("call_x")
	defer done()
	w.wake(&Call{ID: "call_x", Status: StatusApproved, Grant: "g"})
	w.wake(&Call{ID: "call_x", Status: StatusPending})
	if got := <-ch; got.Status != StatusApproved || got.Grant != "g" {
		t.Fatalf("waiter holds %s, want the approved call", got.Status)
	}
	// A newer pending state does replace an older pending one.
	w.wake(&Call{ID: "call_x", Status: StatusPending, Approvals: []Approval{{Operator: "a"}}})
	w.wake(&Call{ID: "call_x", Status: StatusPending, Approvals: []Approval{{Operator: "a"}, {Operator: "b"}}})
	if got := <-ch; len(got.Approvals) != 2 {
		t.Fatalf("waiter holds %d approvals, want the newest state (2)", len(got.Approvals))
	}
}

// TestExpiryKick: a new call kicks the expiry loop unless the loop already
// wakes by itself before the call's deadline, and always while the loop is
// computing its next wake-up.
func TestExpiryKick(t *testing.T) {
	s := NewService(Config{})
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	if s.wakesBefore(now.Add(time.Hour)) {
		t.Error("with no wake-up scheduled (computing), a new deadline must kick the loop")
	}
	s.wakeAt.Store(now.Add(time.Minute).UnixMilli())
	if !s.wakesBefore(now.Add(5 * time.Minute)) {
		t.Error("a deadline after the scheduled wake-up needs no kick")
	}
	if s.wakesBefore(now.Add(30 * time.Second)) {
		t.Error("a deadline before the scheduled wake-up must kick the loop")
	}
}
