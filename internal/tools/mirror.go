package tools

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/mail"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"time"
	"unicode"

	"github.com/countersign/countersign/internal/canonical"
)

// A tool mirrored from an MCP server is built from the server's own
// definition (name, description, JSON Schema of its input, annotations)
// rather than from the tools file. Upstream schemas use more of JSON Schema
// than a tools file may; the mirror compiler accepts the keywords below and
// quarantines a tool that uses anything else, with the reason, instead of
// guessing:
//
//	type               one type, or one type and "null"
//	properties, required, additionalProperties (false or absent: an object
//	                   is closed either way, and the review page says so
//	                   when the upstream left it open)
//	items, minItems, maxItems, uniqueItems
//	minLength, maxLength, pattern (Go RE2 syntax: a pattern RE2 cannot
//	                   compile quarantines the tool)
//	minimum, maximum, exclusiveMinimum, exclusiveMaximum
//	enum, const
//	format             shown; enforced for date-time, uri, email and uuid
//	default            shown, never applied: Countersign never fills in a
//	                   value nobody saw
//	title, description, examples, $comment, $schema (at the root)
//	anyOf, oneOf       of plain alternatives (no alternatives inside an
//	                   alternative, no other constraints beside them)
//	$ref, $defs, definitions  local references ("#/...") without cycles
//
// Mirrored tools have no informational members: every argument is bound.
// Strings may be empty unless minLength says otherwise, as JSON Schema
// says, since the upstream decides what its strings mean.

// DefinitionPrefix separates definition digests from every other SHA-256
// the system computes.
const DefinitionPrefix = "countersign/v1/mcp-tool:"

// MaxMirroredSchemaBytes bounds an upstream input schema.
const MaxMirroredSchemaBytes = 1 << 20

// MirrorSpec is one tool as an MCP server lists it, with the tools file's
// overrides for it.
type MirrorSpec struct {
	// Server is the upstream's name: the audience, and the first part of
	// the mirrored tool's name.
	Server string
	// Name is the upstream's own tool name.
	Name        string
	Description string
	// InputSchema and Annotations are the raw JSON the server sent;
	// Annotations may be empty.
	InputSchema []byte
	Annotations []byte
	Override    MCPOverride
}

// QuarantineError says why an upstream tool cannot be mirrored. Its
// reasons are shown on the review page.
type QuarantineError struct {
	Tool    string
	Reasons []string
}

func (e *QuarantineError) Error() string {
	return fmt.Sprintf("tools: %s quarantined: %s", e.Tool, strings.Join(e.Reasons, "; "))
}

// Mirrored is what a tool mirrored from an MCP server carries besides the
// policy every tool has.
type Mirrored struct {
	// Server is the upstream's name; UpstreamName the tool's name there.
	Server       string
	UpstreamName string
	// Definition is the canonical JSON of what is pinned: server, name,
	// description, inputSchema, annotations and the overrides in force.
	// DefinitionDigest of the Tool is its digest.
	Definition []byte
	// Annotations is the canonical JSON of the server's annotations (its
	// claims: shown, never relied on), "null" when it sent none.
	Annotations []byte
	// Notes are what the review page must say about the schema, such as
	// objects the upstream left open that Countersign treats as closed.
	Notes []string
	// TargetPointer, when set, is the JSON Pointer into the arguments whose
	// string is the call's target; otherwise every call's target is Target
	// (mcp:{server} unless the tools file says otherwise).
	TargetPointer string
	Target        string

	numbers         *canonical.NumberPaths // rooted at the arguments
	proposalNumbers *canonical.NumberPaths // rooted at a proposal
}

// ArgsNumbers returns the places in the arguments where the pinned schema
// types a value as number, for canonical.Options.Numbers when the
// arguments object itself is parsed.
func (m *Mirrored) ArgsNumbers() *canonical.NumberPaths { return m.numbers }

// ProposalNumbers is ArgsNumbers rooted at a proposal ({"args": ...}).
func (m *Mirrored) ProposalNumbers() *canonical.NumberPaths { return m.proposalNumbers }

