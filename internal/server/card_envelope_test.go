package server

import (
	"context"
	"testing"

	"github.com/countersign/countersign/web/templates"
)

// BenchmarkCardRender is what one queue card costs the hub for a change:
// the card's view from the stored call and its fragment rendered, once
// for every viewer of a role.
func BenchmarkCardRender(b *testing.B) {
	e := newConsoleEnv(b)
	e.submit("agent:billing-bot", "payments-host", conRefundBody)
	calls, err := e.q.Store().PendingCalls(context.Background(), 1)
	if err != nil || len(calls) != 1 {
		b.Fatalf("PendingCalls = %d calls, %v", len(calls), err)
	}
	call, now := calls[0], e.clock.Now()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := renderBytes(templates.CardItem(e.c.cardView(call, true, false, now), "true")); err != nil {
			b.Fatal(err)
		}
	}
}
