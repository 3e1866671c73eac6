package storetest

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
)

// redeemed moves a stored pending call to redeemed by token, its lease
// ending at leaseUntil, as the queue does (through approved).
func redeemed(t *testing.T, s Stores, c *queue.Call, token string, leaseUntil time.Time) {
	t.Helper()
	at := leaseUntil.Add(-c.OutcomeWithinOrDefault())
	update(t, s, func(tx queue.Tx) error {
		a := queue.Approval{Operator: "alice", Channel: audit.ChannelWeb, At: at.Add(-time.Second)}
		if err := tx.AddApproval(c.ID, a); err != nil {
			return err
		}
		c.Approvals = []queue.Approval{a}
		c.Status, c.DecidedAt = queue.StatusApproved, a.At
		c.Grant, c.GrantJTI, c.GrantKID, c.GrantExpiresAt = "g.g.g", randomID("jti"), "kid1", a.At.Add(time.Minute)
		if err := tx.UpdateCall(c); err != nil {
			return err
		}
		c.Status, c.RedeemedAt, c.RedeemedBy, c.LeaseUntil = queue.StatusRedeemed, at, token, leaseUntil
		return tx.UpdateCall(c)
	})
}

var _ = add("leases/lease, outcome and resolution fields persist", func(t *testing.T, s Stores) {
	ctx := context.Background()
	c := newCall("agent:a", "t.x", t0)
	c.OutcomeWithin = 90 * time.Second
	insert(t, s, c)
	redeemed(t, s, c, "tok_1", t0.Add(time.Hour))
	got, err := s.Queue.Call(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, c) {
		t.Fatalf("redeemed call =\n%+v\nwant\n%+v", got, c)
	}
	steps := []func(){
		func() { c.LeaseUntil = c.LeaseUntil.Add(time.Minute) }, // a heartbeat
		func() { c.Outcome = &queue.Outcome{Status: queue.OutcomeLeaseExpired, At: c.LeaseUntil} },
		func() {
			c.Resolution = &queue.Resolution{Verdict: queue.VerdictNotExecuted, By: "bob", Channel: audit.ChannelWeb,
				Note: "no refund in the ledger", Evidence: "https://ledger.example/r?q=1", At: c.LeaseUntil.Add(time.Hour)}
		},
		func() {
			c.Outcome = &queue.Outcome{Status: queue.OutcomeSucceeded, Detail: "late", At: c.LeaseUntil.Add(2 * time.Hour)}
		},
	}
	for i, step := range steps {
		step()
		update(t, s, func(tx queue.Tx) error { return tx.UpdateCall(c) })
		got, err := s.Queue.Call(ctx, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, c) {
			t.Errorf("after step %d: call =\n%+v %+v %+v\nwant\n%+v %+v %+v", i, got, got.Outcome, got.Resolution, c, c.Outcome, c.Resolution)
		}
	}
})

// A reported outcome and a resolution are final in the store itself, below
// the queue's rules; only lease_expired gives way to a report.
var _ = add("leases/a reported outcome and a resolution never change", func(t *testing.T, s Stores) {
	ctx := context.Background()
	c := newCall("agent:a", "t.x", t0)
	insert(t, s, c)
	redeemed(t, s, c, "tok_1", t0.Add(time.Hour))
	c.Outcome = &queue.Outcome{Status: queue.OutcomeUnknown, Detail: "timed out", At: t0.Add(time.Minute)}
	update(t, s, func(tx queue.Tx) error { return tx.UpdateCall(c) })
	c.Resolution = &queue.Resolution{Verdict: queue.VerdictExecuted, By: "bob", Channel: audit.ChannelWeb, Note: "seen", At: t0.Add(time.Hour)}
	update(t, s, func(tx queue.Tx) error { return tx.UpdateCall(c) })
	want := *c
	changes := map[string]func(c *queue.Call){
		"outcome status": func(c *queue.Call) { c.Outcome = &queue.Outcome{Status: queue.OutcomeSucceeded, At: c.Outcome.At} },
		"outcome detail": func(c *queue.Call) {
			c.Outcome = &queue.Outcome{Status: c.Outcome.Status, Detail: "edited", At: c.Outcome.At}
		},
		"outcome erased": func(c *queue.Call) { c.Outcome = nil },
		"verdict": func(c *queue.Call) {
			r := *c.Resolution
			r.Verdict = queue.VerdictNotExecuted
			c.Resolution = &r
		},
		"note": func(c *queue.Call) {
			r := *c.Resolution
			r.Note = "edited"
			c.Resolution = &r
		},
		"resolver": func(c *queue.Call) {
			r := *c.Resolution
			r.By = "mallory"
			c.Resolution = &r
		},
		"resolution erased": func(c *queue.Call) { c.Resolution = nil },
	}
	for name, change := range changes {
		edited := want
		change(&edited)
		if err := s.Queue.Update(ctx, func(tx queue.Tx) error { return tx.UpdateCall(&edited) }); err == nil {
			t.Errorf("%s: UpdateCall accepted the change", name)
		}
		got, err := s.Queue.Call(ctx, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Outcome, want.Outcome) || !reflect.DeepEqual(got.Resolution, want.Resolution) {
			t.Errorf("%s: stored %+v %+v, want %+v %+v", name, got.Outcome, got.Resolution, want.Outcome, want.Resolution)
		}
	}
})

