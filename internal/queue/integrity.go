package queue

import (
	"fmt"

	"github.com/countersign/countersign/internal/canonical"
)

// IntegrityError is a stored call whose record does not match its digest:
// the database was edited. It is shown as a loud error page, never as a
// call someone could approve.
type IntegrityError struct {
	ID, What string
}

func (e *IntegrityError) Error() string {
	return fmt.Sprintf("queue: call %s: %s", e.ID, e.What)
}

// HashedEnvelope reads a call's stored canonical envelope after checking
// that it hashes to the call's digest, and that the call's own columns say
// what it says.
func HashedEnvelope(call *Call) (canonical.Envelope, error) {
	bad := func(what string) (canonical.Envelope, error) {
		return canonical.Envelope{}, &IntegrityError{ID: call.ID, What: what}
	}
	if canonical.DigestOf(call.Envelope) != call.Digest {
		return bad("its stored envelope does not hash to its digest")
	}
	v, err := canonical.ParseWith(call.Envelope, canonical.Options{MaxDepth: canonical.MaxArgsDepth + 1,
		Numbers: canonical.NumbersFor(call.Tool)})
	if err != nil {
		return bad("its stored envelope does not parse")
	}
	o, _ := v.(canonical.Object)
	var env canonical.Envelope
	str := func(name string, dst *string) bool {
		x, ok := o.Get(name)
		*dst, _ = x.(string)
		_, isString := x.(string)
		return ok && isString
	}
	ver, _ := o.Get("v")
	a, _ := o.Get("args")
	args, isObj := a.(canonical.Object)
	if len(o) != 6 || ver != int64(1) || !isObj || !str("actor", &env.Actor) || !str("audience", &env.Audience) ||
		!str("tool", &env.Tool) || !str("target", &env.Target) {
		return bad("its stored envelope is not a v1 envelope")
	}
	env.Args = args
	if env.Actor != call.Actor || env.Audience != call.Audience || env.Tool != call.Tool || env.Target != call.Target {
		return bad("its stored actor, audience, tool or target differs from what was hashed")
	}
	return env, nil
}
