package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/testkit"
	"github.com/countersign/countersign/internal/testkit/sqlitekit"
	"github.com/countersign/countersign/internal/tools"
)

// TestRunWakesForPlanDeadlines runs the expiry loop on the real clock with
// no call pending: a plan whose decide_by is two seconds away and an
// approved plan valid for two seconds both end on time, so the loop sleeps
// until the earliest plan deadline rather than its idle minute.
func TestRunWakesForPlanDeadlines(t *testing.T) {
	reg, err := tools.Parse([]byte(`tools:
  quick.copy:
    audience: host
    target: '.+'
    decide_within: 2s
    plan: {max_for: 1h}
    args: {type: object, additionalProperties: false}
  slow.copy:
    audience: host
    target: '.+'
    decide_within: 1h
    plan: {max_for: 1h}
    args: {type: object, additionalProperties: false}
`))
	if err != nil {
		t.Fatal(err)
	}
	k := sqlitekit.NewQueue(t, sqlitekit.WithTools(reg), sqlitekit.WithConfig(func(c *queue.Config) { c.Now = time.Now }))
	testkit.SeedUsers(t, k.DB.Accounts(), account.RoleOperator, "alice")
	q := k.Service
	expired := make(chan string, 4)
	q.Subscribe(func(ev queue.Event) {
		if ev.Kind == audit.KindPlanExpired {
			expired <- ev.Plan.ID
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); q.Run(ctx) }()
	defer func() { cancel(); <-done }()

	pending, _, err := q.SubmitPlan(ctx, planner, []byte(`{"rationale":"r","items":[{"tool":"quick.copy","target":"a","args":{}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	approved, _, err := q.SubmitPlan(ctx, planner, []byte(`{"rationale":"r","items":[{"tool":"slow.copy","target":"b","args":{}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if approved, err = q.ApprovePlan(ctx, queue.ApprovePlanInput{Operator: "alice", Channel: audit.ChannelCLI,
		PlanID: approved.ID, Digest: approved.Digest, ValidFor: 2 * time.Second}); err != nil || approved.Status != queue.PlanApproved {
		t.Fatalf("approve: %v", err)
	}
	want := map[string]bool{pending.ID: true, approved.ID: true}
	limit := time.After(20 * time.Second)
	for len(want) > 0 {
		select {
		case id := <-expired:
			delete(want, id)
		case <-limit:
			t.Fatalf("plans %v not expired within 20s of a two-second deadline", want)
		}
	}
	for _, id := range []string{pending.ID, approved.ID} {
		if p, _, err := q.ReadPlan(ctx, id); err != nil || p.Status != queue.PlanExpired {
			t.Fatalf("plan %s after the loop: %v, %v", id, p, err)
		}
	}
}
