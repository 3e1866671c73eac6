package tools

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"

	"github.com/countersign/countersign/internal/canonical"
)

// Keywords of the admitted JSON Schema subset, grouped by the type they
// apply to. Anything else is refused: an unknown keyword is either a typo
// that would silently check nothing, or a feature that could let a value
// through unchecked.
var (
	objectKeywords     = []string{"properties", "required", "additionalProperties"}
	arrayKeywords      = []string{"items", "minItems", "maxItems", "uniqueItems"}
	stringKeywords     = []string{"minLength", "maxLength", "pattern", "x-allow-empty"}
	integerKeywords    = []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}
	anyKeywords        = []string{"type", "enum", "const"}
	annotationKeywords = []string{"description", "title", "$comment", "examples"}
)

// refusedKeywords explain why a known JSON Schema keyword is not admitted.
var refusedKeywords = map[string]string{
	"patternProperties":     "patternProperties lets members with unlisted names through; declare each property",
	"additionalItems":       "additionalItems is not supported; use items",
	"prefixItems":           "prefixItems (tuples) is not supported; use items",
	"unevaluatedProperties": "unevaluatedProperties is not supported; use additionalProperties: false",
	"unevaluatedItems":      "unevaluatedItems is not supported; use items",
	"format":                "format is only an annotation in JSON Schema 2020-12 and would check nothing; use pattern",
	"default":               "default is never filled in (the digest covers exactly what the agent sent); make the member required or leave the choice to the executing host",
	"$ref":                  "references are not supported; write the schema out in place",
	"$defs":                 "definitions are not supported; write the schema out in place",
	"definitions":           "definitions are not supported; write the schema out in place",
	"$id":                   "$id is not supported",
	"$anchor":               "$anchor is not supported",
	"$dynamicRef":           "$dynamicRef is not supported",
	"allOf":                 "allOf is not supported; one closed schema per value keeps errors exact",
	"anyOf":                 "anyOf is not supported; use enum, or a list of types",
	"oneOf":                 "oneOf is not supported; use enum, or a list of types",
	"not":                   "not is not supported",
	"if":                    "if/then/else is not supported",
	"then":                  "if/then/else is not supported",
	"else":                  "if/then/else is not supported",
	"multipleOf":            "multipleOf is not supported",
}

func supportedKeywords() string {
	var all []string
	for _, g := range [][]string{anyKeywords, objectKeywords, arrayKeywords, stringKeywords, integerKeywords, annotationKeywords} {
		all = append(all, g...)
	}
	return strings.Join(all, ", ")
}

func keywordType(k string) (jsonType, bool) {
	switch {
	case contains(objectKeywords, k):
		return typeObject, true
	case contains(arrayKeywords, k):
		return typeArray, true
	case contains(stringKeywords, k):
		return typeString, true
	case contains(integerKeywords, k):
		return typeInteger, true
	case contains(anyKeywords, k), contains(annotationKeywords, k):
		return 0, true
	}
	return 0, false
}

