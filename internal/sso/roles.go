package sso

import (
	"fmt"
	"slices"
	"strings"

	"github.com/countersign/countersign/internal/account"
)

// RoleMap maps a provider's group names to console roles.
type RoleMap map[string]account.Role

// ParseRoleMap reads 'group=role,group=role'. Each entry is split at its
// last '=', so a group name may contain '=' but not ','; the flag may be
// given several times and the maps merged with Merge.
func ParseRoleMap(s string) (RoleMap, error) {
	m := RoleMap{}
	for _, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		i := strings.LastIndexByte(entry, '=')
		if i <= 0 || i == len(entry)-1 {
			return nil, fmt.Errorf("sso: role map entry %q is not group=role", entry)
		}
		group, name := strings.TrimSpace(entry[:i]), strings.TrimSpace(entry[i+1:])
		role, err := account.ParseRole(name)
		if err != nil {
			return nil, fmt.Errorf("sso: role map entry %q: %w", entry, err)
		}
		if prev, ok := m[group]; ok && prev != role {
			return nil, fmt.Errorf("sso: group %q is mapped to both %s and %s", group, prev, role)
		}
		m[group] = role
	}
	return m, nil
}

// Merge adds other's entries to m; a group mapped to two roles is an error.
func (m RoleMap) Merge(other RoleMap) error {
	for g, r := range other {
		if prev, ok := m[g]; ok && prev != r {
			return fmt.Errorf("sso: group %q is mapped to both %s and %s", g, prev, r)
		}
		m[g] = r
	}
	return nil
}

// rank orders roles by what they may do: admin over operator over auditor.
func rank(r account.Role) int {
	switch r {
	case account.RoleAdmin:
		return 3
	case account.RoleOperator:
		return 2
	case account.RoleAuditor:
		return 1
	}
	return 0
}

// Role returns the most capable role any of the groups maps to, and false
// when none maps.
func (m RoleMap) Role(groups []string) (account.Role, bool) {
	var best account.Role
	for _, g := range groups {
		if r, ok := m[g]; ok && rank(r) > rank(best) {
			best = r
		}
	}
	return best, best != ""
}

// String writes the map back in ParseRoleMap's form, groups sorted.
func (m RoleMap) String() string {
	keys := make([]string, 0, len(m))
	for g := range m {
		keys = append(keys, g)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, g := range keys {
		parts[i] = g + "=" + string(m[g])
	}
	return strings.Join(parts, ",")
}
