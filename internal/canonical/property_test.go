package canonical

import (
	"bytes"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"pgregory.net/rapid"
)

// Generators for parsed values: the types the parser produces, with strings
// that need escaping, sort differently in UTF-16 and UTF-8, or leave the
// Basic Multilingual Plane.

var (
	valueRune = rapid.OneOf(
		interestingRune,
		rapid.RuneFrom([]rune{'\b', '\f', '\n', '\r', '\t', 0x01, 0x7f, 0x85, 0x200b, 0x202e, 0xfffd, 0x1d11e, 0xe0041}),
	)
	valueString = rapid.StringOfN(valueRune, 0, 20, -1)
	memberName  = rapid.StringOfN(rapid.RuneFrom([]rune{'a', 'b', 'A', '_', '/', '~', 'é', 0xff61, 0xffff, 0x10000, 0x1f600}), 0, 3, -1)
	integer     = rapid.OneOf(
		rapid.Int64Range(-MaxInt, MaxInt),
		rapid.SampledFrom([]int64{0, 1, -1, MaxInt, -MaxInt, MaxInt - 1, 255, 256}),
	)
)

// drawValue draws a value nesting at most depth containers.
func drawValue(t *rapid.T, label string, depth int) any {
	kinds := 4
	if depth > 0 {
		kinds = 6
	}
	switch rapid.IntRange(0, kinds-1).Draw(t, label+" kind") {
	case 0:
		return nil
	case 1:
		return rapid.Bool().Draw(t, label+" bool")
	case 2:
		return integer.Draw(t, label+" int")
	case 3:
		return valueString.Draw(t, label+" string")
	case 4:
		n := rapid.IntRange(0, 4).Draw(t, label+" len")
		items := make([]any, n)
		for i := range items {
			items[i] = drawValue(t, label+"/"+strconv.Itoa(i), depth-1)
		}
		return items
	default:
		return drawObject(t, label, depth)
	}
}

// drawObject draws an Object whose members nest at most depth-1 further.
func drawObject(t *rapid.T, label string, depth int) Object {
	names := rapid.SliceOfNDistinct(memberName, 0, 5, rapid.ID[string]).Draw(t, label+" names")
	members := make([]Member, len(names))
	for i, name := range names {
		members[i] = Member{Name: name, Value: drawValue(t, label+"/"+name, depth-1)}
	}
	o, err := NewObject(members...)
	if err != nil {
		t.Fatal(err)
	}
	if o == nil {
		o = Object{} // the parser's empty object
	}
	return o
}

// spell writes v as JSON text the way some client might: members in any
// order, any white space, any legal escape for any character.
func spell(t *rapid.T, b *strings.Builder, v any) {
	space := func() {
		b.WriteString(rapid.SampledFrom([]string{"", "", " ", "\n", "\t", "\r\n  "}).Draw(t, "space"))
	}
	switch v := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(v))
	case int64:
		if v == 0 && rapid.Bool().Draw(t, "minus zero") {
			b.WriteString("-0")
		} else {
			b.WriteString(strconv.FormatInt(v, 10))
		}
	case string:
		spellString(t, b, v)
	case []any:
		b.WriteByte('[')
		space()
		for i, item := range v {
			if i > 0 {
				b.WriteByte(',')
				space()
			}
			spell(t, b, item)
			space()
		}
		b.WriteByte(']')
	case Object:
		order := make([]int, len(v))
		for i := range order {
			order[i] = i
		}
		order = rapid.Permutation(order).Draw(t, "member order")
		b.WriteByte('{')
		space()
		for i, j := range order {
			if i > 0 {
				b.WriteByte(',')
				space()
			}
			spellString(t, b, v[j].Name)
			space()
			b.WriteByte(':')
			space()
			spell(t, b, v[j].Value)
			space()
		}
		b.WriteByte('}')
	default:
		t.Fatalf("spell: unexpected %T", v)
	}
}

var shortEscapes = map[rune]string{'"': `\"`, '\\': `\\`, '/': `\/`, '\b': `\b`, '\f': `\f`, '\n': `\n`, '\r': `\r`, '\t': `\t`}

