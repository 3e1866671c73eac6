package replay_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/db"
	"github.com/countersign/countersign/internal/replay"
	"github.com/countersign/countersign/internal/scope"
)

// TestCoverKnownAnswers: a scope made from one refund covers exactly the
// past refunds of the same agent, currency and audience whose target,
// amount and reason it allows, and no call of another tool; the calls of
// the tool are counted, and identical calls once among the distinct.
func TestCoverKnownAnswers(t *testing.T) {
	h := newHistory(t)
	base := h.submit("base", bot, "payments.refund", "invoice:INV-100", refund(1200, "USD", "duplicate"))
	h.submit("inside", bot, "payments.refund", "invoice:INV-101", refund(4000, "USD", "requested"))
	h.submit("inside-again", bot, "payments.refund", "invoice:INV-102", refund(5000, "USD", "duplicate"))
	h.submit("above", bot, "payments.refund", "invoice:INV-103", refund(5001, "USD", "duplicate"))
	h.submit("other-target", bot, "payments.refund", "invoice:INV-200", refund(100, "USD", "duplicate"))
	h.submit("other-currency", bot, "payments.refund", "invoice:INV-104", refund(100, "EUR", "duplicate"))
	h.submit("other-reason", bot, "payments.refund", "invoice:INV-105", refund(100, "USD", "fraud"))
	h.submit("other-actor", other, "payments.refund", "invoice:INV-106", refund(100, "USD", "duplicate"))
	h.submit("other-tool", janitor, "files.delete", "file:/srv/shared/tmp/a", `{"reason":"old"}`)

	tool, ok := h.q.Tools().Tool("payments.refund")
	if !ok || tool.Allowance == nil {
		t.Fatal("examples/tools.yaml's payments.refund has no allowance block")
	}
	max := int64(5000)
	sc, err := scope.Materialise(scope.Call{Actor: base.Actor, Audience: base.Audience, Tool: base.Tool, Target: base.Target,
		ToolDigest: base.ToolDigest, Args: base.Args}, tool, scope.Choices{Uses: 3, Until: h.clk.Now().Add(time.Hour),
		TargetPrefix: "invoice:INV-1", Members: map[string]scope.Member{"/amount_minor": {Max: &max},
			"/reason_code": {In: []string{"duplicate", "requested"}}}}, h.clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	ro, err := db.OpenReadOnly(h.path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	cov, err := replay.Cover(context.Background(), ro, sc, tool, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range cov.Listed {
		for name, call := range h.calls {
			if call.ID == c.CallID {
				got = append(got, name)
			}
		}
	}
	slices.Sort(got)
	if want := []string{"base", "inside", "inside-again"}; !slices.Equal(got, want) {
		t.Errorf("covered %q, want %q", got, want)
	}
	if cov.Calls != 8 || cov.Covered != 3 || cov.Distinct != 3 || cov.Uses != 3 || cov.ScopeDigest != sc.Digest() {
		t.Errorf("coverage %+v", cov)
	}
}
