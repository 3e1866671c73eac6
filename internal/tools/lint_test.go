package tools

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// toolFile builds a tools file with one tool, demo.tool, whose fields are
// the given YAML lines (indented by four spaces). Missing audience, target
// or args get harmless defaults unless the fields name them or "no-" marks
// them absent.
func toolFile(fields string) string {
	var b strings.Builder
	b.WriteString("tools:\n  demo.tool:\n")
	has := func(k string) bool {
		return strings.Contains(fields, "\n    "+k+":") || strings.HasPrefix(fields, "    "+k+":")
	}
	if !has("audience") && !strings.Contains(fields, "#no-audience") {
		b.WriteString("    audience: demo-host\n")
	}
	if !has("target") && !strings.Contains(fields, "#no-target") {
		b.WriteString("    target: '^demo:[a-z]+$'\n")
	}
	if !has("args") && !strings.Contains(fields, "#no-args") {
		b.WriteString("    args: {type: object, additionalProperties: false}\n")
	}
	b.WriteString(fields)
	return b.String()
}

func lintProblems(t *testing.T, yaml string) []LintProblem {
	t.Helper()
	r, err := Parse([]byte(yaml))
	if err == nil {
		t.Fatalf("Parse accepted:\n%s\ntools %v", yaml, r.Names())
	}
	var le *LintError
	if !errors.As(err, &le) {
		t.Fatalf("error %T %v, want *LintError", err, err)
	}
	if r != nil {
		t.Error("Parse returned a registry along with an error")
	}
	return le.Problems
}

