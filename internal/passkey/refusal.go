package passkey

import "github.com/countersign/countersign/internal/problem"

// Reason says which check refused a passkey ceremony.
type Reason string

// The reasons a ceremony is refused.
const (
	ReasonCeremony         Reason = "ceremony"          // unknown, used, expired, or another operator's
	ReasonCallChanged      Reason = "call_changed"      // the call's binding differs from the one signed for
	ReasonMalformed        Reason = "malformed"         // the browser's answer does not parse
	ReasonUserVerification Reason = "user_verification" // the UV flag is not set
	ReasonChallenge        Reason = "challenge"         // not our challenge, or not bound to this call
	ReasonCredential       Reason = "credential"        // not one of the operator's passkeys
	ReasonSignature        Reason = "signature"         // the signature does not verify
	ReasonSignCount        Reason = "sign_count"        // the counter went backwards or stood still above zero
	ReasonVerification     Reason = "verification"      // another WebAuthn check (origin, RP ID, presence)
)

// Refused says what a Refusal over these reasons refused.
func (Reason) Refused() string { return "passkey: refused" }

// Refusal is a ceremony that did not pass. Message is for the operator;
// Err, when set, is the underlying error, for the log.
type Refusal = problem.Refusal[Reason]

func refuse(reason Reason, msg string, err error) *Refusal {
	return &Refusal{Reason: reason, Message: msg, Err: err}
}
