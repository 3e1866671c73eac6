package grant

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/countersign/countersign/internal/canonical"
)

// Limits on what the verifier reads.
const (
	// MaxTokenBytes bounds a grant. A real one is well under 2 KiB: the
	// target is at most 512 bytes and the tool 128.
	MaxTokenBytes = 8 << 10
	// MaxKIDBytes bounds a key id; longer ones are unknown keys.
	MaxKIDBytes = 64
)

// b64 is base64url without padding (RFC 7515 §2), refusing non-zero
// trailing bits so that each token has exactly one spelling.
var b64 = base64.RawURLEncoding.Strict()

// claim names, in RFC 8785 order.
var claimNames = []string{"aud", "call_id", "digest", "exp", "iat", "iss", "jti", "sub", "target", "tool"}

// errClaims is wrapped by every claims error.
var errClaims = errors.New("grant: bad claims")

// NewJTI returns a fresh grant id: 48 bits of the Unix time in
// milliseconds then 80 random bits, as 32 lowercase hex digits. Ids made
// later sort after earlier ones, so the unique indexes keyed by them (the
// calls' grant ids, the redemptions' nonce ledger) take new ids on their
// last pages instead of a random page each; uniqueness rests on the 80
// random bits within one millisecond, and nothing rests on the id being
// unguessable (a grant is its signature).
func NewJTI() string { return newJTI(time.Now()) }

func newJTI(now time.Time) string {
	var b [16]byte
	ms := uint64(now.UnixMilli())
	for i := 5; i >= 0; i-- {
		b[i] = byte(ms)
		ms >>= 8
	}
	if _, err := rand.Read(b[6:]); err != nil {
		panic("grant: crypto/rand failed: " + err.Error()) // never returns an error since Go 1.24
	}
	return hex.EncodeToString(b[:])
}

// Mint signs c with the current key and returns the compact token and the
// key id it was signed with.
//
// Zero members are filled in: Issuer with the keyring's issuer (any other
// issuer is an error), JTI with NewJTI, IssuedAt with the keyring's clock
// and ExpiresAt with IssuedAt + MaxTTL. Callers that store the grant's id
// or expiry set JTI and ExpiresAt themselves. Every other member is
// required. A grant may not outlive MaxTTL from now: a key that stops
// signing at rotation time T then never signs a grant that outlives
// T + MaxTTL, the moment the key is retired.
//
// Mint looks at the key directory on every call, under a shared lock that
// a rotation in any process excludes, so a grant minted after `console
// keys rotate` returned is always signed with the new key.
func (k *Keyring) Mint(c Claims) (token, kid string, err error) {
	unlock, err := k.lock(lockShared)
	if err != nil {
		return "", "", err
	}
	defer unlock()
	if err := k.refresh(); err != nil {
		return "", "", err
	}
	now := k.now()
	if c.Issuer == "" {
		c.Issuer = k.issuer
	}
	if c.JTI == "" {
		c.JTI = NewJTI()
	}
	if c.IssuedAt == 0 {
		c.IssuedAt = now.Unix()
	}
	if c.ExpiresAt == 0 {
		c.ExpiresAt = c.IssuedAt + int64(MaxTTL/time.Second)
	}
	if err := validClaims(&c, k.issuer); err != nil {
		return "", "", err
	}
	if c.ExpiresAt > now.Unix()+int64(MaxTTL/time.Second) {
		return "", "", fmt.Errorf("grant: exp %d is more than %s after now (%d)", c.ExpiresAt, MaxTTL, now.Unix())
	}
	payload, err := encodeClaims(&c)
	if err != nil {
		return "", "", err
	}
	k.mu.RLock()
	cur := k.current()
	k.mu.RUnlock()
	if cur.priv == nil {
		return "", "", fmt.Errorf("grant: %s: private key of %s is missing; rotate to make a new key", k.dir, cur.kid)
	}
	token = sign(cur.kid, cur.priv, payload)
	k.signedHere.add(token, cur.kid)
	return token, cur.kid, nil
}

// headerFor returns the protected header of a grant signed by kid: exactly
// {"alg":"EdDSA","typ":"countersign-grant+jwt","kid":"..."}. Key ids hold
// only [A-Za-z0-9_-], so nothing needs escaping.
func headerFor(kid string) []byte {
	return []byte(`{"alg":"` + Algorithm + `","typ":"` + Type + `","kid":"` + kid + `"}`)
}

// sign returns the compact JWS of payload under the grant header.
func sign(kid string, priv ed25519.PrivateKey, payload []byte) string {
	return signCompact(headerFor(kid), payload, priv)
}

