// Package scope is what an allowance approves: a materialised scope, made
// from one pending call (the base call) and an operator's choices within
// the tool's ceilings, its digest, the test of whether it covers a later
// call, and the words an operator reads before giving it.
//
// A scope is never implied. It names the target and every member of the
// base call's bound args by JSON Pointer, each with the one bound it
// allows (equals, max, in), and every optional member the base call lacks
// as absent. A call is covered only when everything in it is named and
// within its bound. The package stores nothing: the queue counts uses and
// judges each covered call's own requirements.
package scope

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/tools"
)

// DigestPrefix is hashed before the canonical bytes of a scope.
const DigestPrefix = "countersign/v1/scope:"

// Refusals of Materialise and Parse. Each is wrapped with the detail of
// what was refused.
var (
	ErrNoAllowance  = errors.New("scope: the tool does not allow allowances")
	ErrPasskeyTool  = errors.New("scope: the tool's approvals can require a passkey; it is never covered by an allowance")
	ErrToolMismatch = errors.New("scope: the base call was made under another tool or definition")
	ErrUses         = errors.New("scope: uses outside the tool's ceiling")
	ErrUntil        = errors.New("scope: until outside the tool's ceiling")
	ErrNotVariable  = errors.New("scope: the member may not vary")
	ErrAboveMaximum = errors.New("scope: maximum above what the tool's schema allows")
	ErrNotInEnum    = errors.New("scope: value outside the member's enum")
	ErrBaseOutside  = errors.New("scope: the base call would fall outside the scope")
	ErrMalformed    = errors.New("scope: malformed scope")
)

// Call is a call as a scope sees it: who proposed it, for which executor,
// of which tool under which definition, and what it does.
type Call struct {
	Actor, Audience, Tool, Target string
	// ToolDigest is the tool definition digest the call was submitted under.
	ToolDigest string
	Args       canonical.Object
}

// Kind is how one args member is bound.
type Kind int

const (
	Equals Kind = iota + 1
	Max
	In
	Absent
)

// Bound is the bound of one args member.
type Bound struct {
	Kind  Kind
	Value any      // Equals: the value, whole
	Max   int64    // Max: the greatest integer allowed
	In    []string // In: the allowed strings, sorted, distinct
}

// Target bounds the target: equal to Value, or (Prefix) starting with it.
type Target struct {
	Value  string
	Prefix bool
}

// Scope is a materialised scope (DESIGN §10).
type Scope struct {
	Actor, Audience, Tool, ToolDigest string
	Target                            Target
	// Args bounds members by JSON Pointer into args.
	Args        map[string]Bound
	Uses        int
	OncePerCall bool
	// Until is when the scope ends, UTC, whole seconds.
	Until time.Time
}

// Member is an operator's choice for one varying args member: Max for an
// integer, In for an enum, exactly one of them. A member without a choice
// stays equal to the base call's.
type Member struct {
	Max *int64
	In  []string
}

// Choices are what an operator chose on "approve this and more like it".
type Choices struct {
	Uses  int
	Until time.Time
	// TargetPrefix, when not empty, lets the target vary: a covered call's
	// target must start with it (and still match the tool's pattern).
	TargetPrefix string
	// Members maps JSON Pointers of varying members to their bounds.
	Members map[string]Member
	// RepeatCalls lets the identical call be approved more than once; by
	// default each distinct call is approved at most once.
	RepeatCalls bool
}