func TestLintRefusals(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		// want lists one substring per expected problem, in order.
		want []string
	}{
		{"nested object without additionalProperties", toolFile(`    args:
      type: object
      additionalProperties: false
      properties:
        filter:
          type: object
          properties: {status: {type: string}}
`), []string{"demo.tool: args/properties/filter: object schema without additionalProperties: false"}},
		{"root object without additionalProperties", toolFile("    args: {type: object, properties: {a: {type: string}}}\n"),
			[]string{"demo.tool: args: object schema without additionalProperties: false"}},
		{"additionalProperties true", toolFile("    args: {type: object, additionalProperties: true}\n"),
			[]string{"demo.tool: args/additionalProperties: must be false"}},
		{"additionalProperties schema", toolFile("    args: {type: object, additionalProperties: {type: string}}\n"),
			[]string{"demo.tool: args/additionalProperties: must be false"}},
		{"patternProperties", toolFile("    args: {type: object, additionalProperties: false, patternProperties: {'^x': {type: string}}}\n"),
			[]string{"demo.tool: args: patternProperties lets members with unlisted names through"}},
		{"array without items", toolFile("    args: {type: object, additionalProperties: false, properties: {tags: {type: array, maxItems: 3}}}\n"),
			[]string{"demo.tool: args/properties/tags: array schema without items"}},
		{"array of open objects", toolFile("    args: {type: object, additionalProperties: false, properties: {to: {type: array, items: {type: object}}}}\n"),
			[]string{"demo.tool: args/properties/to/items: object schema without additionalProperties: false"}},
		{"number type", toolFile("    args: {type: object, additionalProperties: false, properties: {amount: {type: number}}}\n"),
			[]string{"demo.tool: args/properties/amount/type: number allows fractions"}},
		{"number in a type list", toolFile("    args: {type: object, additionalProperties: false, properties: {amount: {type: [integer, number]}}}\n"),
			[]string{"demo.tool: args/properties/amount/type: number allows fractions"}},
		{"unknown keyword", toolFile("    args: {type: object, additionalProperties: false, properties: {s: {type: string, maxlength: 3}}}\n"),
			[]string{"demo.tool: args/properties/s: unknown keyword maxlength (supported: type, enum"}},
		{"format refused", toolFile("    args: {type: object, additionalProperties: false, properties: {d: {type: string, format: date}}}\n"),
			[]string{"demo.tool: args/properties/d: format is only an annotation"}},
		{"default refused", toolFile("    args: {type: object, additionalProperties: false, properties: {n: {type: integer, default: 3}}}\n"),
			[]string{"demo.tool: args/properties/n: default is never filled in"}},
		{"combinator refused", toolFile("    args: {type: object, additionalProperties: false, properties: {n: {anyOf: [{type: integer}]}}}\n"),
			[]string{"demo.tool: args/properties/n: anyOf is not supported", "demo.tool: args/properties/n: schema without type"}},
		{"ref refused", toolFile("    args: {type: object, additionalProperties: false, properties: {n: {$ref: '#/x', type: string}}}\n"),
			[]string{"demo.tool: args/properties/n: references are not supported"}},
		{"schema without type", toolFile("    args: {type: object, additionalProperties: false, properties: {anything: {description: whatever}}}\n"),
			[]string{"demo.tool: args/properties/anything: schema without type (or enum or const) accepts any value"}},
		{"empty schema", toolFile("    args: {type: object, additionalProperties: false, properties: {anything: {}}}\n"),
			[]string{"demo.tool: args/properties/anything: schema without type"}},
		{"boolean schema true", toolFile("    args: {type: object, additionalProperties: false, properties: {anything: true}}\n"),
			[]string{"demo.tool: args/properties/anything: the boolean schema true accepts any value"}},
		{"keyword of another type", toolFile("    args: {type: object, additionalProperties: false, properties: {n: {type: integer, maxLength: 3}}}\n"),
			[]string{"demo.tool: args/properties/n: maxLength applies to string values only"}},
		{"fractional minimum", toolFile("    args: {type: object, additionalProperties: false, properties: {n: {type: integer, minimum: 0.5}}}\n"),
			[]string{"demo.tool: args/properties/n/minimum: must be an integer, not a fractional number"}},
		{"negative maxLength", toolFile("    args: {type: object, additionalProperties: false, properties: {s: {type: string, maxLength: -1}}}\n"),
			[]string{"demo.tool: args/properties/s/maxLength: must not be negative"}},
		{"min over max", toolFile("    args: {type: object, additionalProperties: false, properties: {s: {type: string, minLength: 5, maxLength: 2}}}\n"),
			[]string{"demo.tool: args/properties/s: minLength 5 is more than maxLength 2"}},
		{"required not declared", toolFile("    args: {type: object, additionalProperties: false, required: [city], properties: {town: {type: string}}}\n"),
			[]string{"demo.tool: args/required: city is required but not declared in properties"}},
		{"enum value of the wrong type", toolFile("    args: {type: object, additionalProperties: false, properties: {c: {type: string, enum: [USD, 1]}}}\n"),
			[]string{"demo.tool: args/properties/c: the value 1 is not a string"}},
		{"enum with a float", toolFile("    args: {type: object, additionalProperties: false, properties: {c: {type: integer, enum: [1, 2.5]}}}\n"),
			[]string{"demo.tool: args/properties/c/enum/1: fractional numbers are not allowed"}},
		{"example not accepted", toolFile("    args: {type: object, additionalProperties: false, properties: {c: {type: string, pattern: '^[A-Z]{3}$', examples: [usd]}}}\n"),
			[]string{"demo.tool: args/properties/c/examples/0: not accepted by its own schema: the example must match"}},
		{"schema pattern does not compile", toolFile("    args: {type: object, additionalProperties: false, properties: {v: {type: string, pattern: '^(v[0-9]+$'}}}\n"),
			[]string{"demo.tool: args/properties/v/pattern: pattern does not compile"}},
		{"args not an object schema", toolFile("    args: {type: string}\n"),
			[]string{"demo.tool: args: the args schema must have type: object"}},
		{"args missing", toolFile("    #no-args\n"),
			[]string{"demo.tool: args is required"}},
		{"unknown tool field", toolFile("    ttl: 60s\n    approver: alice\n"),
			[]string{"demo.tool: unknown field ttl", "demo.tool: unknown field approver"}},
		{"grant_ttl over 300s", toolFile("    grant_ttl: 301s\n"),
			[]string{"demo.tool: grant_ttl: 301s is over the 300s limit"}},
		{"grant_ttl in minutes over the limit", toolFile("    grant_ttl: 10m\n"),
			[]string{"demo.tool: grant_ttl: 10m is over the 300s limit"}},
		{"grant_ttl fraction of a second", toolFile("    grant_ttl: 1500ms\n"),
			[]string{"demo.tool: grant_ttl: must be a whole number of seconds"}},
		{"grant_ttl without unit", toolFile("    grant_ttl: 60\n"),
			[]string{"demo.tool: grant_ttl: must be a duration with a unit"}},
		{"decide_within too long", toolFile("    decide_within: 200h\n"),
			[]string{"demo.tool: decide_within: must be between 1s and 168h"}},
		{"outcome_within over a day", toolFile("    outcome_within: 25h\n"),
			[]string{"demo.tool: outcome_within: must be a whole number of seconds from 1s to 24h, not 25h"}},
		{"outcome_within zero", toolFile("    outcome_within: 0s\n"),
			[]string{"demo.tool: outcome_within: must be a whole number of seconds from 1s to 24h, not 0s"}},
		{"outcome_within fraction of a second", toolFile("    outcome_within: 1500ms\n"),
			[]string{"demo.tool: outcome_within: must be a whole number of seconds"}},
		{"outcome_within without unit", toolFile("    outcome_within: 300\n"),
			[]string{"demo.tool: outcome_within: must be a duration with a unit"}},
		{"approvals zero", toolFile("    approvals: 0\n"),
			[]string{"demo.tool: approvals: must be between 1 and 10, not 0"}},
		{"approvals eleven", toolFile("    approvals: 11\n"),
			[]string{"demo.tool: approvals: must be between 1 and 10, not 11"}},
		{"target pattern does not compile", toolFile("    target: '^invoice:[0-9+$'\n"),
			[]string{"demo.tool: target: pattern does not compile"}},
		{"target missing", toolFile("    #no-target\n"),
			[]string{"demo.tool: target is required"}},
		{"audience missing", toolFile("    #no-audience\n"),
			[]string{"demo.tool: audience is required"}},
		{"audience with a space", toolFile("    audience: 'payments host'\n"),
			[]string{"demo.tool: audience: must be a non-empty name without spaces"}},
		{"informational not declared", toolFile(`    informational: [/notes, /memo]
    args: {type: object, additionalProperties: false, properties: {notes: {type: string}}}
`), []string{"demo.tool: informational: /memo: memo is not a declared property of args"}},
		{"informational not a pointer", toolFile(`    informational: [notes]
    args: {type: object, additionalProperties: false, properties: {notes: {type: string}}}
`), []string{"demo.tool: informational: notes: canonical: JSON Pointer \"notes\" must start with '/'"}},
		{"informational into an array", toolFile(`    informational: [/tags/0]
    args: {type: object, additionalProperties: false, properties: {tags: {type: array, items: {type: string}}}}
`), []string{"demo.tool: informational: /tags/0: 0 is not a declared property of /tags"}},
		{"display pointers not declared", toolFile(`    display: {money: {amount: /amount, currency: /ccy}}
    args: {type: object, additionalProperties: false, properties: {amount_minor: {type: integer}, currency: {type: string}}}
`), []string{"demo.tool: display/money/amount: /amount: amount is not a declared property of args",
			"demo.tool: display/money/currency: /ccy: ccy is not a declared property of args"}},
		{"display amount not an integer", toolFile(`    display: {money: {amount: /amount, currency: /currency}}
    args: {type: object, additionalProperties: false, properties: {amount: {type: string}, currency: {type: string}}}
`), []string{"demo.tool: display/money/amount: /amount must be declared as an integer only, not a string"}},
		{"display amount informational", toolFile(`    informational: [/amount]
    display: {money: {amount: /amount, currency: /currency}}
    args: {type: object, additionalProperties: false, properties: {amount: {type: integer}, currency: {type: string}}}
`), []string{"demo.tool: display/money/amount: /amount is informational"}},
		{"display missing currency", toolFile(`    display: {money: {amount: /amount}}
    args: {type: object, additionalProperties: false, properties: {amount: {type: integer}}}
`), []string{"demo.tool: display/money: currency is required"}},
		{"unknown display", toolFile("    display: {chart: {x: /a}}\n"),
			[]string{"demo.tool: display: unknown display chart"}},
		{"tool name with capitals", strings.Replace(toolFile(""), "demo.tool", "Payments.Refund", 1),
			[]string{"Payments.Refund: tool names are dotted lower-case words"}},
		{"tool name with empty segment", strings.Replace(toolFile(""), "demo.tool", "payments..refund", 1),
			[]string{"payments..refund: tool names are dotted lower-case words"}},
		{"tool name starting with a digit", strings.Replace(toolFile(""), "demo.tool", "'1payments'", 1),
			[]string{"1payments: tool names are dotted lower-case words"}},
		{"duplicate tool", "tools:\n  a.b: {audience: h, target: x, args: {type: object, additionalProperties: false}}\n  a.b: {audience: h, target: x, args: {type: object, additionalProperties: false}}\n",
			[]string{"tools: a.b appears twice (first at line 2)"}},
		{"duplicate keyword", toolFile("    args: {type: object, additionalProperties: false, type: object}\n"),
			[]string{"demo.tool: args: type appears twice"}},
		{"unknown top-level field", "tools: {}\nversion: 2\n",
			[]string{"no tools are declared", "unknown top-level field version"}},
		{"no tools", "tools: {}\n", []string{"tools: no tools are declared"}},
		{"tools missing", "tool:\n  a.b: {}\n", []string{"unknown top-level field tool", "tools is required"}},
		{"empty file", "", []string{"the file is empty"}},
		{"not YAML", "tools: [\n", []string{"not valid YAML"}},
		{"two documents", toolFile("") + "---\ntools: {}\n", []string{"more than one YAML document"}},
		{"anchors and aliases", "tools:\n  a.b: &t {audience: h, target: x, args: {type: object, additionalProperties: false}}\n  a.c: *t\n",
			[]string{"YAML anchors (&t) are not supported", "YAML aliases (*t) are not supported"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ps := lintProblems(t, tt.yaml)
			if len(ps) != len(tt.want) {
				t.Errorf("%d problems, want %d:\n%s", len(ps), len(tt.want), joinProblems(ps))
			}
			for i, w := range tt.want {
				if i < len(ps) && !strings.Contains(ps[i].String(), w) {
					t.Errorf("problem %d = %q, want it to contain %q", i, ps[i].String(), w)
				}
			}
		})
	}
}

