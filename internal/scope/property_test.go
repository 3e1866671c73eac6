package scope

import (
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/tools"
)

var reasons = []string{"duplicate", "fraud", "other"}

// drawArgs draws args for payments.refund, each optional member present or
// not.
func drawArgs(t *rapid.T, label string) canonical.Object {
	ms := []canonical.Member{
		{Name: "amount_minor", Value: rapid.Int64Range(1, 500000).Draw(t, label+"amount")},
		{Name: "currency", Value: rapid.SampledFrom([]string{"USD", "EUR"}).Draw(t, label+"currency")},
		{Name: "reason", Value: rapid.SampledFrom(reasons).Draw(t, label+"reason")},
	}
	if rapid.Bool().Draw(t, label+"has lines") {
		ms = append(ms, canonical.Member{Name: "lines", Value: []any{rapid.Int64Range(0, 3).Draw(t, label+"line")}})
	}
	if rapid.Bool().Draw(t, label+"has note") {
		ms = append(ms, canonical.Member{Name: "note", Value: rapid.SampledFrom([]string{"a", "b"}).Draw(t, label+"note")})
	}
	if rapid.Bool().Draw(t, label+"has memo") {
		ms = append(ms, canonical.Member{Name: "memo", Value: rapid.String().Draw(t, label+"memo")})
	}
	if rapid.Bool().Draw(t, label+"has meta") {
		meta := []canonical.Member{}
		if rapid.Bool().Draw(t, label+"has n") {
			meta = append(meta, canonical.Member{Name: "n", Value: rapid.Int64Range(0, 100).Draw(t, label+"n")})
		}
		if rapid.Bool().Draw(t, label+"has tag") {
			meta = append(meta, canonical.Member{Name: "tag", Value: rapid.SampledFrom([]string{"x", "y"}).Draw(t, label+"tag")})
		}
		ms = append(ms, canonical.Member{Name: "meta", Value: mustObject(meta...)})
	}
	return mustObject(ms...)
}

func drawTarget(t *rapid.T, label string) string {
	return rapid.SampledFrom([]string{"invoice:INV-1", "invoice:INV-12", "invoice:INV-2", "invoice:AB-1", "invoice:INV-x", "order:INV-1"}).Draw(t, label)
}

// drawChoices draws an operator's choices, many of them outside the
// ceilings.
func drawChoices(t *rapid.T) Choices {
	c := Choices{
		Uses:        rapid.IntRange(-1, 25).Draw(t, "uses"),
		Until:       now.Add(time.Duration(rapid.Int64Range(-60, 3700).Draw(t, "until s")) * time.Second),
		RepeatCalls: rapid.Bool().Draw(t, "repeat"),
		Members:     map[string]Member{},
	}
	if rapid.Bool().Draw(t, "prefix") {
		c.TargetPrefix = rapid.SampledFrom([]string{"invoice:", "invoice:INV-", "invoice:INV-1", "inv", "order:"}).Draw(t, "prefix value")
	}
	for _, ptr := range []string{"/amount_minor", "/meta/n", "/currency", "/lines"} {
		if rapid.Bool().Draw(t, "vary "+ptr) {
			m := rapid.Int64Range(-5, 600000).Draw(t, "max "+ptr)
			c.Members[ptr] = Member{Max: &m}
		}
	}
	if rapid.Bool().Draw(t, "vary reason") {
		c.Members["/reason"] = Member{In: rapid.SliceOfN(rapid.SampledFrom(append(reasons, "gift")), 1, 4).Draw(t, "in")}
	}
	return c
}

func drawBase(t *rapid.T, tool *tools.Tool) Call {
	return Call{Actor: "agent:billing-bot", Audience: "payments-host", Tool: tool.Name, ToolDigest: tool.DefinitionDigest,
		Target: rapid.SampledFrom([]string{"invoice:INV-1", "invoice:INV-12", "invoice:AB-7"}).Draw(t, "base target"), Args: drawArgs(t, "base ")}
}

