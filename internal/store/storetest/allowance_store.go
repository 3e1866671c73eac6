package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/queue"
)

// The allowance store: what queue.Tx keeps of allowances and their uses,
// checked through the interface alone. The rules of giving and using them
// are checked through the queue in allowances.go.

// storedAllowance is an allowance of base, given at t0 by alice, with the
// given uses and once per call.
func storedAllowance(base *queue.Call, uses int, once bool) *queue.Allowance {
	return &queue.Allowance{
		ID: queue.NewAllowanceID(), Actor: base.Actor, Audience: base.Audience, Tool: base.Tool, ToolDigest: "ab" + base.Digest[2:],
		BaseCall: base.ID, BaseDigest: base.Digest,
		Scope:       []byte("{\"v\":1,\"n\":\"caf\u00e9 \x00\"}"),
		ScopeDigest: base.Digest, Uses: uses, OncePerCall: once, Until: t0.Add(time.Hour),
		Giver: "alice", Confirmers: []string{"alice"}, ConfirmersNeeded: 2, GivenAt: t0,
	}
}

// uses inserts n calls and returns them.
func callsOf(t *testing.T, s Stores, n int) []*queue.Call {
	t.Helper()
	out := make([]*queue.Call, n)
	for i := range out {
		out[i] = newCall("agent:a", "pay.refund", t0.Add(time.Duration(i)*time.Millisecond))
	}
	insert(t, s, out...)
	return out
}

// use runs UseAllowance in a transaction of its own.
func use(t *testing.T, s Stores, u queue.AllowanceUse) bool {
	t.Helper()
	var ok bool
	update(t, s, func(tx queue.Tx) error {
		var err error
		ok, err = tx.UseAllowance(u)
		return err
	})
	return ok
}

var _ = add("allowances/stored, confirmed and ended, read back", func(t *testing.T, s Stores) {
	ctx := context.Background()
	base := callsOf(t, s, 1)[0]
	a := storedAllowance(base, 7, true)
	update(t, s, func(tx queue.Tx) error { return tx.InsertAllowance(a) })
	check := func(when string, want *queue.Allowance) {
		t.Helper()
		got, err := s.Queue.Allowance(ctx, want.ID)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: Allowance = %+v, %v\nwant %+v", when, got, err, want)
		}
		update(t, s, func(tx queue.Tx) error {
			in, err := tx.Allowance(want.ID)
			if err != nil || !reflect.DeepEqual(in, want) {
				t.Errorf("%s: tx.Allowance = %+v, %v\nwant %+v", when, in, err, want)
			}
			return nil
		})
	}
	check("given", a)

	a.Confirmers = []string{"alice", "oidc:idp.example/b\u00f6b"}
	update(t, s, func(tx queue.Tx) error { return tx.SetConfirmers(a.ID, a.Confirmers) })
	check("confirmed", a)

	var ended, again bool
	update(t, s, func(tx queue.Tx) error {
		var err error
		if ended, err = tx.EndAllowance(a.ID, queue.EndRevoked, "bob", t0.Add(time.Minute)); err != nil {
			return err
		}
		again, err = tx.EndAllowance(a.ID, queue.EndExpired, "console", t0.Add(2*time.Minute))
		return err
	})
	if !ended || again {
		t.Fatalf("EndAllowance = %t then %t, want true then false", ended, again)
	}
	a.EndedAt, a.EndReason, a.EndedBy = t0.Add(time.Minute), queue.EndRevoked, "bob"
	check("ended", a)

	err := s.Queue.Update(ctx, func(tx queue.Tx) error { return tx.SetConfirmers(a.ID, []string{"alice", "carol"}) })
	if !errors.Is(err, queue.ErrAllowanceNotFound) {
		t.Errorf("SetConfirmers of an ended allowance: %v, want ErrAllowanceNotFound", err)
	}
	if _, err := s.Queue.Allowance(ctx, "alw_none"); !errors.Is(err, queue.ErrAllowanceNotFound) {
		t.Errorf("Allowance(alw_none): %v, want ErrAllowanceNotFound", err)
	}
	update(t, s, func(tx queue.Tx) error {
		if _, err := tx.Allowance("alw_none"); !errors.Is(err, queue.ErrAllowanceNotFound) {
			t.Errorf("tx.Allowance(alw_none): %v, want ErrAllowanceNotFound", err)
		}
		return nil
	})
})

