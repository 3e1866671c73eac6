package tools

import (
	"time"

	"go.yaml.in/yaml/v3"
)

// Hard bounds of a tool's plan block. A tools file may lower them, never
// raise them.
const (
	MinPlanFor = time.Minute
	MaxPlanFor = 24 * time.Hour
)

// Plan is a tool's opt-in to plans (plan: {max_for}): its calls may be
// items of a plan an operator approves once. A tool without the block is
// never a plan item.
type Plan struct {
	// MaxFor is the longest an approved plan holding the tool's calls may
	// stay valid, from when it is approved.
	MaxFor time.Duration
}

// plan reads and lints a tool's plan block.
func (l *linter) plan(n *yaml.Node, t *Tool) *Plan {
	const path = "plan"
	entries, ok := l.mapping(n, t.Name, path)
	if !ok {
		return nil
	}
	p := &Plan{}
	seen := false
	for _, e := range entries {
		switch e.key {
		case "max_for":
			seen = true
			if d, ok := l.duration(e.val, t.Name, path+"/max_for"); ok {
				if d < MinPlanFor || d > MaxPlanFor || d%time.Second != 0 {
					l.add(e.val, t.Name, path+"/max_for", "must be whole seconds from 1m to %s, not %s", fmtDuration(MaxPlanFor), e.val.Value)
				}
				p.MaxFor = d
			}
		default:
			l.add(e.keyNode, t.Name, path, "unknown field %s (fields: max_for)", displayName(e.key))
		}
	}
	if !seen {
		l.add(n, t.Name, path, "max_for is required: the longest an approved plan may stay valid (1m to %s)", fmtDuration(MaxPlanFor))
	}
	if t.AsksPasskey() {
		l.add(n, t.Name, path, "this tool's approvals can require a passkey (approve_with: passkey on the tool or a rule); such a tool is never a plan item: remove the plan block")
	}
	return p
}
