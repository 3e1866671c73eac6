package tools

import (
	"fmt"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/countersign/countersign/internal/canonical"
)

// Hard bounds of a tool's allowance block. A tools file may lower them,
// never raise them.
const (
	MinAllowanceUses = 1
	MaxAllowanceUses = 1000
	MinAllowanceFor  = time.Minute
	MaxAllowanceFor  = 24 * time.Hour
)

// VaryTarget is the vary entry that lets an allowance cover other targets
// (equal, or sharing a literal prefix, and still matching the tool's
// target pattern).
const VaryTarget = "target"

// Allowance is a tool's opt-in to allowances: an operator's bounded,
// standing approval of calls like one pending call (allowance: {max_uses,
// max_for, vary}). A tool without the block is never covered by one.
type Allowance struct {
	// MaxUses is the most uses an operator may give one allowance.
	MaxUses int
	// MaxFor is the longest an allowance may live, from when it is given.
	MaxFor time.Duration
	// Vary lists what may differ from the base call: "target", or JSON
	// Pointers into args naming members declared as integers only or as
	// string enums. Nothing else may vary.
	Vary []string
}

// Varies reports whether the allowance lets the member at ptr (or
// "target") vary.
func (a *Allowance) Varies(ptr string) bool { return a != nil && contains(a.Vary, ptr) }

// VaryKind says how a varying args member may vary: VaryInteger (up to a
// maximum) or VaryEnum (within a subset of the enum).
type VaryKind int

const (
	VaryNone VaryKind = iota
	VaryInteger
	VaryEnum
)

// VaryOf returns how the args member at ptr may vary, with the schema's
// maximum for an integer (ok false when it has none) and the enum's
// values for an enum. VaryNone for anything else.
func (t *Tool) VaryOf(ptr string) (kind VaryKind, maximum int64, hasMax bool, enum []string) {
	s, err := resolve(t.args, ptr)
	if err != nil {
		return VaryNone, 0, false, nil
	}
	return varyKind(s)
}

func varyKind(s *schema) (VaryKind, int64, bool, []string) {
	switch {
	case s.types == typeInteger && len(s.enum) == 0:
		if s.minimum == nil && s.exclusiveMinimum == nil {
			// A scope bounds an integer by a maximum only: the schema's
			// minimum is its floor, and without one there is none.
			return VaryNone, 0, false, nil
		}
		switch {
		case s.maximum != nil && s.exclusiveMaximum != nil:
			m := min(int64(*s.maximum), int64(*s.exclusiveMaximum)-1)
			return VaryInteger, m, true, nil
		case s.maximum != nil:
			return VaryInteger, int64(*s.maximum), true, nil
		case s.exclusiveMaximum != nil:
			return VaryInteger, int64(*s.exclusiveMaximum) - 1, true, nil
		}
		return VaryInteger, 0, false, nil
	case len(s.enum) > 0 && !s.isConst && s.valueTypes() == typeString:
		var vals []string
		for _, e := range s.enum {
			vals = append(vals, e.(string))
		}
		return VaryEnum, 0, false, vals
	}
	return VaryNone, 0, false, nil
}

// IsRequired reports whether the args member at ptr is required by its
// parent object's schema (every object on the way to it being present).
func (t *Tool) IsRequired(ptr string) bool {
	i := strings.LastIndexByte(ptr, '/')
	if i < 0 {
		return false
	}
	parent := t.args
	if i > 0 {
		var err error
		if parent, err = resolve(t.args, ptr[:i]); err != nil {
			return false
		}
	}
	name := ptr[i+1:]
	name = strings.ReplaceAll(strings.ReplaceAll(name, "~1", "/"), "~0", "~")
	return contains(parent.required, name)
}

// AsksPasskey reports whether any approval of the tool's calls may have
// to be signed by a passkey: the tool requires it, or one of its rules
// can ask for it. Such a tool is never covered by an allowance.
func (t *Tool) AsksPasskey() bool {
	if t.RequirePasskey {
		return true
	}
	for _, r := range t.Rules {
		if r.RequirePasskey {
			return true
		}
	}
	return false
}

// varyProblem says why the args member at ptr of a schema may not vary in
// an allowance, "" when it may.
func varyProblem(args *schema, ptr string) string {
	sub, err := resolve(args, ptr)
	if err != nil {
		return fmt.Sprintf("%s: %v", ptr, err)
	}
	if !varies(sub) {
		return varyRefusal(ptr, sub)
	}
	return ""
}