// MirroredName returns the registered name of an upstream tool.
func MirroredName(server, tool string) string { return server + "/" + tool }

// Mirror compiles an upstream tool. A tool that cannot be mirrored exactly
// is a *QuarantineError listing every reason found.
func Mirror(spec MirrorSpec) (*Tool, error) {
	name := MirroredName(spec.Server, spec.Name)
	q := &QuarantineError{Tool: name}
	if !canonical.ValidServerName(spec.Server) {
		q.Reasons = append(q.Reasons, fmt.Sprintf("the server name %s does not match ^[a-z][a-z0-9-]{0,62}$", displayName(spec.Server)))
	}
	if !canonical.ValidMCPToolName(spec.Name) {
		q.Reasons = append(q.Reasons, fmt.Sprintf("the tool name %s does not satisfy MCP's tool-name rule ^[A-Za-z0-9_.-]{1,128}$", displayName(spec.Name)))
	}
	if len(q.Reasons) > 0 {
		return nil, q
	}
	schemaValue, err := readMirroredJSON(spec.InputSchema)
	if err != nil {
		q.Reasons = append(q.Reasons, "the input schema cannot be read exactly: "+err.Error())
	}
	var annotations any
	if len(spec.Annotations) > 0 && string(spec.Annotations) != "null" {
		if annotations, err = readMirroredJSON(spec.Annotations); err != nil {
			q.Reasons = append(q.Reasons, "the annotations cannot be read exactly: "+err.Error())
		}
	}
	if len(q.Reasons) > 0 {
		return nil, q
	}
	c := &mirrorCompiler{}
	root, ok := schemaValue.(canonical.Object)
	var args *schema
	if !ok {
		c.quarantine("", "the input schema is not an object")
	} else {
		c.root = root
		args = c.schema(root, "", 1)
		if args != nil && args.types != typeObject {
			c.quarantine("", "the input schema must have type object (alone), so that the arguments are an object")
		}
	}
	t := &Tool{
		Name: name, Description: spec.Description, Audience: spec.Server,
		Approvals: DefaultApprovals, GrantTTL: DefaultGrantTTL, DecideWithin: DefaultDecideWithin,
		OutcomeWithin: DefaultOutcomeWithin, args: args,
	}
	m := &Mirrored{Server: spec.Server, UpstreamName: spec.Name, Notes: c.notes}
	o := spec.Override
	if o.Approvals > 0 {
		t.Approvals = o.Approvals
	}
	if o.GrantTTL > 0 {
		t.GrantTTL = o.GrantTTL
	}
	if o.DecideWithin > 0 {
		t.DecideWithin = o.DecideWithin
	}
	if o.OutcomeWithin > 0 {
		t.OutcomeWithin = o.OutcomeWithin
	}
	t.AutoApprove, t.Rules = o.AutoApprove, o.Rules
	target := o.Target
	if target == "" {
		target = "mcp:" + spec.Server
	}
	if strings.HasPrefix(target, "/") {
		m.TargetPointer = target
		t.TargetPattern = ".+"
		if args != nil {
			if s, err := resolve(args, target); err != nil {
				c.quarantine("", fmt.Sprintf("the tools file's target %s: %v", target, err))
			} else if s.types != typeString || !requiredPath(args, target) {
				c.quarantine("", fmt.Sprintf("the tools file's target %s must name a required string argument", target))
			}
		}
	} else {
		m.Target = target
		t.TargetPattern = regexp.QuoteMeta(target)
	}
	t.Target = regexp.MustCompile(`^(?:` + t.TargetPattern + `)$`)
	if a := o.Allowance; a != nil && args != nil {
		for _, ptr := range a.Vary {
			if ptr == VaryTarget {
				continue
			}
			if p := varyProblem(args, ptr); p != "" {
				c.quarantine("", "the tools file's allowance: "+p)
			}
		}
		t.Allowance = a
	}
	if ct := o.Counter; ct != nil && args != nil {
		for _, ptr := range ct.Edit {
			if ptr == CounterTarget {
				continue
			}
			if _, err := resolve(args, ptr); err != nil {
				c.quarantine("", fmt.Sprintf("the tools file's counter: %s: %v", ptr, err))
			}
		}
		t.Counter = ct
	}
	if len(c.reasons) > 0 {
		q.Reasons = c.reasons
		return nil, q
	}
	t.schema, err = canonical.Encode(root)
	if err != nil {
		q.Reasons = append(q.Reasons, "the input schema cannot be encoded: "+err.Error())
		return nil, q
	}
	m.Annotations, _ = canonical.Encode(annotations) // read by the same parser: it encodes
	var overrides canonical.Object
	if a := o.Allowance; a != nil {
		vary := make([]any, len(a.Vary))
		for i, v := range a.Vary {
			vary[i] = v
		}
		overrides = append(overrides, canonical.Member{Name: "allowance", Value: canonical.Object{
			{Name: "max_for_s", Value: int64(a.MaxFor / time.Second)}, {Name: "max_uses", Value: int64(a.MaxUses)},
			{Name: "vary", Value: vary}}})
	}
	overrides = append(overrides, canonical.Member{Name: "approvals", Value: int64(t.Approvals)})
	// Named only when set, so that definitions pinned before these fields
	// existed keep their digests. Members in RFC 8785 order.
	if o.AutoApprove {
		overrides = append(overrides, canonical.Member{Name: "auto_approve", Value: true})
	}
	if ct := o.Counter; ct != nil {
		edit := make([]any, len(ct.Edit))
		for i, v := range ct.Edit {
			edit[i] = v
		}
		overrides = append(overrides, canonical.Member{Name: "counter", Value: canonical.Object{
			{Name: "edit", Value: edit}, {Name: "forward", Value: ct.Forward}}})
	}
	overrides = append(overrides,
		canonical.Member{Name: "decide_within_s", Value: int64(t.DecideWithin / time.Second)},
		canonical.Member{Name: "grant_ttl_s", Value: int64(t.GrantTTL / time.Second)})
	if t.OutcomeWithin != DefaultOutcomeWithin {
		overrides = append(overrides, canonical.Member{Name: "outcome_within_s", Value: int64(t.OutcomeWithin / time.Second)})
	}
	if len(o.Rules) > 0 {
		rules := make([]any, len(o.Rules))
		for i, r := range o.Rules {
			rules[i] = canonical.Object{{Name: "approvals", Value: int64(r.Approvals)}, {Name: "id", Value: r.ID},
				{Name: "reason", Value: r.Reason}, {Name: "then", Value: r.Then}, {Name: "when", Value: r.When}}
		}
		overrides = append(overrides, canonical.Member{Name: "rules", Value: rules})
	}
	overrides = append(overrides, canonical.Member{Name: "target", Value: target})
	definition, err := canonical.Encode(canonical.Object{
		{Name: "annotations", Value: annotations},
		{Name: "description", Value: spec.Description},
		{Name: "inputSchema", Value: root},
		{Name: "name", Value: spec.Name},
		{Name: "overrides", Value: overrides},
		{Name: "server", Value: spec.Server},
	})
	if err != nil {
		q.Reasons = append(q.Reasons, "the definition cannot be encoded: "+err.Error())
		return nil, q
	}
	m.Definition = definition
	t.DefinitionDigest = DefinitionDigestOf(definition)
	m.numbers = &canonical.NumberPaths{}
	args.addNumbers(m.numbers, 0)
	m.proposalNumbers = &canonical.NumberPaths{}
	args.addNumbers(m.proposalNumbers.Member("args"), 0)
	t.Mirror = m
	return t, nil
}

