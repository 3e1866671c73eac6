package problem

import (
	"errors"
	"fmt"
	"testing"
)

type loginReason string

func (loginReason) Refused() string { return "login refused" }

type promptReason string

func (promptReason) Refused() string { return "prompt refused" }

// TestRefusalIs: a refusal matches one of its own kind with the same
// reason, through wrapping, and never another reason or another kind's
// refusal with the same spelling.
func TestRefusalIs(t *testing.T) {
	cause := errors.New("token endpoint said no")
	err := fmt.Errorf("callback: %w", &Refusal[loginReason]{Reason: "nonce", Message: "try again", Err: cause})
	if !errors.Is(err, &Refusal[loginReason]{Reason: "nonce"}) {
		t.Error("a nonce refusal is not Is a nonce refusal")
	}
	if errors.Is(err, &Refusal[loginReason]{Reason: "state"}) {
		t.Error("a nonce refusal Is a state refusal")
	}
	if errors.Is(err, &Refusal[promptReason]{Reason: "nonce"}) {
		t.Error("a login refusal Is a prompt refusal of the same spelling")
	}
	if !errors.Is(err, cause) {
		t.Error("the underlying error is not reachable")
	}
	if got, want := err.Error(), "callback: login refused (nonce): try again: token endpoint said no"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}
