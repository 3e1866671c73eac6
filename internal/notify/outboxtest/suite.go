package outboxtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/notify"
	"github.com/countersign/countersign/internal/queue"
)

// Harness is a store under test.
type Harness struct {
	Outbox notify.Outbox
	// Enqueue writes notices in one committed transaction, as the change
	// they announce would.
	Enqueue func(t testing.TB, ns ...queue.Notice)
	// NewCall stores a pending call and returns its id; EndCall moves it
	// out of pending (denies it).
	NewCall func(t testing.TB) string
	EndCall func(t testing.TB, id string)
}

// MemoryHarness runs the suite against Memory.
func MemoryHarness(t *testing.T) Harness {
	m := NewMemory()
	n := 0
	return Harness{
		Outbox:  m,
		Enqueue: func(t testing.TB, ns ...queue.Notice) { m.Enqueue(ns...) },
		NewCall: func(t testing.TB) string { n++; return fmt.Sprintf("call_%d", n) },
		EndCall: func(t testing.TB, id string) { m.End(id) },
	}
}

// base is a fixed time in the suite; stores keep milliseconds.
var base = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func notice(event, channel, call string, at time.Time) queue.Notice {
	return queue.Notice{EventID: event, Kind: notify.CallSubmitted, Channel: channel, CallID: call,
		Body: []byte(`{"id":"` + event + `"}`), At: at, DueAt: at}
}

func claim(t *testing.T, o notify.Outbox, owner string, now time.Time, limit int) ([]notify.Delivery, []notify.Delivery) {
	t.Helper()
	c, s, err := o.Claim(context.Background(), owner, now, time.Minute, limit)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	return c, s
}

func events(ds []notify.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.EventID + "/" + d.Channel
	}
	return out
}

