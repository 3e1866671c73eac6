package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/tools"
)

// storedPlan is a pending plan of n items (calls of tool by actor,
// submitted by token), not yet inserted.
func storedPlan(actor, token string, n int, created time.Time) (*queue.Plan, []*queue.Call) {
	p := &queue.Plan{ID: randomID("pln_"), Actor: actor, Audience: "payments-host", SubmittedBy: token,
		Rationale: "copy\x00the files", Ordered: true, Digest: randomID("d"), Items: n, ApprovalsRequired: 2,
		MaxFor: time.Hour, Status: queue.PlanPending, CreatedAt: created, DecideBy: created.Add(30 * time.Minute)}
	items := make([]*queue.Call, n)
	for i := range items {
		c := newCall(actor, "files.copy", created)
		c.PlanID, c.PlanIndex, c.SubmittedBy = p.ID, i, token
		c.DecideBy = created.Add(-time.Minute) // due, were it in the queue
		items[i] = c
	}
	return p, items
}

func insertPlan(t *testing.T, s Stores, p *queue.Plan, items []*queue.Call) {
	t.Helper()
	update(t, s, func(tx queue.Tx) error {
		if err := tx.InsertPlan(p); err != nil {
			return err
		}
		// Inserted out of order: PlanItems reads them by index.
		for i := len(items) - 1; i >= 0; i-- {
			if err := tx.InsertCall(items[i]); err != nil {
				return err
			}
		}
		return nil
	})
}