// Materialise makes the scope of an allowance from its base call, the
// tool's definition and the operator's choices at now, refusing anything
// beyond the tool's ceilings or its schema's bounds.
func Materialise(base Call, t *tools.Tool, c Choices, now time.Time) (*Scope, error) {
	a := t.Allowance
	switch {
	case a == nil:
		return nil, fmt.Errorf("%w: %s has no allowance block in the tools file", ErrNoAllowance, t.Name)
	case t.AsksPasskey():
		return nil, fmt.Errorf("%w: %s", ErrPasskeyTool, t.Name)
	case base.Tool != t.Name || base.ToolDigest != t.DefinitionDigest:
		return nil, fmt.Errorf("%w: the call is of %s under definition %s; the tool is %s under %s",
			ErrToolMismatch, base.Tool, short(base.ToolDigest), t.Name, short(t.DefinitionDigest))
	case t.Target == nil || !t.Target.MatchString(base.Target):
		return nil, fmt.Errorf("%w: its target %q does not match the tool's pattern %s", ErrBaseOutside, base.Target, t.TargetPattern)
	case c.Uses < 1 || c.Uses > a.MaxUses:
		return nil, fmt.Errorf("%w: %d uses; %s allows 1 to %d", ErrUses, c.Uses, t.Name, a.MaxUses)
	}
	until := c.Until.UTC().Truncate(time.Second)
	if !until.After(now) || until.After(now.Add(a.MaxFor)) {
		return nil, fmt.Errorf("%w: %s; %s allows up to %s from now (%s)", ErrUntil,
			until.Format(time.RFC3339), t.Name, a.MaxFor, now.Add(a.MaxFor).UTC().Format(time.RFC3339))
	}
	s := &Scope{Actor: base.Actor, Audience: base.Audience, Tool: base.Tool, ToolDigest: base.ToolDigest,
		Target: Target{Value: base.Target}, Args: map[string]Bound{}, Uses: c.Uses, OncePerCall: !c.RepeatCalls, Until: until}
	if c.TargetPrefix != "" {
		if !a.Varies(tools.VaryTarget) {
			return nil, fmt.Errorf("%w: target (%s lets vary: %s)", ErrNotVariable, t.Name, varyList(a))
		}
		if !strings.HasPrefix(base.Target, c.TargetPrefix) {
			return nil, fmt.Errorf("%w: the prefix %q does not start the base call's target %q", ErrBaseOutside, c.TargetPrefix, base.Target)
		}
		s.Target = Target{Value: c.TargetPrefix, Prefix: true}
	}
	args := t.Bound(base.Args)
	for ptr, m := range c.Members {
		if !a.Varies(ptr) {
			return nil, fmt.Errorf("%w: %s (%s lets vary: %s)", ErrNotVariable, ptr, t.Name, varyList(a))
		}
		v, ok := canonical.Lookup(args, ptr)
		if !ok {
			return nil, fmt.Errorf("%w: %s is absent from the base call, so it stays absent", ErrNotVariable, ptr)
		}
		kind, schemaMax, hasMax, enum := t.VaryOf(ptr)
		switch {
		case kind == tools.VaryInteger && m.Max != nil && m.In == nil:
			n, isInt := v.(int64)
			if !isInt {
				return nil, fmt.Errorf("%w: %s is not an integer in the base call", ErrBaseOutside, ptr)
			}
			if hasMax && *m.Max > schemaMax {
				return nil, fmt.Errorf("%w: %s at most %d; the schema allows at most %d", ErrAboveMaximum, ptr, *m.Max, schemaMax)
			}
			if !hasMax && *m.Max > canonical.MaxInt {
				return nil, fmt.Errorf("%w: %s at most %d; integers end at %d", ErrAboveMaximum, ptr, *m.Max, int64(canonical.MaxInt))
			}
			if n > *m.Max {
				return nil, fmt.Errorf("%w: %s is %d in the base call, above the maximum %d", ErrBaseOutside, ptr, n, *m.Max)
			}
			s.Args[ptr] = Bound{Kind: Max, Max: *m.Max}
		case kind == tools.VaryEnum && m.In != nil && m.Max == nil:
			in := slices.Clone(m.In)
			sort.Slice(in, func(i, j int) bool { return canonical.CompareUTF16(in[i], in[j]) < 0 })
			in = slices.Compact(in)
			for _, x := range in {
				if !slices.Contains(enum, x) {
					return nil, fmt.Errorf("%w: %s may be %q only if the schema's enum (%s) holds it", ErrNotInEnum, ptr, x, strings.Join(enum, ", "))
				}
			}
			if str, _ := v.(string); !slices.Contains(in, str) {
				return nil, fmt.Errorf("%w: %s is %q in the base call, not among %s", ErrBaseOutside, ptr, str, strings.Join(in, ", "))
			}
			s.Args[ptr] = Bound{Kind: In, In: in}
		case kind == tools.VaryInteger:
			return nil, fmt.Errorf("%w: %s is an integer; give a maximum only", ErrNotVariable, ptr)
		case kind == tools.VaryEnum:
			return nil, fmt.Errorf("%w: %s is an enum; give a subset only", ErrNotVariable, ptr)
		default:
			return nil, fmt.Errorf("%w: %s", ErrNotVariable, ptr)
		}
	}
	// Every other member: equal whole, except objects on the way to a
	// varying member, whose own members are named one by one. Every
	// declared member missing at a level that is named one by one is
	// absent.
	var walk func(o canonical.Object, at string, schema tools.ArgSchema)
	walk = func(o canonical.Object, at string, schema tools.ArgSchema) {
		for _, name := range schema.Properties() {
			if _, ok := o.Get(name); !ok {
				s.Args[at+canonical.Pointer(name)] = Bound{Kind: Absent}
			}
		}
		for _, m := range o {
			ptr := at + canonical.Pointer(m.Name)
			if t.IsInformational(ptr) {
				continue
			}
			if _, bound := s.Args[ptr]; bound {
				continue
			}
			if sub, isObj := m.Value.(canonical.Object); isObj && leadsTo(ptr, c.Members) {
				prop, _ := schema.Property(m.Name)
				walk(sub, ptr, prop)
				continue
			}
			s.Args[ptr] = Bound{Kind: Equals, Value: m.Value}
		}
	}
	walk(args, "", t.ArgsSchema())
	for ptr := range s.Args {
		if t.IsInformational(ptr) {
			delete(s.Args, ptr)
		}
	}
	return s, nil
}