// DefinitionDigestOf hashes a canonical definition with its domain prefix.
func DefinitionDigestOf(definition []byte) string {
	h := sha256.New()
	h.Write([]byte(DefinitionPrefix))
	h.Write(definition)
	return hex.EncodeToString(h.Sum(nil))
}

// readMirroredJSON parses JSON the server sent, under the same strict rules
// as a proposal (duplicate keys, invalid UTF-8 and integers beyond ±(2^53−1)
// are refused) with numbers accepted wherever they are exact.
func readMirroredJSON(data []byte) (any, error) {
	return canonical.ParseWith(data, canonical.Options{
		MaxBytes: MaxMirroredSchemaBytes, MaxDepth: 4*MaxSchemaDepth + 8, Numbers: canonical.NumbersAnywhere()})
}

// requiredPath reports whether every step of ptr is a required member of
// its object: a target taken from the arguments must always be there.
func requiredPath(s *schema, ptr string) bool {
	tokens, err := canonical.SplitPointer(ptr)
	if err != nil {
		return false
	}
	for _, tok := range tokens {
		if s == nil || !contains(s.required, tok) {
			return false
		}
		s = s.properties[tok]
	}
	return true
}

// TargetFor returns the target of a call of a mirrored tool with these
// arguments: the tool's fixed target, or the string at its target pointer.
func (t *Tool) TargetFor(args canonical.Object) (string, bool) {
	if t.Mirror == nil {
		return "", false
	}
	if t.Mirror.TargetPointer == "" {
		return t.Mirror.Target, true
	}
	v, ok := canonical.Lookup(args, t.Mirror.TargetPointer)
	if !ok {
		return "", false
	}
	s, ok := v.(string)
	return s, ok
}

