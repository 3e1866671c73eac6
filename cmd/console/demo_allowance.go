package main

import (
	"context"
	"fmt"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/scope"
)

// demoAllowanceBody is the refund alice approves, at the demo's start, with
// an allowance for more like it: the demo agent's USD refunds of invoices
// INV-10… up to 1,000.00 then arrive approved.
const demoAllowanceBody = `{"tool":"payments.refund","target":"invoice:INV-1000",` +
	`"args":{"amount_minor":1500,"currency":"USD","reason_code":"duplicate"},` +
	`"rationale":"The demo's example allowance: alice approved this refund and up to ten more like it."}`

// demoAllowanceMax is the demo allowance's largest refund, in cents.
const demoAllowanceMax = 100000

// giveDemoAllowance proposes a refund as the demo's billing agent and has
// alice approve it with an allowance, as the refund page's "Approve this
// and more like it" does, so the demo shows an allowance from its start.
func giveDemoAllowance(ctx context.Context, a *app, now time.Time) (*queue.Allowance, error) {
	call, _, err := a.queue.Submit(ctx, queue.Principal{Actor: "agent:billing-bot", Audience: "payments-host"}, []byte(demoAllowanceBody))
	if err != nil {
		return nil, fmt.Errorf("the demo allowance's refund: %w", err)
	}
	t, ok := a.tools.Tool(call.Tool)
	if !ok {
		return nil, fmt.Errorf("the demo allowance: no %s in the tools file", call.Tool)
	}
	base, err := queue.ScopeCall(call)
	if err != nil {
		return nil, err
	}
	max := int64(demoAllowanceMax)
	ch := scope.Choices{Uses: 10, Until: now.Add(time.Hour), TargetPrefix: "invoice:INV-10",
		Members: map[string]scope.Member{"/amount_minor": {Max: &max}}}
	sc, err := scope.Materialise(base, t, ch, now)
	if err != nil {
		return nil, fmt.Errorf("the demo allowance's scope: %w", err)
	}
	al, _, err := a.queue.GiveAllowance(ctx, queue.GiveInput{Operator: "alice", Channel: audit.ChannelCLI, CallID: call.ID,
		Digest: call.Digest, ScopeDigest: sc.Digest(), Choices: ch})
	if err != nil {
		return nil, fmt.Errorf("the demo allowance: %w", err)
	}
	return al, nil
}
