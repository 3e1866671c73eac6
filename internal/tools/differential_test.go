package tools

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"pgregory.net/rapid"

	"github.com/countersign/countersign/internal/canonical"
)

// compileV6 compiles a tool's args schema with the reference implementation.
func compileV6(tb testing.TB, tl *Tool) *jsonschema.Schema {
	tb.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(tl.SchemaJSON()))
	if err != nil {
		tb.Fatalf("%s: schema JSON: %v", tl.Name, err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	url := "urn:countersign:" + tl.Name
	if err := c.AddResource(url, doc); err != nil {
		tb.Fatalf("%s: AddResource: %v", tl.Name, err)
	}
	sch, err := c.Compile(url)
	if err != nil {
		tb.Fatalf("%s: v6 does not compile the schema the linter accepted: %v", tl.Name, err)
	}
	return sch
}

// toV6 converts a canonical value to the map[string]any form v6 expects.
func toV6(v any) any {
	switch v := v.(type) {
	case canonical.Object:
		m := make(map[string]any, len(v))
		for _, mem := range v {
			m[mem.Name] = toV6(mem.Value)
		}
		return m
	case []any:
		out := make([]any, len(v))
		for i := range v {
			out[i] = toV6(v[i])
		}
		return out
	}
	return v
}

var strayNames = []string{"sql", "__proto__", "x", "constructor", "a/b"}

// gen draws values near a schema: valid ones, with a deviation (a wrong
// type, a stray or missing member, a value just past a bound) at a rate
// chosen per test case, so that single violations are common.
type gen struct {
	t *rapid.T
	// step counts the decisions taken; those numbered in deviations
	// deviate.
	step       *int
	deviations []int
}

func newGen(t *rapid.T) gen {
	n := rapid.IntRange(0, 3).Draw(t, "deviations")
	return gen{t: t, step: new(int), deviations: rapid.SliceOfN(rapid.IntRange(0, 80), n, n).Draw(t, "at")}
}

func (g gen) deviate(string) bool {
	n := *g.step
	*g.step++
	return slices.Contains(g.deviations, n)
}

// any draws a small value of any type.
func (g gen) any(label string) any {
	t := g.t
	switch rapid.IntRange(0, 6).Draw(t, label+".kind") {
	case 0:
		return nil
	case 1:
		return rapid.Bool().Draw(t, label+".bool")
	case 2:
		return rapid.Int64Range(-3, 3).Draw(t, label+".int")
	case 3:
		return rapid.SampledFrom([]string{"", " ", "x", "USD", "2024-05"}).Draw(t, label+".str")
	case 4:
		return []any{}
	case 5:
		return canonical.Object{}
	}
	o, _ := canonical.NewObject(canonical.Member{Name: rapid.SampledFrom(strayNames).Draw(t, label+".name"), Value: int64(1)})
	return o
}

func (g gen) value(s *schema, label string) any {
	t := g.t
	if g.deviate(label + ".type") {
		return g.any(label)
	}
	if s.enum != nil && (s.types == 0 || rapid.IntRange(0, 3).Draw(t, label+".useEnum") > 0) {
		return s.enum[rapid.IntRange(0, len(s.enum)-1).Draw(t, label+".enum")]
	}
	var types []jsonType
	for _, tn := range typeNames {
		if s.types&tn.t != 0 {
			types = append(types, tn.t)
		}
	}
	switch rapid.SampledFrom(types).Draw(t, label+".type") {
	case typeNull:
		return nil
	case typeBoolean:
		return rapid.Bool().Draw(t, label+".bool")
	case typeInteger:
		return g.integer(s, label)
	case typeString:
		return g.string(s, label)
	case typeArray:
		return g.array(s, label)
	case typeObject:
		return g.object(s, label)
	}
	return nil
}

func (g gen) integer(s *schema, label string) int64 {
	lo, hi := int64(-1000), int64(1000000)
	if s.minimum != nil {
		lo = int64(*s.minimum)
	}
	if s.exclusiveMinimum != nil {
		lo = max(lo, int64(*s.exclusiveMinimum)+1)
	}
	if s.maximum != nil {
		hi = int64(*s.maximum)
	}
	if s.exclusiveMaximum != nil {
		hi = min(hi, int64(*s.exclusiveMaximum)-1)
	}
	if g.deviate(label + ".range") {
		return rapid.SampledFrom([]int64{lo - 1, hi + 1}).Draw(g.t, label+".out")
	}
	return rapid.OneOf(rapid.SampledFrom([]int64{lo, hi}), rapid.Int64Range(lo, hi)).Draw(g.t, label+".in")
}

// length draws a length within [lo, hi], often a bound, or just outside
// when deviating.
func (g gen) length(lo, hi int, label string) int {
	if g.deviate(label) {
		out := []int{hi + 1}
		if lo > 0 {
			out = append(out, lo-1)
		}
		return rapid.SampledFrom(out).Draw(g.t, label+".out")
	}
	return rapid.OneOf(rapid.SampledFrom([]int{lo, hi}), rapid.IntRange(lo, hi)).Draw(g.t, label+".in")
}

func (g gen) string(s *schema, label string) string {
	t := g.t
	if g.deviate(label + ".blank") {
		return rapid.SampledFrom([]string{"", " ", "\t\n"}).Draw(t, label+".blank")
	}
	if s.pattern != nil && !g.deviate(label+".pattern") {
		return rapid.StringMatching(s.patternSrc).Draw(t, label+".matching")
	}
	lo, hi := max(s.minLength, 1), 12
	if s.maxLength >= 0 {
		hi = s.maxLength
	}
	n := g.length(lo, min(hi, 64), label+".len")
	if hi > 64 && n == 65 {
		n = hi + 1 // just past a long limit
	}
	return rapid.StringOfN(rapid.RuneFrom([]rune("abcXYZ019@.-_é")), n, n, -1).Draw(t, label+".str")
}

func (g gen) array(s *schema, label string) []any {
	lo, hi := max(s.minItems, 0), 4
	if s.maxItems >= 0 {
		hi = s.maxItems
	}
	n := g.length(lo, hi, label+".len")
	out := make([]any, 0, n)
	seen := map[string]bool{}
	for i := range n {
		item := fmt.Sprintf("%s.%d", label, i)
		if i > 0 && s.uniqueItems && g.deviate(item+".dup") {
			out = append(out, out[0])
			continue
		}
		var v any
		for try := 0; try < 5; try++ {
			v = g.value(s.items, fmt.Sprintf("%s.try%d", item, try))
			b, _ := canonical.Encode(v)
			if !s.uniqueItems || !seen[string(b)] {
				seen[string(b)] = true
				break
			}
		}
		out = append(out, v)
	}
	return out
}

func (g gen) object(s *schema, label string) canonical.Object {
	var members []canonical.Member
	for _, name := range s.names {
		present := rapid.Bool().Draw(g.t, label+"."+name+".present")
		if contains(s.required, name) {
			present = !g.deviate(label + "." + name + ".missing")
		}
		if present {
			members = append(members, canonical.Member{Name: name, Value: g.value(s.properties[name], label+"."+name)})
		}
	}
	if g.deviate(label + ".stray") {
		name := rapid.SampledFrom(strayNames).Draw(g.t, label+".strayName")
		members = append(members, canonical.Member{Name: name, Value: g.any(label + ".strayValue")})
	}
	o, err := canonical.NewObject(members...)
	if err != nil {
		g.t.Fatalf("NewObject: %v", err)
	}
	return o
}

// TestAgreesWithJSONSchemaV6 checks the validator against the reference
// implementation: for generated args, it finds no problem exactly when v6
// finds the value valid. Blank strings are left out of the comparison
// because empty_string is Countersign's rule, not JSON Schema's.
func TestAgreesWithJSONSchemaV6(t *testing.T) {
	examples := MustLoad(t, examplesFile)
	sink, err := Parse([]byte(kitchenSink))
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range append(examples.Tools(), sink.Tools()...) {
		t.Run(tl.Name, func(t *testing.T) {
			ref := compileV6(t, tl)
			var valid, invalid int
			for range 5 {
				rapid.Check(t, func(rt *rapid.T) {
					g := newGen(rt)
					args := g.value(tl.args, "args")
					v := validation{tool: tl}
					v.value(tl.args, args)
					for _, p := range v.problems {
						if p.Code == canonical.CodeEmptyString {
							return
						}
					}
					refErr := ref.Validate(toV6(args))
					if (len(v.problems) == 0) != (refErr == nil) {
						b, _ := canonical.Encode(args)
						rt.Fatalf("args %s\nproblems: %v\nv6: %v", b, v.problems, refErr)
					}
					if refErr == nil {
						valid++
					} else {
						invalid++
					}
				})
			}
			if valid == 0 || invalid == 0 {
				t.Errorf("the generator produced %d valid and %d invalid args; both must occur", valid, invalid)
			}
		})
	}
}
