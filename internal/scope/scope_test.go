package scope

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/tools"
)

const refundFile = `tools:
  payments.refund:
    audience: payments-host
    target: 'invoice:[A-Z]+-[0-9]+'
    args:
      type: object
      additionalProperties: false
      required: [amount_minor, currency, reason]
      properties:
        amount_minor: {type: integer, minimum: 1, maximum: 500000}
        currency: {type: string, enum: [USD, EUR]}
        reason: {type: string, enum: [duplicate, fraud, other]}
        note: {type: string}
        memo: {type: string}
        lines: {type: array, items: {type: integer}}
        meta:
          type: object
          additionalProperties: false
          properties:
            n: {type: integer, minimum: 0, maximum: 100}
            tag: {type: string}
    display: {money: {amount: /amount_minor, currency: /currency}}
    informational: [/memo]
    allowance: {max_uses: 20, max_for: 1h, vary: [target, /amount_minor, /reason, /meta/n]}
  payments.plain:
    audience: payments-host
    target: '.+'
    args: {type: object, additionalProperties: false, properties: {n: {type: integer}}}
`

var now = time.Date(2026, 12, 5, 13, 30, 0, 0, time.UTC)

func mustTool(tb testing.TB, name string) *tools.Tool {
	tb.Helper()
	r, err := tools.Parse([]byte(refundFile))
	if err != nil {
		tb.Fatal(err)
	}
	t, ok := r.Tool(name)
	if !ok {
		tb.Fatalf("no tool %s", name)
	}
	return t
}

func mustArgs(tb testing.TB, js string) canonical.Object {
	tb.Helper()
	v, err := canonical.Parse([]byte(js))
	if err != nil {
		tb.Fatal(err)
	}
	return v.(canonical.Object)
}

func baseCall(tb testing.TB, t *tools.Tool) Call {
	return Call{Actor: "agent:billing-bot", Audience: "payments-host", Tool: t.Name, ToolDigest: t.DefinitionDigest,
		Target: "invoice:INV-2041", Args: mustArgs(tb, `{"amount_minor":1250,"currency":"USD","reason":"duplicate","lines":[1,2],"meta":{"n":3},"memo":"hi"}`)}
}

func i64(n int64) *int64 { return &n }

func TestMaterialise(t *testing.T) {
	tool := mustTool(t, "payments.refund")
	base := baseCall(t, tool)
	s, err := Materialise(base, tool, Choices{Uses: 10, Until: now.Add(time.Hour), TargetPrefix: "invoice:INV-",
		Members: map[string]Member{"/amount_minor": {Max: i64(5000)}, "/reason": {In: []string{"fraud", "duplicate"}}, "/meta/n": {Max: i64(10)}}}, now)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"actor":"agent:billing-bot","args":{"/amount_minor":{"max":5000},"/currency":{"equals":"USD"},"/lines":{"equals":[1,2]},` +
		`"/meta/n":{"max":10},"/meta/tag":"absent","/note":"absent","/reason":{"in":["duplicate","fraud"]}},"audience":"payments-host",` +
		`"once_per_call":true,"target":{"prefix":"invoice:INV-"},"tool":"payments.refund","tool_digest":"` + tool.DefinitionDigest +
		`","until":"2026-12-05T14:30:00Z","uses":10,"v":1}`
	if got := string(s.JSON()); got != want {
		t.Errorf("JSON =\n%s\nwant\n%s", got, want)
	}
	p, err := Parse(s.JSON())
	if err != nil {
		t.Fatal(err)
	}
	if p.Digest() != s.Digest() || len(s.Digest()) != 64 {
		t.Errorf("parsed digest %s, want %s", p.Digest(), s.Digest())
	}
}