var _ = add("allowances/uses counted to exactly uses, a digest once, never after the end", func(t *testing.T, s Stores) {
	calls := callsOf(t, s, 8)
	once := storedAllowance(calls[0], 3, true)
	repeat := storedAllowance(calls[0], 2, false)
	short := storedAllowance(calls[0], 5, true)
	update(t, s, func(tx queue.Tx) error {
		for _, a := range []*queue.Allowance{once, repeat, short} {
			if err := tx.InsertAllowance(a); err != nil {
				return err
			}
		}
		return nil
	})
	at := t0.Add(time.Minute)
	u := func(a *queue.Allowance, c *queue.Call, digest string) queue.AllowanceUse {
		return queue.AllowanceUse{AllowanceID: a.ID, CallID: c.ID, Digest: digest, Once: a.OncePerCall, At: at}
	}
	steps := []struct {
		what string
		u    queue.AllowanceUse
		want bool
	}{
		{"first use", u(once, calls[1], "d1"), true},
		{"the same digest again, once per call", u(once, calls[2], "d1"), false},
		{"a second digest", u(once, calls[2], "d2"), true},
		{"a third digest", u(once, calls[3], "d3"), true},
		{"a fourth use of three", u(once, calls[4], "d4"), false},
		{"repeatable: a digest", u(repeat, calls[1], "d1"), true},
		{"repeatable: the same digest again", u(repeat, calls[2], "d1"), true},
		{"repeatable: a third use of two", u(repeat, calls[3], "d1"), false},
		{"at its until", queue.AllowanceUse{AllowanceID: short.ID, CallID: calls[1].ID, Digest: "d1", Once: true, At: short.Until}, false},
		{"just before its until", queue.AllowanceUse{AllowanceID: short.ID, CallID: calls[1].ID, Digest: "d1", Once: true, At: short.Until.Add(-time.Millisecond)}, true},
	}
	for _, st := range steps {
		if got := use(t, s, st.u); got != st.want {
			t.Errorf("%s: UseAllowance = %t, want %t", st.what, got, st.want)
		}
	}
	update(t, s, func(tx queue.Tx) error {
		_, err := tx.EndAllowance(short.ID, queue.EndRevoked, "bob", at)
		return err
	})
	if use(t, s, u(short, calls[5], "d5")) {
		t.Errorf("UseAllowance after the end: true, want false")
	}
	for _, w := range []struct {
		a     *queue.Allowance
		used  int
		calls []string
	}{
		{once, 3, []string{calls[1].ID, calls[2].ID, calls[3].ID}},
		{repeat, 2, []string{calls[1].ID, calls[2].ID}},
		{short, 1, []string{calls[1].ID}},
	} {
		got, err := s.Queue.Allowance(context.Background(), w.a.ID)
		if err != nil || got.Used != w.used {
			t.Errorf("%s: used %d, %v; want %d", w.a.ID, got.Used, err, w.used)
		}
		update(t, s, func(tx queue.Tx) error {
			ids, err := tx.AllowanceCalls(w.a.ID)
			if err != nil || !sameSet(ids, w.calls) {
				t.Errorf("AllowanceCalls(%s) = %v, %v; want %v", w.a.ID, ids, err, w.calls)
			}
			return nil
		})
	}
})

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]int{}
	for _, x := range a {
		seen[x]++
	}
	for _, x := range b {
		if seen[x]--; seen[x] < 0 {
			return false
		}
	}
	return true
}