// signCompact is the one JWS signing path (RFC 7515 compact
// serialization, EdDSA): grants are signed here, and the tests that forge
// tokens with other headers sign through it too.
func signCompact(header, payload []byte, priv ed25519.PrivateKey) string {
	input := b64.EncodeToString(header) + "." + b64.EncodeToString(payload)
	sig := ed25519.Sign(priv, []byte(input))
	return input + "." + b64.EncodeToString(sig)
}

// encodeClaims returns the RFC 8785 bytes of the claims.
func encodeClaims(c *Claims) ([]byte, error) {
	o, err := canonical.NewObject(
		canonical.Member{Name: "iss", Value: c.Issuer},
		canonical.Member{Name: "sub", Value: c.Subject},
		canonical.Member{Name: "aud", Value: c.Audience},
		canonical.Member{Name: "jti", Value: c.JTI},
		canonical.Member{Name: "iat", Value: c.IssuedAt},
		canonical.Member{Name: "exp", Value: c.ExpiresAt},
		canonical.Member{Name: "call_id", Value: c.CallID},
		canonical.Member{Name: "tool", Value: c.Tool},
		canonical.Member{Name: "target", Value: c.Target},
		canonical.Member{Name: "digest", Value: c.Digest},
	)
	if err != nil {
		return nil, err
	}
	b, err := canonical.Encode(o)
	if err != nil {
		return nil, fmt.Errorf("grant: encode claims: %w", err)
	}
	return b, nil
}

// Verify runs the checks shape through time on token, in order, stopping
// at the first that fails. Status and nonce are left for the ledger (not
// reached), so Verify alone never accepts.
//
// shape: three segments of unpadded base64url; a header that is exactly
// {"alg":"EdDSA","typ":"countersign-grant+jwt","kid":string} with no other
// member (alg none, HS256, jwk, jku, x5u, x5c, crit, ... are malformed);
// a 64-byte signature. signature: the kid names a key that may still
// verify at now (else unknown_key) and the Ed25519 signature over the
// first two segments checks out with that key (else bad_signature). The
// payload is not parsed until its signature has been checked.
func (k *Keyring) Verify(token string, ctx Context, call Presented, now time.Time) Result {
	r := NewResult()

	kid, payloadB64, ok := parseShape(token)
	r.Set(StepShape, ok, ReasonMalformed)
	if !ok {
		return r
	}

	payload, reason := k.verifySignature(token, kid, payloadB64, now)
	r.Set(StepSignature, reason == "", reason)
	if reason != "" {
		return r
	}

	c, err := parseClaims(payload, k.issuer)
	r.Set(StepClaims, err == nil, ReasonBadClaims)
	if err != nil {
		return r
	}
	r.Claims = c

	if !step(&r, StepActor, c.Subject == ctx.Actor, ReasonActorMismatch) ||
		!step(&r, StepAudience, c.Audience == ctx.Audience, ReasonAudienceMismatch) ||
		!step(&r, StepTool, c.Tool == call.Tool, ReasonToolMismatch) ||
		!step(&r, StepTarget, c.Target == call.Target, ReasonTargetMismatch) {
		return r
	}
	digest, err := canonical.Envelope{Actor: ctx.Actor, Audience: ctx.Audience,
		Tool: call.Tool, Target: call.Target, Args: call.Args}.Digest()
	r.Digest = digest
	if !step(&r, StepDigest, err == nil && digest == c.Digest, ReasonDigestMismatch) {
		return r
	}
	ok, reason = CheckTime(c, now)
	r.Set(StepTime, ok, reason)
	return r
}

func step(r *Result, name string, ok bool, reason string) bool {
	r.Set(name, ok, reason)
	return ok
}

// parseShape checks the token's syntax and its header, returning the key
// id and the payload segment.
func parseShape(token string) (kid, payload string, ok bool) {
	if len(token) == 0 || len(token) > MaxTokenBytes {
		return "", "", false
	}
	h, rest, _ := strings.Cut(token, ".")
	p, s, found := strings.Cut(rest, ".")
	if !found || strings.Contains(s, ".") || !isB64(h) || !isB64(p) || !isB64(s) {
		return "", "", false
	}
	if sig, err := b64.DecodeString(s); err != nil || len(sig) != ed25519.SignatureSize {
		return "", "", false
	}
	if _, err := b64.DecodeString(p); err != nil {
		return "", "", false
	}
	header, err := b64.DecodeString(h)
	if err != nil {
		return "", "", false
	}
	v, err := canonical.ParseWith(header, canonical.Options{MaxBytes: 1024, MaxDepth: 1})
	if err != nil {
		return "", "", false
	}
	o, isObj := v.(canonical.Object)
	if !isObj || len(o) != 3 || o[0].Name != "alg" || o[1].Name != "kid" || o[2].Name != "typ" {
		return "", "", false
	}
	alg, _ := o[0].Value.(string)
	kid, isStr := o[1].Value.(string)
	typ, _ := o[2].Value.(string)
	if alg != Algorithm || typ != Type || !isStr {
		return "", "", false
	}
	return kid, p, true
}

