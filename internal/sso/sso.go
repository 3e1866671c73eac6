// Package sso is the console's OpenID Connect relying party: the
// authorization code flow with PKCE, state and nonce, the ID token verified
// against the provider's discovery document and keys, the mapping from the
// provider's groups to a console role, and RP-initiated logout.
//
// It knows nothing of HTTP sessions or storage: the server starts a login
// with Begin (it gets the provider's URL to redirect to and a state value to
// keep in a cookie), hands the callback's query and that cookie to Finish,
// and gets back the verified Identity or a *Refusal saying why not.
package sso

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/oneshot"
)

// PrincipalPrefix starts every single-sign-on principal:
// oidc:{issuer host}/{sub}.
const PrincipalPrefix = "oidc:"

// FlowTTL is how long a started login may take to come back.
const FlowTTL = 10 * time.Minute

// MaxFlows bounds the logins under way at once in the default in-memory
// store, so a flood of unfinished logins cannot grow memory without end.
const MaxFlows = 10000

// DefaultScopes are requested when Config.Scopes is empty.
var DefaultScopes = []string{oidc.ScopeOpenID, "profile", "email", "groups"}

// DefaultGroupsClaim names the ID token claim that lists the user's groups.
const DefaultGroupsClaim = "groups"

// Config configures a RelyingParty.
type Config struct {
	// Issuer is the provider's issuer URL, exactly as it appears in its
	// discovery document and in the tokens' iss claim.
	Issuer string
	// ClientID and ClientSecret are the console's registration at the
	// provider. The client id is the audience ID tokens must name.
	ClientID     string
	ClientSecret string
	// RedirectURL is the console's callback, {public URL}/auth/oidc/callback.
	RedirectURL string
	// Scopes requested; openid is added when missing. Empty means
	// DefaultScopes.
	Scopes []string
	// GroupsClaim names the claim holding the groups (DefaultGroupsClaim
	// when empty). A string or an array of strings.
	GroupsClaim string
	// Roles maps groups to console roles.
	Roles RoleMap
	// HTTPClient reaches the provider (http.DefaultClient when nil).
	HTTPClient *http.Client
	// Now is the clock for token expiry and flow lifetimes.
	Now func() time.Time
	// Flows keeps the logins under way between Begin and Finish. Behind
	// several replicas it must be shared (the database); nil keeps them
	// in this process's memory, at most MaxFlows at once.
	Flows oneshot.Store
}

// RelyingParty runs logins against one provider. Safe for concurrent use.
type RelyingParty struct {
	cfg        Config
	oauth      oauth2.Config
	verifier   *oidc.IDTokenVerifier
	endSession string
	issuerHost string
	now        func() time.Time
	flows      oneshot.Store
}

// flow is one login under way, kept under its state.
type flow struct {
	Nonce    string `json:"nonce"`
	Verifier string `json:"verifier"` // PKCE code verifier
	ReturnTo string `json:"return_to"`
}