// schema compiles and lints one schema found at path (e.g.
// "args/properties/filter") at the given nesting depth. It returns nil when
// the schema has problems that leave nothing to compile.
func (l *linter) schema(n *yaml.Node, tool, path string, depth int) *schema {
	if depth > MaxSchemaDepth {
		l.add(n, tool, path, "schemas nest more than %d deep", MaxSchemaDepth)
		return nil
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!bool" {
		if n.Value == "true" {
			l.add(n, tool, path, "the boolean schema true accepts any value; write a closed schema")
		} else {
			l.add(n, tool, path, "the boolean schema false accepts nothing; leave the member out instead")
		}
		return nil
	}
	entries, ok := l.mapping(n, tool, path)
	if !ok {
		return nil
	}
	kw := make(map[string]*yaml.Node, len(entries))
	for _, e := range entries {
		if why, refused := refusedKeywords[e.key]; refused {
			l.add(e.keyNode, tool, path, "%s", why)
			continue
		}
		if e.key == "$schema" && depth == 1 {
			if s, ok := l.str(e.val, tool, path+"/$schema"); ok && s != SchemaDialect {
				l.add(e.val, tool, path+"/$schema", "only %s is supported", SchemaDialect)
			}
			continue
		}
		if _, known := keywordType(e.key); !known {
			l.add(e.keyNode, tool, path, "unknown keyword %s (supported: %s)", displayName(e.key), supportedKeywords())
			continue
		}
		kw[e.key] = e.val
	}
	s := newSchema()

	// type
	if n := kw["type"]; n != nil {
		s.types = l.types(n, tool, path+"/type")
	}
	// enum and const
	if n := kw["enum"]; n != nil {
		if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
			l.add(n, tool, path+"/enum", "must be a non-empty list of values")
		} else {
			for i, c := range n.Content {
				v, ok := l.value(c, tool, path+"/enum/"+strconv.Itoa(i))
				if !ok {
					continue
				}
				if inEnum(s.enum, v) {
					l.add(c, tool, path+"/enum", "the value %s is listed twice", enumText([]any{v}))
					continue
				}
				s.enum = append(s.enum, v)
			}
			s.enumText = enumText(s.enum)
		}
	}
	if n := kw["const"]; n != nil {
		if kw["enum"] != nil {
			l.add(n, tool, path, "use enum or const, not both")
		} else if v, ok := l.value(n, tool, path+"/const"); ok {
			s.enum, s.isConst, s.enumText = []any{v}, true, enumText([]any{v})
		}
	}
	if s.types != 0 {
		for _, e := range s.enum {
			if s.types&typeOf(e) == 0 {
				l.add(kw["enum"], tool, path, "the value %s is not %s, so it can never be accepted", enumText([]any{e}), s.types.describe())
			}
		}
	} else if kw["type"] == nil && kw["enum"] == nil && kw["const"] == nil {
		l.add(n, tool, path, "schema without type (or enum or const) accepts any value; declare a type")
	}
	// keywords that apply to one type only
	for _, e := range entries {
		want, known := keywordType(e.key)
		if !known || want == 0 || kw[e.key] == nil {
			continue
		}
		if s.types&want == 0 {
			l.add(e.keyNode, tool, path, "%s applies to %s values only, and this schema does not declare type: %s", e.key, typeWord(want), typeWord(want))
		}
	}

	// objects
	if s.types&typeObject != 0 {
		s.properties = map[string]*schema{}
		if n := kw["properties"]; n != nil {
			props, ok := l.mapping(n, tool, path+"/properties")
			if ok {
				folded := map[string]string{}
				for _, p := range props {
					// Two names that read alike once case and compatibility
					// forms are folded ("amount" and "Amount", "limiſt" and
					// "limist") would show an operator one member while the
					// agent sends the other.
					key := foldName(p.key)
					if other, dup := folded[key]; dup {
						l.add(p.keyNode, tool, path+"/properties", "%s and %s differ only in case or Unicode folding; rename one of them", displayName(other), displayName(p.key))
					} else {
						folded[key] = p.key
					}
					sub := l.schema(p.val, tool, path+"/properties/"+p.key, depth+1)
					if sub != nil {
						s.properties[p.key] = sub
					}
					s.names = append(s.names, p.key)
				}
				sort.Strings(s.names)
			}
		}
		if n := kw["required"]; n != nil {
			if n.Kind != yaml.SequenceNode {
				l.add(n, tool, path+"/required", "must be a list of property names")
			} else {
				for i, c := range n.Content {
					name, ok := l.str(c, tool, path+"/required/"+strconv.Itoa(i))
					if !ok {
						continue
					}
					switch {
					case contains(s.required, name):
						l.add(c, tool, path+"/required", "%s is listed twice", displayName(name))
					case !contains(s.names, name):
						l.add(c, tool, path+"/required", "%s is required but not declared in properties, so nothing could ever be accepted", displayName(name))
					default:
						s.required = append(s.required, name)
					}
				}
			}
		}
		if n := kw["additionalProperties"]; n == nil {
			l.add(kw["type"], tool, path, "object schema without additionalProperties: false")
		} else if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" || n.Value != "false" {
			l.add(n, tool, path+"/additionalProperties", "must be false: an object schema lists every member it accepts")
		}
	}

	// arrays
	if s.types&typeArray != 0 {
		if n := kw["items"]; n == nil {
			l.add(kw["type"], tool, path, "array schema without items: every item must have a schema")
		} else {
			s.items = l.schema(n, tool, path+"/items", depth+1)
		}
		s.minItems = l.count(kw["minItems"], tool, path+"/minItems")
		s.maxItems = l.count(kw["maxItems"], tool, path+"/maxItems")
		if s.minItems >= 0 && s.maxItems >= 0 && s.minItems > s.maxItems {
			l.add(kw["minItems"], tool, path, "minItems %d is more than maxItems %d", s.minItems, s.maxItems)
		}
		if n := kw["uniqueItems"]; n != nil {
			s.uniqueItems, _ = l.boolean(n, tool, path+"/uniqueItems")
		}
	}

	// strings
	if s.types&typeString != 0 {
		s.minLength = l.count(kw["minLength"], tool, path+"/minLength")
		s.maxLength = l.count(kw["maxLength"], tool, path+"/maxLength")
		if s.minLength >= 0 && s.maxLength >= 0 && s.minLength > s.maxLength {
			l.add(kw["minLength"], tool, path, "minLength %d is more than maxLength %d", s.minLength, s.maxLength)
		}
		if n := kw["pattern"]; n != nil {
			if src, ok := l.str(n, tool, path+"/pattern"); ok {
				re, err := regexp.Compile(src)
				if err != nil {
					l.add(n, tool, path+"/pattern", "pattern does not compile: %v", err)
				} else {
					s.pattern, s.patternSrc = re, src
				}
			}
		}
		if n := kw["x-allow-empty"]; n != nil {
			s.allowEmpty, _ = l.boolean(n, tool, path+"/x-allow-empty")
		}
	}

	// integers
	if s.types&typeInteger != 0 {
		s.minimum = l.bound(kw["minimum"], tool, path+"/minimum")
		s.maximum = l.bound(kw["maximum"], tool, path+"/maximum")
		s.exclusiveMinimum = l.bound(kw["exclusiveMinimum"], tool, path+"/exclusiveMinimum")
		s.exclusiveMaximum = l.bound(kw["exclusiveMaximum"], tool, path+"/exclusiveMaximum")
	}

	// annotations
	for _, k := range []string{"description", "title", "$comment"} {
		if n := kw[k]; n != nil {
			l.str(n, tool, path+"/"+k)
		}
	}
	if n := kw["examples"]; n != nil {
		l.examples(n, s, tool, path)
	}
	return s
}