// A plan and its items are stored and read back; items are in no read of
// the queue (pending lists, pages, deadlines, the per-token count); a
// token's pending plans are counted up to a limit and only while pending
// and before their deadline; an ended plan and an item's plan never change.
var _ = add("plans/stored, items out of the queue, ended final", func(t *testing.T, s Stores) {
	ctx := context.Background()
	p, items := storedPlan("agent:a", "tok_1", 3, t0)
	insertPlan(t, s, p, items)
	got, err := s.Queue.Plan(ctx, p.ID)
	if err != nil || *got != *p {
		t.Fatalf("plan reads back\n %+v, %v; want\n %+v", got, err, p)
	}
	if _, err := s.Queue.Plan(ctx, "pln_none"); !errors.Is(err, queue.ErrPlanNotFound) {
		t.Fatalf("a missing plan: %v", err)
	}
	read, err := s.Queue.PlanItems(ctx, p.ID)
	if err != nil || len(read) != 3 {
		t.Fatalf("PlanItems: %d, %v", len(read), err)
	}
	for i, c := range read {
		if c.ID != items[i].ID || c.PlanID != p.ID || c.PlanIndex != i {
			t.Fatalf("item %d reads back %s of %s at %d", i, c.ID, c.PlanID, c.PlanIndex)
		}
	}
	plain := newCall("agent:a", "files.copy", t0)
	plain.SubmittedBy, plain.DecideBy = "tok_1", t0.Add(-time.Minute)
	insert(t, s, plain)
	if c, _ := s.Queue.Call(ctx, plain.ID); c.PlanID != "" || c.PlanIndex != 0 {
		t.Fatalf("a call outside plans reads back in plan %q at %d", c.PlanID, c.PlanIndex)
	}
	pending, err := s.Queue.PendingCalls(ctx, 100)
	if err != nil || len(pending) != 1 || pending[0].ID != plain.ID {
		t.Fatalf("PendingCalls = %d calls, %v; want only the call outside the plan", len(pending), err)
	}
	page, err := s.Queue.PendingPage(ctx, queue.PageKey{}, 100)
	if err != nil || len(page) != 1 || page[0].ID != plain.ID {
		t.Fatalf("PendingPage = %d calls, %v", len(page), err)
	}
	due, err := s.Queue.DueCalls(ctx, t0, 100)
	if err != nil || len(due) != 1 || due[0] != plain.ID {
		t.Fatalf("DueCalls = %v, %v", due, err)
	}
	if all, soon, err := s.Queue.CountPending(ctx, t0.Add(time.Hour)); err != nil || all != 1 || soon != 1 {
		t.Fatalf("CountPending = %d, %d, %v; want the call outside the plan only", all, soon, err)
	}
	if of, err := s.Queue.PendingCallsOf(ctx, "files.copy", 100); err != nil || len(of) != 1 || of[0].ID != plain.ID {
		t.Fatalf("PendingCallsOf = %d calls, %v; want only the call outside the plan", len(of), err)
	}
	if next, ok, err := s.Queue.NextDeadline(ctx); err != nil || !ok || !next.Equal(plain.DecideBy) {
		t.Fatalf("NextDeadline = %v %t %v", next, ok, err)
	}
	update(t, s, func(tx queue.Tx) error {
		if n, err := tx.PendingBy("tok_1", 10); err != nil || n != 1 {
			return fmt.Errorf("PendingBy = %d, %v; want 1", n, err)
		}
		return nil
	})

	for i := 0; i < 3; i++ {
		q, qi := storedPlan("agent:a", "tok_1", 1, t0.Add(time.Duration(i+1)*time.Second))
		insertPlan(t, s, q, qi)
	}
	update(t, s, func(tx queue.Tx) error {
		for _, c := range []struct {
			now   time.Time
			limit int
			want  int
		}{{t0, 10, 4}, {t0, 2, 2}, {t0.Add(30 * time.Minute), 10, 3}, {t0.Add(time.Hour), 10, 0}} {
			if n, err := tx.PendingPlansBy("tok_1", c.now, c.limit); err != nil || n != c.want {
				return fmt.Errorf("PendingPlansBy(at %s, limit %d) = %d, %v; want %d", c.now, c.limit, n, err, c.want)
			}
		}
		if n, err := tx.PendingPlansBy("tok_2", t0, 10); err != nil || n != 0 {
			return fmt.Errorf("another token's pending plans = %d, %v", n, err)
		}
		return nil
	})
	listed, err := s.Queue.PendingPlans(ctx, t0, 10)
	if err != nil || len(listed) != 4 || listed[0].ID != p.ID {
		t.Fatalf("PendingPlans = %d, %v; want 4, by deadline", len(listed), err)
	}

	if due, err := s.Queue.DuePlans(ctx, t0.Add(30*time.Minute), 10); err != nil || len(due) != 1 || due[0] != p.ID {
		t.Fatalf("DuePlans at the first deadline = %v, %v; want the first plan", due, err)
	}
	p.Status, p.DecidedAt, p.DecidedBy, p.ValidUntil = queue.PlanApproved, t0.Add(time.Minute), "alice", t0.Add(time.Hour)
	update(t, s, func(tx queue.Tx) error { return tx.UpdatePlan(p) })
	if due, err := s.Queue.DuePlans(ctx, t0.Add(59*time.Minute), 10); err != nil || len(due) != 3 {
		t.Fatalf("DuePlans before valid_until = %v, %v; want the 3 pending plans", due, err)
	}
	if due, err := s.Queue.DuePlans(ctx, t0.Add(time.Hour), 10); err != nil || len(due) != 4 {
		t.Fatalf("DuePlans at valid_until = %v, %v; want all 4", due, err)
	}
	if got, err := s.Queue.Plan(ctx, p.ID); err != nil || *got != *p {
		t.Fatalf("approved plan reads back %+v, %v", got, err)
	}
	p.Status, p.Reason, p.DecidedBy = queue.PlanCancelled, "stop", "agent:a"
	update(t, s, func(tx queue.Tx) error { return tx.UpdatePlan(p) })

	// Below the application: an ended plan never changes, and an item
	// never moves to another plan.
	for name, fn := range map[string]func(tx queue.Tx) error{
		"cancelled to approved": func(tx queue.Tx) error {
			q := *p
			q.Status = queue.PlanApproved
			return tx.UpdatePlan(&q)
		},
	} {
		if err := s.Queue.Update(ctx, fn); err == nil {
			t.Errorf("%s: committed, want the store to refuse it", name)
		}
	}
	if got, err := s.Queue.Plan(ctx, p.ID); err != nil || got.Status != queue.PlanCancelled || got.Reason != "stop" {
		t.Fatalf("plan after a refused write: %+v, %v", got, err)
	}
})

// planToolsYAML is a tool whose calls may be plan items.
const planToolsYAML = `tools:
  files.copy:
    audience: payments-host
    target: '^file:.+$'
    approvals: 1
    grant_ttl: 60s
    decide_within: 15m
    plan: {max_for: 1h}
    args:
      type: object
      additionalProperties: false
      required: [size]
      properties:
        size: {type: integer, minimum: 1, maximum: 100000}
`

