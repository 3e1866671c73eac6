// Package ssotest runs an in-process OpenID provider (mockoidc) on
// 127.0.0.1 for tests of single sign-on: it speaks the real protocol
// (discovery, authorization code with PKCE, token endpoint, JWKS, signed ID
// tokens, userinfo, RP-initiated logout), and hands out the users queued on
// it, one per login.
package ssotest

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/oauth2-proxy/mockoidc"
)

// EndSessionPath is where the provider serves RP-initiated logout.
const EndSessionPath = "/oidc/logout"

// Provider is a running in-process OpenID provider. Its discovery document
// advertises the userinfo endpoint and, unless NoEndSession, an
// end_session_endpoint.
type Provider struct {
	*mockoidc.MockOIDC
	// EndSession is advertised as the end_session_endpoint. Start sets it
	// to the provider's own EndSessionPath when a test leaves it empty.
	EndSession string
	// NoEndSession advertises no end_session_endpoint at all.
	NoEndSession bool
	// ClaimsInUserinfo makes the users queued by User carry their profile,
	// email and groups only in the userinfo response, as OpenID Connect
	// Core allows in the code flow; the ID token then names only the
	// subject.
	ClaimsInUserinfo bool
	// JWKS, when set, replaces the key set the provider serves.
	JWKS func() []byte
	// IDToken, when set, rewrites the ID token of each token response.
	IDToken func(signed string) string

	mu         sync.Mutex
	logouts    []url.Values
	authorized []url.Values
}

// User is someone the provider logs in. Queue one per login.
type User struct {
	Subject, Username, Email, Name string
	Groups                         []string
	// ClaimsInUserinfo keeps the profile, email and groups out of the ID
	// token: only the userinfo endpoint says them.
	ClaimsInUserinfo bool
	// SignedInAt is when the user last authenticated at the provider (its
	// session there), reported as auth_time. Zero means at this login. An
	// authorization request with prompt=login, or a max_age the session
	// is older than, makes the user authenticate again: auth_time is then
	// the moment of the request.
	SignedInAt time.Time
	// NoAuthTime leaves auth_time out of the ID token.
	NoAuthTime bool
	// IgnoresReauthentication keeps SignedInAt as auth_time whatever the
	// request asks, as a provider that does not honour prompt or max_age.
	IgnoresReauthentication bool
	// UserinfoSubject, when set, is the sub the userinfo endpoint answers
	// instead of Subject.
	UserinfoSubject string

	authTime time.Time // set when the provider authorizes this login
}

var _ mockoidc.User = (*User)(nil)

// ID implements mockoidc.User.
func (u *User) ID() string { return u.Subject }

// scoped returns the claims the scopes grant.
func (u *User) scoped(scopes []string) map[string]any {
	m := map[string]any{}
	if slices.Contains(scopes, "profile") {
		if u.Username != "" {
			m["preferred_username"] = u.Username
		}
		if u.Name != "" {
			m["name"] = u.Name
		}
	}
	if slices.Contains(scopes, "email") && u.Email != "" {
		m["email"], m["email_verified"] = u.Email, true
	}
	if slices.Contains(scopes, "groups") && u.Groups != nil {
		m["groups"] = append([]string(nil), u.Groups...)
	}
	return m
}

// Userinfo implements mockoidc.User: the userinfo endpoint's answer.
func (u *User) Userinfo(scopes []string) ([]byte, error) {
	m := u.scoped(scopes)
	m["sub"] = u.Subject
	if u.UserinfoSubject != "" {
		m["sub"] = u.UserinfoSubject
	}
	return json.Marshal(m)
}

// Claims implements mockoidc.User: the ID token's claims.
func (u *User) Claims(scopes []string, base *mockoidc.IDTokenClaims) (jwt.Claims, error) {
	b, err := json.Marshal(base)
	if err != nil {
		return nil, err
	}
	var m jwt.MapClaims
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	if !u.NoAuthTime && !u.authTime.IsZero() {
		m["auth_time"] = u.authTime.Unix()
	}
	if !u.ClaimsInUserinfo {
		for k, v := range u.scoped(scopes) {
			m[k] = v
		}
	}
	return m, nil
}

