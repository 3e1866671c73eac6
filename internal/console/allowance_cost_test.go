package console

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/db"
	"github.com/countersign/countersign/internal/policy"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/scope"
)

// costTools has one refund tool: a rule approves any refund by
// agent:rule-bot, and an allowance may cover agent:billing-bot's.
const costTools = `tools:
  payments.refund:
    description: Refund an invoice
    audience: payments-host
    target: '^invoice:INV-[0-9]+$'
    approvals: 1
    auto_approve: allowed
    args:
      type: object
      additionalProperties: false
      required: [amount_minor, currency]
      properties:
        amount_minor: {type: integer, minimum: 1, maximum: 5000000}
        currency: {type: string, enum: [USD, EUR]}
    allowance: {max_uses: 1000, max_for: 1h, vary: [target, /amount_minor]}
    rules:
      - id: rule-bot
        when: actor == "agent:rule-bot"
        then: approve
`

// maxCoveredExtraStatements is how many more SQL statements the submission
// of a call an allowance covers runs than one a rule approves: the
// allowances of the tool are read, the use is counted (a row and the
// allowance's count), and each confirmer's account is read as it stands
// now. A statement more fails TestCoveredSubmissionCost.
const maxCoveredExtraStatements = 4

// coveredSubmissions starts a console on a real SQLite file with an
// allowance covering agent:billing-bot's refunds, and returns submit,
// which submits one refund over HTTP (covered, or approved by the rule)
// and returns how long the answer took and how many statements it ran.
func coveredSubmissions(tb testing.TB) (*consoleEnv, func(covered bool, n int) (time.Duration, int64)) {
	pol, err := policy.Parse([]byte(costTools))
	if err != nil {
		tb.Fatal(err)
	}
	e := newConsoleEnvTools(tb, pol.Registry(), pol, func(c *envConfig) { c.Writes = c.Audit.(*db.DB) })
	e.addUser("olga", "operator", "pw-olga-123")
	ctx := context.Background()
	_, billing, err := accountsOf(e.db).CreateToken(ctx, "agent:billing-bot", "payments-host", "", "test", audit.ChannelCLI)
	if err != nil {
		tb.Fatal(err)
	}
	_, ruled, err := accountsOf(e.db).CreateToken(ctx, "agent:rule-bot", "payments-host", "", "test", audit.ChannelCLI)
	if err != nil {
		tb.Fatal(err)
	}
	post := func(token, body string) (time.Duration, int64, map[string]any) {
		tb.Helper()
		before := e.db.Statements()
		start := time.Now()
		req, _ := http.NewRequest(http.MethodPost, e.url+"/api/v1/calls", bytes.NewReader([]byte(body)))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			tb.Fatal(err)
		}
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		took := time.Since(start)
		if res.StatusCode != http.StatusCreated {
			tb.Fatalf("submit: %d %s", res.StatusCode, raw)
		}
		return took, e.db.Statements() - before, map[string]any{"raw": string(raw)}
	}
	refund := func(n, amount int) string {
		return fmt.Sprintf(`{"tool":"payments.refund","target":"invoice:INV-%d","args":{"amount_minor":%d,"currency":"USD"}}`, n, amount)
	}
	// The allowance, from a pending call of the billing bot.
	c, _, err := e.q.Submit(ctx, queue.Principal{Actor: "agent:billing-bot", Audience: "payments-host"}, []byte(refund(1, 100)))
	if err != nil {
		tb.Fatal(err)
	}
	t, _ := e.q.Tools().Tool(c.Tool)
	max := int64(5000000)
	ch := scope.Choices{Uses: 1000, Until: e.clock.Now().Add(time.Hour), TargetPrefix: "invoice:INV-",
		Members: map[string]scope.Member{"/amount_minor": {Max: &max}}}
	base, err := queue.ScopeCall(c)
	if err != nil {
		tb.Fatal(err)
	}
	sc, err := scope.Materialise(base, t, ch, e.clock.Now())
	if err != nil {
		tb.Fatal(err)
	}
	if _, _, err := e.q.GiveAllowance(ctx, queue.GiveInput{Operator: "olga", Channel: audit.ChannelCLI, CallID: c.ID, Digest: c.Digest,
		ScopeDigest: sc.Digest(), Choices: ch}); err != nil {
		tb.Fatal(err)
	}
	return e, func(covered bool, n int) (time.Duration, int64) {
		token := ruled
		if covered {
			token = billing
		}
		took, stmts, out := post(token, refund(1000+n, 100+n))
		if !bytes.Contains([]byte(out["raw"].(string)), []byte(`"status":"approved"`)) {
			tb.Fatalf("covered %t: not approved at submission: %s", covered, out["raw"])
		}
		return took, stmts
	}
}

