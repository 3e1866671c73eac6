package sso

import "github.com/countersign/countersign/internal/problem"

// Reason says which check refused a login.
type Reason string

// The reasons a login is refused.
const (
	// ReasonState: the callback's state is missing, already finished,
	// expired or not the one this browser started (a replayed or forged callback).
	ReasonState Reason = "state"
	// ReasonProvider: the provider sent the user back with an error.
	ReasonProvider Reason = "provider_error"
	// ReasonExchange: the token endpoint refused the code (replayed code,
	// wrong PKCE verifier, wrong client secret).
	ReasonExchange Reason = "code_refused"
	// ReasonNonce: the ID token's nonce is not the one this login sent.
	ReasonNonce Reason = "nonce"
	// ReasonIssuer, ReasonAudience, ReasonExpired, ReasonSignature: the ID
	// token was issued by another issuer, for another client, has expired,
	// or its signature does not verify against the provider's keys.
	ReasonIssuer    Reason = "issuer"
	ReasonAudience  Reason = "audience"
	ReasonExpired   Reason = "expired"
	ReasonSignature Reason = "signature"
	// ReasonIDToken: the ID token is missing or unreadable otherwise.
	ReasonIDToken Reason = "id_token"
	// ReasonNotFresh: a login that had to be fresh came with an ID token
	// whose auth_time is missing or older than the window asked for.
	ReasonNotFresh Reason = "not_fresh"
	// ReasonUserinfo: the userinfo endpoint, asked for the claims the ID
	// token lacks, failed or named another subject.
	ReasonUserinfo Reason = "userinfo"
)

// Refused says what a Refusal over these reasons refused.
func (Reason) Refused() string { return "sso: login refused" }

// Refusal is a login that did not pass. Message is for the person at the
// browser; Err, when set, is the underlying error, for the log.
type Refusal = problem.Refusal[Reason]

func refuse(reason Reason, msg string, err error) *Refusal {
	return &Refusal{Reason: reason, Message: msg, Err: err}
}
