package passkey

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/go-webauthn/webauthn/protocol"
	"github.com/go-webauthn/webauthn/webauthn"

	"github.com/countersign/countersign/internal/oneshot"
	"github.com/countersign/countersign/internal/problem"
)

// CeremonyTTL is how long a begun registration or approval may take to
// finish; its session data is gone after that, and after its first use.
const CeremonyTTL = 2 * time.Minute

// MaxCeremonies bounds the ceremonies under way at once in the default
// in-memory store.
const MaxCeremonies = 10000

// MaxCeremoniesPerAccount bounds the ceremonies one account has under
// way, in any store. A new one beyond it replaces the account's oldest
// rather than being refused: an operator whose earlier prompts were
// abandoned (a closed tab, a cancelled authenticator dialog) can always
// open a new one, and an account can use up only its own share of the
// store, never another's. The replaced prompt, if finished later, is
// refused as unknown (start again).
const MaxCeremoniesPerAccount = 5

// ErrPromptsFull is a ceremony refused because the store holds its bound
// of ceremonies under way, from other accounts: nothing was begun; the
// operator should try again once some have finished or expired
// (CeremonyTTL at most). It carries its answer in the console's one error
// vocabulary.
var ErrPromptsFull = &problem.Error{Status: http.StatusServiceUnavailable, Code: "passkey_prompts_full",
	Message: "too many passkey prompts are open on this console right now; nothing was begun. Try again in two minutes (prompts expire by then); if it keeps happening, tell an administrator"}

// MaxNameLen bounds a passkey's name.
const MaxNameLen = 64

// Config configures a Service.
type Config struct {
	// RPID is the relying party id: the console's host name as browsers
	// see it (from --public-url), or localhost. An IP address cannot be one.
	RPID string
	// RPName is shown by some authenticators.
	RPName string
	// Origins are the console's origins, e.g. https://approvals.example.com.
	Origins []string
	// Now is the clock for ceremony lifetimes.
	Now func() time.Time
	// Ceremonies keeps the session data of ceremonies under way. Behind
	// several replicas it must be shared (the database); nil keeps them
	// in this process's memory, at most MaxCeremonies at once. Either way
	// an account keeps at most MaxCeremoniesPerAccount.
	Ceremonies oneshot.Store
}

// User is an operator as the ceremonies need them.
type User struct {
	// Handle is the operator's WebAuthn user handle: random bytes (at most
	// 64), fixed for the account, never shown.
	Handle []byte
	// Name is the operator's principal, as decisions record it.
	Name        string
	DisplayName string
	Credentials []Credential
}

// Credential is one registered passkey: the library's credential record
// (id, COSE public key, sign count, flags, transports) and the name the
// operator gave it.
type Credential struct {
	webauthn.Credential
	Name      string
	CreatedAt time.Time
}

// IDString is the credential id in unpadded base64url, as browsers show it.
func (c Credential) IDString() string { return base64.RawURLEncoding.EncodeToString(c.ID) }

type waUser struct{ u User }

func (w waUser) WebAuthnID() []byte          { return w.u.Handle }
func (w waUser) WebAuthnName() string        { return w.u.Name }
func (w waUser) WebAuthnDisplayName() string { return w.u.DisplayName }
func (w waUser) WebAuthnCredentials() []webauthn.Credential {
	out := make([]webauthn.Credential, len(w.u.Credentials))
	for i, c := range w.u.Credentials {
		out[i] = c.Credential
	}
	return out
}

// Service runs registration and approval ceremonies. Safe for concurrent
// use. The session data of a ceremony lives in Config.Ceremonies: with a
// shared store, a ceremony begun on one replica finishes on any other.
type Service struct {
	wa         *webauthn.WebAuthn
	rpID       string
	origins    []string
	now        func() time.Time
	ceremonies oneshot.Store
}

type kind int

const (
	kindRegister kind = iota + 1
	kindApprove
)

