package account

import (
	"errors"
	"fmt"
)

// InputError refuses a value given for an account or a token: a name, a
// role, a password, an owner, a token's actor or audience, or the name an
// identity provider gave. Message is written for the person who gave the
// value and says what is allowed; Error adds the package's prefix, for logs
// and the command line. errors.Is matches the rule that was broken
// (ErrBadName, ErrReservedName, ErrUnknownRole, ErrWeakPassword,
// ErrLongPassword, ErrBadOwner, ErrTokenName).
type InputError struct {
	// Field names the value: "name", "role", "password", "owner", "actor",
	// "audience" or "preferred_username".
	Field   string
	Message string
	Err     error
}

func (e *InputError) Error() string { return "account: " + e.Message }

func (e *InputError) Unwrap() error { return e.Err }

// refuse returns the InputError of field breaking rule, its message made
// from format and args.
func refuse(field string, rule error, format string, args ...any) *InputError {
	return &InputError{Field: field, Message: fmt.Sprintf(format, args...), Err: rule}
}

// within restates err, an InputError of a name rule, as one of field
// (a token's actor or audience, a provider's name): the message says
// whose value it is, and errors.Is still matches the name rule as well as
// rule.
func within(field string, rule error, err error, format string, args ...any) error {
	var in *InputError
	if !errors.As(err, &in) {
		return err
	}
	return &InputError{Field: field, Message: fmt.Sprintf(format, args...) + in.Message, Err: errors.Join(rule, in.Err)}
}