func typeWord(t jsonType) string {
	for _, tn := range typeNames {
		if tn.t == t {
			return tn.name
		}
	}
	return "?"
}

// types reads the type keyword: one type name or a list of them.
func (l *linter) types(n *yaml.Node, tool, path string) jsonType {
	var names []*yaml.Node
	switch n.Kind {
	case yaml.ScalarNode:
		names = []*yaml.Node{n}
	case yaml.SequenceNode:
		if len(n.Content) == 0 {
			l.add(n, tool, path, "must name at least one type")
		}
		names = n.Content
	default:
		l.add(n, tool, path, "must be a type name or a list of them")
		return 0
	}
	var t jsonType
	for _, c := range names {
		s, ok := l.str(c, tool, path)
		if !ok {
			continue
		}
		if s == "number" {
			l.add(c, tool, path, "number allows fractions, which Countersign refuses; use integer (money in minor units)")
			continue
		}
		found := false
		for _, tn := range typeNames {
			if tn.name == s {
				found = true
				if t&tn.t != 0 {
					l.add(c, tool, path, "%s is listed twice", s)
				}
				t |= tn.t
			}
		}
		if !found {
			l.add(c, tool, path, "unknown type %s (types: null, boolean, integer, string, array, object)", displayName(s))
		}
	}
	return t
}

// count reads a non-negative integer keyword; -1 when absent or wrong.
func (l *linter) count(n *yaml.Node, tool, path string) int {
	if n == nil {
		return -1
	}
	i, ok := l.integer(n, tool, path)
	if !ok {
		return -1
	}
	if i < 0 {
		l.add(n, tool, path, "must not be negative")
		return -1
	}
	return int(i)
}

func (l *linter) bound(n *yaml.Node, tool, path string) *float64 {
	if n == nil {
		return nil
	}
	i, ok := l.integer(n, tool, path)
	if !ok {
		return nil
	}
	f := float64(i) // exact: i is within ±(2^53−1)
	return &f
}

// examples checks that each example is a value the schema accepts, so that
// the documentation agents read cannot drift from the rule applied.
func (l *linter) examples(n *yaml.Node, s *schema, tool, path string) {
	if n.Kind != yaml.SequenceNode {
		l.add(n, tool, path+"/examples", "must be a list of example values")
		return
	}
	for i, c := range n.Content {
		v, ok := l.value(c, tool, path+"/examples/"+strconv.Itoa(i))
		if !ok {
			continue
		}
		val := validation{tool: &Tool{Name: tool}, root: "the example"}
		val.value(s, v)
		if len(val.problems) > 0 {
			l.add(c, tool, path+"/examples/"+strconv.Itoa(i), "not accepted by its own schema: %s", val.problems[0].Message)
		}
	}
}

// enumText lists values for a message: strings bare when they are plain
// words, everything else as canonical JSON.
func enumText(values []any) string {
	parts := make([]string, len(values))
	for i, v := range values {
		if s, ok := v.(string); ok && plainName.MatchString(s) {
			parts[i] = s
			continue
		}
		b, err := canonical.Encode(v)
		if err != nil {
			parts[i] = fmt.Sprint(v)
			continue
		}
		parts[i] = string(b)
	}
	return strings.Join(parts, ", ")
}

// foldName is the form under which two property names count as the same:
// NFKC, then Unicode full case folding.
func foldName(name string) string {
	return cases.Fold().String(norm.NFKC.String(name))
}
