// Package passkey signs approvals with the operator's own authenticator
// (WebAuthn, user verification required) over exactly one call, and keeps
// what the authenticator returned as evidence that anyone can re-check
// offline.
//
// The challenge of an approval is 32 random bytes followed by
//
//	SHA-256("countersign/v1/approval:" || JCS({"call_id","digest","operator"}))
//
// so the signed client data names the call, its digest and the operator,
// and any RFC 8785 library recomputes the suffix from an audit entry. The
// package knows nothing of HTTP or storage: the server hands it the
// operator's credentials and the call's binding, and stores what it
// returns.
package passkey

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/countersign/countersign/internal/canonical"
)

// ChallengePrefix separates approval challenges from every other SHA-256
// Countersign computes.
const ChallengePrefix = "countersign/v1/approval:"

// nonceLen is the random part of a challenge; the rest is the binding hash.
const nonceLen = 32

// ChallengeLen is the length of an approval challenge.
const ChallengeLen = nonceLen + sha256.Size

// Binding is what an approval is over: the call, the digest the operator
// was shown, and the operator approving.
type Binding struct {
	CallID   string `json:"call_id"`
	Digest   string `json:"digest"`
	Operator string `json:"operator"`
}

// Canonical returns the RFC 8785 bytes of {"call_id","digest","operator"}.
func (b Binding) Canonical() ([]byte, error) {
	if b.CallID == "" || b.Operator == "" || !canonical.IsDigest(b.Digest) {
		return nil, fmt.Errorf("passkey: a binding needs a call id, a digest of 64 hex digits and an operator (got %q, %q, %q)", b.CallID, b.Digest, b.Operator)
	}
	obj, err := canonical.NewObject(
		canonical.Member{Name: "call_id", Value: b.CallID},
		canonical.Member{Name: "digest", Value: b.Digest},
		canonical.Member{Name: "operator", Value: b.Operator},
	)
	if err != nil {
		return nil, err
	}
	return canonical.Encode(obj)
}

// Hash returns SHA-256(ChallengePrefix || Canonical()).
func (b Binding) Hash() ([]byte, error) {
	c, err := b.Canonical()
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	h.Write([]byte(ChallengePrefix))
	h.Write(c)
	return h.Sum(nil), nil
}

// NewChallenge returns 32 random bytes followed by b's hash.
func NewChallenge(b Binding) ([]byte, error) {
	sum, err := b.Hash()
	if err != nil {
		return nil, err
	}
	c := make([]byte, nonceLen, ChallengeLen)
	if _, err := rand.Read(c); err != nil {
		return nil, fmt.Errorf("passkey: random challenge: %w", err)
	}
	return append(c, sum...), nil
}

// ErrChallengeBinding is a challenge whose suffix is not the hash of the
// binding it is checked against: it was issued for another call, digest
// or operator.
var ErrChallengeBinding = errors.New("passkey: the challenge was not issued for this call, digest and operator")

// CheckChallenge reports whether challenge is ChallengeLen bytes ending in
// b's hash.
func CheckChallenge(challenge []byte, b Binding) error {
	if len(challenge) != ChallengeLen {
		return fmt.Errorf("passkey: the challenge is %d bytes, want %d: %w", len(challenge), ChallengeLen, ErrChallengeBinding)
	}
	sum, err := b.Hash()
	if err != nil {
		return err
	}
	if !bytes.Equal(challenge[nonceLen:], sum) {
		return ErrChallengeBinding
	}
	return nil
}
