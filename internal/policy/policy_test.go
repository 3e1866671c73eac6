package policy

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/tools"
)

// refundTool is a tools file entry whose rules the tests below fill in.
const refundTool = `
  payments.refund:
    audience: payments-host
    target: '^invoice:INV-[0-9]+$'
    approvals: %APPROVALS%
    auto_approve: allowed
    informational: [/notes]
    args:
      type: object
      additionalProperties: false
      required: [amount_minor, currency]
      properties:
        amount_minor: {type: integer, minimum: 1, maximum: 5000000}
        currency: {type: string, enum: [USD, EUR, JPY]}
        big: {type: integer}
        notes: {type: string, maxLength: 500}
        meta:
          type: object
          additionalProperties: false
          properties:
            source: {type: string}
        lines:
          type: array
          items:
            type: object
            additionalProperties: false
            properties:
              sku: {type: string}
              qty: {type: integer}
    rules:
`

func file(approvals, rules string) string {
	return "tools:" + strings.ReplaceAll(refundTool, "%APPROVALS%", approvals) + rules
}

func mustPolicy(tb testing.TB, src string, opts ...Option) *Policy {
	tb.Helper()
	p, err := Parse([]byte(src), opts...)
	if err != nil {
		tb.Fatalf("Parse: %v\n%s", err, src)
	}
	return p
}

func mustArgs(tb testing.TB, json string) canonical.Object {
	tb.Helper()
	v, err := canonical.Parse([]byte(json))
	if err != nil {
		tb.Fatalf("args %s: %v", json, err)
	}
	return v.(canonical.Object)
}

func obj(tb testing.TB, members ...canonical.Member) canonical.Object {
	tb.Helper()
	o, err := canonical.NewObject(members...)
	if err != nil {
		tb.Fatal(err)
	}
	return o
}

var monday10 = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

func decide(tb testing.TB, p *Policy, args canonical.Object) Decision {
	tb.Helper()
	t, _ := p.Registry().Tool("payments.refund")
	return p.Decide(t, Input{Target: "invoice:INV-1", Args: args, Actor: "agent:bot", Audience: "payments-host", Now: monday10})
}

const orderedRules = `
      - id: fraud-asks-two
        when: args.currency == "USD" && args.amount_minor >= 100000
        then: ask
        approvals: 2
      - id: no-jpy
        when: args.currency == "JPY"
        then: deny
        reason: JPY refunds go through finance
      - id: small
        when: args.amount_minor <= 5000
        then: approve
        reason: small refunds
      - id: small-too
        when: args.amount_minor <= 6000
        then: deny
        reason: never reached for small amounts
`

func TestDecideOrder(t *testing.T) {
	p := mustPolicy(t, file("1", orderedRules))
	tests := []struct {
		name      string
		args      string
		action    Action
		rule      string
		approvals int
	}{
		{"first match wins over a later approve", `{"amount_minor":200000,"currency":"USD"}`, Ask, "fraud-asks-two", 2},
		{"deny before approve", `{"amount_minor":100,"currency":"JPY"}`, Deny, "no-jpy", 0},
		{"approve before a later deny", `{"amount_minor":100,"currency":"EUR"}`, Approve, "small", 1},
		{"the later rule matches what the earlier did not", `{"amount_minor":5500,"currency":"EUR"}`, Deny, "small-too", 0},
		{"no match asks with the tool's approvals", `{"amount_minor":9000,"currency":"EUR"}`, Ask, "", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := decide(t, p, mustArgs(t, tt.args))
			rule := ""
			if d.Rule != nil {
				rule = d.Rule.ID
			}
			if d.Action != tt.action || rule != tt.rule || d.Approvals != tt.approvals || d.Err != nil {
				t.Fatalf("Decide = %s by %q, %d approvals, err %v; want %s by %q, %d approvals",
					d.Action, rule, d.Approvals, d.Err, tt.action, tt.rule, tt.approvals)
			}
			if tt.rule != "" && d.Steps[len(d.Steps)-1].Rule.ID != tt.rule {
				t.Fatalf("last step %s, want %s", d.Steps[len(d.Steps)-1].Rule.ID, tt.rule)
			}
		})
	}
}