// New discovers the provider (its discovery document is fetched now, its
// keys when the first token arrives) and returns a relying party for it.
func New(ctx context.Context, cfg Config) (*RelyingParty, error) {
	if cfg.Issuer == "" || cfg.ClientID == "" {
		return nil, errors.New("sso: an issuer URL and a client id are required")
	}
	iu, err := url.Parse(cfg.Issuer)
	if err != nil || (iu.Scheme != "https" && iu.Scheme != "http") || iu.Host == "" {
		return nil, fmt.Errorf("sso: issuer %q is not an http(s) URL", cfg.Issuer)
	}
	if _, err := url.ParseRequestURI(cfg.RedirectURL); err != nil {
		return nil, fmt.Errorf("sso: redirect URL %q: %w", cfg.RedirectURL, err)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Flows == nil {
		cfg.Flows = oneshot.NewMemory(MaxFlows, cfg.Now)
	}
	if cfg.GroupsClaim == "" {
		cfg.GroupsClaim = DefaultGroupsClaim
	}
	scopes := cfg.Scopes
	if len(scopes) == 0 {
		scopes = DefaultScopes
	}
	if !slices.Contains(scopes, oidc.ScopeOpenID) {
		scopes = append([]string{oidc.ScopeOpenID}, scopes...)
	}
	if cfg.HTTPClient != nil {
		ctx = oidc.ClientContext(ctx, cfg.HTTPClient)
	}
	p, err := oidc.NewProvider(ctx, cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("sso: discover %s: %w", cfg.Issuer, err)
	}
	var extra struct {
		EndSession string   `json:"end_session_endpoint"`
		PKCE       []string `json:"code_challenge_methods_supported"`
	}
	if err := p.Claims(&extra); err != nil {
		return nil, fmt.Errorf("sso: read %s's discovery document: %w", cfg.Issuer, err)
	}
	// A provider that lists its PKCE methods without S256 would ignore the
	// challenge; refuse to run without it rather than silently lose it.
	if len(extra.PKCE) > 0 && !slices.Contains(extra.PKCE, "S256") {
		return nil, fmt.Errorf("sso: %s does not support PKCE with S256 (it lists %v)", cfg.Issuer, extra.PKCE)
	}
	rp := &RelyingParty{
		cfg: cfg,
		oauth: oauth2.Config{
			ClientID: cfg.ClientID, ClientSecret: cfg.ClientSecret,
			Endpoint: p.Endpoint(), RedirectURL: cfg.RedirectURL, Scopes: scopes,
		},
		// The verifier checks the signature against the provider's JWKS,
		// the issuer, the audience (our client id) and the expiry.
		verifier:   p.VerifierContext(ctx, &oidc.Config{ClientID: cfg.ClientID, Now: cfg.Now}),
		endSession: extra.EndSession,
		issuerHost: iu.Host,
		now:        cfg.Now,
		flows:      cfg.Flows,
	}
	return rp, nil
}

// Issuer returns the configured issuer URL.
func (rp *RelyingParty) Issuer() string { return rp.cfg.Issuer }

// Begin starts a login: it returns the provider's authorization URL to
// redirect the browser to, and the state, which the caller keeps in a
// cookie on that browser and hands back to Finish. returnTo is kept with
// the flow and given back by Finish. forceLogin asks the provider to
// authenticate the user again even when it holds a session of its own
// (prompt=login), for the steps that want a fresh login.
func (rp *RelyingParty) Begin(ctx context.Context, returnTo string, forceLogin bool) (authURL, state string, err error) {
	state, nonce, verifier := random(), random(), oauth2.GenerateVerifier()
	data, err := json.Marshal(flow{Nonce: nonce, Verifier: verifier, ReturnTo: returnTo})
	if err != nil {
		return "", "", err
	}
	if err := rp.flows.Put(ctx, state, data, rp.now().Add(FlowTTL)); err != nil {
		if errors.Is(err, oneshot.ErrFull) {
			return "", "", ErrBusy
		}
		return "", "", fmt.Errorf("sso: keep the login under way: %w", err)
	}
	opts := []oauth2.AuthCodeOption{oidc.Nonce(nonce), oauth2.S256ChallengeOption(verifier)}
	if forceLogin {
		opts = append(opts, oauth2.SetAuthURLParam("prompt", "login"))
	}
	return rp.oauth.AuthCodeURL(state, opts...), state, nil
}

// ErrBusy is returned by Begin when too many logins are under way.
var ErrBusy = errors.New("sso: too many logins under way; try again in a few minutes")

// Finish completes a login from the provider's callback. query is the
// callback's query string; cookieState is the state Begin returned, as
// kept on the browser. The flow is used up whatever the outcome, so a
// replayed callback is refused.
func (rp *RelyingParty) Finish(ctx context.Context, query url.Values, cookieState string) (Identity, error) {
	state := query.Get("state")
	if state == "" {
		return Identity{}, refuse(ReasonState, "the callback carries no state", nil)
	}
	data, expires, err := rp.flows.Take(ctx, state)
	if errors.Is(err, oneshot.ErrNotFound) {
		return Identity{}, refuse(ReasonState, "the login is unknown, already used or too old", nil)
	}
	if err != nil {
		return Identity{}, fmt.Errorf("sso: read the login under way: %w", err)
	}
	var f flow
	if err := json.Unmarshal(data, &f); err != nil {
		return Identity{}, fmt.Errorf("sso: read the login under way: %w", err)
	}
	if subtle.ConstantTimeCompare([]byte(state), []byte(cookieState)) != 1 {
		return Identity{}, refuse(ReasonState, "the login was started in another browser", nil)
	}
	if !rp.now().Before(expires) {
		return Identity{}, refuse(ReasonState, "the login took longer than "+FlowTTL.String(), nil)
	}
	if e := query.Get("error"); e != "" {
		return Identity{}, refuse(ReasonProvider, providerError(e, query.Get("error_description")), nil)
	}
	code := query.Get("code")
	if code == "" {
		return Identity{}, refuse(ReasonProvider, "the callback carries no code", nil)
	}
	if rp.cfg.HTTPClient != nil {
		ctx = context.WithValue(ctx, oauth2.HTTPClient, rp.cfg.HTTPClient)
	}
	tok, err := rp.oauth.Exchange(ctx, code, oauth2.VerifierOption(f.Verifier))
	if err != nil {
		return Identity{}, refuse(ReasonExchange, "the provider refused the code", err)
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return Identity{}, refuse(ReasonIDToken, "the provider returned no ID token", nil)
	}
	idt, err := rp.verifier.Verify(ctx, raw)
	if err != nil {
		return Identity{}, refuse(tokenReason(err), "the ID token did not verify", err)
	}
	if subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(f.Nonce)) != 1 {
		return Identity{}, refuse(ReasonNonce, "the ID token's nonce is not this login's", nil)
	}
	return rp.identity(idt, raw, f.ReturnTo)
}

