package notify_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/notify"
	"github.com/countersign/countersign/internal/queue"
)

// A plan's submission and its decision are announced once each, as plan
// events, to the channels of its items' route; its cancellation is not.
func TestRouterAnnouncesPlans(t *testing.T) {
	cfg := mustConfig(t, routedConfig, map[string]string{"S": newSecret(t)})
	r := notify.NewRouter(cfg, "http://127.0.0.1:8080")
	items := []*queue.Call{testCall("call_1", t0), testCall("call_2", t0)}
	p := &queue.Plan{ID: "pln_1", Actor: "agent:billing-bot", Audience: "payments-host", Digest: items[0].Digest, Items: 2,
		ApprovalsRequired: 1, Status: queue.PlanPending, CreatedAt: t0, DecideBy: t0.Add(15 * time.Minute), Ordered: true}
	read := func(ns []queue.Notice) notify.Event {
		t.Helper()
		var ev notify.Event
		if err := json.Unmarshal(ns[0].Body, &ev); err != nil {
			t.Fatal(err)
		}
		return ev
	}
	sub := r.Notices(queue.Event{Kind: audit.KindPlanSubmitted, Plan: p, Items: items})
	if got := notices(sub); got != "plan.submitted@hook" {
		t.Fatalf("submitted: %q, want one notice to the route's channel", got)
	}
	if ev := read(sub); ev.Data.URL != "https://cs.example.com/plans/pln_1" || ev.Data.Plan == nil || ev.Data.Plan.Items != 2 ||
		ev.Data.Tool != "payments.refund" || !ev.Data.Plan.Ordered {
		t.Errorf("submitted: %+v %+v", ev.Data, ev.Data.Plan)
	}
	p.Status, p.DecidedAt, p.ValidUntil = queue.PlanApproved, t0.Add(time.Minute), t0.Add(time.Hour)
	dec := r.Notices(queue.Event{Kind: audit.KindPlanApproved, Plan: p, Items: items})
	if ev := read(dec); notices(dec) != "plan.decided@hook" || ev.Data.Status != "approved" || ev.Data.Plan.ValidUntil == "" {
		t.Errorf("approved: %q %+v", notices(dec), ev.Data)
	}
	p.Status, p.Reason, p.DecidedBy = queue.PlanDenied, "not now", "bob"
	dec = r.Notices(queue.Event{Kind: audit.KindPlanDenied, Plan: p, Items: items})
	if ev := read(dec); ev.Data.Decision == nil || ev.Data.Decision.Reason != "not now" {
		t.Errorf("denied: %+v", ev.Data)
	}
	if got := r.Notices(queue.Event{Kind: audit.KindPlanCancelled, Plan: p, Items: items}); len(got) != 0 {
		t.Errorf("a cancelled plan announced %q", notices(got))
	}
}