func TestIntegersAreExact(t *testing.T) {
	const two53 = int64(1) << 53
	rules := `
      - id: exactly-2-53
        when: args.big == 9007199254740992
        then: deny
        reason: exactly 2^53
`
	p := mustPolicy(t, file("1", rules))
	for _, tt := range []struct {
		big  int64
		want Action
	}{
		{two53 - 1, Ask},
		{two53, Deny},
		{two53 + 1, Ask}, // a float64 would round this to 2^53 and deny it
	} {
		args := obj(t, canonical.Member{Name: "amount_minor", Value: int64(1)},
			canonical.Member{Name: "currency", Value: "USD"}, canonical.Member{Name: "big", Value: tt.big})
		if d := decide(t, p, args); d.Action != tt.want || d.Err != nil {
			t.Errorf("big=%d: %s (err %v), want %s", tt.big, d.Action, d.Err, tt.want)
		}
	}
	// Within the canonical range, from JSON text.
	rules = `
      - id: max
        when: args.big == 9007199254740991 && args.big - 1 == 9007199254740990 && args.big != 9007199254740990
        then: deny
        reason: the largest integer
`
	p = mustPolicy(t, file("1", rules))
	if d := decide(t, p, mustArgs(t, `{"amount_minor":1,"big":9007199254740991,"currency":"USD"}`)); d.Action != Deny {
		t.Errorf("2^53-1 from JSON: %s (err %v), want deny", d.Action, d.Err)
	}
}

func TestMissingMembers(t *testing.T) {
	rules := `
      - id: has-meta-source
        when: has(args.meta) && has(args.meta.source) && args.meta.source == "import"
        then: deny
        reason: imported
      - id: unguarded
        when: args.meta.source == "web"
        then: approve
`
	p := mustPolicy(t, file("1", rules))
	tests := []struct {
		name   string
		args   string
		action Action
		err    bool
	}{
		{"present", `{"amount_minor":1,"currency":"USD","meta":{"source":"import"}}`, Deny, false},
		{"has() guards an absent object", `{"amount_minor":1,"currency":"USD","meta":{"source":"web"}}`, Approve, false},
		{"absent member without has() is an evaluation error: people decide", `{"amount_minor":1,"currency":"USD"}`, Ask, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := decide(t, p, mustArgs(t, tt.args))
			if d.Action != tt.action || (d.Err != nil) != tt.err {
				t.Fatalf("Decide = %s, err %v; want %s, err %v", d.Action, d.Err, tt.action, tt.err)
			}
		})
	}
}

func TestInformationalMembersAreInvisible(t *testing.T) {
	// A rule cannot name notes (a load error, below); it cannot see it
	// through a dynamic key either, because Decide binds args first.
	rules := `
      - id: any-notes
        when: args.exists(k, k == "notes")
        then: deny
        reason: has notes
`
	p := mustPolicy(t, file("1", rules))
	d := decide(t, p, mustArgs(t, `{"amount_minor":1,"currency":"USD","notes":"hello"}`))
	if d.Action != Ask || d.Err != nil {
		t.Fatalf("Decide = %s (err %v); the rule saw an informational member", d.Action, d.Err)
	}
}

func TestCostLimit(t *testing.T) {
	rules := `
      - id: expensive
        when: args.lines.all(a, args.lines.all(b, args.lines.all(c, a.qty + b.qty + c.qty > 0)))
        then: approve
      - id: catch-all
        when: "true"
        then: approve
`
	p := mustPolicy(t, file("1", rules), WithCostLimit(1000))
	var lines []string
	for range 30 {
		lines = append(lines, `{"qty":1,"sku":"a"}`)
	}
	args := mustArgs(t, `{"amount_minor":1,"currency":"USD","lines":[`+strings.Join(lines, ",")+`]}`)
	before := p.EvalErrors()
	d := decide(t, p, args)
	if d.Action != Ask || d.Rule != nil || d.Err == nil || !strings.Contains(d.Err.Error(), "cost") {
		t.Fatalf("Decide = %s by %v, err %v; want ask with a cost-limit error", d.Action, d.Rule, d.Err)
	}
	if p.EvalErrors() != before+1 {
		t.Fatalf("EvalErrors = %d, want %d", p.EvalErrors(), before+1)
	}
	// A short list stays under the limit.
	d = decide(t, p, mustArgs(t, `{"amount_minor":1,"currency":"USD","lines":[{"qty":1}]}`))
	if d.Action != Approve || d.Rule.ID != "expensive" {
		t.Fatalf("short list: %s by %v (err %v), want approve by expensive", d.Action, d.Rule, d.Err)
	}
}