type mirrorCompiler struct {
	root    canonical.Object
	reasons []string
	notes   []string
	refs    []string // the $ref chain being expanded, for cycles
	// nodes counts the schemas compiled: references are expanded in
	// place, so a schema that refers to one definition twice at each of
	// many levels would otherwise expand exponentially.
	nodes int
	// enumValues counts the enum values listed, over every schema
	// compiled: an upstream chooses them, and each is compared with those
	// before it.
	enumValues int
}

// maxMirrorNodes bounds the schemas one input schema expands to.
const maxMirrorNodes = 10000

// maxMirrorEnumValues bounds the enum values one input schema lists once
// its references are followed.
const maxMirrorEnumValues = 10000

func (c *mirrorCompiler) quarantine(path, msg string) {
	if path == "" {
		path = "the input schema"
	}
	c.reasons = append(c.reasons, path+": "+msg)
}

func (c *mirrorCompiler) note(path, msg string) {
	if path == "" {
		path = "the input schema"
	}
	c.notes = append(c.notes, path+": "+msg)
}

// Keyword groups of the mirror dialect.
var (
	mirrorAnnotations = []string{"title", "description", "examples", "$comment", "default"}
	mirrorObject      = []string{"properties", "required", "additionalProperties"}
	mirrorArray       = []string{"items", "minItems", "maxItems", "uniqueItems"}
	mirrorString      = []string{"minLength", "maxLength", "pattern", "format"}
	mirrorNumber      = []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}
	mirrorAny         = []string{"type", "enum", "const", "anyOf", "oneOf", "$ref", "$defs", "definitions"}
)

var mirrorRefused = map[string]string{
	"patternProperties":     "patternProperties admits members by pattern (a free-form map)",
	"propertyNames":         "propertyNames admits members by pattern (a free-form map)",
	"additionalItems":       "additionalItems is not supported",
	"prefixItems":           "prefixItems (tuples) is not supported",
	"unevaluatedProperties": "unevaluatedProperties is not supported",
	"unevaluatedItems":      "unevaluatedItems is not supported",
	"allOf":                 "allOf is not supported",
	"not":                   "not is not supported",
	"if":                    "if/then/else is not supported",
	"then":                  "if/then/else is not supported",
	"else":                  "if/then/else is not supported",
	"dependentRequired":     "dependentRequired is not supported",
	"dependentSchemas":      "dependentSchemas is not supported",
	"dependencies":          "dependencies is not supported",
	"contains":              "contains is not supported",
	"minContains":           "minContains is not supported",
	"maxContains":           "maxContains is not supported",
	"minProperties":         "minProperties is not supported",
	"maxProperties":         "maxProperties is not supported",
	"multipleOf":            "multipleOf is not supported",
	"$id":                   "$id is not supported (it changes how references resolve)",
	"$anchor":               "$anchor is not supported",
	"$dynamicRef":           "$dynamicRef is not supported",
	"$dynamicAnchor":        "$dynamicAnchor is not supported",
	"$recursiveRef":         "$recursiveRef is not supported",
	"$vocabulary":           "$vocabulary is not supported",
	"contentEncoding":       "contentEncoding is not supported",
	"contentMediaType":      "contentMediaType is not supported",
	"contentSchema":         "contentSchema is not supported",
}