func TestMaterialiseRefusals(t *testing.T) {
	tool := mustTool(t, "payments.refund")
	plain := mustTool(t, "payments.plain")
	base := baseCall(t, tool)
	ok := Choices{Uses: 5, Until: now.Add(time.Hour)}
	with := func(f func(*Choices)) Choices { c := ok; f(&c); return c }
	tests := []struct {
		name string
		base Call
		tool *tools.Tool
		c    Choices
		want error
	}{
		{"no allowance block", Call{Tool: plain.Name, ToolDigest: plain.DefinitionDigest}, plain, ok, ErrNoAllowance},
		{"other definition", func() Call { b := base; b.ToolDigest = strings.Repeat("0", 64); return b }(), tool, ok, ErrToolMismatch},
		{"no uses", base, tool, with(func(c *Choices) { c.Uses = 0 }), ErrUses},
		{"too many uses", base, tool, with(func(c *Choices) { c.Uses = 21 }), ErrUses},
		{"until past", base, tool, with(func(c *Choices) { c.Until = now }), ErrUntil},
		{"until too late", base, tool, with(func(c *Choices) { c.Until = now.Add(time.Hour + time.Second) }), ErrUntil},
		{"varying a fixed member", base, tool, with(func(c *Choices) { c.Members = map[string]Member{"/currency": {In: []string{"USD", "EUR"}}} }), ErrNotVariable},
		{"max on an enum", base, tool, with(func(c *Choices) { c.Members = map[string]Member{"/reason": {Max: i64(3)}} }), ErrNotVariable},
		{"subset on an integer", base, tool, with(func(c *Choices) { c.Members = map[string]Member{"/amount_minor": {In: []string{"1"}}} }), ErrNotVariable},
		{"above the schema", base, tool, with(func(c *Choices) { c.Members = map[string]Member{"/amount_minor": {Max: i64(500001)}} }), ErrAboveMaximum},
		{"nested above the schema", base, tool, with(func(c *Choices) { c.Members = map[string]Member{"/meta/n": {Max: i64(101)}} }), ErrAboveMaximum},
		{"below the base call", base, tool, with(func(c *Choices) { c.Members = map[string]Member{"/amount_minor": {Max: i64(1249)}} }), ErrBaseOutside},
		{"not in the enum", base, tool, with(func(c *Choices) { c.Members = map[string]Member{"/reason": {In: []string{"duplicate", "gift"}}} }), ErrNotInEnum},
		{"subset without the base", base, tool, with(func(c *Choices) { c.Members = map[string]Member{"/reason": {In: []string{"fraud"}}} }), ErrBaseOutside},
		{"prefix not a prefix", base, tool, with(func(c *Choices) { c.TargetPrefix = "invoice:X" }), ErrBaseOutside},
		{"absent member varied", func() Call { b := base; b.Args = canonical.Without(b.Args, "/meta"); return b }(), tool,
			with(func(c *Choices) { c.Members = map[string]Member{"/meta/n": {Max: i64(5)}} }), ErrNotVariable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Materialise(tt.base, tt.tool, tt.c, now)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Materialise = %v, %v; want %v", s, err, tt.want)
			}
		})
	}
}

func TestCovers(t *testing.T) {
	tool := mustTool(t, "payments.refund")
	base := baseCall(t, tool)
	s, err := Materialise(base, tool, Choices{Uses: 10, Until: now.Add(time.Hour), TargetPrefix: "invoice:INV-",
		Members: map[string]Member{"/amount_minor": {Max: i64(5000)}, "/meta/n": {Max: i64(10)}}}, now)
	if err != nil {
		t.Fatal(err)
	}
	call := func(f func(*Call)) Call {
		c := base
		c.Args = append(canonical.Object(nil), base.Args...)
		f(&c)
		return c
	}
	set := func(js string) func(*Call) { return func(c *Call) { c.Args = mustArgs(t, js) } }
	tests := []struct {
		name   string
		c      Call
		ok     bool
		reason string
	}{
		{"the base call", base, true, ""},
		{"another amount and target, memo changed", call(func(c *Call) {
			c.Target = "invoice:INV-9"
			c.Args = mustArgs(t, `{"amount_minor":5000,"currency":"USD","reason":"duplicate","lines":[1,2],"meta":{"n":10},"memo":"other"}`)
		}), true, ""},
		{"amount above", call(set(`{"amount_minor":5001,"currency":"USD","reason":"duplicate","lines":[1,2],"meta":{"n":3}}`)), false, "/amount_minor is above 5000"},
		{"other currency", call(set(`{"amount_minor":5,"currency":"EUR","reason":"duplicate","lines":[1,2],"meta":{"n":3}}`)), false, "/currency differs"},
		{"other reason", call(set(`{"amount_minor":5,"currency":"USD","reason":"fraud","lines":[1,2],"meta":{"n":3}}`)), false, "/reason differs"},
		{"other array", call(set(`{"amount_minor":5,"currency":"USD","reason":"duplicate","lines":[1],"meta":{"n":3}}`)), false, "/lines differs"},
		{"added note", call(set(`{"amount_minor":5,"currency":"USD","reason":"duplicate","lines":[1,2],"meta":{"n":3},"note":"x"}`)), false, "/note is in the call"},
		{"added nested tag", call(set(`{"amount_minor":5,"currency":"USD","reason":"duplicate","lines":[1,2],"meta":{"n":3,"tag":"x"}}`)), false, "/meta/tag is in the call"},
		{"missing lines", call(set(`{"amount_minor":5,"currency":"USD","reason":"duplicate","meta":{"n":3}}`)), false, "/lines is missing"},
		{"nested above", call(set(`{"amount_minor":5,"currency":"USD","reason":"duplicate","lines":[1,2],"meta":{"n":11}}`)), false, "/meta/n is above 10"},
		{"unnamed member", call(set(`{"amount_minor":5,"currency":"USD","reason":"duplicate","lines":[1,2],"meta":{"n":3},"zzz":1}`)), false, "/zzz is not named"},
		{"target outside prefix", call(func(c *Call) { c.Target = "invoice:ABC-1" }), false, "does not start with"},
		{"target outside pattern", call(func(c *Call) { c.Target = "invoice:INV-x" }), false, "does not match the tool's pattern"},
		{"other actor", call(func(c *Call) { c.Actor = "agent:other" }), false, "the call is by agent:other"},
		{"other audience", call(func(c *Call) { c.Audience = "elsewhere" }), false, "the call is for elsewhere"},
		{"other tool", call(func(c *Call) { c.Tool = "payments.plain" }), false, "the call is of payments.plain"},
		{"other definition", call(func(c *Call) { c.ToolDigest = strings.Repeat("1", 64) }), false, "definition changed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ok, reason := Covers(s, tool, tt.c)
			if ok != tt.ok || !strings.Contains(reason, tt.reason) {
				t.Errorf("Covers = %v, %q; want %v, %q", ok, reason, tt.ok, tt.reason)
			}
		})
	}
}

