// Package grant mints and verifies Countersign grants: short-lived,
// single-use JWS tokens (RFC 7515 compact serialization, Ed25519) that bind
// an operator's approval to one exact call. It also keeps the signing keys
// on disk and rotates them.
//
// Verification runs the ordered checks of DESIGN §6 up to and including
// time; the redemption ledger fills in the last two (status and nonce)
// under its write lock.
package grant

import (
	"time"

	"github.com/countersign/countersign/internal/canonical"
)

// MaxTTL is the longest a grant may live: exp − iat is at most this.
const MaxTTL = 300 * time.Second

// Header members of every grant.
const (
	// Algorithm is the only JWS algorithm a grant is signed or verified
	// with. The verifier never takes the algorithm from the token.
	Algorithm = "EdDSA"
	// Type is the JWS "typ" of a grant.
	Type = "countersign-grant+jwt"
)

// Rejection reasons, in the order of the checks that produce them.
const (
	ReasonMalformed        = "malformed"
	ReasonBadSignature     = "bad_signature"
	ReasonUnknownKey       = "unknown_key"
	ReasonBadClaims        = "bad_claims"
	ReasonActorMismatch    = "actor_mismatch"
	ReasonAudienceMismatch = "audience_mismatch"
	ReasonToolMismatch     = "tool_mismatch"
	ReasonTargetMismatch   = "target_mismatch"
	ReasonDigestMismatch   = "digest_mismatch"
	ReasonNotYetValid      = "not_yet_valid"
	ReasonExpired          = "expired"
	ReasonRevoked          = "revoked"
	ReasonReplayed         = "replayed"
	// ReasonToolChanged and ReasonFrozen come from the status check: the
	// tool's definition is no longer the one the call was made under, or
	// a freeze stops the call's redemption.
	ReasonToolChanged = "tool_changed"
	ReasonFrozen      = "frozen"
)

// Names of the checks (steps of a redemption), in the order they run.
const (
	StepShape     = "shape"
	StepSignature = "signature"
	StepClaims    = "claims"
	StepActor     = "actor"
	StepAudience  = "audience"
	StepTool      = "tool"
	StepTarget    = "target"
	StepDigest    = "digest"
	StepTime      = "time"
	StepStatus    = "status"
	StepNonce     = "nonce"
)

// CheckNames lists every check in the order redemption runs them.
func CheckNames() []string {
	return []string{StepShape, StepSignature, StepClaims, StepActor, StepAudience,
		StepTool, StepTarget, StepDigest, StepTime, StepStatus, StepNonce}
}

// Claims are the members of a grant's payload, all of them required and no
// others allowed.
type Claims struct {
	Issuer    string // iss: the console that minted the grant
	Subject   string // sub: the actor of the call
	Audience  string // aud: the audience of the call, one string
	JTI       string // jti: 128 random bits as 32 lowercase hex digits; the nonce
	IssuedAt  int64  // iat: seconds since the Unix epoch
	ExpiresAt int64  // exp: seconds since the Unix epoch; 0 < exp − iat ≤ 300
	CallID    string // call_id: the call the grant was minted for
	Tool      string // tool of the call
	Target    string // target of the call
	Digest    string // digest of the call's envelope, 64 lowercase hex digits
}

// Expires returns ExpiresAt as a time.
func (c *Claims) Expires() time.Time { return time.Unix(c.ExpiresAt, 0).UTC() }

// Context is the trusted context of the token that redeems a grant.
type Context struct {
	Actor    string
	Audience string
}

// Presented is the call presented with a grant. Args are already bound:
// the caller has removed the tool's informational members, so that the
// digest recomputed from them is the envelope digest.
type Presented struct {
	Tool   string
	Target string
	Args   canonical.Object
}

// Check is one step of verification. OK is nil when the check was not
// reached. As JSON: {"name":"shape","ok":true|false|null}.
type Check struct {
	Name string `json:"name"`
	OK   *bool  `json:"ok"`
}

// Result reports every check in order. Reason is the rejection reason of
// the first failed check, "" while every check so far has passed. Claims
// are set once the claims check passed, so a rejected redemption can still
// be recorded against its call.
type Result struct {
	Checks []Check `json:"checks"`
	Reason string  `json:"reason,omitempty"`
	Claims *Claims `json:"-"`
	// Digest is the digest recomputed from the call presented and the
	// redeeming context, once the checks reached it.
	Digest string `json:"-"`
}

// NewResult returns a Result with every check not reached.
func NewResult() Result {
	names := CheckNames()
	r := Result{Checks: make([]Check, len(names))}
	for i, n := range names {
		r.Checks[i].Name = n
	}
	return r
}

// Set records the outcome of the named check. The first failure sets
// Reason; later calls do not overwrite it. An unknown name is ignored.
func (r *Result) Set(name string, ok bool, reason string) {
	for i := range r.Checks {
		if r.Checks[i].Name == name {
			v := ok
			r.Checks[i].OK = &v
			break
		}
	}
	if !ok && r.Reason == "" {
		r.Reason = reason
	}
}

// Get returns the outcome of the named check: nil when not reached.
func (r *Result) Get(name string) *bool {
	for _, c := range r.Checks {
		if c.Name == name {
			return c.OK
		}
	}
	return nil
}

// Accepted reports whether all eleven checks ran and passed.
func (r *Result) Accepted() bool {
	if r.Reason != "" || len(r.Checks) != len(CheckNames()) {
		return false
	}
	for i, n := range CheckNames() {
		c := r.Checks[i]
		if c.Name != n || c.OK == nil || !*c.OK {
			return false
		}
	}
	return true
}

// CheckTime applies the time check to c: iat ≤ now < exp, with no allowance
// for clock skew. The ledger calls it again once it holds its write lock.
func CheckTime(c *Claims, now time.Time) (ok bool, reason string) {
	s := now.Unix() // iat and exp are whole seconds, so flooring now is exact
	switch {
	case s < c.IssuedAt:
		return false, ReasonNotYetValid
	case s >= c.ExpiresAt:
		return false, ReasonExpired
	}
	return true, ""
}