func (rp *RelyingParty) identity(idt *oidc.IDToken, raw, returnTo string) (Identity, error) {
	if idt.Subject == "" {
		return Identity{}, refuse(ReasonIDToken, "the ID token has no subject", nil)
	}
	var std struct {
		Name              string `json:"name"`
		Email             string `json:"email"`
		PreferredUsername string `json:"preferred_username"`
	}
	var all map[string]any
	if err := idt.Claims(&std); err != nil {
		return Identity{}, refuse(ReasonIDToken, "the ID token's claims do not read", err)
	}
	if err := idt.Claims(&all); err != nil {
		return Identity{}, refuse(ReasonIDToken, "the ID token's claims do not read", err)
	}
	groups, err := groupsOf(all[rp.cfg.GroupsClaim])
	if err != nil {
		return Identity{}, refuse(ReasonIDToken, fmt.Sprintf("the %q claim: %v", rp.cfg.GroupsClaim, err), nil)
	}
	id := Identity{
		Issuer: idt.Issuer, Subject: idt.Subject,
		Principal:   PrincipalPrefix + rp.issuerHost + "/" + idt.Subject,
		DisplayName: std.Name, Email: std.Email, PreferredUsername: std.PreferredUsername,
		Groups: groups, IDToken: raw, ReturnTo: returnTo, Expiry: idt.Expiry,
	}
	id.Role, id.HasRole = rp.cfg.Roles.Role(groups)
	return id, nil
}

// LogoutURL returns the provider's end-session URL (RP-initiated logout)
// for a user whose login produced idToken, sending the browser back to
// postLogout; ok is false when the provider advertises no
// end_session_endpoint, and the caller just ends its own session.
func (rp *RelyingParty) LogoutURL(idToken, postLogout string) (string, bool) {
	if rp.endSession == "" {
		return "", false
	}
	// The address comes from the provider's discovery document and goes
	// into a link on the console's pages: only an http(s) address is one
	// (never javascript: or data:).
	u, err := url.Parse(rp.endSession)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return "", false
	}
	q := u.Query()
	if idToken != "" {
		q.Set("id_token_hint", idToken)
	}
	q.Set("client_id", rp.cfg.ClientID)
	if postLogout != "" {
		q.Set("post_logout_redirect_uri", postLogout)
	}
	u.RawQuery = q.Encode()
	return u.String(), true
}

// Identity is who the provider says logged in, after every check passed.
type Identity struct {
	// Issuer and Subject are the identity: stable, unlike the names.
	Issuer  string
	Subject string
	// Principal is how decisions and audit entries name the user:
	// oidc:{issuer host}/{sub}.
	Principal string
	// DisplayName, Email and PreferredUsername are shown, never trusted as
	// the identity.
	DisplayName       string
	Email             string
	PreferredUsername string
	Groups            []string
	// Role is the most capable role the groups map to; HasRole is false
	// when none maps, and such a user gets no session.
	Role    account.Role
	HasRole bool
	// IDToken is the raw token, kept for RP-initiated logout's hint.
	IDToken string
	// Expiry is the ID token's expiry.
	Expiry time.Time
	// ReturnTo is what Begin was given.
	ReturnTo string
}

func groupsOf(v any) ([]string, error) {
	switch g := v.(type) {
	case nil:
		return nil, nil
	case string:
		return []string{g}, nil
	case []any:
		out := make([]string, 0, len(g))
		for _, e := range g {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("a group is a %T, not a string", e)
			}
			out = append(out, s)
		}
		return out, nil
	}
	return nil, fmt.Errorf("is a %T, not a string or a list of strings", v)
}

func providerError(code, desc string) string {
	msg := "the provider answered " + code
	if desc != "" {
		msg += ": " + desc
	}
	return msg
}

// tokenReason names the check that failed, for the message only: go-oidc
// returns typed errors for expiry alone, so the others are told apart by
// their text. The login is refused whatever the classification says.
func tokenReason(err error) Reason {
	var exp *oidc.TokenExpiredError
	switch msg := err.Error(); {
	case errors.As(err, &exp):
		return ReasonExpired
	case strings.Contains(msg, "issued by a different provider"):
		return ReasonIssuer
	case strings.Contains(msg, "expected audience"):
		return ReasonAudience
	case strings.Contains(msg, "signature"), strings.Contains(msg, "malformed jwt"):
		return ReasonSignature
	}
	return ReasonIDToken
}

func random() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}
