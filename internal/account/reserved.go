package account

import (
	"errors"
	"strings"
)

// Reserved names: decisions by rule are recorded as "policy:RULE", the
// server's own actions as "system:..." or "console". No account, token
// actor or single-sign-on user may take one, so that nobody can pass for a
// rule or for the console in the audit trail.
var (
	// ErrReservedName is a name that only Countersign itself may use.
	ErrReservedName = errors.New("account: the name is reserved")

	reservedPrefixes = []string{"policy:", "system:"}
	reservedNames    = []string{"console"}
)

// CheckReserved refuses a name that is reserved for Countersign itself:
// one starting with "policy:" or "system:" (in any case), or "console".
func CheckReserved(name string) error {
	lower := strings.ToLower(name)
	for _, p := range reservedPrefixes {
		if strings.HasPrefix(lower, p) {
			return refuse("name", ErrReservedName, "names starting with %s are reserved for decisions by Countersign itself", p)
		}
	}
	for _, n := range reservedNames {
		if lower == n {
			return refuse("name", ErrReservedName, "the name %s is reserved for Countersign itself", n)
		}
	}
	return nil
}
