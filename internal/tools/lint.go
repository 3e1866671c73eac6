package tools

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"

	"github.com/countersign/countersign/internal/canonical"
)

// Policy limits of a tools file.
const (
	DefaultApprovals    = 1
	MaxApprovals        = 10
	DefaultGrantTTL     = 60 * time.Second
	MaxGrantTTL         = 300 * time.Second
	DefaultDecideWithin = 15 * time.Minute
	MaxDecideWithin     = 7 * 24 * time.Hour
	// DefaultOutcomeWithin is how long an executor has, after redeeming a
	// call, to report its outcome (or extend its lease) before the outcome
	// becomes lease_expired; MaxOutcomeWithin bounds it.
	DefaultOutcomeWithin = 5 * time.Minute
	MaxOutcomeWithin     = 24 * time.Hour
	// MaxSchemaDepth bounds how deeply an args schema nests schemas.
	MaxSchemaDepth = canonical.MaxArgsDepth
)

// SchemaDialect is the only $schema value accepted, at the args root.
const SchemaDialect = "https://json-schema.org/draft/2020-12/schema"

var toolNamePattern = regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$`)

// LintProblem is one reason a tools file was refused.
type LintProblem struct {
	// Tool is the tool concerned, empty for a problem of the file itself.
	Tool string
	// Path locates the problem inside the tool: a field ("grant_ttl") or a
	// schema path ("args/properties/filter").
	Path string
	// Line is the line in the file, 0 when unknown.
	Line    int
	Message string
}

// String reads "payments.refund: args/properties/filter: object schema
// without additionalProperties: false".
func (p LintProblem) String() string {
	var b strings.Builder
	if p.Tool != "" {
		b.WriteString(p.Tool)
		b.WriteString(": ")
	}
	if p.Path != "" {
		b.WriteString(p.Path)
		b.WriteString(": ")
	}
	b.WriteString(p.Message)
	return b.String()
}

// LintError is a refused tools file with every problem found in it.
type LintError struct {
	// File is the path given to Load, empty after Parse.
	File     string
	Problems []LintProblem
}

// Error lists one problem per line, each prefixed with its file and line.
func (e *LintError) Error() string {
	var b strings.Builder
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteByte('\n')
		}
		switch {
		case e.File != "" && p.Line > 0:
			fmt.Fprintf(&b, "%s:%d: ", e.File, p.Line)
		case e.File != "":
			fmt.Fprintf(&b, "%s: ", e.File)
		case p.Line > 0:
			fmt.Fprintf(&b, "line %d: ", p.Line)
		}
		b.WriteString(p.String())
	}
	return b.String()
}

// linter collects problems while a tools file is read.
type linter struct {
	problems []LintProblem
}

func (l *linter) add(n *yaml.Node, tool, path, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	l.problems = append(l.problems, LintProblem{Tool: tool, Path: path, Line: line, Message: fmt.Sprintf(format, args...)})
}

func parseFile(data []byte) (*Registry, error) {
	l := &linter{}
	r := l.file(data)
	if len(l.problems) > 0 {
		sort.SliceStable(l.problems, func(i, j int) bool { return l.problems[i].Line < l.problems[j].Line })
		return nil, &LintError{Problems: l.problems}
	}
	return r, nil
}

func (l *linter) file(data []byte) *Registry {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			l.add(nil, "", "", "the file is empty; it must hold a tools: mapping")
		} else {
			l.add(nil, "", "", "not valid YAML: %v", err)
		}
		return nil
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		l.add(&extra, "", "", "the file holds more than one YAML document")
		return nil
	}
	if !l.plain(&doc) {
		return nil
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	top, ok := l.mapping(root, "", "")
	if !ok {
		return nil
	}
	var toolsNode, mcpNode *yaml.Node
	for _, e := range top {
		switch e.key {
		case "tools":
			toolsNode = e.val
		case "mcp":
			mcpNode = e.val
		case "notifications":
			// Channels and routes, read and checked by internal/notify.
		default:
			l.add(e.keyNode, "", "", "unknown top-level field %s (fields: tools, mcp, notifications)", displayName(e.key))
		}
	}
	r := &Registry{tools: map[string]*Tool{}}
	if mcpNode != nil {
		l.mcpSection(mcpNode, r)
	}
	if toolsNode == nil && mcpNode == nil {
		l.add(root, "", "", "tools is required: a mapping from tool name to tool")
		return nil
	}
	var entries []entry
	if toolsNode != nil {
		if entries, ok = l.mapping(toolsNode, "", "tools"); !ok {
			return nil
		}
		if len(entries) == 0 && mcpNode == nil {
			l.add(toolsNode, "", "tools", "no tools are declared")
		}
	}
	for _, e := range entries {
		if !toolNamePattern.MatchString(e.key) || len(e.key) > canonical.MaxToolBytes {
			l.add(e.keyNode, displayName(e.key), "", "tool names are dotted lower-case words matching %s, at most %d bytes",
				toolNamePattern, canonical.MaxToolBytes)
			l.tool(displayName(e.key), e.keyNode, e.val) // lint the rest all the same
			continue
		}
		if t := l.tool(e.key, e.keyNode, e.val); t != nil {
			r.tools[t.Name] = t
		}
	}
	r.names = sortedKeys(r.tools)
	if len(l.problems) == 0 {
		if doc, ok := l.value(root, "", ""); ok {
			r.digest = prefixedDigest("countersign/v1/tools:", doc)
		}
	}
	return r
}

// plain refuses anchors, aliases, merge keys and custom tags anywhere: each
// tool is read exactly as written.
func (l *linter) plain(n *yaml.Node) bool {
	ok := true
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		switch {
		case n.Kind == yaml.AliasNode:
			l.add(n, "", "", "YAML aliases (*%s) are not supported; write each tool out in full", n.Value)
			ok = false
			return
		case n.Anchor != "":
			l.add(n, "", "", "YAML anchors (&%s) are not supported; write each tool out in full", n.Anchor)
			ok = false
		case n.ShortTag() == "!!merge":
			l.add(n, "", "", "YAML merge keys (<<) are not supported; write each tool out in full")
			ok = false
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(n)
	return ok
}

type entry struct {
	key     string
	keyNode *yaml.Node
	val     *yaml.Node
}

// mapping returns the entries of a mapping node, refusing duplicate and
// non-scalar keys.
func (l *linter) mapping(n *yaml.Node, tool, path string) ([]entry, bool) {
	if n.Kind != yaml.MappingNode {
		l.add(n, tool, path, "must be a mapping, not %s", yamlKind(n))
		return nil, false
	}
	entries := make([]entry, 0, len(n.Content)/2)
	seen := make(map[string]int, len(n.Content)/2)
	ok := true
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			l.add(k, tool, path, "keys must be plain names, not %s", yamlKind(k))
			ok = false
			continue
		}
		if line, dup := seen[k.Value]; dup {
			l.add(k, tool, path, "%s appears twice (first at line %d)", displayName(k.Value), line)
			ok = false
			continue
		}
		seen[k.Value] = k.Line
		entries = append(entries, entry{key: k.Value, keyNode: k, val: v})
	}
	return entries, ok
}

func yamlKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "null"
		case "!!int":
			return "an integer"
		case "!!float":
			return "a fractional number"
		case "!!bool":
			return "a boolean"
		}
		return fmt.Sprintf("the scalar %q", n.Value)
	case yaml.AliasNode:
		return "an alias"
	}
	return "a document"
}

// str reads a string scalar.
func (l *linter) str(n *yaml.Node, tool, path string) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		l.add(n, tool, path, "must be a string, not %s", yamlKind(n))
		return "", false
	}
	return n.Value, true
}

// integer reads an integer scalar within ±(2^53−1).
func (l *linter) integer(n *yaml.Node, tool, path string) (int64, bool) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		l.add(n, tool, path, "must be an integer, not %s", yamlKind(n))
		return 0, false
	}
	var i int64
	if err := n.Decode(&i); err != nil || i > canonical.MaxInt || i < -canonical.MaxInt {
		l.add(n, tool, path, "must be an integer within ±%d", int64(canonical.MaxInt))
		return 0, false
	}
	return i, true
}

func (l *linter) boolean(n *yaml.Node, tool, path string) (bool, bool) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
		l.add(n, tool, path, "must be true or false, not %s", yamlKind(n))
		return false, false
	}
	var b bool
	if err := n.Decode(&b); err != nil {
		l.add(n, tool, path, "must be true or false")
		return false, false
	}
	return b, true
}

func (l *linter) duration(n *yaml.Node, tool, path string) (time.Duration, bool) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		l.add(n, tool, path, "must be a duration with a unit like 60s or 15m, not %s", yamlKind(n))
		return 0, false
	}
	d, err := time.ParseDuration(n.Value)
	if err != nil {
		l.add(n, tool, path, "must be a duration with a unit like 60s or 15m, not %q", n.Value)
		return 0, false
	}
	return d, true
}

// value converts a YAML value to a canonical value (nil, bool, int64,
// string, []any, canonical.Object), refusing fractional numbers and tags
// JSON cannot carry.
func (l *linter) value(n *yaml.Node, tool, path string) (any, bool) {
	switch n.Kind {
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!str", "!!timestamp":
			return n.Value, true
		case "!!null":
			return nil, true
		case "!!bool":
			return l.boolean(n, tool, path)
		case "!!int":
			return l.integer(n, tool, path)
		case "!!float":
			l.add(n, tool, path, "fractional numbers are not allowed (%s); Countersign accepts integers only", n.Value)
			return nil, false
		}
		l.add(n, tool, path, "the YAML tag %s has no JSON equivalent", n.ShortTag())
		return nil, false
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		ok := true
		for i, c := range n.Content {
			v, good := l.value(c, tool, path+"/"+strconv.Itoa(i))
			ok = ok && good
			out = append(out, v)
		}
		return out, ok
	case yaml.MappingNode:
		entries, ok := l.mapping(n, tool, path)
		members := make([]canonical.Member, 0, len(entries))
		for _, e := range entries {
			v, good := l.value(e.val, tool, path+"/"+e.key)
			ok = ok && good
			members = append(members, canonical.Member{Name: e.key, Value: v})
		}
		o, err := canonical.NewObject(members...)
		if err != nil {
			l.add(n, tool, path, "%v", err)
			return nil, false
		}
		return o, ok
	}
	l.add(n, tool, path, "unexpected %s", yamlKind(n))
	return nil, false
}

var toolFields = []string{"allowance", "approvals", "approve_from", "approve_with", "approvers", "args", "audience", "auto_approve", "confirm", "counter", "decide_within", "deny_reasons", "description", "display", "effects", "escalate", "grant_ttl", "informational", "outcome_within", "plan", "risk", "rules", "summary", "target"}

// tool reads and lints one tool. It returns nil when the tool has problems.
func (l *linter) tool(name string, key, n *yaml.Node) *Tool {
	before := len(l.problems)
	entries, ok := l.mapping(n, name, "")
	if !ok {
		return nil
	}
	t := &Tool{Name: name, Approvals: DefaultApprovals, GrantTTL: DefaultGrantTTL, DecideWithin: DefaultDecideWithin,
		OutcomeWithin: DefaultOutcomeWithin}
	fields := map[string]*yaml.Node{}
	for _, e := range entries {
		if !contains(toolFields, e.key) {
			l.add(e.keyNode, name, "", "unknown field %s (fields: %s)", displayName(e.key), strings.Join(toolFields, ", "))
			continue
		}
		fields[e.key] = e.val
	}
	if f := fields["description"]; f != nil {
		t.Description, _ = l.str(f, name, "description")
	}
	if f := fields["audience"]; f == nil {
		l.add(key, name, "", "audience is required: the host that executes this tool")
	} else if s, ok := l.str(f, name, "audience"); ok {
		if s == "" || strings.IndexFunc(s, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) >= 0 {
			l.add(f, name, "audience", "must be a non-empty name without spaces or invisible characters")
		}
		t.Audience = s
	}
	if f := fields["target"]; f == nil {
		l.add(key, name, "", "target is required: a pattern the whole target must match (write '.+' to allow any)")
	} else if s, ok := l.str(f, name, "target"); ok {
		if s == "" {
			l.add(f, name, "target", "must be a non-empty pattern")
		} else if _, err := regexp.Compile(s); err != nil {
			l.add(f, name, "target", "pattern does not compile: %v", err)
		} else {
			// Anchored: the pattern must match the whole target.
			t.Target, t.TargetPattern = regexp.MustCompile(`^(?:`+s+`)$`), s
		}
	}
	if f := fields["approvals"]; f != nil {
		if i, ok := l.integer(f, name, "approvals"); ok {
			if i < 1 || i > MaxApprovals {
				l.add(f, name, "approvals", "must be between 1 and %d, not %d", MaxApprovals, i)
			}
			t.Approvals = int(i)
		}
	}
	if f := fields["grant_ttl"]; f != nil {
		if d, ok := l.duration(f, name, "grant_ttl"); ok {
			switch {
			case d < time.Second || d%time.Second != 0:
				l.add(f, name, "grant_ttl", "must be a whole number of seconds, at least 1s, not %s", f.Value)
			case d > MaxGrantTTL:
				l.add(f, name, "grant_ttl", "%s is over the %s limit", f.Value, fmtDuration(MaxGrantTTL))
			}
			t.GrantTTL = d
		}
	}
	if f := fields["decide_within"]; f != nil {
		if d, ok := l.duration(f, name, "decide_within"); ok {
			if d < time.Second || d > MaxDecideWithin {
				l.add(f, name, "decide_within", "must be between 1s and %s, not %s", fmtDuration(MaxDecideWithin), f.Value)
			}
			t.DecideWithin = d
		}
	}
	if f := fields["outcome_within"]; f != nil {
		if d, ok := l.outcomeWithin(f, name, "outcome_within"); ok {
			t.OutcomeWithin = d
		}
	}
	if f := fields["args"]; f == nil {
		l.add(key, name, "", "args is required: a closed object schema (use {type: object, additionalProperties: false} for none)")
	} else {
		t.args = l.schema(f, name, "args", 1)
		if t.args != nil && t.args.types != typeObject {
			l.add(f, name, "args", "the args schema must have type: object")
		}
	}
	if f := fields["auto_approve"]; f != nil {
		if s, ok := l.str(f, name, "auto_approve"); ok {
			switch s {
			case AutoApproveAllowed:
				t.AutoApprove = true
			case AutoApproveNever:
			default:
				l.add(f, name, "auto_approve", "must be %s or %s, not %s", AutoApproveAllowed, AutoApproveNever, displayName(s))
			}
		}
	}
	if f := fields["approve_with"]; f != nil {
		t.RequirePasskey = l.approveWith(f, name, "approve_with")
	}
	if f := fields["approve_from"]; f != nil {
		t.ApproveFrom = l.approveFrom(f, name)
	}
	if f := fields["approvers"]; f != nil {
		t.Approvers = l.approvers(f, name)
	}
	if f := fields["rules"]; f != nil {
		t.Rules = l.rules(f, name)
	}
	if t.args != nil && t.args.types == typeObject {
		if f := fields["informational"]; f != nil {
			t.Informational = l.informational(f, t)
		}
		if f := fields["display"]; f != nil {
			t.Money = l.display(f, t)
		}
		if f := fields["summary"]; f != nil {
			t.Summary = l.summary(f, t)
		}
	}
	if f := fields["allowance"]; f != nil && t.args != nil && t.args.types == typeObject {
		t.Allowance = l.allowance(f, t)
	}
	if f := fields["plan"]; f != nil {
		t.Plan = l.plan(f, t)
	}
	if f := fields["risk"]; f != nil {
		t.Risk = l.risk(f, t)
	}
	if f := fields["effects"]; f != nil {
		t.Effects = l.effects(f, t)
	}
	if f := fields["counter"]; f != nil {
		t.Counter = l.counter(f, t)
	}
	confirmNone := false
	if f := fields["confirm"]; f != nil {
		if f.Kind == yaml.ScalarNode && f.Value == ConfirmNone {
			confirmNone = true
		} else {
			t.Confirm = l.confirm(f, t)
		}
	}
	if t.Risk == RiskHigh && t.Confirm == nil && !confirmNone {
		t.Confirm = &Confirm{Target: true}
	}
	if f := fields["deny_reasons"]; f != nil {
		t.DenyReasons = l.denyReasons(f, t)
	}
	if f := fields["escalate"]; f != nil {
		t.Escalate = l.tiers(f, t)
	}
	if len(l.problems) > before {
		return nil
	}
	raw, ok := l.value(fields["args"], name, "args")
	if !ok {
		return nil
	}
	b, err := canonical.Encode(raw)
	if err != nil {
		l.add(fields["args"], name, "args", "%v", err)
		return nil
	}
	t.schema = b
	entry, ok := l.value(n, name, "")
	if !ok {
		return nil
	}
	t.DefinitionDigest = definitionDigest(name, entry)
	return t
}

// outcomeWithin reads an outcome_within: whole seconds from 1s to
// MaxOutcomeWithin.
func (l *linter) outcomeWithin(n *yaml.Node, tool, path string) (time.Duration, bool) {
	d, ok := l.duration(n, tool, path)
	if !ok {
		return 0, false
	}
	if d < time.Second || d%time.Second != 0 || d > MaxOutcomeWithin {
		l.add(n, tool, path, "must be a whole number of seconds from 1s to %s, not %s", fmtDuration(MaxOutcomeWithin), n.Value)
		return 0, false
	}
	return d, true
}

func fmtDuration(d time.Duration) string {
	if d%time.Hour == 0 {
		return fmt.Sprintf("%dh", d/time.Hour)
	}
	return fmt.Sprintf("%ds", d/time.Second)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// resolve finds the schema of the args member at ptr, through declared
// properties only.
func resolve(s *schema, ptr string) (*schema, error) {
	tokens, err := canonical.SplitPointer(ptr)
	if err != nil {
		return nil, err
	}
	if len(tokens) == 0 {
		return nil, errors.New("the pointer names args itself; name a member such as /notes")
	}
	for i, tok := range tokens {
		sub, ok := s.properties[tok]
		if !ok {
			where := "args"
			if i > 0 {
				where = canonical.Pointer(tokens[:i]...)
			}
			return nil, fmt.Errorf("%s is not a declared property of %s", displayName(tok), where)
		}
		s = sub
	}
	return s, nil
}

func (l *linter) pointers(n *yaml.Node, tool, path string) ([]string, []*yaml.Node) {
	if n.Kind != yaml.SequenceNode {
		l.add(n, tool, path, "must be a list of JSON Pointers into args, such as [/notes]")
		return nil, nil
	}
	var out []string
	var nodes []*yaml.Node
	for i, c := range n.Content {
		p := path + "/" + strconv.Itoa(i)
		s, ok := l.str(c, tool, p)
		if !ok {
			continue
		}
		if contains(out, s) {
			l.add(c, tool, p, "%s is listed twice", s)
			continue
		}
		out = append(out, s)
		nodes = append(nodes, c)
	}
	return out, nodes
}

func (l *linter) informational(n *yaml.Node, t *Tool) []string {
	ptrs, nodes := l.pointers(n, t.Name, "informational")
	for i, p := range ptrs {
		if _, err := resolve(t.args, p); err != nil {
			l.add(nodes[i], t.Name, "informational", "%s: %v", p, err)
		}
	}
	return ptrs
}

func (l *linter) display(n *yaml.Node, t *Tool) *Money {
	entries, ok := l.mapping(n, t.Name, "display")
	if !ok {
		return nil
	}
	var money *Money
	for _, e := range entries {
		if e.key != "money" {
			l.add(e.keyNode, t.Name, "display", "unknown display %s (displays: money)", displayName(e.key))
			continue
		}
		fields, ok := l.mapping(e.val, t.Name, "display/money")
		if !ok {
			continue
		}
		m := &Money{}
		for _, f := range fields {
			path := "display/money/" + f.key
			var dst *string
			var want jsonType
			switch f.key {
			case "amount":
				dst, want = &m.Amount, typeInteger
			case "currency":
				dst, want = &m.Currency, typeString
			default:
				l.add(f.keyNode, t.Name, "display/money", "unknown field %s (fields: amount, currency)", displayName(f.key))
				continue
			}
			s, ok := l.str(f.val, t.Name, path)
			if !ok {
				continue
			}
			*dst = s
			target, err := resolve(t.args, s)
			if err != nil {
				l.add(f.val, t.Name, path, "%s: %v", s, err)
				continue
			}
			if target.valueTypes() != want {
				l.add(f.val, t.Name, path, "%s must be declared as %s only, not %s", s, want.describe(), target.valueTypes().describe())
			}
			if t.IsInformational(s) {
				l.add(f.val, t.Name, path, "%s is informational; money shown to the operator must be bound by the digest", s)
			}
		}
		if m.Amount == "" {
			l.add(e.val, t.Name, "display/money", "amount is required: a JSON Pointer to the integer amount in minor units")
		}
		if m.Currency == "" {
			l.add(e.val, t.Name, "display/money", "currency is required: a JSON Pointer to the ISO 4217 currency code")
		}
		money = m
	}
	return money
}

// valueTypes is the set of types a value accepted by s can have.
func (s *schema) valueTypes() jsonType {
	if s.types != 0 {
		return s.types
	}
	var t jsonType
	for _, e := range s.enum {
		t |= typeOf(e)
	}
	return t
}
