package problem

import "fmt"

// A Reason names the check that refused an identity ceremony (a sign-in
// through single sign-on, a passkey prompt); Refused says what was
// refused, for the error's text ("sso: login refused").
type Reason interface {
	~string
	Refused() string
}

// Refusal is an identity ceremony that did not pass: Reason names the
// check, Message is for the person at the browser, and Err, when set, is
// the underlying error, for the log. sso.Refusal and passkey.Refusal are
// this type over their own reasons.
type Refusal[R Reason] struct {
	Reason  R
	Message string
	Err     error
}

func (r *Refusal[R]) Error() string {
	if r.Err != nil {
		return fmt.Sprintf("%s (%s): %s: %v", r.Reason.Refused(), string(r.Reason), r.Message, r.Err)
	}
	return fmt.Sprintf("%s (%s): %s", r.Reason.Refused(), string(r.Reason), r.Message)
}

func (r *Refusal[R]) Unwrap() error { return r.Err }

// Is matches another *Refusal of the same kind with the same reason, so
// callers can write errors.Is(err, &sso.Refusal{Reason: sso.ReasonNonce}).
func (r *Refusal[R]) Is(target error) bool {
	t, ok := target.(*Refusal[R])
	return ok && t.Reason == r.Reason
}