func spellString(t *rapid.T, b *strings.Builder, s string) {
	hex := func(u uint16) string {
		if rapid.Bool().Draw(t, "upper hex") {
			return fmt.Sprintf(`\u%04X`, u)
		}
		return fmt.Sprintf(`\u%04x`, u)
	}
	b.WriteByte('"')
	for _, r := range s {
		mustEscape := r < 0x20 || r == '"' || r == '\\'
		choice := rapid.IntRange(0, 2).Draw(t, "spelling")
		short, hasShort := shortEscapes[r]
		switch {
		case choice == 0 && !mustEscape:
			b.WriteRune(r)
		case choice == 1 && hasShort:
			b.WriteString(short)
		case r >= 0x10000:
			hi, lo := utf16.EncodeRune(r)
			b.WriteString(hex(uint16(hi)) + hex(uint16(lo)))
		default:
			b.WriteString(hex(uint16(r)))
		}
	}
	b.WriteByte('"')
}

// drawEnvelopeStrings draws a valid tool and target.
func drawTool(t *rapid.T) string {
	return rapid.StringMatching(`[a-z][a-z0-9_]{0,8}(\.[a-z][a-z0-9_]{0,8}){0,2}`).Draw(t, "tool")
}

func drawTarget(t *rapid.T) string {
	return rapid.StringMatching(`[a-z]{1,6}:[A-Za-z0-9 é😀]{0,10}`).Draw(t, "target")
}

// TestAnySpellingSameDigest: any member order, white space and escaping of
// the same value gives the digest of the value itself.
func TestAnySpellingSameDigest(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		args := drawObject(t, "args", 4)
		env := Envelope{Actor: "agent:billing-bot", Audience: "payments-host", Tool: drawTool(t), Target: drawTarget(t), Args: args}
		want, err := env.Digest()
		if err != nil {
			t.Fatal(err)
		}
		top := Object{{"args", args}, {"rationale", valueString.Draw(t, "rationale")}, {"target", env.Target}, {"tool", env.Tool}}
		if rapid.Bool().Draw(t, "no rationale") {
			top = Object{top[0], top[2], top[3]}
		}
		var b strings.Builder
		spell(t, &b, top)
		p, err := ParseProposal([]byte(b.String()))
		if err != nil {
			t.Fatalf("ParseProposal(%s): %v", b.String(), err)
		}
		got, err := p.Envelope(env.Actor, env.Audience).Digest()
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("digest of %s = %s, want %s", b.String(), got, want)
		}
	})
}

// TestEncodeIdempotent: the canonical bytes parse back to the same value and
// encode to the same bytes, which the reference encoder also leaves alone.
func TestEncodeIdempotent(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		v := drawValue(t, "v", 5)
		b1, err := Encode(v)
		if err != nil {
			t.Fatalf("Encode(%#v): %v", v, err)
		}
		if !utf8.Valid(b1) {
			t.Fatalf("Encode produced invalid UTF-8: %q", b1)
		}
		v2, err := ParseWith(b1, Options{MaxDepth: 64})
		if err != nil {
			t.Fatalf("Parse(%q): %v", b1, err)
		}
		if !reflect.DeepEqual(v, v2) {
			t.Fatalf("Parse(Encode(v)) = %#v, want %#v", v2, v)
		}
		b2, err := Encode(v2)
		if err != nil || !bytes.Equal(b1, b2) {
			t.Fatalf("re-encoding %q gave %q, %v", b1, b2, err)
		}
		ref, err := refCanonicalJSON(b1)
		if err != nil || ref != string(b1) {
			t.Fatalf("reference encoder turns %q into %q, %v", b1, ref, err)
		}
	})
}

// leafPaths lists the JSON Pointers of every leaf below v: scalars and empty
// containers.
func leafPaths(v any, ptr string, out *[]string) {
	switch v := v.(type) {
	case []any:
		if len(v) == 0 {
			*out = append(*out, ptr)
		}
		for i, item := range v {
			leafPaths(item, Join(ptr, strconv.Itoa(i)), out)
		}
	case Object:
		if len(v) == 0 {
			*out = append(*out, ptr)
		}
		for _, m := range v {
			leafPaths(m.Value, Join(ptr, m.Name), out)
		}
	default:
		*out = append(*out, ptr)
	}
}

