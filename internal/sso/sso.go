// Package sso is the console's OpenID Connect relying party: the
// authorization code flow with PKCE, state and nonce, the ID token verified
// against the provider's discovery document and keys, the mapping from the
// provider's groups to a console role, and RP-initiated logout.
//
// It knows nothing of HTTP sessions or cookies: the server starts a login
// with Begin (it gets the provider's URL to redirect to and the Flow, which
// it keeps on the browser in a signed, encrypted cookie), hands the
// callback's query and that Flow to Finish, and gets back the verified
// Identity or a *Refusal saying why not. A login under way costs the
// console no storage: a flood of logins started and never finished fills
// nothing.
package sso

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
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

// MaxFinished bounds the finished logins remembered at once (each for the
// rest of its FlowTTL, so that its callback is not accepted twice). Only a
// login the provider completed is remembered, and a full store refuses
// nobody: the provider's single-use code still stops a replay.
const MaxFinished = 10000

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
	// Finished remembers the logins already finished until their flow
	// expires, so a callback is accepted once. Behind several replicas it
	// should be shared (the database); nil keeps them in this process's
	// memory, at most MaxFinished at once.
	Finished oneshot.Store
}

// RelyingParty runs logins against one provider. Safe for concurrent use.
type RelyingParty struct {
	cfg        Config
	oauth      oauth2.Config
	verifier   *oidc.IDTokenVerifier
	endSession string
	issuerHost string
	provider   *oidc.Provider
	userinfo   string // the userinfo endpoint, "" when the provider has none
	now        func() time.Time
	finished   oneshot.Store
}