// allowance reads and lints a tool's allowance block.
func (l *linter) allowance(n *yaml.Node, t *Tool) *Allowance {
	const path = "allowance"
	entries, ok := l.mapping(n, t.Name, path)
	if !ok {
		return nil
	}
	a := &Allowance{}
	seen := map[string]bool{}
	for _, e := range entries {
		seen[e.key] = true
		p := path + "/" + e.key
		switch e.key {
		case "max_uses":
			if i, ok := l.integer(e.val, t.Name, p); ok {
				if i < MinAllowanceUses || i > MaxAllowanceUses {
					l.add(e.val, t.Name, p, "must be between %d and %d, not %d", MinAllowanceUses, MaxAllowanceUses, i)
				}
				a.MaxUses = int(i)
			}
		case "max_for":
			if d, ok := l.duration(e.val, t.Name, p); ok {
				if d < MinAllowanceFor || d > MaxAllowanceFor || d%time.Second != 0 {
					l.add(e.val, t.Name, p, "must be whole seconds from 1m to %s, not %s", fmtDuration(MaxAllowanceFor), e.val.Value)
				}
				a.MaxFor = d
			}
		case "vary":
			a.Vary = l.vary(e.val, t)
		default:
			l.add(e.keyNode, t.Name, path, "unknown field %s (fields: max_uses, max_for, vary)", displayName(e.key))
		}
	}
	if !seen["max_uses"] {
		l.add(n, t.Name, path, "max_uses is required: the most calls one allowance may approve (1 to %d)", MaxAllowanceUses)
	}
	if !seen["max_for"] {
		l.add(n, t.Name, path, "max_for is required: the longest one allowance may live (1m to %s)", fmtDuration(MaxAllowanceFor))
	}
	if t.AsksPasskey() {
		l.add(n, t.Name, path, "this tool's approvals can require a passkey (approve_with: passkey on the tool or a rule); such a tool is never covered by an allowance: remove the allowance block")
	}
	return a
}

func (l *linter) vary(n *yaml.Node, t *Tool) []string {
	return l.pointerList(n, t, "allowance/vary", false, "an allowance cannot bound it",
		func(c *yaml.Node, p, ptr string, sub *schema) {
			switch {
			case t.Money != nil && ptr == t.Money.Currency:
				l.add(c, t.Name, p, "%s is the currency of the money display: a money amount may vary only while its currency is fixed", ptr)
			case !varies(sub):
				l.add(c, t.Name, p, "%s", varyRefusal(ptr, sub))
			}
		})
}

// varies reports whether a member of schema s may vary in an allowance.
func varies(s *schema) bool {
	kind, _, _, _ := varyKind(s)
	return kind != VaryNone
}

// pointerList reads a list of target and JSON Pointers into args, each
// named once (an allowance's vary, a counter-proposal's edit; nonEmpty
// when the list may not be empty). Each pointer must name a member the
// schema declares (for a mirrored tool, whose schema is the upstream's,
// be well formed: Mirror checks the member once listed) that the digest
// binds (unbound ends the refusal of an informational one). check judges
// each such member further.
func (l *linter) pointerList(n *yaml.Node, t *Tool, path string, nonEmpty bool, unbound string, check func(c *yaml.Node, p, ptr string, sub *schema)) []string {
	if n.Kind != yaml.SequenceNode || nonEmpty && len(n.Content) == 0 {
		article := "a"
		if nonEmpty {
			article = "a non-empty"
		}
		l.add(n, t.Name, path, "must be %s list of target and JSON Pointers into args, such as [target, /amount_minor]", article)
		return nil
	}
	var out []string
	for i, c := range n.Content {
		p := fmt.Sprintf("%s/%d", path, i)
		s, ok := l.str(c, t.Name, p)
		if !ok {
			continue
		}
		if contains(out, s) {
			l.add(c, t.Name, p, "%s is listed twice", displayName(s))
			continue
		}
		out = append(out, s)
		if s == VaryTarget { // CounterTarget too: both name the target
			continue
		}
		if !strings.HasPrefix(s, "/") {
			l.add(c, t.Name, p, "%s is neither target nor a JSON Pointer into args such as /amount_minor", displayName(s))
			continue
		}
		if t.args == nil {
			if _, err := canonical.SplitPointer(s); err != nil {
				l.add(c, t.Name, p, "%s: %v", s, err)
			}
			continue
		}
		sub, err := resolve(t.args, s)
		if err != nil {
			l.add(c, t.Name, p, "%s: %v", s, err)
			continue
		}
		if t.IsInformational(s) {
			l.add(c, t.Name, p, "%s is informational: the digest does not bind it, so %s", s, unbound)
			continue
		}
		if check != nil {
			check(c, p, s, sub)
		}
	}
	return out
}

// varyRefusal says why the member at ptr, of schema s, may not vary.
func varyRefusal(ptr string, s *schema) string {
	if s.types == typeInteger && len(s.enum) == 0 {
		return fmt.Sprintf("%s is an integer without a minimum; an allowance bounds it by a maximum only, so the schema must say how low it may go (minimum: 1, for instance)", ptr)
	}
	return fmt.Sprintf("%s is %s; only integers (with a minimum, bounded by a maximum) and string enums (bounded by a subset) may vary", ptr, describeVary(s))
}

func describeVary(s *schema) string {
	switch {
	case s.isConst:
		return "a constant"
	case len(s.enum) > 0:
		return "an enum of " + s.valueTypes().describe()
	}
	return s.valueTypes().describe()
}
