package tools

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/countersign/countersign/internal/canonical"
)

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
	const path = "counter/edit"
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		l.add(n, t.Name, path, "must be a non-empty list of target and JSON Pointers into args, such as [target, /amount_minor]")
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
		if s == CounterTarget {
			continue
		}
		if !strings.HasPrefix(s, "/") {
			l.add(c, t.Name, p, "%s is neither target nor a JSON Pointer into args such as /amount_minor", displayName(s))
			continue
		}
		if t.args == nil {
			// A mirrored MCP tool: its schema is the upstream's, known
			// once listed.
			if _, err := canonical.SplitPointer(s); err != nil {
				l.add(c, t.Name, p, "%s: %v", s, err)
			}
			continue
		}
		if _, err := resolve(t.args, s); err != nil {
			l.add(c, t.Name, p, "%s: %v", s, err)
			continue
		}
		if t.IsInformational(s) {
			l.add(c, t.Name, p, "%s is informational: the digest does not bind it, so an edit of it changes nothing the operator approves", s)
		}
	}
	return out
}
