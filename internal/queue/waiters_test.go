package queue

import "testing"

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
