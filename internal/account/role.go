package account

import (
	"errors"
	"unicode/utf8"
)

// Role is what a console account may do.
type Role string

// The roles. Operators decide calls; auditors read the queue, the calls and
// the history; admins manage accounts and tokens and may also decide.
const (
	RoleOperator Role = "operator"
	RoleAuditor  Role = "auditor"
	RoleAdmin    Role = "admin"
)

// ParseRole reads a role name.
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case RoleOperator, RoleAuditor, RoleAdmin:
		return r, nil
	}
	return "", refuse("role", ErrUnknownRole, "unknown role %q: a role is operator, auditor or admin", s)
}

// ErrUnknownRole is a role name other than operator, auditor and admin.
var ErrUnknownRole = errors.New("account: unknown role")

// CanDecide reports whether the role may approve, deny and clear retry
// blocks.
func (r Role) CanDecide() bool { return r == RoleOperator || r == RoleAdmin }

// CanAdminister reports whether the role may manage accounts and tokens.
func (r Role) CanAdminister() bool { return r == RoleAdmin }

// MaxNameBytes bounds an account name.
const MaxNameBytes = 64

// nameRule says what CheckName allows.
const nameRule = "a name is 1 to 64 characters of letters, digits and . _ - : @, starting with a letter or digit"

// ErrBadName is an account name outside the rules of CheckName.
var ErrBadName = errors.New("account: " + nameRule)

// CheckName applies the account name rules. The name is the operator's
// identity in decisions and in the audit trail, so it is kept to plain
// ASCII that reads the same everywhere.
func CheckName(name string) error {
	if err := checkNameChars(name); err != nil {
		return err
	}
	return CheckReserved(name)
}

// checkNameChars is the character rule of names, without the reserved
// names.
func checkNameChars(name string) error {
	if name == "" || len(name) > MaxNameBytes || !utf8.ValidString(name) {
		return refuse("name", ErrBadName, nameRule)
	}
	for i, c := range []byte(name) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-' || c == ':' || c == '@'):
		default:
			return refuse("name", ErrBadName, nameRule)
		}
	}
	return nil
}
