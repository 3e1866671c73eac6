package passkey

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/go-webauthn/webauthn/protocol"
)

// EvidenceFormat names the evidence shape documented in docs/passkeys.md.
const EvidenceFormat = "countersign.passkey-approval.v1"

// Evidence is what an approval by passkey leaves behind: everything a
// WebAuthn verifier needs to re-check it offline, with no Countersign
// state. Byte fields are unpadded base64url in JSON.
type Evidence struct {
	Format   string `json:"format"`
	RPID     string `json:"rp_id"`
	Origin   string `json:"origin"`
	CallID   string `json:"call_id"`
	Digest   string `json:"digest"`
	Operator string `json:"operator"`
	// CredentialID and PublicKey (a COSE_Key, RFC 9052 §7) identify the
	// passkey; CredentialName is what the operator called it.
	CredentialID   B64    `json:"credential_id"`
	CredentialName string `json:"credential_name"`
	PublicKey      B64    `json:"public_key"`
	// AuthenticatorData, ClientDataJSON and Signature are exactly what the
	// authenticator and browser returned: the signature is over
	// AuthenticatorData || SHA-256(ClientDataJSON).
	AuthenticatorData B64    `json:"authenticator_data"`
	ClientDataJSON    B64    `json:"client_data_json"`
	Signature         B64    `json:"signature"`
	SignCount         uint32 `json:"sign_count"`
}

// B64 is bytes written as unpadded base64url.
type B64 []byte

// MarshalJSON writes unpadded base64url.
func (b B64) MarshalJSON() ([]byte, error) {
	return json.Marshal(base64.RawURLEncoding.EncodeToString(b))
}

// UnmarshalJSON reads unpadded base64url.
func (b *B64) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return err
	}
	d, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return fmt.Errorf("passkey: not unpadded base64url: %w", err)
	}
	*b = d
	return nil
}

// Binding returns the binding the evidence claims to be for.
func (e Evidence) Binding() Binding {
	return Binding{CallID: e.CallID, Digest: e.Digest, Operator: e.Operator}
}

// ErrEvidence wraps every reason evidence fails to verify.
var ErrEvidence = errors.New("passkey: the evidence does not verify")

// Verify re-checks evidence offline against b, the call id, digest and
// operator taken from the audit entry that carries it (not from the
// evidence itself):
//   - the client data is a webauthn.get for e.Origin, which lies on e.RPID;
//   - its challenge is 64 bytes ending in b's hash;
//   - the authenticator data is for e.RPID, with user presence and user
//     verification, and its counter is e.SignCount;
//   - the signature verifies with e.PublicKey.
//
// It uses the go-webauthn protocol package for the WebAuthn steps, and no
// Countersign state beyond e and b.
func Verify(e Evidence, b Binding) error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrEvidence, fmt.Sprintf(format, args...))
	}
	if e.Format != EvidenceFormat {
		return fail("format %q, want %q", e.Format, EvidenceFormat)
	}
	if e.Binding() != b {
		return fail("it is for call %s, digest %s, operator %s; the entry says %s, %s, %s",
			e.CallID, e.Digest, e.Operator, b.CallID, b.Digest, b.Operator)
	}
	if len(e.CredentialID) == 0 || len(e.PublicKey) == 0 || len(e.Signature) == 0 {
		return fail("a credential id, public key and signature are required")
	}
	u, err := url.Parse(e.Origin)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || !hostWithin(u.Hostname(), e.RPID) {
		return fail("origin %q is not on the RP ID %q", e.Origin, e.RPID)
	}
	car := protocol.CredentialAssertionResponse{
		PublicKeyCredential: protocol.PublicKeyCredential{
			Credential: protocol.Credential{ID: base64.RawURLEncoding.EncodeToString(e.CredentialID), Type: string(protocol.PublicKeyCredentialType)},
			RawID:      protocol.URLEncodedBase64(e.CredentialID),
		},
		AssertionResponse: protocol.AuthenticatorAssertionResponse{
			AuthenticatorResponse: protocol.AuthenticatorResponse{ClientDataJSON: protocol.URLEncodedBase64(e.ClientDataJSON)},
			AuthenticatorData:     protocol.URLEncodedBase64(e.AuthenticatorData),
			Signature:             protocol.URLEncodedBase64(e.Signature),
		},
	}
	parsed, err := car.Parse()
	if err != nil {
		return fail("parse: %v", err)
	}
	challenge, err := base64.RawURLEncoding.DecodeString(parsed.Response.CollectedClientData.Challenge)
	if err != nil {
		return fail("the challenge does not decode: %v", err)
	}
	if err := CheckChallenge(challenge, b); err != nil {
		return fail("%v", err)
	}
	if !parsed.Response.AuthenticatorData.Flags.HasUserVerified() {
		return fail("the authenticator did not verify the user")
	}
	if err := parsed.Verify(parsed.Response.CollectedClientData.Challenge, e.RPID, "", []string{e.Origin}, nil, nil,
		protocol.TopOriginExplicitVerificationMode, false, true, true, e.PublicKey,
		protocol.SignaturePolicy{ECDSAEncoding: protocol.ECDSASignatureEncodingDER}); err != nil {
		return fail("%v", describe(err))
	}
	if parsed.Response.AuthenticatorData.Counter != e.SignCount {
		return fail("the authenticator data's counter is %d, the evidence says %d", parsed.Response.AuthenticatorData.Counter, e.SignCount)
	}
	return nil
}

// SamePublicKey reports whether the evidence was made with the passkey
// whose registration recorded id and key.
func (e Evidence) SamePublicKey(id, key []byte) bool {
	return bytes.Equal(e.CredentialID, id) && bytes.Equal(e.PublicKey, key)
}

// describe says why the WebAuthn library refused an assertion, in words:
// the library's details format its inner error even when there is none
// (a signature that simply does not verify reads "...: <nil>").
func describe(err error) string {
	var pe *protocol.Error
	if !errors.As(err, &pe) {
		return err.Error()
	}
	if pe.Type == protocol.ErrAssertionSignature.Type {
		if pe.Err != nil {
			return "the signature does not verify with the passkey's public key: " + pe.Err.Error()
		}
		return "the signature does not verify with the passkey's public key"
	}
	if d := strings.TrimSuffix(pe.Details, ": <nil>"); d != "" {
		if pe.Err != nil && !strings.Contains(d, pe.Err.Error()) {
			return d + ": " + pe.Err.Error()
		}
		return d
	}
	if pe.Err != nil {
		return pe.Type + ": " + pe.Err.Error()
	}
	return pe.Type
}