// ceremony is one begun registration or approval, kept under a random id.
type ceremony struct {
	Kind    kind                 `json:"kind"`
	Handle  []byte               `json:"handle"`
	Binding Binding              `json:"binding"` // approvals only
	Session webauthn.SessionData `json:"session"`
}

// New returns a Service for one relying party.
func New(cfg Config) (*Service, error) {
	if cfg.RPID == "" || len(cfg.Origins) == 0 {
		return nil, errors.New("passkey: an RP ID and at least one origin are required")
	}
	for _, o := range cfg.Origins {
		u, err := url.Parse(o)
		if err != nil || u.Hostname() == "" || !hostWithin(u.Hostname(), cfg.RPID) {
			return nil, fmt.Errorf("passkey: origin %q is not on the RP ID %q", o, cfg.RPID)
		}
	}
	if cfg.RPName == "" {
		cfg.RPName = "Countersign"
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Ceremonies == nil {
		cfg.Ceremonies = oneshot.NewMemory(MaxCeremonies, cfg.Now)
	}
	wa, err := webauthn.New(&webauthn.Config{
		RPID: cfg.RPID, RPDisplayName: cfg.RPName, RPOrigins: cfg.Origins,
		AuthenticatorSelection: protocol.AuthenticatorSelection{
			ResidentKey:      protocol.ResidentKeyRequirementPreferred,
			UserVerification: protocol.VerificationRequired,
		},
		AttestationPreference: protocol.PreferNoAttestation,
	})
	if err != nil {
		return nil, fmt.Errorf("passkey: %w", err)
	}
	return &Service{wa: wa, rpID: cfg.RPID, origins: cfg.Origins, now: cfg.Now, ceremonies: cfg.Ceremonies}, nil
}

// RPID returns the relying party id.
func (s *Service) RPID() string { return s.rpID }

// NewHandle returns a fresh random user handle for an account.
func NewHandle() []byte {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return b
}

// BeginRegistration starts registering a new passkey for u. The options go
// to navigator.credentials.create; the ceremony id comes back with the
// browser's answer.
func (s *Service) BeginRegistration(ctx context.Context, u User) (*protocol.CredentialCreation, string, error) {
	if len(u.Handle) == 0 || len(u.Handle) > 64 {
		return nil, "", errors.New("passkey: the user handle must be 1 to 64 bytes")
	}
	exclude := make([]protocol.CredentialDescriptor, len(u.Credentials))
	for i, c := range u.Credentials {
		exclude[i] = c.Descriptor()
	}
	opts, sd, err := s.wa.BeginRegistration(waUser{u}, webauthn.WithExclusions(exclude))
	if err != nil {
		return nil, "", fmt.Errorf("passkey: begin registration: %w", err)
	}
	id, err := s.put(ctx, ceremony{Kind: kindRegister, Handle: u.Handle, Session: *sd})
	if err != nil {
		return nil, "", err
	}
	return opts, id, nil
}

// FinishRegistration checks the browser's answer to BeginRegistration
// (user verification required) and returns the new credential named name.
func (s *Service) FinishRegistration(ctx context.Context, id string, u User, name string, response []byte) (Credential, error) {
	if err := CheckName(name); err != nil {
		return Credential{}, err
	}
	c, err := s.take(ctx, id, kindRegister, u.Handle)
	if err != nil {
		return Credential{}, err
	}
	parsed, err := protocol.ParseCredentialCreationResponseBytes(response)
	if err != nil {
		return Credential{}, refuse(ReasonMalformed, "the authenticator's answer does not parse", err)
	}
	if !parsed.Response.AttestationObject.AuthData.Flags.HasUserVerified() {
		return Credential{}, refuse(ReasonUserVerification, "the authenticator did not verify the user (PIN or biometrics)", nil)
	}
	for _, have := range u.Credentials {
		if bytes.Equal(have.ID, parsed.RawID) {
			return Credential{}, refuse(ReasonCredential, "this passkey is already registered", nil)
		}
	}
	wc, err := s.wa.CreateCredential(waUser{u}, c.Session, parsed)
	if err != nil {
		return Credential{}, refuse(ReasonVerification, "the registration did not verify", err)
	}
	return Credential{Credential: *wc, Name: name, CreatedAt: s.now().UTC()}, nil
}

// CheckName applies the rules for a passkey's name: 1 to 64 bytes of
// printable text.
func CheckName(name string) error {
	if name == "" || len(name) > MaxNameLen {
		return fmt.Errorf("passkey: a name is 1 to %d bytes", MaxNameLen)
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == 0xfffd {
			return errors.New("passkey: a name has no control characters")
		}
	}
	return nil
}

// BeginApproval starts approving the call of b with one of u's passkeys.
// The options go to navigator.credentials.get.
func (s *Service) BeginApproval(ctx context.Context, u User, b Binding) (*protocol.CredentialAssertion, string, error) {
	if b.Operator != u.Name {
		return nil, "", fmt.Errorf("passkey: binding names operator %q, not %q", b.Operator, u.Name)
	}
	if len(u.Credentials) == 0 {
		return nil, "", ErrNoPasskey
	}
	challenge, err := NewChallenge(b)
	if err != nil {
		return nil, "", err
	}
	opts, sd, err := s.wa.BeginLogin(waUser{u}, webauthn.WithChallenge(challenge),
		webauthn.WithUserVerification(protocol.VerificationRequired))
	if err != nil {
		return nil, "", fmt.Errorf("passkey: begin approval: %w", err)
	}
	id, err := s.put(ctx, ceremony{Kind: kindApprove, Handle: u.Handle, Binding: b, Session: *sd})
	if err != nil {
		return nil, "", err
	}
	return opts, id, nil
}

// ErrNoPasskey is an operator with no passkey registered.
var ErrNoPasskey = errors.New("passkey: register a passkey on your account page first")

// Approval is a verified passkey approval.
type Approval struct {
	// Credential is the passkey used, its sign count advanced: store it.
	Credential Credential
	// Evidence is what to keep with the decision.
	Evidence Evidence
}

// FinishApproval checks the browser's answer to BeginApproval. now is the
// binding of the call as it stands (re-read by the caller): a call whose
// digest changed since the ceremony began approves nothing. The ceremony
// is used up whatever the outcome.
func (s *Service) FinishApproval(ctx context.Context, id string, u User, now Binding, response []byte) (Approval, error) {
	c, err := s.take(ctx, id, kindApprove, u.Handle)
	if err != nil {
		return Approval{}, err
	}
	if c.Binding != now {
		return Approval{}, refuse(ReasonCallChanged, "the call, its digest or the operator changed since the passkey prompt opened; reload the call and approve again", nil)
	}
	parsed, err := protocol.ParseCredentialRequestResponseBytes(response)
	if err != nil {
		return Approval{}, refuse(ReasonMalformed, "the authenticator's answer does not parse", err)
	}
	if !parsed.Response.AuthenticatorData.Flags.HasUserVerified() {
		return Approval{}, refuse(ReasonUserVerification, "the authenticator did not verify the user (PIN or biometrics); an approval needs it", nil)
	}
	cd := parsed.Response.CollectedClientData
	if cd.Challenge != c.Session.Challenge {
		return Approval{}, refuse(ReasonChallenge, "the signed challenge is not the one issued for this approval", nil)
	}
	got, err := decodeB64(cd.Challenge)
	if err != nil {
		return Approval{}, refuse(ReasonChallenge, "the signed challenge does not decode", err)
	}
	if err := CheckChallenge(got, now); err != nil {
		return Approval{}, refuse(ReasonChallenge, "the signed challenge is not bound to this call", err)
	}
	var stored *Credential
	for i := range u.Credentials {
		if bytes.Equal(u.Credentials[i].ID, parsed.RawID) {
			stored = &u.Credentials[i]
		}
	}
	if stored == nil {
		return Approval{}, refuse(ReasonCredential, "the passkey used is not one of yours (it may have been removed)", nil)
	}
	wc, err := s.wa.ValidateLogin(waUser{u}, c.Session, parsed)
	if err != nil {
		var pe *protocol.Error
		if errors.As(err, &pe) && pe.Type == protocol.ErrAssertionSignature.Type {
			return Approval{}, refuse(ReasonSignature, "the signature does not verify against your registered passkey", err)
		}
		return Approval{}, refuse(ReasonVerification, "the assertion did not verify", err)
	}
	count := parsed.Response.AuthenticatorData.Counter
	if err := checkSignCount(stored.Authenticator.SignCount, count); err != nil {
		return Approval{}, err
	}
	used := *stored
	used.Credential = *wc
	used.Authenticator.SignCount = count
	used.Authenticator.CloneWarning = false
	ev := Evidence{
		Format: EvidenceFormat, RPID: s.rpID, Origin: parsed.Response.CollectedClientData.Origin,
		CallID: now.CallID, Digest: now.Digest, Operator: now.Operator,
		CredentialID: stored.ID, CredentialName: stored.Name, PublicKey: stored.PublicKey,
		AuthenticatorData: B64(parsed.Raw.AssertionResponse.AuthenticatorData),
		ClientDataJSON:    B64(parsed.Raw.AssertionResponse.ClientDataJSON),
		Signature:         B64(parsed.Raw.AssertionResponse.Signature),
		SignCount:         count,
	}
	return Approval{Credential: used, Evidence: ev}, nil
}

// checkSignCount applies the clone rule: a count that goes backwards, or
// stays equal while above zero, means two copies of the key exist.
// Authenticators that keep no counter (synced passkeys) report 0 every
// time, and 0 after 0 is accepted.
func checkSignCount(stored, got uint32) error {
	if got == 0 && stored == 0 {
		return nil
	}
	if got <= stored {
		return refuse(ReasonSignCount, fmt.Sprintf("the passkey's signature counter went from %d to %d: it may have been cloned; remove it and register a new one", stored, got), nil)
	}
	return nil
}

func decodeB64(s string) ([]byte, error) {
	return base64.RawURLEncoding.DecodeString(s)
}

func (s *Service) put(ctx context.Context, c ceremony) (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	id := base64.RawURLEncoding.EncodeToString(b[:])
	data, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	owner := base64.RawURLEncoding.EncodeToString(c.Handle)
	if err := s.ceremonies.PutOwned(ctx, owner, MaxCeremoniesPerAccount, id, data, s.now().Add(CeremonyTTL)); err != nil {
		if errors.Is(err, oneshot.ErrFull) {
			return "", ErrPromptsFull
		}
		return "", fmt.Errorf("passkey: keep the prompt under way: %w", err)
	}
	return id, nil
}

// take removes and returns a ceremony: whatever happens next, it cannot be
// finished twice.
func (s *Service) take(ctx context.Context, id string, k kind, handle []byte) (ceremony, error) {
	data, expires, err := s.ceremonies.Take(ctx, id)
	if errors.Is(err, oneshot.ErrNotFound) {
		return ceremony{}, refuse(ReasonCeremony, "the passkey prompt is unknown or already used; start again", nil)
	}
	if err != nil {
		return ceremony{}, fmt.Errorf("passkey: read the prompt under way: %w", err)
	}
	var c ceremony
	if err := json.Unmarshal(data, &c); err != nil {
		return ceremony{}, fmt.Errorf("passkey: read the prompt under way: %w", err)
	}
	if c.Kind != k {
		return ceremony{}, refuse(ReasonCeremony, "the passkey prompt is unknown or already used; start again", nil)
	}
	if !s.now().Before(expires) {
		return ceremony{}, refuse(ReasonCeremony, "the passkey prompt was open longer than "+CeremonyTTL.String()+"; start again", nil)
	}
	if !bytes.Equal(c.Handle, handle) {
		return ceremony{}, refuse(ReasonCeremony, "the passkey prompt was opened by another operator", nil)
	}
	return c, nil
}

// hostWithin reports whether host is rpID or a subdomain of it.
func hostWithin(host, rpID string) bool {
	return host == rpID || (len(host) > len(rpID) && host[len(host)-len(rpID)-1:] == "."+rpID)
}