// A materialised scope never exceeds the tool's ceilings or the schema's
// bounds, varies only what the tool lists, and covers its base call.
func TestPropertyMaterialisedWithinCeilings(t *testing.T) {
	tool := mustTool(t, "payments.refund")
	rapid.Check(t, func(t *rapid.T) {
		base := drawBase(t, tool)
		c := drawChoices(t)
		if rapid.Bool().Draw(t, "good") {
			c = drawGoodChoices(t, base, true)
		}
		s, err := Materialise(base, tool, c, now)
		if err != nil {
			return
		}
		a := tool.Allowance
		if s.Uses < 1 || s.Uses > a.MaxUses {
			t.Fatalf("uses %d outside 1..%d", s.Uses, a.MaxUses)
		}
		if !s.Until.After(now) || s.Until.After(now.Add(a.MaxFor)) {
			t.Fatalf("until %s outside (now, now+%s]", s.Until, a.MaxFor)
		}
		if s.Target.Prefix && (!a.Varies("target") || !strings.HasPrefix(base.Target, s.Target.Value)) {
			t.Fatalf("prefix %q for base target %q", s.Target.Value, base.Target)
		}
		for ptr, b := range s.Args {
			if b.Kind == Equals || b.Kind == Absent {
				continue
			}
			if !a.Varies(ptr) {
				t.Fatalf("%s varies but the tool does not list it", ptr)
			}
			kind, schemaMax, hasMax, enum := tool.VaryOf(ptr)
			switch b.Kind {
			case Max:
				if kind != tools.VaryInteger || (hasMax && b.Max > schemaMax) {
					t.Fatalf("%s max %d beyond the schema (%d)", ptr, b.Max, schemaMax)
				}
			case In:
				for _, x := range b.In {
					if kind != tools.VaryEnum || !slices.Contains(enum, x) {
						t.Fatalf("%s in %v beyond the enum %v", ptr, b.In, enum)
					}
				}
			}
		}
		if _, named := s.Args["/memo"]; named {
			t.Fatal("an informational member is named")
		}
		if ok, reason := Covers(s, tool, base); !ok {
			t.Fatalf("the base call is not covered: %s\n%s", reason, s.JSON())
		}
		p, err := Parse(s.JSON())
		if err != nil || p.Digest() != s.Digest() {
			t.Fatalf("round trip: %v, %v", p, err)
		}
	})
}

// Covers agrees with a plain reading of the scope for every drawn call:
// a call outside the scope (an added optional member included) is never
// covered, and one inside always is.
func TestPropertyCoversExactly(t *testing.T) {
	tool := mustTool(t, "payments.refund")
	rapid.Check(t, func(t *rapid.T) {
		base := drawBase(t, tool)
		s, err := Materialise(base, tool, drawGoodChoices(t, base, false), now)
		if err != nil {
			t.Fatal(err)
		}
		c := Call{Actor: "agent:billing-bot", Audience: "payments-host", Tool: tool.Name, ToolDigest: tool.DefinitionDigest,
			Target: drawTarget(t, "call target"), Args: drawArgs(t, "call ")}
		if rapid.IntRange(0, 3).Draw(t, "near the base") > 0 {
			c.Target, c.Args = base.Target, base.Args
		}
		// Values at the edges of the bounds, and a member no schema declares.
		if b, ok := s.Args["/amount_minor"]; ok && b.Kind == Max && rapid.IntRange(0, 3).Draw(t, "edge amount") > 0 {
			c.Args = setMember(c.Args, "amount_minor", b.Max+rapid.Int64Range(-1, 1).Draw(t, "amount edge"))
		}
		if b, ok := s.Args["/meta/n"]; ok && b.Kind == Max && rapid.Bool().Draw(t, "edge n") {
			c.Args = setMember(c.Args, "meta", mustObject(canonical.Member{Name: "n", Value: b.Max + rapid.Int64Range(-1, 1).Draw(t, "n edge")}))
		}
		if b, ok := s.Args["/reason"]; ok && b.Kind == In && rapid.Bool().Draw(t, "edge reason") {
			c.Args = setMember(c.Args, "reason", rapid.SampledFrom(reasons).Draw(t, "reason edge"))
		}
		if rapid.IntRange(0, 9).Draw(t, "unknown member") == 0 {
			c.Args = setMember(c.Args, "zzz", int64(1))
		}
		switch rapid.IntRange(0, 19).Draw(t, "who") {
		case 0:
			c.Actor = "agent:other"
		case 1:
			c.Audience = "other-host"
		case 2:
			c.ToolDigest = strings.Repeat("a", 64)
		case 3:
			c.Args = base.Args // the base args, another target perhaps
		}
		got, reason := Covers(s, tool, c)
		if want := inside(s, base, c); got != want {
			t.Fatalf("Covers = %v (%s), want %v\nscope %s\ncall %s %s", got, reason, want, s.JSON(), c.Target, mustJSON(c.Args))
		}
	})
}

