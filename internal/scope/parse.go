package scope

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/tools"
)

var scopeMembers = []string{"actor", "args", "audience", "once_per_call", "target", "tool", "tool_digest", "until", "uses", "v"}

// Parse reads a scope from its canonical JSON, strictly: unknown or
// missing members, wrong types, bounds that could not come from
// Materialise (overlapping pointers, an empty or unsorted in, more uses
// than any tool allows) and any text that is not exactly the scope's
// canonical form are refused with ErrMalformed.
func Parse(data []byte) (*Scope, error) {
	v, err := canonical.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if enc, err := canonical.Encode(v); err != nil || string(enc) != string(data) {
		return nil, fmt.Errorf("%w: not in canonical form (RFC 8785, no whitespace)", ErrMalformed)
	}
	o, ok := v.(canonical.Object)
	if !ok {
		return nil, bad("a scope is an object, not %s", canonical.TypeName(v))
	}
	if err := exactly(o, "", scopeMembers...); err != nil {
		return nil, err
	}
	s := &Scope{Args: map[string]Bound{}}
	if n, ok := get(o, "v").(int64); !ok || n != 1 {
		return nil, bad("v must be 1")
	}
	for name, dst := range map[string]*string{"actor": &s.Actor, "audience": &s.Audience, "tool": &s.Tool, "tool_digest": &s.ToolDigest} {
		str, ok := get(o, name).(string)
		if !ok || str == "" {
			return nil, bad("%s must be a non-empty string", name)
		}
		*dst = str
	}
	if !canonical.IsDigest(s.ToolDigest) {
		return nil, bad("tool_digest must be 64 lower-case hex digits")
	}
	target, ok := get(o, "target").(canonical.Object)
	if !ok || len(target) != 1 || (target[0].Name != "equals" && target[0].Name != "prefix") {
		return nil, bad(`target must be {"equals": TARGET} or {"prefix": PREFIX}`)
	}
	tv, ok := target[0].Value.(string)
	if !ok || tv == "" {
		return nil, bad("target/%s must be a non-empty string", target[0].Name)
	}
	s.Target = Target{Value: tv, Prefix: target[0].Name == "prefix"}
	uses, ok := get(o, "uses").(int64)
	if !ok || uses < 1 || uses > tools.MaxAllowanceUses {
		return nil, bad("uses must be an integer from 1 to %d", tools.MaxAllowanceUses)
	}
	s.Uses = int(uses)
	if s.OncePerCall, ok = get(o, "once_per_call").(bool); !ok {
		return nil, bad("once_per_call must be true or false")
	}
	until, _ := get(o, "until").(string)
	t, err := time.Parse(time.RFC3339, until)
	if err != nil || t.UTC().Format(time.RFC3339) != until {
		return nil, bad("until must be a UTC time in whole seconds such as 2026-01-02T15:04:05Z")
	}
	s.Until = t
	args, ok := get(o, "args").(canonical.Object)
	if !ok {
		return nil, bad("args must be an object of JSON Pointers to bounds")
	}
	for _, m := range args {
		if err := s.parseBound(m); err != nil {
			return nil, err
		}
	}
	ptrs := sortedPointers(s.Args)
	for i := range ptrs {
		for j := range ptrs {
			if i != j && strings.HasPrefix(ptrs[j], ptrs[i]+"/") {
				return nil, bad("args names %s and %s inside it; a member is bound once", ptrs[i], ptrs[j])
			}
		}
	}
	return s, nil
}

func (s *Scope) parseBound(m canonical.Member) error {
	ptr := m.Name
	if toks, err := canonical.SplitPointer(ptr); err != nil || len(toks) == 0 {
		return bad("args: %q is not a JSON Pointer to a member", ptr)
	}
	if m.Value == "absent" {
		s.Args[ptr] = Bound{Kind: Absent}
		return nil
	}
	b, ok := m.Value.(canonical.Object)
	if !ok || len(b) != 1 {
		return bad(`args%s must be "absent" or one of {"equals":V}, {"max":INT}, {"in":[...]}`, ptr)
	}
	switch b[0].Name {
	case "equals":
		s.Args[ptr] = Bound{Kind: Equals, Value: b[0].Value}
	case "max":
		n, ok := b[0].Value.(int64)
		if !ok {
			return bad("args%s/max must be an integer", ptr)
		}
		s.Args[ptr] = Bound{Kind: Max, Max: n}
	case "in":
		list, ok := b[0].Value.([]any)
		if !ok || len(list) == 0 {
			return bad("args%s/in must be a non-empty list of strings", ptr)
		}
		in := make([]string, len(list))
		for i, x := range list {
			str, ok := x.(string)
			if !ok {
				return bad("args%s/in must be a non-empty list of strings", ptr)
			}
			if i > 0 && canonical.CompareUTF16(in[i-1], str) >= 0 {
				return bad("args%s/in must be sorted and without repeats", ptr)
			}
			in[i] = str
		}
		s.Args[ptr] = Bound{Kind: In, In: slices.Clip(in)}
	default:
		return bad(`args%s must be "absent" or one of {"equals":V}, {"max":INT}, {"in":[...]}`, ptr)
	}
	return nil
}

func bad(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

func get(o canonical.Object, name string) any {
	v, _ := o.Get(name)
	return v
}

// exactly refuses an object whose member names are not exactly names.
func exactly(o canonical.Object, at string, names ...string) error {
	for _, m := range o {
		if !slices.Contains(names, m.Name) {
			return bad("unknown member %q%s (members: %s)", m.Name, at, strings.Join(names, ", "))
		}
	}
	for _, n := range names {
		if _, ok := o.Get(n); !ok {
			return bad("%s is required", n)
		}
	}
	return nil
}