// Start runs a provider until the test ends. opts run before it starts.
func Start(t testing.TB, opts ...func(*Provider)) *Provider {
	t.Helper()
	m, err := mockoidc.NewServer(nil)
	if err != nil {
		t.Fatal(err)
	}
	p := &Provider{MockOIDC: m}
	for _, o := range opts {
		o(p)
	}
	// mockoidc keeps its sessions in a plain map; one request at a time
	// keeps it (and the race detector) happy. Its own Start serves a fixed
	// set of paths; this one serves them and the end-session endpoint.
	var mu sync.Mutex
	serve := func(h http.HandlerFunc) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			h(w, r)
		})
	}
	mux := http.NewServeMux()
	mux.Handle(mockoidc.DiscoveryEndpoint, serve(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		m.Discovery(rec, r)
		var doc map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		if !p.NoEndSession {
			doc["end_session_endpoint"] = p.EndSession
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(doc)
	}))
	mux.Handle(mockoidc.AuthorizationEndpoint, serve(p.authorize))
	mux.Handle(mockoidc.TokenEndpoint, serve(func(w http.ResponseWriter, r *http.Request) {
		if p.IDToken == nil {
			m.Token(w, r)
			return
		}
		rec := httptest.NewRecorder()
		m.Token(rec, r)
		var resp map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil || rec.Code != http.StatusOK {
			w.WriteHeader(rec.Code)
			_, _ = w.Write(rec.Body.Bytes())
			return
		}
		if t, ok := resp["id_token"].(string); ok {
			resp["id_token"] = p.IDToken(t)
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(resp)
	}))
	mux.Handle(mockoidc.UserinfoEndpoint, serve(m.Userinfo))
	mux.Handle(mockoidc.JWKSEndpoint, serve(func(w http.ResponseWriter, r *http.Request) {
		if p.JWKS == nil {
			m.JWKS(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(p.JWKS())
	}))
	mux.Handle(EndSessionPath, serve(p.endSession))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m.Server = &http.Server{Addr: ln.Addr().String(), Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = m.Server.Serve(ln) }()
	if p.EndSession == "" {
		p.EndSession = m.Addr() + EndSessionPath
	}
	t.Cleanup(func() { _ = m.Shutdown() })
	return p
}

// authorize lets mockoidc authorize the request, then sets the user's
// auth_time the way a provider holding a session would: the session's
// time, unless the request asks for a new authentication.
func (p *Provider) authorize(w http.ResponseWriter, r *http.Request) {
	_ = r.ParseForm()
	p.mu.Lock()
	p.authorized = append(p.authorized, r.Form)
	p.mu.Unlock()
	rec := httptest.NewRecorder()
	p.Authorize(rec, r)
	if loc, err := url.Parse(rec.Header().Get("Location")); err == nil && rec.Code == http.StatusFound {
		if s, err := p.SessionStore.GetSessionByID(loc.Query().Get("code")); err == nil {
			if u, ok := s.User.(*User); ok {
				now := p.Now()
				u.authTime = u.SignedInAt
				if u.authTime.IsZero() || r.Form.Get("prompt") == "login" && !u.IgnoresReauthentication {
					u.authTime = now
				}
				if maxAge, err := time.ParseDuration(r.Form.Get("max_age") + "s"); err == nil && now.Sub(u.authTime) > maxAge &&
					!u.IgnoresReauthentication {
					u.authTime = now
				}
			}
		}
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

// endSession is RP-initiated logout: the client and the ID token hint must
// be this provider's; the browser goes on to post_logout_redirect_uri.
func (p *Provider) endSession(w http.ResponseWriter, r *http.Request) {
	_ = r.ParseForm()
	if r.Form.Get("client_id") != p.ClientID {
		http.Error(w, "unknown client_id", http.StatusBadRequest)
		return
	}
	if hint := r.Form.Get("id_token_hint"); hint != "" {
		// An expired hint is still a hint; its signature must be ours.
		if _, err := jwt.Parse(hint, func(*jwt.Token) (any, error) { return p.Keypair.PublicKey, nil },
			jwt.WithoutClaimsValidation(), jwt.WithValidMethods([]string{"RS256"})); err != nil {
			http.Error(w, "id_token_hint: "+err.Error(), http.StatusBadRequest)
			return
		}
	}
	p.mu.Lock()
	p.logouts = append(p.logouts, r.Form)
	p.mu.Unlock()
	if back := r.Form.Get("post_logout_redirect_uri"); back != "" {
		http.Redirect(w, r, back, http.StatusFound)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write([]byte(`<!doctype html><title>Signed out</title><p id="idp-signed-out">You are signed out.</p>`))
}

// Logouts returns the requests the end-session endpoint accepted.
func (p *Provider) Logouts() []url.Values {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.logouts)
}

// Authorizations returns the authorization requests the provider received.
func (p *Provider) Authorizations() []url.Values {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.authorized)
}

// User queues the identity the next login receives.
func (p *Provider) User(sub, username, email string, groups ...string) {
	p.Queue(&User{Subject: sub, Username: username, Email: email, Groups: groups, ClaimsInUserinfo: p.ClaimsInUserinfo})
}

// Queue queues u for the next login.
func (p *Provider) Queue(u *User) { p.QueueUser(u) }

// SecretFile writes the client secret to a file only the owner reads, for
// --oidc-client-secret-file.
func (p *Provider) SecretFile(t testing.TB) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "oidc-client-secret")
	if err := os.WriteFile(f, []byte(p.ClientSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}