// Handles racing to mint the same item of an approved plan, as replicas
// would, mint one grant: every mint returns it.
var _ = add("race/plan item minted on several handles: one grant", func(t *testing.T, s Stores) {
	ctx := context.Background()
	w := newWorld(t, s)
	reg, err := tools.Parse([]byte(planToolsYAML))
	if err != nil {
		t.Fatal(err)
	}
	w.tools = reg
	hs := handles(t, w, 4)
	agent := queue.Principal{Actor: "agent:copier", Audience: "payments-host", TokenID: "tok_copier"}
	for round := 0; round < rounds; round++ {
		body := fmt.Sprintf(`{"rationale":"copy","items":[{"tool":"files.copy","target":"file:r%d","args":{"size":1}},
			{"tool":"files.copy","target":"file:r%d-b","args":{"size":2}}]}`, round, round)
		p, _, err := hs[0].q.SubmitPlan(ctx, agent, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := hs[1].q.ApprovePlan(ctx, queue.ApprovePlanInput{Operator: "alice", Channel: audit.ChannelCLI,
			PlanID: p.ID, Digest: p.Digest}); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		jtis := map[string]int{}
		race(hs, func(i int, h *handle) {
			c, err := h.q.MintPlanItem(ctx, agent, p.ID, 1)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("mint on handle %d: %v", i%len(hs), err)
				return
			}
			jtis[c.GrantJTI]++
		})
		if len(jtis) != 1 {
			t.Fatalf("round %d: grants %v; want one", round, jtis)
		}
		granted := 0
		for _, e := range entriesOf(t, hs[0], audit.KindGranted) {
			if detail(e, "jti") != nil {
				for jti := range jtis {
					if detail(e, "jti") == jti {
						granted++
					}
				}
			}
		}
		if granted != 1 {
			t.Fatalf("round %d: %d granted entries for the item; want 1", round, granted)
		}
	}
})

// NextPlanDeadline is the earliest of pending plans' decide_by and
// approved plans' valid_until; ended plans count for nothing.
var _ = add("plans/next deadline: pending decide_by, approved valid_until", func(t *testing.T, s Stores) {
	ctx := context.Background()
	next := func() (time.Time, bool) {
		t.Helper()
		at, ok, err := s.Queue.NextPlanDeadline(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return at, ok
	}
	if at, ok := next(); ok {
		t.Fatalf("no plans: NextPlanDeadline = %v, want none", at)
	}
	p, items := storedPlan("agent:a", "tok_1", 1, t0) // decide_by t0+30m
	insertPlan(t, s, p, items)
	if at, ok := next(); !ok || !at.Equal(p.DecideBy) {
		t.Fatalf("one pending plan: %v %t; want its decide_by %v", at, ok, p.DecideBy)
	}
	q, qi := storedPlan("agent:a", "tok_1", 1, t0.Add(-20*time.Minute)) // decide_by t0+10m
	insertPlan(t, s, q, qi)
	q.Status, q.DecidedAt, q.DecidedBy, q.ValidUntil = queue.PlanApproved, t0, "alice", t0.Add(5*time.Minute)
	update(t, s, func(tx queue.Tx) error { return tx.UpdatePlan(q) })
	if at, ok := next(); !ok || !at.Equal(q.ValidUntil) {
		t.Fatalf("an approved plan valid until before the pending plan's deadline: %v %t; want %v", at, ok, q.ValidUntil)
	}
	q.ValidUntil = t0.Add(time.Hour)
	update(t, s, func(tx queue.Tx) error { return tx.UpdatePlan(q) })
	if at, ok := next(); !ok || !at.Equal(p.DecideBy) {
		t.Fatalf("the pending plan's deadline first: %v %t; want %v", at, ok, p.DecideBy)
	}
	p.Status, p.DecidedAt, p.DecidedBy, p.Reason = queue.PlanDenied, t0, "alice", "no"
	update(t, s, func(tx queue.Tx) error { return tx.UpdatePlan(p) })
	if at, ok := next(); !ok || !at.Equal(q.ValidUntil) {
		t.Fatalf("a denied plan counts for nothing: %v %t; want %v", at, ok, q.ValidUntil)
	}
})
