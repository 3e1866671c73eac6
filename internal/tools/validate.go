package tools

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/countersign/countersign/internal/canonical"
)

// The validator interprets the closed subset of JSON Schema 2020-12 that the
// linter admits, directly on canonical values, instead of handing them to
// github.com/santhosh-tekuri/jsonschema/v6. The reasons:
//
//   - Every unknown member must be its own problem with its own path
//     (/args/filter/sql), and every missing member likewise; v6 reports one
//     error per object listing the names, at the object's location.
//   - Each failure maps to exactly one of the API's problem codes with a
//     message a model can act on; a value of the wrong type yields only
//     wrong_type, and a blank string only empty_string, instead of a cascade.
//   - empty_string (with the x-allow-empty opt-out) is not a JSON Schema
//     keyword at all.
//   - Problems come out in a fixed order (document order, then missing
//     members in the order of required), with no map iteration.
//   - No conversion of every proposal into map[string]any, and no
//     allocation on the valid path, which the benchmark in docs/perf/tools.md
//     measures.
//
// v6 stays the reference: the property test in differential_test.go checks,
// for generated arguments, that this validator accepts exactly what v6
// accepts for the same schema.

// MaxProblems bounds how many problems one validation lists. A proposal
// with more is refused all the same; the list stops there so that a 256 KiB
// body of junk cannot produce a response many times its size.
const MaxProblems = 1000

// jsonType is a bit set of JSON types.
type jsonType uint8

const (
	typeNull jsonType = 1 << iota
	typeBoolean
	typeInteger
	typeString
	typeArray
	typeObject
	// typeNumber is a number with a fraction (canonical.Number). Only
	// schemas of tools mirrored from MCP servers declare "number", which
	// compiles to typeNumber|typeInteger: every integer is a number.
	typeNumber
)

var typeNames = []struct {
	t       jsonType
	name    string
	article string
}{
	{typeNull, "null", "null"},
	{typeBoolean, "boolean", "a boolean"},
	{typeInteger, "integer", "an integer"},
	{typeString, "string", "a string"},
	{typeArray, "array", "an array"},
	{typeObject, "object", "an object"},
	{typeNumber, "number", "a number"},
}

func typeOf(v any) jsonType {
	switch v.(type) {
	case nil:
		return typeNull
	case bool:
		return typeBoolean
	case int64:
		return typeInteger
	case string:
		return typeString
	case []any:
		return typeArray
	case canonical.Object:
		return typeObject
	case canonical.Number:
		return typeNumber
	}
	return 0
}