func TestEvaluationErrorGoesToPeople(t *testing.T) {
	rules := `
      - id: divides
        when: 100 / (args.amount_minor - 1) > 1
        then: approve
      - id: asks-three
        when: args.currency == "USD"
        then: ask
        approvals: 3
      - id: never-reached
        when: "true"
        then: deny
        reason: x
`
	p := mustPolicy(t, file("2", strings.ReplaceAll(rules, "then: approve", "then: ask")))
	d := decide(t, p, mustArgs(t, `{"amount_minor":1,"currency":"EUR"}`)) // divide by zero
	if d.Action != Ask || d.Rule != nil || d.Err == nil {
		t.Fatalf("Decide = %s by %v, err %v; want ask, no rule, an error", d.Action, d.Rule, d.Err)
	}
	if !errors.Is(d.Err, d.Err) || !strings.Contains(d.Err.Error(), "divides") {
		t.Fatalf("error %v does not name the rule", d.Err)
	}
	if d.Approvals != 3 {
		t.Fatalf("approvals after an error = %d, want 3: the most any rule from there on asks", d.Approvals)
	}
	if len(d.Steps) != 1 || d.Steps[0].Err == nil {
		t.Fatalf("steps = %+v, want the one failed step", d.Steps)
	}
}

func TestAskNeverLowersApprovals(t *testing.T) {
	// A rule that would lower the count is a load error...
	_, err := Parse([]byte(file("3", `
      - id: one-is-enough
        when: args.amount_minor < 100
        then: ask
        approvals: 2
`)))
	wantLint(t, err, "rules/one-is-enough/approvals", "would lower payments.refund's 3")
	// ...and an ask rule without a count asks for the tool's.
	p := mustPolicy(t, file("3", `
      - id: plain-ask
        when: args.amount_minor < 100
        then: ask
      - id: raise
        when: args.amount_minor < 1000
        then: ask
        approvals: 4
`))
	for args, want := range map[string]int{
		`{"amount_minor":1,"currency":"USD"}`:    3,
		`{"amount_minor":500,"currency":"USD"}`:  4,
		`{"amount_minor":5000,"currency":"USD"}`: 3,
	} {
		if d := decide(t, p, mustArgs(t, args)); d.Approvals != want || d.Action != Ask {
			t.Errorf("%s: %s with %d approvals, want ask with %d", args, d.Action, d.Approvals, want)
		}
	}
}

func TestContextVariables(t *testing.T) {
	rules := `
      - id: allowlist
        when: actor in ["agent:bot", "agent:other"] && audience == "payments-host" && tool == "payments.refund" && target.startsWith("invoice:")
        then: ask
        approvals: 2
      - id: business-hours
        when: now.getDayOfWeek("Europe/Berlin") >= 1 && now.getDayOfWeek("Europe/Berlin") <= 5 && now.getHours("Europe/Berlin") >= 9 && now.getHours("Europe/Berlin") < 17
        then: approve
`
	p := mustPolicy(t, file("1", rules))
	tl, _ := p.Registry().Tool("payments.refund")
	args := mustArgs(t, `{"amount_minor":1,"currency":"USD"}`)
	in := Input{Target: "invoice:INV-1", Args: args, Actor: "agent:bot", Audience: "payments-host", Now: monday10}
	if d := p.Decide(tl, in); d.Rule == nil || d.Rule.ID != "allowlist" {
		t.Fatalf("allowlisted actor: %+v", d)
	}
	in.Actor = "agent:stranger"
	if d := p.Decide(tl, in); d.Rule == nil || d.Rule.ID != "business-hours" || d.Action != Approve {
		t.Fatalf("Monday 11:00 Berlin: %s by %v (err %v)", d.Action, d.Rule, d.Err)
	}
	in.Now = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC) // a Sunday
	if d := p.Decide(tl, in); d.Rule != nil {
		t.Fatalf("Sunday: decided by %s", d.Rule.ID)
	}
}

func TestStaleToolDefinition(t *testing.T) {
	p := mustPolicy(t, file("1", `
      - id: all
        when: "true"
        then: approve
`))
	other := mustPolicy(t, strings.Replace(file("1", `
      - id: all
        when: "false"
        then: approve
`), "approvals: 1", "approvals: 1\n    description: changed", 1))
	t2, _ := other.Registry().Tool("payments.refund")
	d := p.Decide(t2, Input{Args: mustArgs(t, `{"amount_minor":1,"currency":"USD"}`), Now: monday10})
	if d.Action != Ask || !errors.Is(d.Err, ErrToolNotCompiled) {
		t.Fatalf("Decide with another definition = %s, err %v; want ask with ErrToolNotCompiled", d.Action, d.Err)
	}
}

