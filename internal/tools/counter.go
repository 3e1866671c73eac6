package tools

import "go.yaml.in/yaml/v3"

// CounterTarget is the edit entry that lets an operator change a call's
// target in a counter-proposal.
const CounterTarget = "target"

// Counter is a tool's opt-in to counter-proposals: an operator may answer
// a pending call with an edited one instead of only refusing it (counter:
// {edit, forward} in the tools file; see docs/counters.md).
type Counter struct {
	// Edit lists what an operator may change: target, and JSON Pointers
	// into args naming members of the tool's schema.
	Edit []string
	// Forward lets the MCP gateway run a counter itself when the edit only
	// narrows the call; any other edit still needs a second person.
	Forward bool
}

// Edits reports whether the counter lets an operator change the member at
// ptr (or the target).
func (c *Counter) Edits(ptr string) bool { return c != nil && contains(c.Edit, ptr) }

// counter reads and lints a tool's counter block.
func (l *linter) counter(n *yaml.Node, t *Tool) *Counter {
	const path = "counter"
	entries, ok := l.mapping(n, t.Name, path)
	if !ok {
		return nil
	}
	c := &Counter{}
	seen := map[string]bool{}
	for _, e := range entries {
		seen[e.key] = true
		p := path + "/" + e.key
		switch e.key {
		case "edit":
			c.Edit = l.counterEdit(e.val, t)
		case "forward":
			if b, ok := l.boolean(e.val, t.Name, p); ok {
				c.Forward = b
			}
		default:
			l.add(e.keyNode, t.Name, path, "unknown field %s (fields: edit, forward)", displayName(e.key))
		}
	}
	if !seen["edit"] {
		l.add(n, t.Name, path, "edit is required: what an operator may change, such as [target, /amount_minor]")
	}
	return c
}

func (l *linter) counterEdit(n *yaml.Node, t *Tool) []string {
	return l.pointerList(n, t, "counter/edit", true, "an edit of it changes nothing the operator approves", nil)
}

// TakesString reports whether the args member at ptr admits only strings:
// a form edits it as text, where any other member's new value is typed as
// JSON.
func (t *Tool) TakesString(ptr string) bool {
	s, err := resolve(t.args, ptr)
	return err == nil && s.valueTypes() == typeString
}