func joinProblems(ps []LintProblem) string {
	var b strings.Builder
	for _, p := range ps {
		b.WriteString("  ")
		b.WriteString(p.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// TestLintCollectsEverything puts one problem of each kind in one file and
// expects all of them, across tools, with their lines.
func TestLintCollectsEverything(t *testing.T) {
	yaml := `tools:
  payments.refund:
    audience: payments-host
    target: '^invoice:INV-[0-9]+$'
    grant_ttl: 600s
    informational: [/memo]
    args:
      type: object
      additionalProperties: false
      properties:
        amount: {type: number}
        filter: {type: object, properties: {q: {type: string}}}
        tags: {type: array}
  Bad.Name:
    audience: h
    target: x
    args: {type: object, additionalProperties: false}
  reports.read:
    target: '(['
    colour: blue
    args: {type: object, additionalProperties: false}
`
	r, err := Parse([]byte(yaml))
	if r != nil || err == nil {
		t.Fatal("Parse accepted a file with problems")
	}
	want := []string{
		"line 5: payments.refund: grant_ttl: 600s is over the 300s limit",
		"line 6: payments.refund: informational: /memo: memo is not a declared property of args",
		"line 11: payments.refund: args/properties/amount/type: number allows fractions",
		"line 12: payments.refund: args/properties/filter: object schema without additionalProperties: false",
		"line 13: payments.refund: args/properties/tags: array schema without items",
		"line 14: Bad.Name: tool names are dotted lower-case words",
		"line 18: reports.read: audience is required",
		"line 19: reports.read: target: pattern does not compile",
		"line 20: reports.read: unknown field colour",
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d problems, want %d:\n%s", len(lines), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("problem %d = %q, want prefix %q", i, lines[i], w)
		}
	}
}

func TestLoadNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tools.yaml")
	if err := os.WriteFile(path, []byte(toolFile("    grant_ttl: 301s\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	if err == nil {
		t.Fatal("Load accepted grant_ttl 301s")
	}
	if want := path + ":6: demo.tool: grant_ttl: 301s is over the 300s limit"; err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil || errors.As(err, new(*LintError)) {
		t.Errorf("Load of a missing file: %v, want a plain I/O error", err)
	}
}

// kitchenSink uses every keyword and field the linter admits.
var kitchenSink = toolFile(`    description: Everything the linter admits
    approvals: 10
    grant_ttl: 300s
    decide_within: 168h
    outcome_within: 24h
    informational: [/meta/comment]
    display: {money: {amount: /price/amount, currency: /price/currency}}
    args:
      $schema: https://json-schema.org/draft/2020-12/schema
      title: Kitchen sink
      type: object
      additionalProperties: false
      required: [price]
      properties:
        price:
          type: object
          additionalProperties: false
          required: [amount, currency]
          properties:
            amount: {type: integer, exclusiveMinimum: 0, exclusiveMaximum: 100000}
            currency: {enum: [USD, EUR]}
        meta:
          type: object
          additionalProperties: false
          properties:
            comment: {type: [string, "null"], maxLength: 10, x-allow-empty: true}
        mode: {const: fast}
        flags: {type: array, items: {type: boolean}, minItems: 0, maxItems: 2, uniqueItems: true}
        code: {type: string, minLength: 2, pattern: '^[A-Z]+$', examples: [AB], $comment: upper case}
`)

func TestLintAccepts(t *testing.T) {
	yaml := kitchenSink
	r, err := Parse([]byte(yaml))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	tl, _ := r.Tool("demo.tool")
	if tl.Approvals != 10 || tl.GrantTTL != 300*time.Second || tl.DecideWithin != 168*time.Hour || tl.OutcomeWithin != 24*time.Hour {
		t.Errorf("policy = %d %s %s %s", tl.Approvals, tl.GrantTTL, tl.DecideWithin, tl.OutcomeWithin)
	}
	def, err := Parse([]byte(toolFile("")))
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := def.Tool("demo.tool"); d.OutcomeWithin != DefaultOutcomeWithin || DefaultOutcomeWithin != 5*time.Minute {
		t.Errorf("default outcome_within = %s, want 5m", d.OutcomeWithin)
	}
	if tl.Description != "Everything the linter admits" {
		t.Errorf("Description = %q", tl.Description)
	}
	if tl.Money == nil || tl.Money.Amount != "/price/amount" {
		t.Errorf("Money = %v", tl.Money)
	}
	if !tl.IsInformational("/meta/comment") {
		t.Error("/meta/comment should be informational")
	}
}

func TestDefaults(t *testing.T) {
	r, err := Parse([]byte(toolFile("")))
	if err != nil {
		t.Fatal(err)
	}
	tl, _ := r.Tool("demo.tool")
	if tl.Approvals != DefaultApprovals || tl.GrantTTL != DefaultGrantTTL || tl.DecideWithin != DefaultDecideWithin ||
		tl.Money != nil || tl.Informational != nil || tl.Description != "" {
		t.Errorf("defaults = %+v", tl)
	}
	if tl.GrantTTL != 60*time.Second || tl.DecideWithin != 15*time.Minute || tl.Approvals != 1 {
		t.Errorf("defaults %s %s %d, want 60s 15m 1", tl.GrantTTL, tl.DecideWithin, tl.Approvals)
	}
}

func TestExamplesFileLoads(t *testing.T) {
	r := MustLoad(t, examplesFile)
	if got := len(r.Tools()); got != 7 {
		t.Errorf("%d tools in %s, want 7", got, examplesFile)
	}
}

// TestLintRefusesFoldingCollisions: property names that differ only in case
// or under Unicode folding (NFKC and case folding) are refused, at any
// depth; names that merely look different are not.
func TestLintRefusesFoldingCollisions(t *testing.T) {
	for name, props := range map[string]string{
		"case":                "{amount: {type: integer}, Amount: {type: integer}}",
		"long s":              "{limist: {type: integer}, \"limi\u017ft\": {type: integer}}",
		"ligature":            "{file: {type: string}, \"\ufb01le\": {type: string}}",
		"full width":          "{id: {type: string}, \"\uff49\uff44\": {type: string}}",
		"sharp s and ss":      "{strasse: {type: string}, \"stra\u00dfe\": {type: string}}",
		"nested, Kelvin sign": "{outer: {type: object, additionalProperties: false, properties: {k: {type: string}, \"\u212a\": {type: string}}}}",
	} {
		t.Run(name, func(t *testing.T) {
			ps := lintProblems(t, toolFile("    args: {type: object, additionalProperties: false, properties: "+props+"}\n"))
			if len(ps) != 1 || !strings.Contains(ps[0].String(), "differ only in case or Unicode folding") {
				t.Errorf("problems = %v, want one folding collision", ps)
			}
		})
	}
	if _, err := Parse([]byte(toolFile("    args: {type: object, additionalProperties: false, properties: {amount: {type: integer}, amount_minor: {type: integer}, \"caf\u00e9\": {type: string}, cafe: {type: string}}}\n"))); err != nil {
		t.Errorf("distinct names refused: %v", err)
	}
}

// TestMirrorQuarantinesFoldingCollisions: an upstream schema whose property
// names collide under folding is quarantined, not mirrored.
func TestMirrorQuarantinesFoldingCollisions(t *testing.T) {
	for _, props := range []string{`"amount":{"type":"integer"},"Amount":{"type":"integer"}`, `"limist":{"type":"string"},"limi\u017ft":{"type":"string"}`} {
		_, err := Mirror(MirrorSpec{Server: "demo", Name: "t", InputSchema: []byte(`{"type":"object","additionalProperties":false,"properties":{` + props + `}}`)})
		var q *QuarantineError
		if !errors.As(err, &q) || !strings.Contains(strings.Join(q.Reasons, "\n"), "differ only in case or Unicode folding") {
			t.Errorf("%s: %v, want a quarantine for the folding collision", props, err)
		}
	}
}