func wantLint(tb testing.TB, err error, path, fragment string) {
	tb.Helper()
	var le *tools.LintError
	if !errors.As(err, &le) {
		tb.Fatalf("error %v, want a *tools.LintError with %s: %s", err, path, fragment)
	}
	for _, p := range le.Problems {
		if p.Path == path && strings.Contains(p.Message, fragment) {
			if p.Tool != "payments.refund" || p.Line == 0 {
				tb.Fatalf("problem %+v: want tool payments.refund and a line", p)
			}
			return
		}
	}
	tb.Fatalf("no problem at %s containing %q in:\n%v", path, fragment, err)
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name, approvals, rules, path, fragment string
	}{
		{"unknown argument", "1", `
      - id: typo
        when: args.amount < 100
        then: deny
        reason: x`, "rules/typo/when", "names args.amount, which the tool's args schema does not declare (declared: amount_minor, big, currency, lines, meta, notes)"},
		{"unknown argument in has()", "1", `
      - id: typo
        when: has(args.amout_minor)
        then: deny
        reason: x`, "rules/typo/when", "tests for args.amout_minor"},
		{"unknown nested member", "1", `
      - id: nested
        when: args.meta.origin == "x"
        then: deny
        reason: x`, "rules/nested/when", "args.meta.origin, which args.meta does not declare (declared: source)"},
		{"unknown member of array items", "1", `
      - id: items
        when: args.lines.exists(l, l.price > 3)
        then: deny
        reason: x`, "rules/items/when", "args.lines[].price"},
		{"unknown member by index", "1", `
      - id: index
        when: args["amount"] < 3 || args.lines[0].size == 1
        then: deny
        reason: x`, "rules/index/when", "args.amount"},
		{"member of a scalar", "1", `
      - id: scalar
        when: args.currency.code == "x"
        then: deny
        reason: x`, "rules/scalar/when", "args.currency is a string, which has no members"},
		{"informational member", "1", `
      - id: notes
        when: has(args.notes)
        then: deny
        reason: x`, "rules/notes/when", "informational"},
		{"not a bool", "1", `
      - id: number
        when: args.amount_minor + 1
        then: deny
        reason: x`, "rules/number/when", "must be true or false"},
		{"a bare string is not a bool", "1", `
      - id: str
        when: target
        then: deny
        reason: x`, "rules/str/when", "must be true or false, but this expression is string"},
		{"does not compile", "1", `
      - id: syntax
        when: args.amount_minor <
        then: deny
        reason: x`, "rules/syntax/when", "does not compile"},
		{"unknown variable", "1", `
      - id: rationale
        when: rationale == "trust me"
        then: approve`, "rules/rationale/when", "undeclared reference to 'rationale'"},
		{"approve on a tool needing two approvals", "2", `
      - id: small
        when: args.amount_minor < 100
        then: approve`, "rules/small", "needs 2 approvals"},
		{"approvals on an approve rule", "1", `
      - id: small
        when: args.amount_minor < 100
        then: approve
        approvals: 1`, "rules/small/approvals", "ask rules only"},
		{"deny without a reason", "1", `
      - id: big
        when: args.amount_minor > 100
        then: deny`, "rules/big", "needs a reason"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(file(tt.approvals, tt.rules)))
			wantLint(t, err, tt.path, tt.fragment)
		})
	}
	t.Run("approve on a tool that does not opt in", func(t *testing.T) {
		src := strings.Replace(file("1", `
      - id: small
        when: args.amount_minor < 100
        then: approve`), "auto_approve: allowed", "auto_approve: never", 1)
		_, err := Parse([]byte(src))
		wantLint(t, err, "rules/small", "does not opt in (auto_approve: allowed)")
	})
}

func TestDynamicKeyIsCheckedAtRunTime(t *testing.T) {
	// A key known only at run time passes the load check; a missing member
	// then fails the evaluation, and people decide.
	p := mustPolicy(t, file("1", `
      - id: dynamic
        when: args[target] == 1
        then: approve
`))
	d := decide(t, p, mustArgs(t, `{"amount_minor":1,"currency":"USD"}`))
	if d.Action != Ask || d.Err == nil {
		t.Fatalf("Decide = %s, err %v; want ask after an evaluation error", d.Action, d.Err)
	}
}

func TestRulePrincipal(t *testing.T) {
	p := mustPolicy(t, file("1", `
      - id: small-refunds
        when: "true"
        then: approve
`))
	r := p.Rules("payments.refund")[0]
	if r.Principal() != "policy:small-refunds" || len(r.Digest) != 64 {
		t.Fatalf("principal %q digest %q", r.Principal(), r.Digest)
	}
	if p.ToolsDigest() == "" || len(p.ToolsDigest()) != 64 {
		t.Fatalf("ToolsDigest = %q", p.ToolsDigest())
	}
}