// leadsTo reports whether a chosen member lies inside the member at ptr.
func leadsTo(ptr string, members map[string]Member) bool {
	for p := range members {
		if strings.HasPrefix(p, ptr+"/") {
			return true
		}
	}
	return false
}

func varyList(a *tools.Allowance) string {
	if len(a.Vary) == 0 {
		return "nothing"
	}
	return strings.Join(a.Vary, ", ")
}

func short(d string) string {
	if len(d) > 12 {
		return d[:12] + "…"
	}
	return d
}

// JSON returns the scope's canonical JSON (RFC 8785), the bytes its
// digest is taken over.
func (s *Scope) JSON() []byte {
	b, err := canonical.Encode(s.object())
	if err != nil {
		panic("scope: encode a materialised scope: " + err.Error())
	}
	return b
}

// Digest is hex(SHA-256("countersign/v1/scope:" || JCS(scope))).
func (s *Scope) Digest() string {
	h := sha256.New()
	h.Write([]byte(DigestPrefix))
	h.Write(s.JSON())
	return hex.EncodeToString(h.Sum(nil))
}

func (s *Scope) object() canonical.Object {
	target := "equals"
	if s.Target.Prefix {
		target = "prefix"
	}
	args := make([]canonical.Member, 0, len(s.Args))
	for _, ptr := range sortedPointers(s.Args) {
		b := s.Args[ptr]
		var v any
		switch b.Kind {
		case Equals:
			v = mustObject(canonical.Member{Name: "equals", Value: b.Value})
		case Max:
			v = mustObject(canonical.Member{Name: "max", Value: b.Max})
		case In:
			in := make([]any, len(b.In))
			for i, x := range b.In {
				in[i] = x
			}
			v = mustObject(canonical.Member{Name: "in", Value: in})
		case Absent:
			v = "absent"
		}
		args = append(args, canonical.Member{Name: ptr, Value: v})
	}
	return mustObject(
		canonical.Member{Name: "v", Value: int64(1)},
		canonical.Member{Name: "actor", Value: s.Actor},
		canonical.Member{Name: "audience", Value: s.Audience},
		canonical.Member{Name: "tool", Value: s.Tool},
		canonical.Member{Name: "tool_digest", Value: s.ToolDigest},
		canonical.Member{Name: "target", Value: mustObject(canonical.Member{Name: target, Value: s.Target.Value})},
		canonical.Member{Name: "args", Value: mustObject(args...)},
		canonical.Member{Name: "uses", Value: int64(s.Uses)},
		canonical.Member{Name: "once_per_call", Value: s.OncePerCall},
		canonical.Member{Name: "until", Value: s.Until.UTC().Format(time.RFC3339)},
	)
}