func TestWords(t *testing.T) {
	tool := mustTool(t, "payments.refund")
	base := baseCall(t, tool)
	tests := []struct {
		name string
		base Call
		c    Choices
		want string
	}{
		{"the issue's example", func() Call {
			b := base
			b.Args = mustArgs(t, `{"amount_minor":1250,"currency":"USD","reason":"duplicate"}`)
			return b
		}(), Choices{Uses: 10, Until: now.Add(time.Hour), Members: map[string]Member{"/amount_minor": {Max: i64(5000)}}},
			"up to 10 payments.refund calls by agent:billing-bot for payments-host, target invoice:INV-2041, each at most USD 50.00, " +
				"currency USD, no lines, no meta, no note, reason duplicate, until 14:30 UTC on 2026-12-05; the same call at most once"},
		{"repeats, prefix, subset, nested, one use", base, Choices{Uses: 1, Until: now.Add(90 * time.Second), TargetPrefix: "invoice:INV-", RepeatCalls: true,
			Members: map[string]Member{"/reason": {In: []string{"fraud", "duplicate"}}, "/meta/n": {Max: i64(7)}}},
			`up to 1 payments.refund call by agent:billing-bot for payments-host, any target starting with "invoice:INV-" that matches invoice:[A-Z]+-[0-9]+, ` +
				`amount USD 12.50, currency USD, lines [1,2], meta/n at most 7, no meta/tag, no note, reason duplicate or fraud, ` +
				`until 13:31:30 UTC on 2026-12-05; the same call may be approved again each time it is made`},
		{"deceptive strings escaped", func() Call {
			b := base
			b.Actor = "agent:bi\u200bll"
			b.Target = "invoice:INV-1"
			b.Args = mustArgs(t, `{"amount_minor":1,"currency":"EUR","reason":"other","meta":{"n":1,"tag":"caf\u00e9 \u202e"}}`)
			return b
		}(), Choices{Uses: 2, Until: now.Add(time.Minute)},
			`up to 2 payments.refund calls by "agent:bi\u200bll" for payments-host, target invoice:INV-1, amount EUR 0.01, currency EUR, ` +
				`no lines, meta {"n":1,"tag":"caf\u00e9 \u202e"}, no note, reason other, until 13:31 UTC on 2026-12-05; the same call at most once`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Materialise(tt.base, tool, tt.c, now)
			if err != nil {
				t.Fatal(err)
			}
			if got := Words(s, tool, nil); got != tt.want {
				t.Errorf("Words =\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}