// isB64 reports whether s is non-empty and holds only the base64url
// alphabet: no padding, and none of the line breaks that encoding/base64
// would otherwise skip.
func isB64(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// ValidKID reports whether s can be a key id: 1 to MaxKIDBytes characters
// of [A-Za-z0-9_-].
func ValidKID(s string) bool {
	return len(s) <= MaxKIDBytes && isB64(s)
}

// verifySignature finds the key and checks the signature, returning the
// verified payload or a reason. The algorithm is fixed: go-jose is told
// to accept EdDSA only and is given an Ed25519 public key.
func (k *Keyring) verifySignature(token, kid, payloadB64 string, now time.Time) ([]byte, string) {
	if !ValidKID(kid) {
		return nil, ReasonUnknownKey
	}
	pub, ok := k.verifyingKey(kid, now)
	if !ok {
		return nil, ReasonUnknownKey
	}
	if k.signedHere.signed(token, kid) {
		// These are the bytes Mint signed with kid (see signedMemo).
		payload, err := b64.DecodeString(payloadB64)
		if err != nil {
			return nil, ReasonBadSignature
		}
		return payload, ""
	}
	k.fullChecks.Add(1)
	jws, err := jose.ParseSignedCompact(token, []jose.SignatureAlgorithm{jose.EdDSA})
	if err != nil || len(jws.Signatures) != 1 {
		return nil, ReasonBadSignature
	}
	payload, err := jws.Verify(pub)
	if err != nil {
		return nil, ReasonBadSignature
	}
	if want, err := b64.DecodeString(payloadB64); err != nil || !bytes.Equal(payload, want) {
		return nil, ReasonBadSignature
	}
	return payload, ""
}

// parseClaims strictly parses a verified payload: one JSON object with
// exactly the ten claims, each of its type, and values that hold together.
func parseClaims(payload []byte, issuer string) (*Claims, error) {
	v, err := canonical.ParseWith(payload, canonical.Options{MaxBytes: MaxTokenBytes, MaxDepth: 1})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errClaims, err)
	}
	o, ok := v.(canonical.Object)
	if !ok {
		return nil, fmt.Errorf("%w: not an object", errClaims)
	}
	if len(o) != len(claimNames) {
		return nil, fmt.Errorf("%w: %d members, want %d", errClaims, len(o), len(claimNames))
	}
	for i, m := range o {
		if m.Name != claimNames[i] {
			return nil, fmt.Errorf("%w: unexpected member %q", errClaims, m.Name)
		}
	}
	var c Claims
	str := func(i int, dst *string) bool {
		s, ok := o[i].Value.(string)
		*dst = s
		return ok
	}
	num := func(i int, dst *int64) bool {
		n, ok := o[i].Value.(int64)
		*dst = n
		return ok
	}
	if !str(0, &c.Audience) || !str(1, &c.CallID) || !str(2, &c.Digest) || !num(3, &c.ExpiresAt) ||
		!num(4, &c.IssuedAt) || !str(5, &c.Issuer) || !str(6, &c.JTI) || !str(7, &c.Subject) ||
		!str(8, &c.Target) || !str(9, &c.Tool) {
		return nil, fmt.Errorf("%w: a claim has the wrong type", errClaims)
	}
	if err := validClaims(&c, issuer); err != nil {
		return nil, err
	}
	return &c, nil
}

// validClaims checks the values of c, the same for minting and verifying.
func validClaims(c *Claims, issuer string) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", errClaims, fmt.Sprintf(format, args...))
	}
	switch {
	case c.Issuer != issuer:
		return bad("iss %q is not %q", c.Issuer, issuer)
	case c.Subject == "", c.Audience == "", c.CallID == "", c.Tool == "", c.Target == "":
		return bad("sub, aud, call_id, tool and target must not be empty")
	case !isJTI(c.JTI):
		return bad("jti must be 32 lowercase hex digits")
	case !canonical.IsDigest(c.Digest):
		return bad("digest must be 64 lowercase hex digits")
	case c.IssuedAt <= 0:
		return bad("iat must be positive")
	case c.ExpiresAt <= c.IssuedAt:
		return bad("exp must be after iat")
	case c.ExpiresAt-c.IssuedAt > int64(MaxTTL/time.Second):
		return bad("lifetime %d s is over %s", c.ExpiresAt-c.IssuedAt, MaxTTL)
	}
	return nil
}

func isJTI(s string) bool {
	if len(s) != 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