// memberPaths lists the JSON Pointers of the object members below v that
// are reached through objects alone (the members Without can remove).
func memberPaths(v any, ptr string, out *[]string) {
	if v, ok := v.(Object); ok {
		for _, m := range v {
			*out = append(*out, Join(ptr, m.Name))
			memberPaths(m.Value, Join(ptr, m.Name), out)
		}
	}
}

// replaceAt returns a copy of v with the value at the pointer tokens replaced.
func replaceAt(v any, tokens []string, with any) any {
	if len(tokens) == 0 {
		return with
	}
	switch c := v.(type) {
	case []any:
		i, _ := strconv.Atoi(tokens[0])
		out := append([]any{}, c...)
		out[i] = replaceAt(c[i], tokens[1:], with)
		return out
	case Object:
		out := append(Object{}, c...)
		for i := range out {
			if out[i].Name == tokens[0] {
				out[i].Value = replaceAt(c[i].Value, tokens[1:], with)
			}
		}
		return out
	}
	panic(fmt.Sprintf("replaceAt: %T has no children", v))
}

// differentLeaf returns a leaf that encodes differently from old.
func differentLeaf(t *rapid.T, old any) any {
	oldBytes, _ := Encode(old)
	v := drawValue(t, "new leaf", 0)
	if b, _ := Encode(v); !bytes.Equal(b, oldBytes) {
		return v
	}
	switch o := old.(type) {
	case nil:
		return false
	case bool:
		return !o
	case int64:
		if o == MaxInt {
			return o - 1
		}
		return o + 1
	case string:
		return o + "\x00"
	}
	t.Fatalf("differentLeaf: unexpected %T", old)
	return nil
}

// TestAnyChangeChangesDigest: replacing any one leaf of args, removing any
// one member, or changing any envelope string gives a different digest.
func TestAnyChangeChangesDigest(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		args := drawObject(t, "args", 4)
		env := Envelope{Actor: "agent:billing-bot", Audience: "payments-host", Tool: drawTool(t), Target: drawTarget(t), Args: args}
		before, err := env.Digest()
		if err != nil {
			t.Fatal(err)
		}
		changed := env
		var what string
		switch rapid.IntRange(0, 5).Draw(t, "change") {
		case 0, 1:
			var leaves []string
			leafPaths(args, "", &leaves)
			ptr := rapid.SampledFrom(leaves).Draw(t, "leaf")
			old, _ := Lookup(args, ptr)
			tokens, _ := SplitPointer(ptr)
			with := differentLeaf(t, old)
			if ptr == "" {
				o, ok := with.(Object)
				if !ok {
					t.Skip("args must stay an object")
				}
				changed.Args = o
			} else {
				changed.Args = replaceAt(args, tokens, with).(Object)
			}
			what = fmt.Sprintf("leaf %q from %#v to %#v", ptr, old, with)
		case 2:
			var members []string
			memberPaths(args, "", &members)
			if len(members) == 0 {
				t.Skip("no members to remove")
			}
			ptr := rapid.SampledFrom(members).Draw(t, "member")
			changed.Args = Without(args, ptr)
			what = fmt.Sprintf("member %q removed", ptr)
		case 3:
			changed.Actor += rapid.SampledFrom([]string{"x", " ", "\u200b"}).Draw(t, "suffix")
			what = "actor " + changed.Actor
		case 4:
			changed.Audience = strings.ToUpper(changed.Audience[:1]) + changed.Audience[1:]
			what = "audience " + changed.Audience
		case 5:
			if rapid.Bool().Draw(t, "tool or target") {
				changed.Tool += "_"
				what = "tool " + changed.Tool
			} else {
				changed.Target = "x" + changed.Target
				what = "target " + changed.Target
			}
		}
		after, err := changed.Digest()
		if err != nil {
			t.Fatal(err)
		}
		if after == before {
			a, _ := env.Canonical()
			b, _ := changed.Canonical()
			t.Fatalf("%s left the digest %s unchanged:\n%s\n%s", what, before, a, b)
		}
	})
}
