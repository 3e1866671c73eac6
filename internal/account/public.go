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
// oidc:HOST/SUB becomes the name people see (User.Shown), never the
// principal itself, which is a stable identifier of the person at their
// identity provider; every other name (a local account, policy:RULE,
// team:GROUP) is returned as it is. An account that cannot be read is
// UnnamedSSO. The function remembers what it read: make one per response.
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
			if n := u.Shown(); n != u.Name && !strings.Contains(strings.ToLower(n), OIDCPrefix) {
				shown = n
			}
		}
		seen[name] = shown
		return shown
	}
}

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