func same(a []string, b ...string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func finish(t *testing.T, o notify.Outbox, owner string, r notify.Result) {
	t.Helper()
	if err := o.Finish(context.Background(), owner, r); err != nil {
		t.Fatalf("Finish(%+v): %v", r, err)
	}
}

func row(t *testing.T, o notify.Outbox, seq int64) notify.Delivery {
	t.Helper()
	ds, err := o.Deliveries(context.Background(), notify.Query{Limit: 1000})
	if err != nil {
		t.Fatalf("Deliveries: %v", err)
	}
	for _, d := range ds {
		if d.Seq == seq {
			return d
		}
	}
	t.Fatalf("row %d not listed", seq)
	return notify.Delivery{}
}

// Case is one check of the suite, on a fresh, empty store.
type Case struct {
	Name string
	Fn   func(t *testing.T, h Harness)
}

// Run runs every case as a subtest, each on the fresh store open returns.
func Run(t *testing.T, open func(t *testing.T) Harness) {
	for _, c := range Cases {
		t.Run(c.Name, func(t *testing.T) { c.Fn(t, open(t)) })
	}
}

var ctx = context.Background()

// Cases are the suite's checks; a store's own conformance suite may run
// them one by one (internal/store/storetest does).
var Cases = []Case{
	{"due rows only, in due order, with their content", func(t *testing.T, h Harness) {
		c1 := h.NewCall(t)
		later := notice("evt_b", "hook", c1, base.Add(time.Minute))
		later.Kind, later.WhilePending = notify.CallEscalated, true
		first := notice("evt_a", "hook", c1, base)
		h.Enqueue(t, first, later)
		h.Enqueue(t, notice("evt_c", "mail", "", base.Add(time.Second)))
		next, ok, err := h.Outbox.NextDue(ctx)
		if err != nil || !ok || !next.Equal(base) {
			t.Fatalf("NextDue = %v, %v, %v; want %v", next, ok, err, base)
		}
		got, _ := claim(t, h.Outbox, "a", base.Add(2*time.Second), 10)
		if !same(events(got), "evt_a/hook", "evt_c/mail") {
			t.Fatalf("claimed %v, want evt_a/hook then evt_c/mail", events(got))
		}
		d := got[0]
		if d.Kind != notify.CallSubmitted || d.CallID != c1 || string(d.Body) != `{"id":"evt_a"}` || !d.At.Equal(base) ||
			!d.DueAt.Equal(base) || !d.ScheduledAt.Equal(base) || d.State != notify.StatePending || d.Attempts != 0 ||
			d.LeaseOwner != "a" || !d.LeaseUntil.Equal(base.Add(2*time.Second+time.Minute)) {
			t.Fatalf("claimed row = %+v", d)
		}
		if got[0].Seq >= got[1].Seq {
			t.Fatalf("seq %d then %d: want increasing with insertion", got[0].Seq, got[1].Seq)
		}
		rows, _ := h.Outbox.Deliveries(ctx, notify.Query{})
		for _, r := range rows {
			if r.EventID == "evt_b" && !r.WhilePending {
				t.Fatalf("WhilePending lost: %+v", r)
			}
		}
	}},
	{"a duplicate event on a channel is stored once", func(t *testing.T, h Harness) {
		c := h.NewCall(t)
		h.Enqueue(t, notice("evt_a", "hook", c, base), notice("evt_a", "slack", c, base))
		h.Enqueue(t, notice("evt_a", "hook", c, base))
		rows, err := h.Outbox.Deliveries(ctx, notify.Query{})
		if err != nil || len(rows) != 2 {
			t.Fatalf("Deliveries = %d rows, %v; want 2", len(rows), err)
		}
	}},
	{"a lease keeps a row from other owners until it runs out", func(t *testing.T, h Harness) {
		h.Enqueue(t, notice("evt_a", "hook", h.NewCall(t), base))
		got, _ := claim(t, h.Outbox, "a", base, 10)
		if len(got) != 1 {
			t.Fatalf("a claimed %d rows, want 1", len(got))
		}
		if again, _ := claim(t, h.Outbox, "b", base.Add(59*time.Second), 10); len(again) != 0 {
			t.Fatalf("b claimed %v while a held the lease", events(again))
		}
		next, ok, _ := h.Outbox.NextDue(ctx)
		if !ok || !next.Equal(base.Add(time.Minute)) {
			t.Fatalf("NextDue = %v, %v; want the lease end %v", next, ok, base.Add(time.Minute))
		}
		taken, _ := claim(t, h.Outbox, "b", base.Add(time.Minute), 10)
		if len(taken) != 1 || taken[0].LeaseOwner != "b" {
			t.Fatalf("after the lease ran out b claimed %+v", taken)
		}
		err := h.Outbox.Finish(ctx, "a", notify.Result{Seq: got[0].Seq, At: base.Add(61 * time.Second), Delivered: true})
		if !errors.Is(err, notify.ErrLeaseLost) {
			t.Fatalf("Finish by the old owner = %v, want ErrLeaseLost", err)
		}
		finish(t, h.Outbox, "b", notify.Result{Seq: got[0].Seq, At: base.Add(62 * time.Second), Delivered: true, Receipt: "r1"})
		if r := row(t, h.Outbox, got[0].Seq); r.State != notify.StateDelivered || r.Attempts != 1 || r.Receipt != "r1" ||
			!r.DeliveredAt.Equal(base.Add(62*time.Second)) || r.LeaseOwner != "" {
			t.Fatalf("after Finish: %+v", r)
		}
		if err := h.Outbox.Finish(ctx, "b", notify.Result{Seq: got[0].Seq, At: base, Delivered: true}); !errors.Is(err, notify.ErrLeaseLost) {
			t.Fatalf("Finish of a delivered row = %v, want ErrLeaseLost", err)
		}
	}},
	{"a failed attempt waits for its retry time; a dead row stays", func(t *testing.T, h Harness) {
		h.Enqueue(t, notice("evt_a", "hook", h.NewCall(t), base))
		got, _ := claim(t, h.Outbox, "a", base, 10)
		finish(t, h.Outbox, "a", notify.Result{Seq: got[0].Seq, At: base, Error: "HTTP 503", RetryAt: base.Add(10 * time.Second)})
		r := row(t, h.Outbox, got[0].Seq)
		if r.State != notify.StatePending || r.Attempts != 1 || r.LastError != "HTTP 503" || !r.DueAt.Equal(base.Add(10*time.Second)) ||
			!r.LastAttemptAt.Equal(base) || r.LeaseOwner != "" || !r.ScheduledAt.Equal(base) {
			t.Fatalf("after a failure: %+v", r)
		}
		if again, _ := claim(t, h.Outbox, "a", base.Add(9*time.Second), 10); len(again) != 0 {
			t.Fatalf("claimed before the retry time: %v", events(again))
		}
		got, _ = claim(t, h.Outbox, "a", base.Add(10*time.Second), 10)
		if len(got) != 1 || got[0].Attempts != 1 {
			t.Fatalf("at the retry time claimed %+v", got)
		}
		finish(t, h.Outbox, "a", notify.Result{Seq: got[0].Seq, At: base.Add(11 * time.Second), Error: "HTTP 400", Dead: true})
		if r := row(t, h.Outbox, got[0].Seq); r.State != notify.StateDead || r.Attempts != 2 || r.LastError != "HTTP 400" {
			t.Fatalf("after a permanent failure: %+v", r)
		}
		if again, _ := claim(t, h.Outbox, "a", base.Add(time.Hour), 10); len(again) != 0 {
			t.Fatalf("a dead row was claimed: %v", events(again))
		}
		if _, ok, _ := h.Outbox.NextDue(ctx); ok {
			t.Fatal("NextDue found a row, want none pending")
		}
	}},
	{"per channel and call, rows go in order", func(t *testing.T, h Harness) {
		c1, c2 := h.NewCall(t), h.NewCall(t)
		h.Enqueue(t, notice("evt_1", "slack", c1, base), notice("evt_1", "hook", c1, base))
		h.Enqueue(t, notice("evt_2", "slack", c1, base.Add(time.Second)), notice("evt_2", "hook", c1, base.Add(time.Second)))
		h.Enqueue(t, notice("evt_3", "slack", c2, base.Add(time.Second)))
		got, _ := claim(t, h.Outbox, "a", base.Add(time.Minute), 10)
		if !same(events(got), "evt_1/slack", "evt_1/hook", "evt_3/slack") {
			t.Fatalf("claimed %v: want only the first row of each channel and call", events(got))
		}
		// The first slack row fails and waits; the second waits behind it.
		finish(t, h.Outbox, "a", notify.Result{Seq: got[0].Seq, At: base.Add(time.Minute), Error: "x", RetryAt: base.Add(2 * time.Minute)})
		finish(t, h.Outbox, "a", notify.Result{Seq: got[1].Seq, At: base.Add(time.Minute), Delivered: true})
		finish(t, h.Outbox, "a", notify.Result{Seq: got[2].Seq, At: base.Add(time.Minute), Delivered: true})
		got2, _ := claim(t, h.Outbox, "a", base.Add(time.Minute), 10)
		if !same(events(got2), "evt_2/hook") {
			t.Fatalf("claimed %v, want evt_2/hook only (evt_2/slack waits for evt_1/slack)", events(got2))
		}
		finish(t, h.Outbox, "a", notify.Result{Seq: got2[0].Seq, At: base.Add(time.Minute), Delivered: true})
		got3, _ := claim(t, h.Outbox, "a", base.Add(2*time.Minute), 10)
		if !same(events(got3), "evt_1/slack") {
			t.Fatalf("claimed %v, want the retried evt_1/slack", events(got3))
		}
		finish(t, h.Outbox, "a", notify.Result{Seq: got3[0].Seq, At: base.Add(2 * time.Minute), Error: "gone", Dead: true})
		got4, _ := claim(t, h.Outbox, "a", base.Add(2*time.Minute), 10)
		if !same(events(got4), "evt_2/slack") {
			t.Fatalf("claimed %v, want evt_2/slack once evt_1/slack is dead", events(got4))
		}
	}},
	{"a later scheduled row does not hold up earlier events", func(t *testing.T, h Harness) {
		c := h.NewCall(t)
		esc := notice("evt_esc", "slack", c, base.Add(10*time.Minute))
		esc.Kind, esc.WhilePending = notify.CallEscalated, true
		h.Enqueue(t, notice("evt_sub", "slack", c, base), esc)
		h.Enqueue(t, notice("evt_appr", "slack", c, base.Add(time.Minute)))
		got, _ := claim(t, h.Outbox, "a", base.Add(time.Minute), 10)
		if !same(events(got), "evt_sub/slack") {
			t.Fatalf("claimed %v", events(got))
		}
		finish(t, h.Outbox, "a", notify.Result{Seq: got[0].Seq, At: base.Add(time.Minute), Delivered: true})
		got, _ = claim(t, h.Outbox, "a", base.Add(time.Minute), 10)
		if !same(events(got), "evt_appr/slack") {
			t.Fatalf("claimed %v, want the approval before the escalation due later", events(got))
		}
	}},
	{"a reminder or escalation of a decided call is skipped, never sent", func(t *testing.T, h Harness) {
		c, open2 := h.NewCall(t), h.NewCall(t)
		esc := notice("evt_esc", "slack", c, base.Add(10*time.Minute))
		esc.Kind, esc.WhilePending = notify.CallEscalated, true
		rem := notice("evt_rem", "slack", c, base.Add(20*time.Minute))
		rem.Kind, rem.WhilePending = notify.CallReminder, true
		still := notice("evt_still", "slack", open2, base.Add(10*time.Minute))
		still.Kind, still.WhilePending = notify.CallEscalated, true
		h.Enqueue(t, esc, rem, still)
		h.EndCall(t, c)
		h.Enqueue(t, notice("evt_out", "slack", c, base.Add(30*time.Minute)))
		got, skipped := claim(t, h.Outbox, "a", base.Add(10*time.Minute), 10)
		if !same(events(got), "evt_still/slack") {
			t.Fatalf("claimed %v, want only the pending call's escalation", events(got))
		}
		finish(t, h.Outbox, "a", notify.Result{Seq: got[0].Seq, At: base.Add(10 * time.Minute), Delivered: true})
		if !same(events(skipped), "evt_esc/slack", "evt_rem/slack") {
			t.Fatalf("skipped %v, want both rows of the decided call, due or not", events(skipped))
		}
		for _, s := range skipped {
			if r := row(t, h.Outbox, s.Seq); r.State != notify.StateSkipped {
				t.Fatalf("row %s is %s, want skipped", r.EventID, r.State)
			}
		}
		got, _ = claim(t, h.Outbox, "a", base.Add(30*time.Minute), 10)
		if !same(events(got), "evt_out/slack") {
			t.Fatalf("claimed %v: a skipped row must not hold up later ones", events(got))
		}
	}},
	{"the receipt is the earliest delivered one of the channel and call", func(t *testing.T, h Harness) {
		c := h.NewCall(t)
		h.Enqueue(t, notice("evt_1", "slack", c, base), notice("evt_1", "mail", c, base))
		h.Enqueue(t, notice("evt_2", "slack", c, base.Add(time.Second)))
		if r, err := h.Outbox.Receipt(ctx, "slack", c); err != nil || r != "" {
			t.Fatalf("Receipt before delivery = %q, %v", r, err)
		}
		got, _ := claim(t, h.Outbox, "a", base.Add(time.Second), 10)
		finish(t, h.Outbox, "a", notify.Result{Seq: got[0].Seq, At: base, Delivered: true, Receipt: "C1 1.2"})
		finish(t, h.Outbox, "a", notify.Result{Seq: got[1].Seq, At: base, Delivered: true, Receipt: "<m@x>"})
		got, _ = claim(t, h.Outbox, "a", base.Add(time.Second), 10)
		finish(t, h.Outbox, "a", notify.Result{Seq: got[0].Seq, At: base, Delivered: true, Receipt: "C1 9.9"})
		if r, _ := h.Outbox.Receipt(ctx, "slack", c); r != "C1 1.2" {
			t.Fatalf("Receipt(slack) = %q, want the first message's C1 1.2", r)
		}
		if r, _ := h.Outbox.Receipt(ctx, "mail", c); r != "<m@x>" {
			t.Fatalf("Receipt(mail) = %q", r)
		}
	}},
	{"a retried failure keeps what the channel finished", func(t *testing.T, h Harness) {
		c := h.NewCall(t)
		h.Enqueue(t, notice("evt_1", "browsers", c, base))
		got, _ := claim(t, h.Outbox, "a", base, 10)
		finish(t, h.Outbox, "a", notify.Result{Seq: got[0].Seq, At: base, Error: "1 of 2 failed", RetryAt: base.Add(time.Minute),
			Receipt: "0a1b2c3d4e5f6a7b"})
		again, _ := claim(t, h.Outbox, "b", base.Add(time.Minute), 10)
		if len(again) != 1 || again[0].Receipt != "0a1b2c3d4e5f6a7b" || again[0].Attempts != 1 {
			t.Fatalf("claimed %+v, want the row with the progress of its first attempt", again)
		}
		if r, _ := h.Outbox.Receipt(ctx, "browsers", c); r != "" {
			t.Fatalf("Receipt = %q: the progress of an undelivered row is not a receipt", r)
		}
		finish(t, h.Outbox, "b", notify.Result{Seq: got[0].Seq, At: base.Add(time.Minute), Delivered: true})
		if r := row(t, h.Outbox, got[0].Seq); r.State != notify.StateDelivered || r.Receipt != "" {
			t.Fatalf("delivered row = %+v", r)
		}
	}},
	{"retry and its refusals", func(t *testing.T, h Harness) {
		c := h.NewCall(t)
		h.Enqueue(t, notice("evt_1", "hook", c, base), notice("evt_2", "mail", c, base), notice("evt_3", "sms", c, base))
		got, _ := claim(t, h.Outbox, "a", base, 10)
		finish(t, h.Outbox, "a", notify.Result{Seq: got[0].Seq, At: base, Error: "boom", Dead: true})
		finish(t, h.Outbox, "a", notify.Result{Seq: got[1].Seq, At: base, Delivered: true})
		finish(t, h.Outbox, "a", notify.Result{Seq: got[2].Seq, At: base, Error: "later", RetryAt: base.Add(time.Hour)})
		now := base.Add(2 * time.Hour)
		if err := h.Outbox.Retry(ctx, got[0].Seq, now, "root"); err != nil {
			t.Fatalf("Retry(dead) = %v", err)
		}
		if r := row(t, h.Outbox, got[0].Seq); r.State != notify.StatePending || !r.DueAt.Equal(now) || !r.ScheduledAt.Equal(now) || r.Attempts != 1 {
			t.Fatalf("retried row = %+v", r)
		}
		if err := h.Outbox.Retry(ctx, got[1].Seq, now, "root"); !errors.Is(err, notify.ErrNotRetryable) {
			t.Fatalf("Retry(delivered) = %v, want ErrNotRetryable", err)
		}
		if err := h.Outbox.Retry(ctx, got[2].Seq, base.Add(time.Minute), "root"); err != nil {
			t.Fatalf("Retry(waiting) = %v", err)
		}
		if err := h.Outbox.Retry(ctx, 1<<40, now, "root"); !errors.Is(err, notify.ErrNoDelivery) {
			t.Fatalf("Retry(unknown) = %v, want ErrNoDelivery", err)
		}
		again, _ := claim(t, h.Outbox, "b", now, 10)
		if !same(events(again), "evt_3/sms", "evt_1/hook") {
			t.Fatalf("after retries claimed %v", events(again))
		}
		if err := h.Outbox.Retry(ctx, again[0].Seq, now, "root"); !errors.Is(err, notify.ErrNotRetryable) {
			t.Fatalf("Retry(in flight) = %v, want ErrNotRetryable", err)
		}
	}},
	{"listing filters and pages newest first", func(t *testing.T, h Harness) {
		c := h.NewCall(t)
		for i := 0; i < 5; i++ {
			h.Enqueue(t, notice(fmt.Sprintf("evt_%d", i), "hook", c, base.Add(time.Duration(i)*time.Second)),
				notice(fmt.Sprintf("evt_%d", i), "mail", "", base))
		}
		page, err := h.Outbox.Deliveries(ctx, notify.Query{Channel: "hook", Limit: 2})
		if err != nil || !same(events(page), "evt_4/hook", "evt_3/hook") {
			t.Fatalf("first page %v, %v", events(page), err)
		}
		page, _ = h.Outbox.Deliveries(ctx, notify.Query{Channel: "hook", Limit: 2, Before: page[1].Seq})
		if !same(events(page), "evt_2/hook", "evt_1/hook") {
			t.Fatalf("second page %v", events(page))
		}
		page, _ = h.Outbox.Deliveries(ctx, notify.Query{CallID: c, State: notify.StatePending, Limit: 100})
		if len(page) != 5 {
			t.Fatalf("by call: %d rows, want 5", len(page))
		}
		page, _ = h.Outbox.Deliveries(ctx, notify.Query{State: notify.StateDelivered})
		if len(page) != 0 {
			t.Fatalf("delivered: %v, want none", events(page))
		}
	}},
	{"prune deletes finished rows only", func(t *testing.T, h Harness) {
		c := h.NewCall(t)
		h.Enqueue(t, notice("evt_1", "hook", c, base), notice("evt_2", "mail", c, base), notice("evt_3", "sms", c, base))
		got, _ := claim(t, h.Outbox, "a", base, 10)
		finish(t, h.Outbox, "a", notify.Result{Seq: got[0].Seq, At: base, Delivered: true})
		finish(t, h.Outbox, "a", notify.Result{Seq: got[1].Seq, At: base, Error: "x", Dead: true})
		finish(t, h.Outbox, "a", notify.Result{Seq: got[2].Seq, At: base, Error: "x", RetryAt: base.Add(time.Hour)})
		n, err := h.Outbox.Prune(ctx, base.Add(time.Millisecond))
		if err != nil || n != 2 {
			t.Fatalf("Prune = %d, %v; want 2", n, err)
		}
		rows, _ := h.Outbox.Deliveries(ctx, notify.Query{})
		if !same(events(rows), "evt_3/sms") {
			t.Fatalf("left %v, want the pending row", events(rows))
		}
	}},
	{"concurrent claims hand each row to one owner", func(t *testing.T, h Harness) {
		if testing.Short() {
			t.Skip("race of claimers")
		}
		const rows = 200
		for i := 0; i < rows; i += 20 {
			var ns []queue.Notice
			for j := i; j < i+20; j++ {
				ns = append(ns, notice(fmt.Sprintf("evt_%03d", j), "hook", "", base))
			}
			h.Enqueue(t, ns...)
		}
		var mu sync.Mutex
		seen := map[int64]string{}
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func(owner string) {
				defer wg.Done()
				for {
					got, _, err := h.Outbox.Claim(ctx, owner, base, time.Hour, 7)
					if err != nil {
						errs <- err
						return
					}
					if len(got) == 0 {
						return
					}
					for _, d := range got {
						mu.Lock()
						if prev, dup := seen[d.Seq]; dup {
							mu.Unlock()
							errs <- fmt.Errorf("row %d claimed by %s and %s", d.Seq, prev, owner)
							return
						}
						seen[d.Seq] = owner
						mu.Unlock()
						if err := h.Outbox.Finish(ctx, owner, notify.Result{Seq: d.Seq, At: base, Delivered: true}); err != nil {
							errs <- err
							return
						}
					}
				}
			}(fmt.Sprintf("owner-%d", w))
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if len(seen) != rows {
			t.Fatalf("%d rows claimed, want %d", len(seen), rows)
		}
	}},
}