var _ = add("leases/due leases and the next lease end", func(t *testing.T, s Stores) {
	ctx := context.Background()
	if _, ok, err := s.Queue.NextLeaseEnd(ctx); err != nil || ok {
		t.Fatalf("NextLeaseEnd of an empty store = %t, %v; want none", ok, err)
	}
	early, late, reported, expired, pending := newCall("agent:a", "t.x", t0), newCall("agent:a", "t.x", t0),
		newCall("agent:a", "t.x", t0), newCall("agent:a", "t.x", t0), newCall("agent:a", "t.x", t0)
	insert(t, s, early, late, reported, expired, pending)
	redeemed(t, s, early, "tok_1", t0.Add(10*time.Minute))
	redeemed(t, s, late, "tok_1", t0.Add(time.Hour))
	redeemed(t, s, reported, "tok_2", t0.Add(5*time.Minute))
	redeemed(t, s, expired, "tok_2", t0.Add(6*time.Minute))
	update(t, s, func(tx queue.Tx) error {
		reported.Outcome = &queue.Outcome{Status: queue.OutcomeSucceeded, At: t0.Add(time.Minute)}
		expired.Outcome = &queue.Outcome{Status: queue.OutcomeLeaseExpired, At: t0.Add(6 * time.Minute)}
		if err := tx.UpdateCall(reported); err != nil {
			return err
		}
		return tx.UpdateCall(expired)
	})
	if got, ok, err := s.Queue.NextLeaseEnd(ctx); err != nil || !ok || !got.Equal(early.LeaseUntil) {
		t.Errorf("NextLeaseEnd = %v, %t, %v; want %v", got, ok, err, early.LeaseUntil)
	}
	for _, tc := range []struct {
		now   time.Time
		limit int
		want  []string
	}{
		{t0.Add(9 * time.Minute), 10, nil},
		{t0.Add(10 * time.Minute), 10, []string{early.ID}}, // at the lease end
		{t0.Add(2 * time.Hour), 10, []string{early.ID, late.ID}},
		{t0.Add(2 * time.Hour), 1, []string{early.ID}}, // the earliest first
	} {
		due, err := s.Queue.DueLeases(ctx, tc.now, tc.limit)
		if err != nil || len(due) != len(tc.want) || (len(due) > 0 && !reflect.DeepEqual(due, tc.want)) {
			t.Errorf("DueLeases(%v, %d) = %v, %v; want %v", tc.now, tc.limit, due, err, tc.want)
		}
	}
})

