package tools

import (
	"slices"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"
)

// MaxTiers bounds a tool's escalation tiers.
const MaxTiers = 5

// Tier is one escalation tier of a tool (docs/team.md): a call still
// pending After its submission reaches it. A tier only widens: it adds
// approver roles and groups, and channels to notify. It has no way to
// lower the approvals a call needs, lift a passkey requirement, owners
// or the own-call ban.
type Tier struct {
	After     time.Duration
	AddRoles  []string
	AddGroups []string
	Notify    []string
}

// Widen is the reviewer condition a with tier t reached: a condition that
// names roles or groups gains t's; an empty one, which already lets every
// operator approve, stays empty (adding names to it would narrow it).
func (a Approvers) Widen(t Tier) Approvers {
	if a.Empty() {
		return a
	}
	out := Approvers{Roles: slices.Clone(a.Roles), Groups: slices.Clone(a.Groups)}
	for _, r := range t.AddRoles {
		if !slices.Contains(out.Roles, r) {
			out.Roles = append(out.Roles, r)
		}
	}
	for _, g := range t.AddGroups {
		if !slices.Contains(out.Groups, g) {
			out.Groups = append(out.Groups, g)
		}
	}
	return out
}

// tiers reads `escalate: [{after, add_roles, add_groups, notify}, ...]`:
// at most MaxTiers, each after the one before and before the tool's
// decide_within (a tier after it would never be reached), each adding
// something, roles only those that decide.
func (l *linter) tiers(n *yaml.Node, t *Tool) []Tier {
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		l.add(n, t.Name, "escalate", "must be a list of tiers, such as [{after: 10m, add_groups: [payments-leads]}]")
		return nil
	}
	if len(n.Content) > MaxTiers {
		l.add(n, t.Name, "escalate", "at most %d tiers, not %d", MaxTiers, len(n.Content))
		return nil
	}
	var out []Tier
	for i, item := range n.Content {
		path := "escalate/" + strconv.Itoa(i)
		entries, ok := l.mapping(item, t.Name, path)
		if !ok {
			continue
		}
		var tier Tier
		hasAfter := false
		for _, e := range entries {
			p := path + "/" + e.key
			switch e.key {
			case "after":
				d, ok := l.duration(e.val, t.Name, p)
				if !ok {
					continue
				}
				hasAfter = true
				tier.After = d
				switch {
				case d < time.Second:
					l.add(e.val, t.Name, p, "must be at least 1s, not %s", e.val.Value)
				case d >= t.DecideWithin:
					l.add(e.val, t.Name, p, "must be before the tool's decide_within (%s), or the tier is never reached", fmtDuration(t.DecideWithin))
				case len(out) > 0 && d <= out[len(out)-1].After:
					l.add(e.val, t.Name, p, "must be after the tier before it (%s): tiers are listed in the order they are reached", fmtDuration(out[len(out)-1].After))
				}
			case "add_roles":
				for _, s := range l.names(e.val, t.Name, p) {
					if s != "operator" && s != "admin" {
						l.add(e.val, t.Name, p, "role %s cannot approve: the roles that decide are operator and admin", displayName(s))
						continue
					}
					tier.AddRoles = append(tier.AddRoles, s)
				}
			case "add_groups":
				tier.AddGroups = l.names(e.val, t.Name, p)
			case "notify":
				tier.Notify = l.channelNames(e.val, t.Name, p)
			default:
				l.add(e.keyNode, t.Name, path, "unknown field %s (fields: add_groups, add_roles, after, notify); a tier only adds who may approve and whom to notify", displayName(e.key))
			}
		}
		if !hasAfter {
			l.add(item, t.Name, path, "needs after: how long after submission the tier is reached, such as 10m")
		}
		if t.Approvers.Empty() && (len(tier.AddRoles) > 0 || len(tier.AddGroups) > 0) {
			l.add(item, t.Name, path, "the tool names no approvers, so every operator may approve already: add_roles and add_groups would add nobody")
		}
		if len(tier.AddRoles) == 0 && len(tier.AddGroups) == 0 && len(tier.Notify) == 0 {
			l.add(item, t.Name, path, "adds nothing: name add_roles, add_groups or notify")
		}
		out = append(out, tier)
	}
	return out
}
