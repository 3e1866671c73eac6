package queue

import (
	"errors"
	"fmt"
	"strings"

	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/reveal"
	"github.com/countersign/countersign/internal/tools"
)

// ErrWarningNotAcknowledged refuses a person's approval of a call with a
// deception warning that the approval did not acknowledge.
var ErrWarningNotAcknowledged = errors.New("queue: the call's deception warning was not acknowledged")

// ConfirmationError refuses a person's approval that did not carry the
// text the call's tool asks to be typed (Describe says what, Want is the
// text as the console shows it).
type ConfirmationError struct {
	Describe, Want string
}

func (e *ConfirmationError) Error() string {
	return fmt.Sprintf("queue: type %s exactly as shown (%q)", e.Describe, e.Want)
}

// Confirmation checks what a person's approval must carry besides the
// digest, on every channel a person approves through (the browser and the
// command line): for a call with a deception warning, the acknowledgement
// of it, and the target or word the call's tool asks to be typed, as the
// console shows it.
func Confirmation(reg *tools.Registry, call *Call, typed string, acknowledged bool) error {
	if Deceptive(call) && !acknowledged {
		return ErrWarningNotAcknowledged
	}
	if reg == nil {
		return nil
	}
	t, ok := reg.Tool(call.Tool)
	if !ok || t.Confirm == nil {
		return nil
	}
	want := t.Confirm.Expected(shown(reveal.Of(call.Target)))
	if strings.TrimSpace(typed) != want {
		return &ConfirmationError{Describe: t.Confirm.Describe(), Want: want}
	}
	return nil
}

// shown is a revealed text as the console shows it, escapes included.
func shown(t reveal.Text) string {
	var b strings.Builder
	for _, s := range t.Segs {
		b.WriteString(s.S)
	}
	return b.String()
}

// Deceptive reports whether anything shown of the call (its names, target,
// rationale, its arguments as stored and as hashed) would be revealed with
// a deception warning.
func Deceptive(call *Call) bool {
	var bound canonical.Object
	if env, err := HashedEnvelope(call); err == nil {
		bound = env.Args
	}
	return DeceptiveWith(call, bound)
}

// DeceptiveWith is Deceptive with the hashed arguments already read (nil
// when they could not be).
func DeceptiveWith(call *Call, bound canonical.Object) bool {
	return reveal.Of(call.Tool).Deceptive() || reveal.Of(call.Target).Deceptive() || reveal.Of(call.Actor).Deceptive() ||
		reveal.Of(call.Audience).Deceptive() || reveal.Of(call.Rationale).Deceptive() || valueDeceptive(call.Args) ||
		valueDeceptive(bound)
}

// valueDeceptive reports whether any key or string inside v would be
// revealed with a warning.
func valueDeceptive(v any) bool {
	switch x := v.(type) {
	case canonical.Object:
		for _, m := range x {
			if reveal.Of(m.Name).Deceptive() || valueDeceptive(m.Value) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if valueDeceptive(e) {
				return true
			}
		}
	case string:
		return reveal.Of(x).Deceptive()
	}
	return false
}