func mustObject(ms ...canonical.Member) canonical.Object {
	o, err := canonical.NewObject(ms...)
	if err != nil {
		panic("scope: " + err.Error())
	}
	return o
}

func sortedPointers(m map[string]Bound) []string {
	ps := make([]string, 0, len(m))
	for p := range m {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return canonical.CompareUTF16(ps[i], ps[j]) < 0 })
	return ps
}

// Covers reports whether the scope covers the call under the tool's
// current definition t, and when it does not, why, in words for a
// person. It judges the call's shape only: the queue also counts uses,
// checks until, and judges the call's own requirements at use.
func Covers(s *Scope, t *tools.Tool, c Call) (bool, string) {
	switch {
	case c.Actor != s.Actor:
		return false, fmt.Sprintf("the call is by %s, the allowance is for %s", c.Actor, s.Actor)
	case c.Audience != s.Audience:
		return false, fmt.Sprintf("the call is for %s, the allowance is for %s", c.Audience, s.Audience)
	case c.Tool != s.Tool || t.Name != s.Tool:
		return false, fmt.Sprintf("the call is of %s, the allowance is for %s", c.Tool, s.Tool)
	case c.ToolDigest != s.ToolDigest || t.DefinitionDigest != s.ToolDigest:
		return false, "the tool's definition changed since the allowance was given"
	case t.Allowance == nil || t.AsksPasskey():
		return false, "the tool no longer allows allowances"
	}
	if s.Target.Prefix {
		if !strings.HasPrefix(c.Target, s.Target.Value) {
			return false, fmt.Sprintf("the target %q does not start with %q", c.Target, s.Target.Value)
		}
		if t.Target == nil || !t.Target.MatchString(c.Target) {
			return false, fmt.Sprintf("the target %q does not match the tool's pattern", c.Target)
		}
	} else if c.Target != s.Target.Value {
		return false, fmt.Sprintf("the target %q is not %q", c.Target, s.Target.Value)
	}
	args := t.Bound(c.Args)
	for _, ptr := range sortedPointers(s.Args) {
		b := s.Args[ptr]
		v, present := canonical.Lookup(args, ptr)
		switch {
		case b.Kind == Absent:
			if present {
				return false, fmt.Sprintf("%s is in the call; the allowance covers calls without it", ptr)
			}
		case !present:
			return false, fmt.Sprintf("%s is missing from the call", ptr)
		case b.Kind == Equals:
			if !sameValue(v, b.Value) {
				return false, fmt.Sprintf("%s differs from the allowance's", ptr)
			}
		case b.Kind == Max:
			n, ok := v.(int64)
			if !ok || n > b.Max {
				return false, fmt.Sprintf("%s is above %d", ptr, b.Max)
			}
		case b.Kind == In:
			str, ok := v.(string)
			if !ok || !slices.Contains(b.In, str) {
				return false, fmt.Sprintf("%s is not one of %s", ptr, strings.Join(b.In, ", "))
			}
		}
	}
	if ptr, ok := unnamed(args, "", s.Args); ok {
		return false, fmt.Sprintf("%s is not named by the allowance", ptr)
	}
	return true, ""
}

// unnamed finds a member of o (at pointer at) that the bounds neither name
// nor lead to.
func unnamed(o canonical.Object, at string, bounds map[string]Bound) (string, bool) {
	for _, m := range o {
		ptr := at + canonical.Pointer(m.Name)
		if _, named := bounds[ptr]; named {
			continue
		}
		sub, isObj := m.Value.(canonical.Object)
		if !isObj || !namesInside(ptr, bounds) {
			return ptr, true
		}
		if p, ok := unnamed(sub, ptr, bounds); ok {
			return p, true
		}
	}
	return "", false
}

func namesInside(ptr string, bounds map[string]Bound) bool {
	for p := range bounds {
		if strings.HasPrefix(p, ptr+"/") {
			return true
		}
	}
	return false
}

func sameValue(a, b any) bool {
	x, err1 := canonical.Encode(a)
	y, err2 := canonical.Encode(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}