// inside is the oracle: the scope read member by member, written
// independently of Covers for payments.refund.
func inside(s *Scope, base, c Call) bool {
	if c.Actor != base.Actor || c.Audience != base.Audience || c.ToolDigest != base.ToolDigest {
		return false
	}
	if s.Target.Prefix {
		if !strings.HasPrefix(c.Target, s.Target.Value) || !strings.HasPrefix(c.Target, "invoice:") {
			return false
		}
		rest := strings.TrimPrefix(c.Target, "invoice:")
		dash := strings.IndexByte(rest, '-')
		if dash < 1 || strings.Trim(rest[:dash], "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != "" ||
			dash == len(rest)-1 || strings.Trim(rest[dash+1:], "0123456789") != "" {
			return false
		}
	} else if c.Target != base.Target {
		return false
	}
	strip := func(o canonical.Object) canonical.Object { return canonical.Without(o, "/memo") }
	bArgs, cArgs := strip(base.Args), strip(c.Args)
	if _, unknown := cArgs.Get("zzz"); unknown {
		return false
	}
	for _, name := range []string{"amount_minor", "currency", "reason", "lines", "note", "meta"} {
		bv, bok := bArgs.Get(name)
		cv, cok := cArgs.Get(name)
		ptr := "/" + name
		switch b, named := s.Args[ptr]; {
		case named && b.Kind == Max:
			if !cok || cv.(int64) > b.Max {
				return false
			}
		case named && b.Kind == In:
			if !cok || !slices.Contains(b.In, cv.(string)) {
				return false
			}
		case name == "meta" && bok && (s.Args["/meta/n"].Kind == Max):
			if !cok {
				return false
			}
			bm, cm := bv.(canonical.Object), cv.(canonical.Object)
			n, hasN := cm.Get("n")
			if !hasN || n.(int64) > s.Args["/meta/n"].Max {
				return false
			}
			_, bTag := bm.Get("tag")
			ct, cTag := cm.Get("tag")
			bt, _ := bm.Get("tag")
			if bTag != cTag || (bTag && bt != ct) {
				return false
			}
		default:
			if bok != cok || (bok && mustJSON(bv) != mustJSON(cv)) {
				return false
			}
		}
	}
	return true
}

func mustJSON(v any) string {
	b, err := canonical.Encode(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// An optional member the base call lacks, added to a call that is
// otherwise the base call, is never covered.
func TestPropertyAddedMemberNeverCovered(t *testing.T) {
	tool := mustTool(t, "payments.refund")
	rapid.Check(t, func(t *rapid.T) {
		base := drawBase(t, tool)
		s, err := Materialise(base, tool, drawGoodChoices(t, base, false), now)
		if err != nil {
			t.Fatal(err)
		}
		var missing []string
		for _, name := range []string{"lines", "note", "meta"} {
			if _, ok := base.Args.Get(name); !ok {
				missing = append(missing, name)
			}
		}
		if len(missing) == 0 {
			t.Skip()
		}
		name := rapid.SampledFrom(missing).Draw(t, "added")
		var v any = "a"
		switch name {
		case "lines":
			v = []any{int64(1)}
		case "meta":
			v = mustObject()
		}
		c := base
		c.Args = mustObject(append(slices.Clone(base.Args), canonical.Member{Name: name, Value: v})...)
		if ok, _ := Covers(s, tool, c); ok {
			t.Fatalf("added /%s covered by %s", name, s.JSON())
		}
	})
}

// drawGoodChoices draws choices Materialise accepts for base.
//
// With overshoot, the maximums may pass the schema's by a little, which
// Materialise must refuse.
func drawGoodChoices(t *rapid.T, base Call, overshoot bool) Choices {
	over := int64(0)
	if overshoot {
		over = 3
	}
	c := Choices{
		Uses:        rapid.IntRange(1, 20).Draw(t, "uses"),
		Until:       now.Add(time.Duration(rapid.Int64Range(1, 3600).Draw(t, "until s")) * time.Second),
		RepeatCalls: rapid.Bool().Draw(t, "repeat"),
		Members:     map[string]Member{},
	}
	if rapid.Bool().Draw(t, "prefix") {
		c.TargetPrefix = base.Target[:rapid.IntRange(1, len(base.Target)).Draw(t, "prefix length")]
	}
	if rapid.Bool().Draw(t, "vary amount") {
		n, _ := base.Args.Get("amount_minor")
		m := rapid.Int64Range(n.(int64), 500000+over).Draw(t, "max amount")
		c.Members["/amount_minor"] = Member{Max: &m}
	}
	if v, ok := canonical.Lookup(base.Args, "/meta/n"); ok && rapid.Bool().Draw(t, "vary n") {
		m := rapid.Int64Range(v.(int64), 100+over).Draw(t, "max n")
		c.Members["/meta/n"] = Member{Max: &m}
	}
	if rapid.Bool().Draw(t, "vary reason") {
		r, _ := base.Args.Get("reason")
		in := append(rapid.SliceOfN(rapid.SampledFrom(reasons), 0, 3).Draw(t, "in"), r.(string))
		c.Members["/reason"] = Member{In: in}
	}
	return c
}

// setMember returns o with the member name set to v, added when absent.
func setMember(o canonical.Object, name string, v any) canonical.Object {
	out := canonical.Without(o, "/"+name)
	return mustObject(append(slices.Clone(out), canonical.Member{Name: name, Value: v})...)
}