// describe names the types in a set for a message: "a string or null".
func (t jsonType) describe() string {
	var parts []string
	if t&typeNumber != 0 {
		t &^= typeInteger // "a number" includes the integers
	}
	for _, tn := range typeNames {
		if t&tn.t != 0 {
			parts = append(parts, tn.article)
		}
	}
	switch len(parts) {
	case 0:
		return "nothing"
	case 1:
		return parts[0]
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " or " + parts[len(parts)-1]
}

// schema is one compiled schema of the admitted subset. Absent keywords are
// nil pointers or -1.
type schema struct {
	types jsonType // 0: no type keyword (then enum or const constrains)

	properties map[string]*schema
	names      []string // declared property names, sorted
	required   []string

	items       *schema
	minItems    int
	maxItems    int
	uniqueItems bool

	minLength  int
	maxLength  int
	pattern    *regexp.Regexp
	patternSrc string
	allowEmpty bool

	// Numeric bounds. A tools file's bounds are integers within ±(2^53−1)
	// and a mirrored schema's are doubles; every value compared against
	// them is an integer within that range or a double, so comparing as
	// float64 is exact.
	minimum, maximum, exclusiveMinimum, exclusiveMaximum *float64

	// format is enforced for the formats in formatChecks (mirrored
	// schemas only); other formats are shown, not checked.
	format      string
	formatCheck func(string) bool

	// anyOf or oneOf alternatives (mirrored schemas only): the value must
	// satisfy at least one (anyOf) or exactly one (oneOf).
	alts  []*schema
	oneOf bool

	enum     []any // canonical values; const is stored as a one-value enum
	isConst  bool
	enumText string // the enum values for messages
}

func newSchema() *schema {
	return &schema{minItems: -1, maxItems: -1, minLength: -1, maxLength: -1}
}

type validation struct {
	tool     *Tool
	problems canonical.Problems
	// segs is the path of the value being checked, relative to args. Paths
	// are built only when a problem is reported.
	segs []segment
	// root names args itself in messages; "args" when empty.
	root string
}

// segment is one step into args: a member name, or an array index when
// name is empty and index >= 0.
type segment struct {
	name  string
	index int
}

func (v *validation) add(code, path, format string, args ...any) {
	if len(v.problems) >= MaxProblems {
		return
	}
	v.problems = append(v.problems, canonical.Problem{Code: code, Path: path, Message: fmt.Sprintf(format, args...), Offset: -1})
}

// addHere reports a problem at the value being checked.
func (v *validation) addHere(code, format string, args ...any) {
	v.add(code, v.path(), format, args...)
}

func (v *validation) full() bool { return len(v.problems) >= MaxProblems }

// rel returns the pointer of the value being checked, relative to args.
func (v *validation) rel() string {
	var b strings.Builder
	for _, s := range v.segs {
		if s.index >= 0 {
			b.WriteByte('/')
			b.WriteString(strconv.Itoa(s.index))
		} else {
			b.WriteString(canonical.Pointer(s.name))
		}
	}
	return b.String()
}

// path returns the pointer of the value being checked from the proposal's
// root.
func (v *validation) path() string { return "/args" + v.rel() }

// label names the value being checked in a message by its pointer relative
// to args without the leading slash ("amount_minor", "filter/status",
// "to/0/address"); args itself is "args".
func (v *validation) label() string {
	rel := v.rel()
	if rel == "" {
		if v.root != "" {
			return v.root
		}
		return "args"
	}
	s := rel[1:]
	if plainPath.MatchString(s) {
		return s
	}
	return displayName(s)
}

var plainPath = regexp.MustCompile(`^[A-Za-z0-9_.$@/~-]{1,128}$`)

func (v *validation) push(name string, index int) {
	v.segs = append(v.segs, segment{name: name, index: index})
}

func (v *validation) pop() { v.segs = v.segs[:len(v.segs)-1] }

// value checks x, found at v.segs, against s.
func (v *validation) value(s *schema, x any) {
	if v.full() {
		return
	}
	t := typeOf(x)
	if s.types != 0 && s.types&t == 0 {
		v.addHere(canonical.CodeWrongType, "%s must be %s, not %s", v.label(), s.types.describe(), canonical.TypeName(x))
		return
	}
	switch x := x.(type) {
	case string:
		if !s.allowEmpty && canonical.IsBlank(x) {
			v.addHere(canonical.CodeEmptyString, "%s must not be empty or only white space", v.label())
			return
		}
		// Lengths count code points, as JSON Schema does. A string of at
		// most maxLength bytes has at most maxLength code points, and one
		// of at least 4×minLength bytes at least minLength: count only
		// when the byte length does not decide.
		if s.maxLength >= 0 && len(x) > s.maxLength || s.minLength >= 0 && len(x) < 4*s.minLength {
			n := utf8.RuneCountInString(x)
			if s.maxLength >= 0 && n > s.maxLength {
				v.addHere(canonical.CodeTooLong, "%s is %d characters; at most %d are allowed", v.label(), n, s.maxLength)
			}
			if s.minLength >= 0 && n < s.minLength {
				v.addHere(canonical.CodeOutOfRange, "%s is %d characters; at least %d are required", v.label(), n, s.minLength)
			}
		}
		if s.pattern != nil && !s.pattern.MatchString(x) {
			v.addHere(canonical.CodePatternMismatch, "%s must match %s", v.label(), s.patternSrc)
		}
		if s.formatCheck != nil && !s.formatCheck(x) {
			v.addHere(canonical.CodePatternMismatch, "%s must be %s", v.label(), formatNames[s.format])
		}
	case int64:
		v.bounds(s, float64(x))
	case canonical.Number:
		v.bounds(s, float64(x))
	case []any:
		v.array(s, x)
	case canonical.Object:
		v.object(s, x)
	}
	if s.alts != nil {
		v.alternatives(s, x)
	}
	if s.enum != nil && !inEnum(s.enum, x) {
		if s.isConst {
			v.addHere(canonical.CodeEnumMismatch, "%s must be %s", v.label(), s.enumText)
		} else {
			v.addHere(canonical.CodeEnumMismatch, "%s must be one of %s", v.label(), s.enumText)
		}
	}
}

// alternatives checks x against anyOf or oneOf alternatives. When no
// alternative accepts x and exactly one admits its type, that
// alternative's problems are reported, so the message is as exact as for a
// single schema; otherwise one problem says what was expected.
func (v *validation) alternatives(s *schema, x any) {
	matched, candidates := 0, 0
	var candidate canonical.Problems
	var admitted jsonType
	t := typeOf(x)
	for _, a := range s.alts {
		sub := validation{tool: v.tool, segs: append([]segment(nil), v.segs...), root: v.root}
		sub.value(a, x)
		if len(sub.problems) == 0 {
			matched++
			continue
		}
		at := a.valueTypes()
		if at&typeNumber != 0 {
			at |= typeInteger // an integer is a number, even where only fractions are listed
		}
		admitted |= at
		if at&t != 0 {
			candidates++
			if candidate == nil {
				candidate = sub.problems
			}
		}
	}
	switch {
	case matched == 1 || matched > 1 && !s.oneOf:
	case matched > 1:
		v.addHere(canonical.CodeEnumMismatch, "%s matches %d of the alternatives; exactly one must match", v.label(), matched)
	case candidates == 0:
		v.addHere(canonical.CodeWrongType, "%s must be %s, not %s", v.label(), admitted.describe(), canonical.TypeName(x))
	case candidates == 1:
		for _, p := range candidate {
			v.add(p.Code, p.Path, "%s", p.Message)
		}
	default:
		v.addHere(candidate[0].Code, "%s matches none of the alternatives (the first says: %s)", v.label(), candidate[0].Message)
	}
}

// bounds checks a number against the numeric bounds.
func (v *validation) bounds(s *schema, x float64) {
	if s.minimum != nil && x < *s.minimum {
		v.addHere(canonical.CodeOutOfRange, "%s must be at least %s", v.label(), fmtBound(*s.minimum))
	}
	if s.exclusiveMinimum != nil && x <= *s.exclusiveMinimum {
		v.addHere(canonical.CodeOutOfRange, "%s must be greater than %s", v.label(), fmtBound(*s.exclusiveMinimum))
	}
	if s.maximum != nil && x > *s.maximum {
		v.addHere(canonical.CodeOutOfRange, "%s must be at most %s", v.label(), fmtBound(*s.maximum))
	}
	if s.exclusiveMaximum != nil && x >= *s.exclusiveMaximum {
		v.addHere(canonical.CodeOutOfRange, "%s must be less than %s", v.label(), fmtBound(*s.exclusiveMaximum))
	}
}

func fmtBound(f float64) string { return string(canonical.AppendECMAScript(nil, f)) }

func (v *validation) array(s *schema, x []any) {
	if s.maxItems >= 0 && len(x) > s.maxItems {
		v.addHere(canonical.CodeTooManyItems, "%s has %d items; at most %d are allowed", v.label(), len(x), s.maxItems)
	}
	if s.minItems >= 0 && len(x) < s.minItems {
		v.addHere(canonical.CodeOutOfRange, "%s has %d items; at least %d are required", v.label(), len(x), s.minItems)
	}
	if s.uniqueItems && len(x) > 1 && len(x) <= 32 {
		// Few items: compare pairs, which allocates nothing.
		for i := 1; i < len(x); i++ {
			for j := range i {
				if equal(x[j], x[i]) {
					v.push("", i)
					v.addHere(canonical.CodeDuplicateKey, "%s repeats item %d; the items must be distinct", v.label(), j)
					v.pop()
					break
				}
			}
		}
	} else if s.uniqueItems && len(x) > 1 {
		seen := make(map[string]int, len(x))
		for i, item := range x {
			b, err := canonical.Encode(item)
			if err != nil {
				continue // not a parsed value; the item check reports it
			}
			if j, dup := seen[string(b)]; dup {
				v.push("", i)
				v.addHere(canonical.CodeDuplicateKey, "%s repeats item %d; the items must be distinct", v.label(), j)
				v.pop()
				continue
			}
			seen[string(b)] = i
		}
	}
	if s.items == nil {
		return
	}
	for i, item := range x {
		if v.full() {
			return
		}
		v.push("", i)
		v.value(s.items, item)
		v.pop()
	}
}

func (v *validation) object(s *schema, x canonical.Object) {
	root := len(v.segs) == 0
	for _, m := range x {
		if v.full() {
			return
		}
		sub, ok := s.properties[m.Name]
		if !ok {
			where := v.label()
			v.push(m.Name, -1)
			if root {
				v.addHere(canonical.CodeUnknownField, "%s is not a parameter of %s (parameters: %s)",
					displayName(m.Name), v.tool.Name, listNames(s.names, 50))
			} else {
				v.addHere(canonical.CodeUnknownField, "%s is not a member of %s (members: %s)",
					displayName(m.Name), where, listNames(s.names, 50))
			}
			v.pop()
			continue
		}
		v.push(m.Name, -1)
		v.value(sub, m.Value)
		v.pop()
	}
	for _, name := range s.required {
		if _, ok := x.Get(name); ok {
			continue
		}
		where := v.label()
		v.push(name, -1)
		if root {
			v.addHere(canonical.CodeMissingField, "%s is required", displayName(name))
		} else {
			v.addHere(canonical.CodeMissingField, "%s is required in %s", displayName(name), where)
		}
		v.pop()
	}
}

// inEnum reports whether x equals one of the values, comparing JSON values.
func inEnum(values []any, x any) bool {
	for _, e := range values {
		if equal(e, x) {
			return true
		}
	}
	return false
}

// equal compares two canonical values as JSON values.
func equal(a, b any) bool {
	switch a := a.(type) {
	case nil:
		return b == nil
	case bool:
		bb, ok := b.(bool)
		return ok && a == bb
	case int64:
		bb, ok := b.(int64)
		return ok && a == bb
	case canonical.Number:
		bb, ok := b.(canonical.Number)
		return ok && a == bb
	case string:
		bb, ok := b.(string)
		return ok && a == bb
	case []any:
		bb, ok := b.([]any)
		if !ok || len(a) != len(bb) {
			return false
		}
		for i := range a {
			if !equal(a[i], bb[i]) {
				return false
			}
		}
		return true
	case canonical.Object:
		bb, ok := b.(canonical.Object)
		if !ok || len(a) != len(bb) {
			return false
		}
		for i := range a {
			if a[i].Name != bb[i].Name || !equal(a[i].Value, bb[i].Value) {
				return false
			}
		}
		return true
	}
	return false
}
