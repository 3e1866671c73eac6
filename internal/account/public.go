package account

import (
	"context"
	"strings"
)

// UnnamedSSO names, to agents, a single-sign-on account whose provider
// gave it neither a user name nor a display name.
const UnnamedSSO = "(single sign-on user)"

// PublicNames returns how the people a call names (its approvers, the
// operator who denied, revoked or resolved it, its owners) are named to
// agents and on the call's status page: a single-sign-on principal
// oidc:HOST/SUB becomes the name people see, never the principal itself,
// which is a stable identifier of the person at their identity provider:
// its user name, else its display name followed by SSOSuffix (so that a
// display name never reads as a local operator's name), else UnnamedSSO
// (also for an account that cannot be read). Every other name (a local
// account, policy:RULE, team:GROUP) is returned as it is. The function
// remembers what it read: make one per response.
func (s *Service) PublicNames(ctx context.Context) func(name string) string {
	seen := map[string]string{}
	return func(name string) string {
		if !strings.HasPrefix(strings.ToLower(name), OIDCPrefix) {
			return name
		}
		if shown, ok := seen[name]; ok {
			return shown
		}
		shown := UnnamedSSO
		if u, err := s.store.User(ctx, name); err == nil {
			switch {
			case u.ShortName != "" && !strings.Contains(strings.ToLower(u.ShortName), OIDCPrefix):
				// No other account goes by it (checkShadow at every login).
				shown = u.ShortName
			case u.DisplayName != "" && !strings.Contains(strings.ToLower(u.DisplayName), OIDCPrefix):
				// Anything the provider likes, a local operator's name too.
				shown = u.DisplayName + SSOSuffix
			}
		}
		seen[name] = shown
		return shown
	}
}

// SSOSuffix follows a single-sign-on account's display name where agents
// read it: unlike its user name, which no other account may go by, a
// display name is whatever the provider sends, a local operator's name too.
const SSOSuffix = " (single sign-on)"

// PublicOwners is owners as PublicNames names them, each name once
// (ignoring case): an owner written as a provider user name and the
// principal pinned beside it are one person.
func PublicOwners(owners []string, name func(string) string) []string {
	var out []string
	for _, o := range owners {
		n := name(o)
		dup := false
		for _, x := range out {
			if strings.EqualFold(x, n) {
				dup = true
				break
			}
		}
		if !dup {
			out = append(out, n)
		}
	}
	return out
}