// TestCoveredSubmissionCost: a submission an allowance approves runs at
// most maxCoveredExtraStatements more statements than one a rule
// approves, measured alternating on one console. With
// COUNTERSIGN_STATEMENTS=1 it prints the statements of one of each.
func TestCoveredSubmissionCost(t *testing.T) {
	e, submit := coveredSubmissions(t)
	for i := range 4 { // connections and caches
		submit(i%2 == 0, -10-i)
	}
	if os.Getenv("COUNTERSIGN_STATEMENTS") != "" {
		for _, cov := range []bool{true, false} {
			e.db.TraceStatements(func(q string) { t.Logf("covered %t: %.160s", cov, q) })
			submit(cov, 900)
			e.db.TraceStatements(nil)
		}
	}
	// Medians: a statement of the console's own sweeps that lands during
	// one submission does not count against it.
	var covered, ruled []int64
	const rounds = 21
	for i := range rounds {
		_, c := submit(true, 2*i)
		_, r := submit(false, 2*i+1)
		covered, ruled = append(covered, c), append(ruled, r)
	}
	slices.Sort(covered)
	slices.Sort(ruled)
	perCovered, perRuled := covered[rounds/2], ruled[rounds/2]
	t.Logf("statements per submission (median of %d): covered %d, approved by a rule %d", rounds, perCovered, perRuled)
	if perCovered > perRuled+maxCoveredExtraStatements {
		t.Errorf("a covered submission ran %d statements, more than %d + %d", perCovered, perRuled, maxCoveredExtraStatements)
	}
}

// maxCoveredRounds is the most rounds BenchmarkCoveredSubmission runs:
// half are covered, and the allowance has 1,000 uses (the most a tool
// may give), some spent warming up.
const maxCoveredRounds = 1900

// BenchmarkCoveredSubmission submits refunds over HTTP, alternating one
// an allowance covers with one a rule approves, and reports the p50 and
// p99 latency of each and their ratio (COUNTERSIGN_COST=1 prints every
// round). Run it with -benchtime 1900x: with 950 of each, p99 is the
// tenth slowest rather than one outlier. docs/performance.md records its
// runs.
func BenchmarkCoveredSubmission(b *testing.B) {
	_, submit := coveredSubmissions(b)
	for i := range 10 {
		submit(i%2 == 0, -20-i)
	}
	var cov, rule []time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if i >= maxCoveredRounds {
			b.Fatalf("more than %d rounds: the allowance's uses run out; run with -benchtime %dx", maxCoveredRounds, maxCoveredRounds)
		}
		d, _ := submit(i%2 == 0, i)
		if i%2 == 0 {
			cov = append(cov, d)
		} else {
			rule = append(rule, d)
		}
	}
	b.StopTimer()
	if len(cov) < 2 || len(rule) < 2 {
		return
	}
	q := func(ds []time.Duration, p float64) time.Duration {
		s := slices.Clone(ds)
		slices.Sort(s)
		return s[min(len(s)-1, int(p*float64(len(s))))]
	}
	b.ReportMetric(float64(q(cov, 0.99).Microseconds()), "covered-p99-µs")
	b.ReportMetric(float64(q(rule, 0.99).Microseconds()), "rule-p99-µs")
	b.ReportMetric(float64(q(cov, 0.99))/float64(q(rule, 0.99)), "p99-ratio")
	b.ReportMetric(float64(q(cov, 0.5))/float64(q(rule, 0.5)), "p50-ratio")
	if os.Getenv("COUNTERSIGN_COST") != "" {
		b.Logf("covered p50 %v p99 %v; rule p50 %v p99 %v", q(cov, 0.5), q(cov, 0.99), q(rule, 0.5), q(rule, 0.99))
	}
}

// TestEditedScopeCoversNothing: an allowance whose stored scope no longer
// hashes to its digest approves nothing, even after it approved calls
// while intact (the queue keeps parsed scopes only for the bytes they were
// parsed from).
func TestEditedScopeCoversNothing(t *testing.T) {
	e, submit := coveredSubmissions(t)
	submit(true, 1) // covered, so its scope is parsed and kept
	ctx := context.Background()
	n, err := e.db.SQL().ExecContext(ctx, `UPDATE allowances SET scope = CAST(replace(CAST(scope AS TEXT), '"uses":1000', '"uses":1001') AS BLOB)`)
	if err != nil {
		t.Fatal(err)
	}
	if rows, _ := n.RowsAffected(); rows != 1 {
		t.Fatalf("edited %d allowances; want 1", rows)
	}
	var scopeText string
	if err := e.db.SQL().QueryRowContext(ctx, `SELECT CAST(scope AS TEXT) FROM allowances`).Scan(&scopeText); err != nil || !strings.Contains(scopeText, `"uses":1001`) {
		t.Fatalf("scope after the edit: %q, %v", scopeText, err)
	}
	c, _, err := e.q.Submit(ctx, queue.Principal{Actor: "agent:billing-bot", Audience: "payments-host"},
		[]byte(`{"tool":"payments.refund","target":"invoice:INV-77","args":{"amount_minor":77,"currency":"USD"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Status != queue.StatusPending || len(c.Approvals) != 0 {
		t.Errorf("after the scope was edited: %s with %d approvals; want pending for a person", c.Status, len(c.Approvals))
	}
}