var _ = add("allowances/lists and live counts by tool and giver", func(t *testing.T, s Stores) {
	ctx := context.Background()
	base := callsOf(t, s, 1)[0]
	var all []*queue.Allowance
	for i := range 6 {
		a := storedAllowance(base, 1, true)
		a.GivenAt = t0.Add(time.Duration(i) * time.Second)
		if i%2 == 1 {
			a.Giver = "bob"
		}
		if i >= 3 {
			a.Tool = "other.tool"
		}
		all = append(all, a)
	}
	all[5].Until = t0.Add(time.Second) // passed at now below, not ended
	update(t, s, func(tx queue.Tx) error {
		for _, a := range all {
			if err := tx.InsertAllowance(a); err != nil {
				return err
			}
		}
		if _, err := tx.EndAllowance(all[0].ID, queue.EndRevoked, "alice", t0); err != nil {
			return err
		}
		_, err := tx.UseAllowance(queue.AllowanceUse{AllowanceID: all[4].ID, CallID: base.ID, Digest: "d", Once: true, At: t0})
		return err
	})
	now := t0.Add(time.Minute)
	ids := func(as []*queue.Allowance) []string {
		var out []string
		for _, a := range as {
			out = append(out, a.ID)
		}
		return out
	}
	for _, c := range []struct {
		f    queue.AllowanceFilter
		want []*queue.Allowance
	}{
		{queue.AllowanceFilter{}, []*queue.Allowance{all[5], all[4], all[3], all[2], all[1], all[0]}},
		{queue.AllowanceFilter{Live: true}, []*queue.Allowance{all[5], all[4], all[3], all[2], all[1]}},
		{queue.AllowanceFilter{Tool: "pay.refund"}, []*queue.Allowance{all[2], all[1], all[0]}},
		{queue.AllowanceFilter{Giver: "bob", Live: true}, []*queue.Allowance{all[5], all[3], all[1]}},
		{queue.AllowanceFilter{Limit: 2}, []*queue.Allowance{all[5], all[4]}},
	} {
		got, err := s.Queue.Allowances(ctx, c.f)
		if err != nil || fmt.Sprint(ids(got)) != fmt.Sprint(ids(c.want)) {
			t.Errorf("Allowances(%+v) = %v, %v; want %v", c.f, ids(got), err, ids(c.want))
		}
	}
	update(t, s, func(tx queue.Tx) error {
		open, err := tx.AllowancesFor(base.Actor, base.Audience, "pay.refund", 10)
		if err != nil || fmt.Sprint(ids(open)) != fmt.Sprint([]string{all[1].ID, all[2].ID}) {
			t.Errorf("AllowancesFor = %v, %v; want %v", ids(open), err, []string{all[1].ID, all[2].ID})
		}
		if got, err := tx.AllowancesFor(base.Actor, "other-host", "pay.refund", 10); err != nil || len(got) != 0 {
			t.Errorf("AllowancesFor another audience = %v, %v; want none", ids(got), err)
		}
		// Live at now: 1 and 2 of pay.refund (0 ended); 3 of other.tool
		// (4 used up, 5 past its until). By giver: alice has 2, bob 1 and 3.
		for _, c := range []struct {
			tool, giver      string
			limit            int
			wantTool, wantBy int
		}{
			{"pay.refund", "alice", 10, 2, 1},
			{"other.tool", "bob", 10, 1, 2},
			{"pay.refund", "bob", 1, 1, 1},
			{"none", "nobody", 10, 0, 0},
		} {
			ofTool, ofGiver, err := tx.LiveAllowances(c.tool, c.giver, now, c.limit)
			if err != nil || ofTool != c.wantTool || ofGiver != c.wantBy {
				t.Errorf("LiveAllowances(%s, %s, limit %d) = %d, %d, %v; want %d, %d", c.tool, c.giver, c.limit, ofTool, ofGiver, err, c.wantTool, c.wantBy)
			}
		}
		return nil
	})
})

// Uses racing on several handles: exactly the allowance's uses are
// counted, whatever the number of transactions, connections or replicas.
var _ = add("allowances/uses racing across handles: exactly uses counted", func(t *testing.T, s Stores) {
	const racers, uses = 64, 10
	calls := callsOf(t, s, racers)
	a := storedAllowance(calls[0], uses, true)
	update(t, s, func(tx queue.Tx) error { return tx.InsertAllowance(a) })
	hs := []Stores{s}
	if s.Reopen != nil {
		hs = append(hs, s.Reopen(t))
	}
	var won atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range racers {
		wg.Go(func() {
			<-start
			err := hs[i%len(hs)].Queue.Update(context.Background(), func(tx queue.Tx) error {
				ok, err := tx.UseAllowance(queue.AllowanceUse{AllowanceID: a.ID, CallID: calls[i].ID,
					Digest: calls[i].Digest, Once: true, At: t0})
				if ok {
					won.Add(1)
				}
				return err
			})
			if err != nil {
				t.Errorf("Update: %v", err)
			}
		})
	}
	close(start)
	wg.Wait()
	got, err := s.Queue.Allowance(context.Background(), a.ID)
	if won.Load() != uses || err != nil || got.Used != uses {
		t.Fatalf("%d uses counted by the racers, stored used %d (%v); want exactly %d", won.Load(), got.Used, err, uses)
	}
})
