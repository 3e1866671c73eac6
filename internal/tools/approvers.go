package tools

import (
	"slices"
	"strings"
	"unicode"

	"go.yaml.in/yaml/v3"
)

// How a tool's calls must be approved (approve_with).
const (
	// ApproveWithAny lets an operator approve by click or with a passkey.
	ApproveWithAny = "any"
	// ApproveWithPasskey requires every approval to be signed by the
	// operator's passkey, with user verification, over the call.
	ApproveWithPasskey = "passkey"
)

// MaxApproverEntries bounds the roles and groups of an approvers condition.
const MaxApproverEntries = 50

// Approvers is a reviewer condition: who may approve a tool's calls. An
// operator matches when they hold one of Roles or belong to one of Groups
// (from their identity provider). The zero value lets every operator who
// may decide approve.
type Approvers struct {
	Roles  []string
	Groups []string
}

// Empty reports whether the condition lets every operator approve.
func (a Approvers) Empty() bool { return len(a.Roles) == 0 && len(a.Groups) == 0 }

// Allows reports whether an operator with role and groups matches.
func (a Approvers) Allows(role string, groups []string) bool {
	if a.Empty() {
		return true
	}
	if slices.Contains(a.Roles, role) {
		return true
	}
	for _, g := range groups {
		if slices.Contains(a.Groups, g) {
			return true
		}
	}
	return false
}

// Describe says who may approve, for the call page and refusals:
// "role admin, or group payments-leads".
func (a Approvers) Describe() string {
	if a.Empty() {
		return "any operator"
	}
	var parts []string
	if len(a.Roles) > 0 {
		parts = append(parts, plural("role", len(a.Roles))+" "+strings.Join(a.Roles, ", "))
	}
	if len(a.Groups) > 0 {
		parts = append(parts, plural("group", len(a.Groups))+" "+strings.Join(a.Groups, ", "))
	}
	return strings.Join(parts, ", or ")
}

func plural(s string, n int) string {
	if n == 1 {
		return s
	}
	return s + "s"
}

// approvers reads {roles: [...], groups: [...]}.
func (l *linter) approvers(n *yaml.Node, tool string) Approvers {
	var a Approvers
	before := len(l.problems)
	entries, ok := l.mapping(n, tool, "approvers")
	if !ok {
		return a
	}
	for _, e := range entries {
		path := "approvers/" + e.key
		switch e.key {
		case "roles":
			for _, s := range l.names(e.val, tool, path) {
				if s != "operator" && s != "admin" {
					l.add(e.val, tool, path, "role %s cannot approve: the roles that decide are operator and admin", displayName(s))
					continue
				}
				a.Roles = append(a.Roles, s)
			}
		case "groups":
			a.Groups = l.names(e.val, tool, path)
		default:
			l.add(e.keyNode, tool, "approvers", "unknown field %s (fields: groups, roles)", displayName(e.key))
		}
	}
	if a.Empty() && len(l.problems) == before {
		l.add(n, tool, "approvers", "name at least one role or group, or leave approvers out to let every operator approve")
	}
	return a
}

// names reads a list of distinct non-empty names without spaces at the
// ends or invisible characters.
func (l *linter) names(n *yaml.Node, tool, path string) []string {
	if n.Kind != yaml.SequenceNode {
		l.add(n, tool, path, "must be a list of names")
		return nil
	}
	if len(n.Content) > MaxApproverEntries {
		l.add(n, tool, path, "%d entries; at most %d are allowed", len(n.Content), MaxApproverEntries)
		return nil
	}
	var out []string
	for _, item := range n.Content {
		s, ok := l.str(item, tool, path)
		if !ok {
			continue
		}
		switch {
		case s == "" || strings.TrimSpace(s) != s:
			l.add(item, tool, path, "a name must be non-empty, without spaces at either end")
		case strings.IndexFunc(s, func(r rune) bool { return unicode.Is(unicode.Cc, r) || unicode.Is(unicode.Cf, r) }) >= 0:
			l.add(item, tool, path, "a name must not hold control or invisible characters")
		case slices.Contains(out, s):
			l.add(item, tool, path, "%s is listed twice", displayName(s))
		default:
			out = append(out, s)
		}
	}
	return out
}

// approveWith reads approve_with: any or passkey.
func (l *linter) approveWith(n *yaml.Node, tool, path string) bool {
	s, ok := l.str(n, tool, path)
	if !ok {
		return false
	}
	switch s {
	case ApproveWithPasskey:
		return true
	case ApproveWithAny:
		return false
	}
	l.add(n, tool, path, "must be %s or %s, not %s", ApproveWithPasskey, ApproveWithAny, displayName(s))
	return false
}

// Channels an approval can arrive through (approve_from): the browser,
// the command line on the console's machine (console approve, the control
// socket), and the operator API with a person's operator token.
const (
	ApproveFromWeb = "web"
	ApproveFromCLI = "cli"
	ApproveFromAPI = "api"
)

// approveFromChannels are the channels approve_from may name.
var approveFromChannels = []string{ApproveFromWeb, ApproveFromCLI, ApproveFromAPI}

// ApprovableFrom reports whether an approval of the tool's calls may
// arrive through channel: any channel when the tool names none
// (approve_from absent), else only those it names.
func (t *Tool) ApprovableFrom(channel string) bool {
	return t.ApproveFrom == nil || slices.Contains(t.ApproveFrom, channel)
}

// approveFrom reads an approve_from: a list of web, cli and api, each at
// most once, that names web (the browser, where the call is shown in
// full, always decides).
func (l *linter) approveFrom(n *yaml.Node, tool string) []string {
	const path = "approve_from"
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		l.add(n, tool, path, "must be a list of %s that names web", strings.Join(approveFromChannels, ", "))
		return nil
	}
	var out []string
	for _, e := range n.Content {
		s, ok := l.str(e, tool, path)
		if !ok {
			continue
		}
		switch {
		case !slices.Contains(approveFromChannels, s):
			l.add(e, tool, path, "unknown channel %s (channels: %s)", displayName(s), strings.Join(approveFromChannels, ", "))
		case slices.Contains(out, s):
			l.add(e, tool, path, "%s is listed twice", s)
		default:
			out = append(out, s)
		}
	}
	if len(out) == len(n.Content) && !slices.Contains(out, ApproveFromWeb) {
		l.add(n, tool, path, "must name web: the browser, which shows the call in full, can always approve")
		return nil
	}
	return out
}
