package server

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
)

// TestDecisionMetrics: each approval is counted once by its method and
// whether a person saw it, including the one that completes a call
// (granted) and not again when an agent accepts a counter-proposal; the
// time to decision is observed by tool for grants, denials, expiries and
// cancellations; another replica's changes are its own to count.
func TestDecisionMetrics(t *testing.T) {
	m := newMetrics(queue.NewService(queue.Config{}), NewTokenWaits(0), nil, nil)
	created := time.Now().Add(-90 * time.Second)
	at := created.Add(time.Minute)
	call := func(tool string, approvals ...queue.Approval) *queue.Call {
		return &queue.Call{ID: "call_x", Tool: tool, CreatedAt: created, Approvals: approvals}
	}
	seen := queue.Approval{Operator: "olivia", Method: queue.MethodClick, Presented: &queue.Presented{Page: "call", At: at}, At: at}
	rule := queue.Approval{Operator: "policy:small", Method: queue.MethodPolicy, At: at}
	cmd := queue.Approval{Operator: "olivia", Method: queue.MethodCommand, At: at}
	counter := call("payments.refund", seen)
	counter.AcceptedAt = at.Add(time.Second)
	for _, ev := range []queue.Event{
		{Kind: audit.KindApproved, Call: call("payments.refund", seen)},              // the first of two
		{Kind: audit.KindGranted, Call: call("payments.refund", seen, cmd)},          // the second completes it
		{Kind: audit.KindGranted, Call: call("deploy.service", rule)},                // a rule
		{Kind: audit.KindGranted, Call: counter},                                     // an agent accepts a counter: no approval
		{Kind: audit.KindDenied, Call: call("deploy.service")},                       // a denial
		{Kind: audit.KindExpired, Call: call("payments.refund")},                     // nobody decided
		{Kind: audit.KindCancelled, Call: call("payments.refund")},                   // the agent withdrew it
		{Kind: audit.KindGranted, Call: call("payments.refund", seen), Remote: true}, // another replica's
	} {
		m.observe(ev)
	}
	for _, tc := range []struct {
		method, human string
		want          float64
	}{
		{queue.MethodClick, queue.HumanTrue, 1},
		{queue.MethodCommand, queue.HumanUnattested, 1},
		{queue.MethodPolicy, queue.HumanFalse, 1},
	} {
		if got := testutil.ToFloat64(m.approvals.WithLabelValues(tc.method, tc.human)); got != tc.want {
			t.Errorf("approvals{method=%s,human=%s} = %v, want %v", tc.method, tc.human, got, tc.want)
		}
	}
	if n := testutil.CollectAndCount(m.approvals); n != 3 {
		t.Errorf("%d approval series, want 3", n)
	}
	for _, tc := range []struct {
		tool, decision string
		want           int
	}{
		{"payments.refund", "granted", 2}, {"deploy.service", "granted", 1}, {"deploy.service", "denied", 1},
		{"payments.refund", "expired", 1}, {"payments.refund", "cancelled", 1},
	} {
		if got := histogramCount(t, m, tc.tool, tc.decision); got != tc.want {
			t.Errorf("decision_seconds{tool=%s,decision=%s} count = %d, want %d", tc.tool, tc.decision, got, tc.want)
		}
	}
}

func histogramCount(t *testing.T, m *metrics, tool, decision string) int {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m.decisionSeconds)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "countersign_decision_seconds" {
			continue
		}
		for _, mt := range f.Metric {
			labels := map[string]string{}
			for _, l := range mt.Label {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["tool"] == tool && labels["decision"] == decision {
				if s := mt.Histogram.GetSampleSum(); s < 60 {
					t.Errorf("decision_seconds{tool=%s,decision=%s} sum %v, want at least the 90 s since creation", tool, decision, s)
				}
				return int(mt.Histogram.GetSampleCount())
			}
		}
	}
	return 0
}