// formatChecks are the formats enforced; formatNames says what each wants.
var formatChecks = map[string]func(string) bool{
	"date-time": isDateTime,
	"uri":       isURI,
	"email":     isEmail,
	"uuid":      uuidPattern.MatchString,
}

var formatNames = map[string]string{
	"date-time": "an RFC 3339 date-time such as 2026-01-31T09:30:00Z",
	"uri":       "an absolute URI such as https://example.com/a",
	"email":     "an e-mail address such as ops@example.com",
	"uuid":      "a UUID such as 123e4567-e89b-12d3-a456-426614174000",
}

var (
	uuidPattern     = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
	dateTimePattern = regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})$`)
)

func isDateTime(s string) bool {
	if !dateTimePattern.MatchString(s) {
		return false
	}
	_, err := time.Parse(time.RFC3339Nano, strings.ToUpper(s))
	return err == nil
}

func isURI(s string) bool {
	if strings.IndexFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f || unicode.IsSpace(r) }) >= 0 {
		return false
	}
	u, err := url.Parse(s)
	return err == nil && u.Scheme != "" && (u.Opaque != "" || u.Host != "" || u.Path != "")
}

func isEmail(s string) bool {
	a, err := mail.ParseAddress(s)
	return err == nil && a.Name == "" && a.Address == s
}

func (c *mirrorCompiler) schema(v any, path string, depth int) *schema {
	if depth > MaxSchemaDepth {
		c.quarantine(path, fmt.Sprintf("schemas nest more than %d deep", MaxSchemaDepth))
		return nil
	}
	if c.nodes++; c.nodes > maxMirrorNodes {
		if c.nodes == maxMirrorNodes+1 {
			c.quarantine(path, fmt.Sprintf("the schema expands to more than %d schemas once its references are followed", maxMirrorNodes))
		}
		return nil
	}
	o, ok := v.(canonical.Object)
	if !ok {
		if b, isBool := v.(bool); isBool && b {
			c.quarantine(path, "the schema true accepts any value (a free-form value)")
		} else if isBool {
			c.quarantine(path, "the schema false accepts nothing")
		} else {
			c.quarantine(path, "a schema must be an object")
		}
		return nil
	}
	kw := map[string]any{}
	for _, m := range o {
		switch {
		case m.Name == "$schema":
			if path != "" {
				c.quarantine(path, "$schema inside a schema is not supported")
			}
			continue
		case mirrorRefused[m.Name] != "":
			c.quarantine(path, mirrorRefused[m.Name])
			continue
		case contains(mirrorAnnotations, m.Name), contains(mirrorObject, m.Name), contains(mirrorArray, m.Name),
			contains(mirrorString, m.Name), contains(mirrorNumber, m.Name), contains(mirrorAny, m.Name):
			kw[m.Name] = m.Value
		default:
			c.quarantine(path, fmt.Sprintf("the keyword %s is not supported", displayName(m.Name)))
		}
	}
	for _, k := range []string{"$defs", "definitions"} {
		if d, ok := kw[k]; ok {
			if _, ok := d.(canonical.Object); !ok {
				c.quarantine(canonical.Join(path, k), "must be an object of schemas")
			}
		}
	}
	if ref, ok := kw["$ref"]; ok {
		for name := range kw {
			if name != "$ref" && name != "$defs" && name != "definitions" && !contains(mirrorAnnotations, name) {
				c.quarantine(path, fmt.Sprintf("$ref beside %s is not supported", name))
				return nil
			}
		}
		return c.ref(ref, path, depth)
	}
	_, hasAny := kw["anyOf"]
	_, hasOne := kw["oneOf"]
	if hasAny || hasOne {
		return c.alternatives(kw, path, depth, hasAny, hasOne)
	}
	s := newSchema()
	s.allowEmpty = true
	if t, ok := kw["type"]; ok {
		s.types = c.types(t, canonical.Join(path, "type"))
	}
	c.enum(s, kw, path)
	if s.types == 0 && s.enum == nil {
		if _, ok := kw["type"]; !ok {
			c.quarantine(path, "a schema without type, enum or const accepts any value (a free-form value)")
		}
		return nil
	}
	want := s.types
	if want == 0 {
		want = s.valueTypes()
	}
	for _, group := range []struct {
		names []string
		t     jsonType
	}{{mirrorObject, typeObject}, {mirrorArray, typeArray}, {mirrorString, typeString}, {mirrorNumber, typeInteger | typeNumber}} {
		for _, k := range group.names {
			if _, ok := kw[k]; ok && want&group.t == 0 {
				c.note(path, fmt.Sprintf("%s has no effect on %s", k, want.describe()))
			}
		}
	}
	if want&typeObject != 0 {
		c.object(s, kw, path, depth)
	}
	if want&typeArray != 0 {
		c.array(s, kw, path, depth)
	}
	if want&typeString != 0 {
		c.str(s, kw, path)
	}
	if want&(typeInteger|typeNumber) != 0 {
		s.minimum = c.bound(kw, "minimum", path)
		s.maximum = c.bound(kw, "maximum", path)
		s.exclusiveMinimum = c.bound(kw, "exclusiveMinimum", path)
		s.exclusiveMaximum = c.bound(kw, "exclusiveMaximum", path)
	}
	if ex, ok := kw["examples"]; ok {
		if _, ok := ex.([]any); !ok {
			c.note(path, "examples is not a list")
		}
	}
	return s
}

func (c *mirrorCompiler) ref(v any, path string, depth int) *schema {
	ref, ok := v.(string)
	if !ok {
		c.quarantine(path, "$ref must be a string")
		return nil
	}
	if ref != "#" && !strings.HasPrefix(ref, "#/") {
		c.quarantine(path, fmt.Sprintf("the reference %s is not local to this schema (only #/... is followed)", displayName(ref)))
		return nil
	}
	if contains(c.refs, ref) {
		c.quarantine(path, fmt.Sprintf("the reference %s is recursive", displayName(ref)))
		return nil
	}
	unescaped, err := url.PathUnescape(ref[1:])
	if err != nil {
		c.quarantine(path, fmt.Sprintf("the reference %s is not a valid URI fragment", displayName(ref)))
		return nil
	}
	target, ok := canonical.Lookup(c.root, unescaped)
	if !ok {
		c.quarantine(path, fmt.Sprintf("the reference %s names nothing in this schema", displayName(ref)))
		return nil
	}
	c.refs = append(c.refs, ref)
	defer func() { c.refs = c.refs[:len(c.refs)-1] }()
	return c.schema(target, unescaped, depth+1)
}

func (c *mirrorCompiler) alternatives(kw map[string]any, path string, depth int, hasAny, hasOne bool) *schema {
	if hasAny && hasOne {
		c.quarantine(path, "anyOf beside oneOf is not supported")
		return nil
	}
	key := "anyOf"
	if hasOne {
		key = "oneOf"
	}
	for name := range kw {
		if name != key && name != "$defs" && name != "definitions" && !contains(mirrorAnnotations, name) {
			c.quarantine(path, fmt.Sprintf("%s beside %s is not supported: the alternatives must be plain", name, key))
			return nil
		}
	}
	list, ok := kw[key].([]any)
	if !ok || len(list) == 0 {
		c.quarantine(canonical.Join(path, key), "must be a non-empty list of schemas")
		return nil
	}
	s := &schema{minItems: -1, maxItems: -1, minLength: -1, maxLength: -1, oneOf: hasOne}
	for i, alt := range list {
		p := canonical.Join(path, key, fmt.Sprint(i))
		if o, ok := alt.(canonical.Object); ok {
			if _, nested := o.Get("anyOf"); nested {
				c.quarantine(p, "alternatives inside an alternative are not supported")
				continue
			}
			if _, nested := o.Get("oneOf"); nested {
				c.quarantine(p, "alternatives inside an alternative are not supported")
				continue
			}
		}
		a := c.schema(alt, p, depth+1)
		if a == nil {
			continue
		}
		if a.alts != nil {
			c.quarantine(p, "alternatives inside an alternative are not supported")
			continue
		}
		s.alts = append(s.alts, a)
	}
	return s
}

func (c *mirrorCompiler) types(v any, path string) jsonType {
	one := func(x any) jsonType {
		name, _ := x.(string)
		switch name {
		case "number":
			return typeNumber | typeInteger
		case "integer":
			return typeInteger
		}
		for _, tn := range typeNames {
			if tn.name == name && tn.t != typeNumber {
				return tn.t
			}
		}
		c.quarantine(path, fmt.Sprintf("unknown type %s", displayValue(x)))
		return 0
	}
	switch x := v.(type) {
	case string:
		return one(x)
	case []any:
		var t jsonType
		nonNull := 0
		for _, item := range x {
			it := one(item)
			if t&it != 0 {
				c.quarantine(path, fmt.Sprintf("%s is listed twice", displayValue(item)))
			}
			if it != typeNull {
				nonNull++
			}
			t |= it
		}
		if nonNull > 1 || len(x) == 0 {
			c.quarantine(path, "type must be one type, or one type and \"null\" (use anyOf for alternatives)")
		}
		return t
	}
	c.quarantine(path, "type must be a type name or a list of them")
	return 0
}

func displayValue(v any) string {
	b, err := canonical.Encode(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	if len(b) > 64 {
		return string(b[:64]) + "…"
	}
	return string(b)
}

func (c *mirrorCompiler) enum(s *schema, kw map[string]any, path string) {
	if e, ok := kw["enum"]; ok {
		list, ok := e.([]any)
		if !ok || len(list) == 0 {
			c.quarantine(canonical.Join(path, "enum"), "must be a non-empty list of values")
			return
		}
		if c.enumValues += len(list); c.enumValues > maxMirrorEnumValues {
			if c.enumValues-len(list) <= maxMirrorEnumValues {
				c.quarantine(canonical.Join(path, "enum"), fmt.Sprintf("the schema lists more than %d enum values once its references are followed", maxMirrorEnumValues))
			}
			return
		}
		for _, v := range list {
			if !inEnum(s.enum, v) {
				s.enum = append(s.enum, v)
			}
		}
		s.enumText = enumText(s.enum)
	}
	if v, ok := kw["const"]; ok {
		if s.enum != nil {
			c.quarantine(path, "enum beside const is not supported")
			return
		}
		s.enum, s.isConst, s.enumText = []any{v}, true, enumText([]any{v})
	}
	if s.types != 0 {
		for _, e := range s.enum {
			if s.types&typeOf(e) == 0 {
				c.note(path, fmt.Sprintf("the value %s is not %s, so it is never accepted", enumText([]any{e}), s.types.describe()))
			}
		}
	}
}

func (c *mirrorCompiler) object(s *schema, kw map[string]any, path string, depth int) {
	s.properties = map[string]*schema{}
	if p, ok := kw["properties"]; ok {
		props, ok := p.(canonical.Object)
		if !ok {
			c.quarantine(canonical.Join(path, "properties"), "must be an object of schemas")
		}
		folded := map[string]string{}
		for _, m := range props {
			if other, dup := folded[foldName(m.Name)]; dup {
				c.quarantine(canonical.Join(path, "properties"), fmt.Sprintf("%s and %s differ only in case or Unicode folding", displayName(other), displayName(m.Name)))
			} else {
				folded[foldName(m.Name)] = m.Name
			}
			sub := c.schema(m.Value, canonical.Join(path, "properties", m.Name), depth+1)
			if sub != nil {
				s.properties[m.Name] = sub
			}
			s.names = append(s.names, m.Name)
		}
		sort.Strings(s.names)
	}
	if r, ok := kw["required"]; ok {
		list, ok := r.([]any)
		if !ok {
			c.quarantine(canonical.Join(path, "required"), "must be a list of property names")
		}
		for _, item := range list {
			name, ok := item.(string)
			switch {
			case !ok:
				c.quarantine(canonical.Join(path, "required"), "must be a list of property names")
			case contains(s.required, name):
			case !contains(s.names, name):
				c.quarantine(canonical.Join(path, "required"), fmt.Sprintf("%s is required but not declared in properties, so nothing could be accepted", displayName(name)))
			default:
				s.required = append(s.required, name)
			}
		}
	}
	switch ap, ok := kw["additionalProperties"]; {
	case !ok:
		c.note(path, "the upstream leaves this object open; Countersign refuses any member it does not declare")
	case ap == false:
	default:
		c.quarantine(canonical.Join(path, "additionalProperties"), "only false is supported: members with undeclared names (a free-form map) are not")
	}
}

func (c *mirrorCompiler) array(s *schema, kw map[string]any, path string, depth int) {
	if it, ok := kw["items"]; !ok {
		c.quarantine(path, "an array without items accepts any item")
	} else if _, isList := it.([]any); isList {
		c.quarantine(canonical.Join(path, "items"), "a list of item schemas (a tuple) is not supported")
	} else {
		s.items = c.schema(it, canonical.Join(path, "items"), depth+1)
	}
	s.minItems = c.count(kw, "minItems", path)
	s.maxItems = c.count(kw, "maxItems", path)
	if u, ok := kw["uniqueItems"]; ok {
		b, isBool := u.(bool)
		if !isBool {
			c.quarantine(canonical.Join(path, "uniqueItems"), "must be true or false")
		}
		s.uniqueItems = b
	}
}

func (c *mirrorCompiler) str(s *schema, kw map[string]any, path string) {
	s.minLength = c.count(kw, "minLength", path)
	s.maxLength = c.count(kw, "maxLength", path)
	if p, ok := kw["pattern"]; ok {
		src, isString := p.(string)
		re, err := regexp.Compile(src)
		switch {
		case !isString:
			c.quarantine(canonical.Join(path, "pattern"), "must be a string")
		case err != nil:
			c.quarantine(canonical.Join(path, "pattern"), fmt.Sprintf("Countersign cannot check this pattern the way its author meant (%v)", err))
		default:
			s.pattern, s.patternSrc = re, src
		}
	}
	if f, ok := kw["format"]; ok {
		name, isString := f.(string)
		if !isString {
			c.quarantine(canonical.Join(path, "format"), "must be a string")
			return
		}
		s.format = name
		if check, enforced := formatChecks[name]; enforced {
			s.formatCheck = check
		} else {
			c.note(path, fmt.Sprintf("format %s is shown, not checked", displayName(name)))
		}
	}
}

func (c *mirrorCompiler) count(kw map[string]any, key, path string) int {
	v, ok := kw[key]
	if !ok {
		return -1
	}
	n, isInt := v.(int64)
	if !isInt || n < 0 {
		c.quarantine(canonical.Join(path, key), "must be a non-negative integer")
		return -1
	}
	return int(n)
}

func (c *mirrorCompiler) bound(kw map[string]any, key, path string) *float64 {
	v, ok := kw[key]
	if !ok {
		return nil
	}
	var f float64
	switch x := v.(type) {
	case int64:
		f = float64(x)
	case canonical.Number:
		f = float64(x)
	default:
		c.quarantine(canonical.Join(path, key), "must be a number")
		return nil
	}
	return &f
}

// addNumbers marks where s and the schemas below it accept numbers with a
// fraction.
func (s *schema) addNumbers(n *canonical.NumberPaths, depth int) {
	if s == nil || depth > 2*MaxSchemaDepth {
		return
	}
	if s.types&typeNumber != 0 {
		n.Accept()
	}
	for _, e := range s.enum {
		if _, ok := e.(canonical.Number); ok {
			n.Accept()
		}
	}
	for name, p := range s.properties {
		p.addNumbers(n.Member(name), depth+1)
	}
	if s.items != nil {
		s.items.addNumbers(n.Items(), depth+1)
	}
	for _, a := range s.alts {
		a.addNumbers(n, depth+1)
	}
}
