package tracing

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

// TestOffCostsNothing: a nil Tracer (tracing off) allocates nothing in any
// hook the console calls per request, write or notification, and Inject
// sets no header outside a trace.
func TestOffCostsNothing(t *testing.T) {
	var tr *Tracer
	ctx := context.Background()
	h := http.Header{}
	calls, tools, events := []string{"call_x"}, []string{"payments.refund"}, []string{"evt_x"}
	err := errors.New("x")
	req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1/api/v1/calls", nil)
	allocs := testing.AllocsPerRun(1000, func() {
		_, endReq := tr.StartRequest(req, "/api/v1/calls")
		endReq(200, "call_x")
		wctx, end := tr.StartWrite(ctx)
		end(calls, tools, events, nil)
		sctx, done := tr.StartSend(wctx, "evt_x", "hook", "call.submitted")
		done(err)
		Inject(sctx, h)
	})
	if allocs != 0 {
		t.Errorf("tracing off allocates %v times per request, want 0", allocs)
	}
	if len(h) != 0 {
		t.Errorf("Inject outside a trace set %v", h)
	}
	if trace.SpanFromContext(ctx).SpanContext().IsValid() {
		t.Error("a span appeared with tracing off")
	}
}
