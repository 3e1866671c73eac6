package main

import (
	"context"
	"fmt"

	"github.com/countersign/countersign/internal/queue"
)

// demoPlanBody is the plan the demo's report agent proposes at the start:
// three report reads in order, one card on the queue and one decision on
// the plan's page.
const demoPlanBody = `{"rationale":"Read the first quarter's sales reports for the quarterly summary, in order.","ordered":true,"items":[` +
	`{"tool":"reports.read","target":"report:sales-2026-01","args":{"period":"2026-01","format":"csv"}},` +
	`{"tool":"reports.read","target":"report:sales-2026-02","args":{"period":"2026-02","format":"csv"}},` +
	`{"tool":"reports.read","target":"report:sales-2026-03","args":{"period":"2026-03","format":"csv"}}]}`

// proposeDemoPlan proposes the demo's plan as its report agent, so the demo
// shows a plan waiting for review beside the allowance.
func proposeDemoPlan(ctx context.Context, a *app) (*queue.Plan, error) {
	p, _, err := a.queue.SubmitPlan(ctx, queue.Principal{Actor: demoAgents["reports-host"], Audience: "reports-host"}, []byte(demoPlanBody))
	if err != nil {
		return nil, fmt.Errorf("the demo plan: %w", err)
	}
	return p, nil
}
