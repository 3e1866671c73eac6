package client_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/client"
	"github.com/countersign/countersign/internal/queue"
)

// reportsPlan reads n monthly reports, in order.
func reportsPlan(n int) client.PlanProposal {
	p := client.PlanProposal{Rationale: "read the year's reports", Ordered: true}
	for i := range n {
		p.Items = append(p.Items, client.CallSpec{Tool: "reports.read", Target: fmt.Sprintf("report:m%d", i+1),
			Args: map[string]any{"period": fmt.Sprintf("2026-%02d", i+1)}})
	}
	return p
}

// TestRunPlanMintsAndRedeemsItemByItem: RunPlan submits a plan, waits for a
// person's approval, then mints, redeems, runs and reports each item in
// order; a failing item stops it, and the console reports the plan halted.
func TestRunPlanMintsAndRedeemsItemByItem(t *testing.T) {
	tc := startConsole(t, t.TempDir(), "127.0.0.1:0")
	c := client.New(tc.url, tc.token("agent:reader", "reports-host"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	approve := func() {
		for {
			plans, err := tc.queue.PendingPlans(ctx, 10)
			if err != nil {
				t.Error(err)
				return
			}
			if len(plans) == 1 {
				if _, err := tc.queue.ApprovePlan(ctx, queue.ApprovePlanInput{Operator: "alice", Channel: "cli",
					PlanID: plans[0].ID, Digest: plans[0].Digest}); err != nil {
					t.Error(err)
				}
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	go approve()
	var ran []string
	p, err := c.RunPlan(ctx, reportsPlan(4), 20*time.Millisecond, func(_ context.Context, item *client.Call) (string, string, error) {
		ran = append(ran, item.Target)
		return "succeeded", "", nil
	})
	if err != nil {
		t.Fatalf("RunPlan: %v", err)
	}
	if p.Status != client.PlanApproved || len(p.Items) != 4 || strings.Join(ran, ",") != "report:m1,report:m2,report:m3,report:m4" {
		t.Fatalf("plan %s, ran %v", p.Status, ran)
	}
	for _, it := range p.Items {
		if it.Status != client.StatusRedeemed || it.Outcome == nil || it.Plan == nil || it.Plan.ID != p.ID ||
			len(it.Lineage.Decided) != 1 || it.Lineage.Decided[0].Method != "plan" {
			t.Fatalf("item %s: %s %+v", it.ID, it.Status, it.Lineage.Decided)
		}
	}

	go approve()
	ran = nil
	p, err = c.RunPlan(ctx, reportsPlan(3), 20*time.Millisecond, func(_ context.Context, item *client.Call) (string, string, error) {
		ran = append(ran, item.Target)
		if len(ran) == 2 {
			return "failed", "disk full", nil
		}
		return "succeeded", "", nil
	})
	if err == nil || p == nil || p.Status != client.PlanHalted || len(ran) != 2 || p.Items[2].Status != client.StatusPending {
		t.Fatalf("a failing item: %v, plan %+v, ran %v", err, p, ran)
	}
	if _, err := c.MintItem(ctx, p.ID, 2); err == nil {
		t.Fatal("minting after a failure succeeded")
	} else if e, ok := client.AsError(err); !ok || e.Code != "plan_halted" {
		t.Fatalf("minting after a failure: %v", err)
	}
	if cancelled, err := c.CancelPlan(ctx, p.ID); err != nil || cancelled.Status != client.PlanCancelled {
		t.Fatalf("CancelPlan: %v", err)
	}
}

// TestWaitPlanLongPolls: WaitPlan holds a read open on the console and
// returns as soon as a person approves, not at its next interval.
func TestWaitPlanLongPolls(t *testing.T) {
	tc := startConsole(t, t.TempDir(), "127.0.0.1:0")
	c := client.New(tc.url, tc.token("agent:reader", "reports-host"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := c.SubmitPlan(ctx, reportsPlan(1))
	if err != nil {
		t.Fatal(err)
	}
	approved := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		_, err := tc.queue.ApprovePlan(ctx, queue.ApprovePlanInput{Operator: "alice", Channel: "cli", PlanID: p.ID, Digest: p.Digest})
		approved <- err
	}()
	got, err := c.WaitPlan(ctx, p.ID, time.Hour)
	if err != nil || got.Status != client.PlanApproved {
		t.Fatalf("WaitPlan with an hour's interval: %v, %+v", err, got)
	}
	if err := <-approved; err != nil {
		t.Fatal(err)
	}
}