var _ = add("leases/unresolved calls, oldest outcome first", func(t *testing.T, s Stores) {
	ctx := context.Background()
	if list, err := s.Queue.UnresolvedCalls(ctx, 10); err != nil || len(list) != 0 {
		t.Fatalf("UnresolvedCalls of an empty store = %v, %v", list, err)
	}
	if n, err := s.Queue.CountUnresolved(ctx); err != nil || n != 0 {
		t.Fatalf("CountUnresolved of an empty store = %d, %v", n, err)
	}
	unknown, expired, resolved, succeeded, open := newCall("agent:a", "t.x", t0), newCall("agent:b", "t.x", t0),
		newCall("agent:a", "t.x", t0), newCall("agent:a", "t.x", t0), newCall("agent:a", "t.x", t0)
	insert(t, s, unknown, expired, resolved, succeeded, open)
	for _, c := range []*queue.Call{unknown, expired, resolved, succeeded, open} {
		redeemed(t, s, c, "tok_1", t0.Add(time.Hour))
	}
	update(t, s, func(tx queue.Tx) error {
		unknown.Outcome = &queue.Outcome{Status: queue.OutcomeUnknown, Detail: "timeout", At: t0.Add(3 * time.Minute)}
		expired.Outcome = &queue.Outcome{Status: queue.OutcomeLeaseExpired, At: t0.Add(2 * time.Minute)}
		resolved.Outcome = &queue.Outcome{Status: queue.OutcomeLeaseExpired, At: t0.Add(time.Minute)}
		resolved.Resolution = &queue.Resolution{Verdict: queue.VerdictExecuted, By: "bob", Channel: audit.ChannelWeb, Note: "n", At: t0.Add(4 * time.Minute)}
		succeeded.Outcome = &queue.Outcome{Status: queue.OutcomeSucceeded, At: t0.Add(time.Minute)}
		for _, c := range []*queue.Call{unknown, expired, resolved, succeeded} {
			if err := tx.UpdateCall(c); err != nil {
				return err
			}
		}
		return nil
	})
	list, err := s.Queue.UnresolvedCalls(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(list, []*queue.Call{expired, unknown}) {
		t.Errorf("UnresolvedCalls = %v, want [%s %s] complete, approvals included", ids(list), expired.ID, unknown.ID)
	}
	if list, _ := s.Queue.UnresolvedCalls(ctx, 1); len(list) != 1 || list[0].ID != expired.ID {
		t.Errorf("UnresolvedCalls with limit 1 = %v, want [%s]", ids(list), expired.ID)
	}
	if n, err := s.Queue.CountUnresolved(ctx); err != nil || n != 2 {
		t.Errorf("CountUnresolved = %d, %v; want 2", n, err)
	}
})

var _ = add("history/the outcome filter", func(t *testing.T, s Stores) {
	ctx := context.Background()
	var calls []*queue.Call
	for i := range 7 {
		c := newCall("agent:a", "t.x", t0.Add(time.Duration(i)*time.Second))
		insert(t, s, c)
		calls = append(calls, c)
	}
	// 0 stays pending; 1 open lease; 2 succeeded; 3 failed; 4 unknown;
	// 5 lease_expired and resolved executed; 6 unknown resolved not
	// executed.
	for _, c := range calls[1:] {
		redeemed(t, s, c, "tok_1", t0.Add(time.Hour))
	}
	at := t0.Add(time.Minute)
	update(t, s, func(tx queue.Tx) error {
		for i, st := range map[int]string{2: queue.OutcomeSucceeded, 3: queue.OutcomeFailed, 4: queue.OutcomeUnknown,
			5: queue.OutcomeLeaseExpired, 6: queue.OutcomeUnknown} {
			calls[i].Outcome = &queue.Outcome{Status: st, At: at}
		}
		calls[5].Resolution = &queue.Resolution{Verdict: queue.VerdictExecuted, By: "bob", Channel: audit.ChannelWeb, Note: "n", At: at}
		calls[6].Resolution = &queue.Resolution{Verdict: queue.VerdictNotExecuted, By: "carol", Channel: audit.ChannelWeb, Note: "n", At: at}
		for _, c := range calls[2:] {
			if err := tx.UpdateCall(c); err != nil {
				return err
			}
		}
		return nil
	})
	for _, tc := range []struct {
		outcome string
		want    []string
	}{
		{queue.OutcomeFilterOpen, newestFirst(calls, 1)},
		{queue.OutcomeFilterSucceeded, newestFirst(calls, 2)},
		{queue.OutcomeFilterFailed, newestFirst(calls, 3)},
		{queue.OutcomeFilterUnknown, newestFirst(calls, 4, 6)},
		{queue.OutcomeFilterLeaseExpired, newestFirst(calls, 5)},
		{queue.OutcomeFilterUnresolved, newestFirst(calls, 4)},
		{queue.OutcomeFilterResolved, newestFirst(calls, 5, 6)},
		{queue.OutcomeFilterExecuted, newestFirst(calls, 5)},
		{queue.OutcomeFilterNotExecuted, newestFirst(calls, 6)},
	} {
		page, _, err := s.History.History(ctx, queue.HistoryFilter{Outcome: tc.outcome})
		if err != nil {
			t.Errorf("%s: %v", tc.outcome, err)
			continue
		}
		if got := ids(page); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("outcome %s: History = %v, want %v", tc.outcome, got, tc.want)
		}
	}
	var fe *queue.FilterError
	if _, _, err := s.History.History(ctx, queue.HistoryFilter{Outcome: "ran"}); err == nil || !errors.As(err, &fe) {
		t.Errorf("an unknown outcome filter: %v, want a *queue.FilterError", err)
	}
})