// Flow is one login under way, from Begin to Finish. It holds the secrets
// of the login (the PKCE verifier), so the caller keeps it where only this
// browser and the console can read it: a signed, encrypted, HttpOnly
// cookie whose keys every replica shares, so that any replica finishes
// the login.
type Flow struct {
	State    string `json:"state"`
	Nonce    string `json:"nonce"`
	Verifier string `json:"verifier"` // PKCE code verifier
	ReturnTo string `json:"return_to"`
	// MaxAge, when positive, is the fresh login this flow asked for: the
	// provider must have authenticated the user within it (auth_time).
	MaxAge time.Duration `json:"max_age,omitempty"`
	// Expires is when the login becomes too old to finish.
	Expires time.Time `json:"expires"`
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
	// Discovery, the keys and the code exchange all go to the issuer: in
	// clear text only on this machine.
	if iu.Scheme == "http" && !loopback(iu.Hostname()) {
		return nil, fmt.Errorf("sso: issuer %q must be https: plain http is allowed only for a provider on this machine (localhost, 127.0.0.0/8, ::1)", cfg.Issuer)
	}
	if _, err := url.ParseRequestURI(cfg.RedirectURL); err != nil {
		return nil, fmt.Errorf("sso: redirect URL %q: %w", cfg.RedirectURL, err)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Finished == nil {
		cfg.Finished = oneshot.NewMemory(MaxFinished, cfg.Now)
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
		provider:   p,
		userinfo:   p.UserInfoEndpoint(),
		now:        cfg.Now,
		finished:   cfg.Finished,
	}
	return rp, nil
}

// Issuer returns the configured issuer URL.
func (rp *RelyingParty) Issuer() string { return rp.cfg.Issuer }

// Begin starts a login: it returns the provider's authorization URL to
// redirect the browser to, and the Flow, which the caller keeps on that
// browser and hands back to Finish. returnTo is kept in the flow and given
// back by Finish. A positive freshWithin asks for a fresh login, for the
// steps that want one: the provider must authenticate the user again even
// when it holds a session of its own (prompt=login, max_age), and Finish
// refuses an ID token whose auth_time is missing or older than freshWithin.
// Begin stores nothing.
func (rp *RelyingParty) Begin(_ context.Context, returnTo string, freshWithin time.Duration) (authURL string, f Flow, err error) {
	f = Flow{State: random(), Nonce: random(), Verifier: oauth2.GenerateVerifier(), ReturnTo: returnTo,
		Expires: rp.now().Add(FlowTTL)}
	opts := []oauth2.AuthCodeOption{oidc.Nonce(f.Nonce), oauth2.S256ChallengeOption(f.Verifier)}
	if freshWithin > 0 {
		f.MaxAge = freshWithin.Truncate(time.Second)
		if f.MaxAge <= 0 {
			f.MaxAge = time.Second
		}
		opts = append(opts, oauth2.SetAuthURLParam("prompt", "login"),
			oauth2.SetAuthURLParam("max_age", strconv.FormatInt(int64(f.MaxAge/time.Second), 10)))
	}
	return rp.oauth.AuthCodeURL(f.State, opts...), f, nil
}

// Finish completes a login from the provider's callback. query is the
// callback's query string; f is the Flow Begin returned, as kept on this
// browser (the zero Flow when the browser holds none). A flow finishes
// once: the caller drops it from the browser, and a callback of a login
// already finished is refused.
func (rp *RelyingParty) Finish(ctx context.Context, query url.Values, f Flow) (Identity, error) {
	state := query.Get("state")
	if state == "" {
		return Identity{}, refuse(ReasonState, "the callback carries no state", nil)
	}
	if f.State == "" || subtle.ConstantTimeCompare([]byte(state), []byte(f.State)) != 1 {
		return Identity{}, refuse(ReasonState, "the login was started in another browser, or already finished in this one", nil)
	}
	if !rp.now().Before(f.Expires) {
		return Identity{}, refuse(ReasonState, "the login took longer than "+FlowTTL.String(), nil)
	}
	if e := query.Get("error"); e != "" {
		return Identity{}, refuse(ReasonProvider, providerError(e, query.Get("error_description")), nil)
	}
	code := query.Get("code")
	if code == "" {
		return Identity{}, refuse(ReasonProvider, "the callback carries no code", nil)
	}
	// A login already finished is remembered until its flow expires. The
	// check and the mark are two steps: the provider's single-use code
	// stops a replay that races between them.
	if _, _, err := rp.finished.Take(ctx, f.State); err == nil {
		_ = rp.markFinished(ctx, f) // still finished, for the next replay
		return Identity{}, refuse(ReasonState, "the login was already finished", nil)
	} else if !errors.Is(err, oneshot.ErrNotFound) {
		return Identity{}, fmt.Errorf("sso: read the finished logins: %w", err)
	}
	if rp.cfg.HTTPClient != nil {
		ctx = context.WithValue(ctx, oauth2.HTTPClient, rp.cfg.HTTPClient)
		ctx = oidc.ClientContext(ctx, rp.cfg.HTTPClient)
	}
	tok, err := rp.oauth.Exchange(ctx, code, oauth2.VerifierOption(f.Verifier))
	if err != nil {
		return Identity{}, refuse(ReasonExchange, "the provider refused the code", err)
	}
	if err := rp.markFinished(ctx, f); err != nil {
		return Identity{}, err
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
	return rp.identity(ctx, tok, idt, raw, f)
}

// markFinished remembers that f's login finished. A full store is not an
// error: only logins the provider completed fill it, and the provider's
// code is single-use anyway.
func (rp *RelyingParty) markFinished(ctx context.Context, f Flow) error {
	err := rp.finished.Put(ctx, f.State, []byte("finished"), f.Expires)
	if err != nil && !errors.Is(err, oneshot.ErrFull) {
		return fmt.Errorf("sso: remember the finished login: %w", err)
	}
	return nil
}

// claimSet is what the console reads about a user: from the ID token, and
// from the userinfo endpoint for what the ID token leaves out.
type claimSet struct {
	Name              string `json:"name"`
	Email             string `json:"email"`
	PreferredUsername string `json:"preferred_username"`
	groups            any
	hasGroups         bool
}

func (rp *RelyingParty) readClaims(claims func(any) error) (claimSet, error) {
	var c claimSet
	var all map[string]any
	if err := claims(&c); err != nil {
		return c, err
	}
	if err := claims(&all); err != nil {
		return c, err
	}
	c.groups, c.hasGroups = all[rp.cfg.GroupsClaim]
	return c, nil
}

// complete reports whether nothing is left for the userinfo endpoint.
func (c claimSet) complete() bool {
	return c.Name != "" && c.Email != "" && c.PreferredUsername != "" && c.hasGroups
}

// fill takes from u what c lacks: the ID token's claims come first.
func (c *claimSet) fill(u claimSet) {
	if c.Name == "" {
		c.Name = u.Name
	}
	if c.Email == "" {
		c.Email = u.Email
	}
	if c.PreferredUsername == "" {
		c.PreferredUsername = u.PreferredUsername
	}
	if !c.hasGroups {
		c.groups, c.hasGroups = u.groups, u.hasGroups
	}
}

func (rp *RelyingParty) identity(ctx context.Context, tok *oauth2.Token, idt *oidc.IDToken, raw string, f Flow) (Identity, error) {
	if idt.Subject == "" {
		return Identity{}, refuse(ReasonIDToken, "the ID token has no subject", nil)
	}
	var at struct {
		AuthTime *int64 `json:"auth_time"`
	}
	if err := idt.Claims(&at); err != nil {
		return Identity{}, refuse(ReasonIDToken, "the ID token's claims do not read", err)
	}
	var authTime time.Time
	if at.AuthTime != nil {
		authTime = time.Unix(*at.AuthTime, 0)
	}
	if f.MaxAge > 0 {
		switch {
		case authTime.IsZero():
			return Identity{}, refuse(ReasonNotFresh, "this step needs a recent sign-in at the provider, and the provider did not say when "+
				"you last signed in (auth_time); ask an administrator", nil)
		case rp.now().Sub(authTime) > f.MaxAge:
			return Identity{}, refuse(ReasonNotFresh, "this step needs a sign-in at the provider within the last "+
				minutes(f.MaxAge)+", and the provider used an older one", nil)
		}
	}
	c, err := rp.readClaims(idt.Claims)
	if err != nil {
		return Identity{}, refuse(ReasonIDToken, "the ID token's claims do not read", err)
	}
	if !c.complete() && rp.userinfo != "" {
		ui, err := rp.provider.UserInfo(ctx, oauth2.StaticTokenSource(tok))
		if err != nil {
			return Identity{}, refuse(ReasonUserinfo, "the provider's userinfo endpoint did not answer", err)
		}
		if subtle.ConstantTimeCompare([]byte(ui.Subject), []byte(idt.Subject)) != 1 {
			return Identity{}, refuse(ReasonUserinfo, "the provider's userinfo names another user than the ID token", nil)
		}
		u, err := rp.readClaims(ui.Claims)
		if err != nil {
			return Identity{}, refuse(ReasonUserinfo, "the provider's userinfo does not read", err)
		}
		c.fill(u)
	}
	var groups []string
	if c.hasGroups {
		if groups, err = groupsOf(c.groups); err != nil {
			return Identity{}, refuse(ReasonIDToken, fmt.Sprintf("the %q claim: %v", rp.cfg.GroupsClaim, err), nil)
		}
	}
	id := Identity{
		Issuer: idt.Issuer, Subject: idt.Subject,
		Principal:   PrincipalPrefix + rp.issuerHost + "/" + idt.Subject,
		DisplayName: c.Name, Email: c.Email, PreferredUsername: c.PreferredUsername,
		Groups: groups, IDToken: raw, ReturnTo: f.ReturnTo, Expiry: idt.Expiry, AuthTime: authTime,
	}
	id.Role, id.HasRole = rp.cfg.Roles.Role(groups)
	return id, nil
}

// LogoutURL returns the provider's end-session URL (RP-initiated logout)
// for a user whose login produced idToken, sending the browser back to
// postLogout; ok is false when the provider advertises no
// end_session_endpoint, and the caller just ends its own session.
func (rp *RelyingParty) LogoutURL(idToken, postLogout string) (string, bool) {
	u, ok := rp.endSessionURL()
	if !ok {
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

// endSessionURL is the provider's end_session_endpoint. The address comes
// from the provider's discovery document and goes into links on the
// console's pages and its Content-Security-Policy: only an http(s) address
// with a plain host name or address is one (never javascript: or data:).
func (rp *RelyingParty) endSessionURL() (*url.URL, bool) {
	if rp.endSession == "" {
		return nil, false
	}
	u, err := url.Parse(rp.endSession)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil ||
		strings.ContainsFunc(u.Host, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(".-:[]", r))
		}) {
		return nil, false
	}
	return u, true
}

// EndSessionOrigin returns the origin (scheme://host[:port]) of the
// provider's end-session endpoint, or "" when it advertises none: logging
// out posts a form that the console redirects there.
func (rp *RelyingParty) EndSessionOrigin() string {
	u, ok := rp.endSessionURL()
	if !ok {
		return ""
	}
	return strings.ToLower(u.Scheme + "://" + u.Host)
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
	// AuthTime is when the provider last authenticated the user
	// (auth_time), zero when the ID token does not say.
	AuthTime time.Time
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

// minutes writes d for people: "5 minutes" when whole minutes.
func minutes(d time.Duration) string {
	switch {
	case d == time.Minute:
		return "minute"
	case d%time.Minute == 0:
		return fmt.Sprintf("%d minutes", d/time.Minute)
	}
	return d.String()
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

// loopback reports whether host names this machine: localhost, or an
// address in 127.0.0.0/8 or ::1.
func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

func random() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}
