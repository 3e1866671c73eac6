package queue_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
)

// BenchmarkPolicyLoop measures, in one run and interleaved, the latency of
// submit → approved by rule → redeem, against submit → redeem of a tool
// without rules (approved by a person in between, the fastest a person can
// be), and the submission alone with and without the rule:
//
//	go test -run '^$' -bench BenchmarkPolicyLoop -benchtime 2000x -count 3 ./internal/queue/
func BenchmarkPolicyLoop(b *testing.B) {
	// payments.refund has the rules; payments.plain is the same tool
	// without them.
	plain := strings.Replace(rulesFile, "    rules:", "    no_rules_here:", 1)
	plain = plain[:strings.Index(plain, "    no_rules_here:")]
	plain = strings.Replace(plain, "payments.refund:", "payments.plain:", 1)
	src := rulesFile + strings.TrimPrefix(plain, "tools:\n")
	e := newPolicyEnv(b, src)
	e.clock.Set(time.Now().UTC()) // grants must verify against the real time
	ctx := context.Background()
	var byRule, byPerson, submitRule, submitPlain []time.Duration
	body := func(tool string, n int) []byte {
		return fmt.Appendf(nil, `{"tool":%q,"target":"invoice:INV-%d","args":{"amount_minor":1200,"currency":"USD"}}`, tool, n)
	}
	b.ResetTimer()
	for i := range b.N {
		// By rule.
		start := time.Now()
		c, _, err := e.q.Submit(ctx, agent, body("payments.refund", i))
		submitRule = append(submitRule, time.Since(start))
		if err != nil || c.Status != queue.StatusApproved {
			b.Fatalf("by rule: %v %v", c, err)
		}
		if r, err := e.q.Redeem(ctx, agent, exactBody(c)); err != nil || !r.Accepted {
			b.Fatalf("redeem: %v %s", err, checks(r))
		}
		byRule = append(byRule, time.Since(start))

		// No rule: a person approves at once.
		start = time.Now()
		c, _, err = e.q.Submit(ctx, agent, body("payments.plain", i))
		submitPlain = append(submitPlain, time.Since(start))
		if err != nil || c.Status != queue.StatusPending {
			b.Fatalf("plain: %v %v", c, err)
		}
		if c, err = e.q.Approve(ctx, "alice", audit.ChannelWeb, c.ID, c.Digest); err != nil {
			b.Fatal(err)
		}
		if r, err := e.q.Redeem(ctx, agent, exactBody(c)); err != nil || !r.Accepted {
			b.Fatalf("redeem: %v %s", err, checks(r))
		}
		byPerson = append(byPerson, time.Since(start))
	}
	b.StopTimer()
	pct := func(ds []time.Duration, p float64) float64 {
		s := slices.Clone(ds)
		slices.Sort(s)
		return float64(s[min(len(s)-1, int(p*float64(len(s))))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(byRule, 0.5), "rule-loop-p50-ms")
	b.ReportMetric(pct(byRule, 0.99), "rule-loop-p99-ms")
	b.ReportMetric(pct(byPerson, 0.5), "person-loop-p50-ms")
	b.ReportMetric(pct(byPerson, 0.99), "person-loop-p99-ms")
	b.ReportMetric(pct(submitRule, 0.5), "submit-rule-p50-ms")
	b.ReportMetric(pct(submitRule, 0.99), "submit-rule-p99-ms")
	b.ReportMetric(pct(submitPlain, 0.5), "submit-plain-p50-ms")
	b.ReportMetric(pct(submitPlain, 0.99), "submit-plain-p99-ms")
}
