package sso

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/oauth2-proxy/mockoidc"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/oneshot"
	"github.com/countersign/countersign/internal/sso/ssotest"
)

const callback = "http://127.0.0.1:1/auth/oidc/callback"

// provider is an in-process OpenID provider speaking the real protocol.
type provider = ssotest.Provider

func startProvider(t *testing.T, opts ...func(*provider)) *provider {
	t.Helper()
	return ssotest.Start(t, opts...)
}

func mustListen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func newRP(t *testing.T, p *provider, edit ...func(*Config)) *RelyingParty {
	t.Helper()
	cfg := Config{
		Issuer: p.Issuer(), ClientID: p.ClientID, ClientSecret: p.ClientSecret,
		RedirectURL: callback,
		Roles:       RoleMap{"approvers": account.RoleOperator, "sre": account.RoleAdmin, "audit": account.RoleAuditor},
	}
	for _, e := range edit {
		e(&cfg)
	}
	rp, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rp
}

var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// authorize sends the browser to the provider's authorization URL and
// returns the query of the callback it is redirected to.
func authorize(t *testing.T, authURL string) url.Values {
	t.Helper()
	resp, err := noRedirect.Get(authURL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("authorize: status %d, want 302: %s", resp.StatusCode, b)
	}
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	if got := loc.Scheme + "://" + loc.Host + loc.Path; got != callback {
		t.Fatalf("redirected to %s, want %s", got, callback)
	}
	return loc.Query()
}

func login(t *testing.T, rp *RelyingParty) (Identity, error) {
	t.Helper()
	authURL, f, err := rp.Begin(context.Background(), "/queue", 0)
	if err != nil {
		t.Fatal(err)
	}
	return rp.Finish(context.Background(), authorize(t, authURL), f)
}

func mustQuery(t *testing.T, raw string) url.Values {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Query()
}

func wantRefusal(t *testing.T, err error, reason Reason) {
	t.Helper()
	var r *Refusal
	if !errors.As(err, &r) {
		t.Fatalf("err = %v, want a refusal for %s", err, reason)
	}
	if r.Reason != reason {
		t.Fatalf("refused for %s (%v), want %s", r.Reason, r, reason)
	}
	if !errors.Is(err, &Refusal{Reason: reason}) {
		t.Fatalf("errors.Is does not match reason %s", reason)
	}
}

func TestLogin(t *testing.T) {
	p := startProvider(t)
	rp := newRP(t, p)
	p.QueueUser(&mockoidc.MockUser{Subject: "00u1ab", Email: "alice@example.com", PreferredUsername: "alice",
		Groups: []string{"approvers", "everyone"}})
	id, err := login(t, rp)
	if err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(p.Addr(), "http://")
	if want := "oidc:" + host + "/00u1ab"; id.Principal != want {
		t.Errorf("Principal = %q, want %q", id.Principal, want)
	}
	if id.Issuer != p.Issuer() || id.Subject != "00u1ab" {
		t.Errorf("identity = (%q, %q), want (%q, 00u1ab)", id.Issuer, id.Subject, p.Issuer())
	}
	if id.Email != "alice@example.com" || id.PreferredUsername != "alice" {
		t.Errorf("email, username = %q, %q", id.Email, id.PreferredUsername)
	}
	if !id.HasRole || id.Role != account.RoleOperator {
		t.Errorf("role = %q (%v), want operator", id.Role, id.HasRole)
	}
	if id.ReturnTo != "/queue" || id.IDToken == "" {
		t.Errorf("ReturnTo = %q, IDToken empty = %v", id.ReturnTo, id.IDToken == "")
	}
	if n := rp.finished.(*oneshot.Memory).Len(); n != 1 {
		t.Errorf("%d finished logins remembered, want 1", n)
	}
}

func TestAuthURLCarriesPKCEStateAndNonce(t *testing.T) {
	p := startProvider(t)
	rp := newRP(t, p)
	authURL, f, err := rp.Begin(context.Background(), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	state := f.State
	u, _ := url.Parse(authURL)
	q := u.Query()
	if q.Get("nonce") != f.Nonce || f.Verifier == "" || !f.Expires.After(time.Now()) {
		t.Errorf("flow = %+v, want the nonce sent, a verifier and an expiry", f)
	}
	if q.Get("state") != state || len(state) < 43 {
		t.Errorf("state = %q, want the returned %q of 256 bits", q.Get("state"), state)
	}
	if q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" {
		t.Errorf("PKCE = %q %q, want S256 and a challenge", q.Get("code_challenge_method"), q.Get("code_challenge"))
	}
	if len(q.Get("nonce")) < 43 {
		t.Errorf("nonce = %q, want 256 bits", q.Get("nonce"))
	}
	if !strings.Contains(" "+q.Get("scope")+" ", " openid ") {
		t.Errorf("scope = %q, want openid", q.Get("scope"))
	}
	if q.Has("prompt") || q.Has("max_age") {
		t.Errorf("prompt = %q, max_age = %q on an ordinary login", q.Get("prompt"), q.Get("max_age"))
	}
	_, f2, _ := rp.Begin(context.Background(), "", 0)
	if f2.State == state || f2.Nonce == f.Nonce || f2.Verifier == f.Verifier {
		t.Error("two logins share a state, nonce or verifier")
	}
	fresh, ff, _ := rp.Begin(context.Background(), "", 5*time.Minute)
	if q := mustQuery(t, fresh); q.Get("prompt") != "login" || q.Get("max_age") != "300" || ff.MaxAge != 5*time.Minute {
		t.Errorf("a login that must be fresh asks prompt=%q max_age=%q (flow %v), want login, 300", q.Get("prompt"), q.Get("max_age"), ff.MaxAge)
	}
}

func TestRoleFromGroups(t *testing.T) {
	p := startProvider(t)
	rp := newRP(t, p)
	cases := []struct {
		groups []string
		want   account.Role
		has    bool
	}{
		{[]string{"approvers"}, account.RoleOperator, true},
		{[]string{"audit", "sre", "approvers"}, account.RoleAdmin, true},
		{[]string{"audit"}, account.RoleAuditor, true},
		{[]string{"everyone"}, "", false},
		{nil, "", false},
	}
	for _, c := range cases {
		p.QueueUser(&mockoidc.MockUser{Subject: "s1", Groups: c.groups})
		id, err := login(t, rp)
		if err != nil {
			t.Fatal(err)
		}
		if id.Role != c.want || id.HasRole != c.has {
			t.Errorf("groups %v: role %q (%v), want %q (%v)", c.groups, id.Role, id.HasRole, c.want, c.has)
		}
	}
}

// The role comes from the groups at every login: out of the group, out of
// the role at the next login.
func TestRoleRemovedAtNextLogin(t *testing.T) {
	p := startProvider(t)
	rp := newRP(t, p)
	p.QueueUser(&mockoidc.MockUser{Subject: "bob", Groups: []string{"approvers"}})
	id, err := login(t, rp)
	if err != nil || id.Role != account.RoleOperator {
		t.Fatalf("first login: %v, role %q", err, id.Role)
	}
	p.QueueUser(&mockoidc.MockUser{Subject: "bob", Groups: []string{"everyone"}})
	id, err = login(t, rp)
	if err != nil {
		t.Fatal(err)
	}
	if id.HasRole {
		t.Errorf("after leaving the group, role %q, want none", id.Role)
	}
}

func TestGroupsClaimConfigurable(t *testing.T) {
	p := startProvider(t)
	rp := newRP(t, p, func(c *Config) { c.GroupsClaim = "roles" })
	p.QueueUser(&claimsUser{sub: "c1", edit: func(c *claims) { c.Extra = map[string]any{"roles": "sre"} }})
	id, err := login(t, rp)
	if err != nil {
		t.Fatal(err)
	}
	if id.Role != account.RoleAdmin {
		t.Errorf("role = %q from a single-string claim, want admin", id.Role)
	}
	p.QueueUser(&claimsUser{sub: "c1", edit: func(c *claims) { c.Extra = map[string]any{"roles": []any{1, 2}} }})
	_, err = login(t, rp)
	wantRefusal(t, err, ReasonIDToken)
}

// A replayed callback, even with a copy of its flow, is refused as a login
// already finished; a replayed code under another login is refused by the
// provider.
func TestReplayedCodeRefused(t *testing.T) {
	p := startProvider(t)
	rp := newRP(t, p)
	authURL, f, _ := rp.Begin(context.Background(), "", 0)
	q := authorize(t, authURL)
	if _, err := rp.Finish(context.Background(), q, f); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		_, err := rp.Finish(context.Background(), q, f)
		wantRefusal(t, err, ReasonState)
	}

	_, f2, _ := rp.Begin(context.Background(), "", 0)
	q2 := url.Values{"state": {f2.State}, "code": {q.Get("code")}}
	_, err := rp.Finish(context.Background(), q2, f2)
	wantRefusal(t, err, ReasonExchange)
}

func TestPKCEVerifierChecked(t *testing.T) {
	p := startProvider(t)
	rp := newRP(t, p)
	authURL, f, _ := rp.Begin(context.Background(), "", 0)
	q := authorize(t, authURL)
	f.Verifier = "a-verifier-that-is-not-the-one-whose-challenge-was-sent-0123456789"
	_, err := rp.Finish(context.Background(), q, f)
	wantRefusal(t, err, ReasonExchange)
}

func TestWrongNonceRefused(t *testing.T) {
	p := startProvider(t)
	rp := newRP(t, p)
	authURL, f, _ := rp.Begin(context.Background(), "", 0)
	u, _ := url.Parse(authURL)
	q := u.Query()
	q.Set("nonce", "a-nonce-chosen-elsewhere")
	u.RawQuery = q.Encode()
	_, err := rp.Finish(context.Background(), authorize(t, u.String()), f)
	wantRefusal(t, err, ReasonNonce)
}

func TestMissingNonceRefused(t *testing.T) {
	p := startProvider(t)
	rp := newRP(t, p)
	authURL, f, _ := rp.Begin(context.Background(), "", 0)
	u, _ := url.Parse(authURL)
	q := u.Query()
	q.Del("nonce")
	u.RawQuery = q.Encode()
	_, err := rp.Finish(context.Background(), authorize(t, u.String()), f)
	wantRefusal(t, err, ReasonNonce)
}

func TestStateBoundToBrowser(t *testing.T) {
	p := startProvider(t)
	rp := newRP(t, p)
	authURL, _, _ := rp.Begin(context.Background(), "", 0)
	_, other, _ := rp.Begin(context.Background(), "", 0)
	q := authorize(t, authURL)
	// The callback reaches a browser whose cookie holds another login, or
	// none: login CSRF, refused.
	_, err := rp.Finish(context.Background(), q, other)
	wantRefusal(t, err, ReasonState)
	_, err = rp.Finish(context.Background(), q, Flow{})
	wantRefusal(t, err, ReasonState)
	_, err = rp.Finish(context.Background(), url.Values{"code": {"x"}}, Flow{})
	wantRefusal(t, err, ReasonState)
}

func TestFlowExpires(t *testing.T) {
	p := startProvider(t)
	now := time.Now()
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	rp := newRP(t, p, func(c *Config) { c.Now = clock })
	authURL, f, _ := rp.Begin(context.Background(), "", 0)
	q := authorize(t, authURL)
	mu.Lock()
	now = now.Add(FlowTTL)
	mu.Unlock()
	_, err := rp.Finish(context.Background(), q, f)
	wantRefusal(t, err, ReasonState)
}

func TestProviderErrorRefused(t *testing.T) {
	p := startProvider(t)
	rp := newRP(t, p)
	_, f, _ := rp.Begin(context.Background(), "", 0)
	_, err := rp.Finish(context.Background(), url.Values{"state": {f.State}, "error": {"access_denied"},
		"error_description": {"user is not assigned to the app"}}, f)
	wantRefusal(t, err, ReasonProvider)
	if !strings.Contains(err.Error(), "not assigned") {
		t.Errorf("message %q loses the provider's description", err)
	}
}

// claims is an ID token whose registered claims a test can alter.
type claims struct {
	*mockoidc.IDTokenClaims
	Groups []string       `json:"groups,omitempty"`
	Extra  map[string]any `json:"-"`
}

func (c *claims) MarshalJSON() ([]byte, error) {
	type plain claims
	b, err := json.Marshal((*plain)(c))
	if err != nil || len(c.Extra) == 0 {
		return b, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	for k, v := range c.Extra {
		m[k] = v
	}
	return json.Marshal(m)
}

// claimsUser is a mockoidc user whose ID token claims a test edits.
type claimsUser struct {
	sub  string
	edit func(*claims)
}

func (u *claimsUser) ID() string { return u.sub }
func (u *claimsUser) Userinfo([]string) ([]byte, error) {
	return json.Marshal(map[string]string{"sub": u.sub})
}
func (u *claimsUser) Claims(_ []string, base *mockoidc.IDTokenClaims) (jwt.Claims, error) {
	c := &claims{IDTokenClaims: base, Groups: []string{"approvers"}}
	if u.edit != nil {
		u.edit(c)
	}
	return c, nil
}

func TestTokenChecks(t *testing.T) {
	cases := []struct {
		name   string
		edit   func(*claims)
		reason Reason
	}{
		{"another audience", func(c *claims) { c.Audience = jwt.ClaimStrings{"some-other-client"} }, ReasonAudience},
		{"expired", func(c *claims) {
			c.IssuedAt = jwt.NewNumericDate(time.Now().Add(-2 * time.Hour))
			c.ExpiresAt = jwt.NewNumericDate(time.Now().Add(-time.Hour))
		}, ReasonExpired},
		{"wrong issuer", func(c *claims) { c.Issuer = "https://idp.attacker.example" }, ReasonIssuer},
		{"no subject", func(c *claims) { c.Subject = "" }, ReasonIDToken},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := startProvider(t)
			rp := newRP(t, p)
			p.QueueUser(&claimsUser{sub: "u1", edit: c.edit})
			_, err := login(t, rp)
			wantRefusal(t, err, c.reason)
		})
	}
}

// The provider's published keys are not the ones that signed the token.
func TestForeignSignatureRefused(t *testing.T) {
	other, err := mockoidc.RandomKeypair(2048)
	if err != nil {
		t.Fatal(err)
	}
	p := startProvider(t, func(p *provider) {
		p.JWKS = func() []byte { b, _ := other.JWKS(); return b }
	})
	rp := newRP(t, p)
	_, err = login(t, rp)
	wantRefusal(t, err, ReasonSignature)
}

func TestLogoutURL(t *testing.T) {
	p := startProvider(t, func(p *provider) { p.NoEndSession = true })
	rp := newRP(t, p)
	if _, ok := rp.LogoutURL("tok", "http://127.0.0.1:1/login"); ok {
		t.Error("LogoutURL offered although the provider advertises no end_session_endpoint")
	}
	p2 := startProvider(t, func(p *provider) { p.EndSession = "https://idp.example/logout?x=1" })
	rp2 := newRP(t, p2)
	got, ok := rp2.LogoutURL("tok.en.value", "http://127.0.0.1:1/login")
	if !ok {
		t.Fatal("LogoutURL not offered although the provider advertises end_session_endpoint")
	}
	u, _ := url.Parse(got)
	q := u.Query()
	if u.Host != "idp.example" || q.Get("x") != "1" || q.Get("id_token_hint") != "tok.en.value" ||
		q.Get("post_logout_redirect_uri") != "http://127.0.0.1:1/login" || q.Get("client_id") != p2.ClientID {
		t.Errorf("logout URL = %s", got)
	}
}

// The end_session_endpoint of a provider's discovery document becomes a
// link on the console's pages: nothing but an http(s) address is linked.
func TestLogoutURLIsOnlyAnHTTPAddress(t *testing.T) {
	for _, endSession := range []string{"javascript:alert(document.domain)//", "data:text/html,<script>alert(1)</script>", "//idp.example/logout", "/logout"} {
		p := startProvider(t, func(p *provider) { p.EndSession = endSession })
		rp := newRP(t, p)
		if got, ok := rp.LogoutURL("tok", "http://127.0.0.1:1/login"); ok {
			t.Errorf("end_session_endpoint %q: LogoutURL offered %s", endSession, got)
		}
	}
}

func TestNewRefusesProviderWithoutS256(t *testing.T) {
	m, err := mockoidc.NewServer(nil)
	if err != nil {
		t.Fatal(err)
	}
	m.CodeChallengeMethodsSupported = []string{"plain"}
	if err := m.Start(mustListen(t), nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Shutdown() })
	_, err = New(context.Background(), Config{Issuer: m.Issuer(), ClientID: m.ClientID, RedirectURL: callback})
	if err == nil || !strings.Contains(err.Error(), "S256") {
		t.Errorf("New = %v, want a refusal naming S256", err)
	}
}

func TestNewRefusesIssuerMismatch(t *testing.T) {
	p := startProvider(t)
	_, err := New(context.Background(), Config{Issuer: p.Addr() + "/oidc/", ClientID: p.ClientID, RedirectURL: callback})
	if err == nil {
		t.Error("New accepted an issuer URL that is not the discovery document's")
	}
}

// Logins started and never finished cost the console nothing: a flood of
// them from one client stores nothing and refuses nobody else's login.
func TestLoginFloodRefusesNobody(t *testing.T) {
	p := startProvider(t)
	rp := newRP(t, p)
	for i := 0; i <= MaxFinished; i++ {
		if _, _, err := rp.Begin(context.Background(), "", 0); err != nil {
			t.Fatalf("Begin %d: %v", i, err)
		}
	}
	if n := rp.finished.(*oneshot.Memory).Len(); n != 0 {
		t.Errorf("%d values stored by logins never finished, want 0", n)
	}
	p.User("00u-other", "otto", "otto@example.com", "approvers")
	if id, err := login(t, rp); err != nil || id.Subject != "00u-other" {
		t.Fatalf("another client's login after the flood = %+v, %v", id, err)
	}
}

func TestParseRoleMap(t *testing.T) {
	m, err := ParseRoleMap("approvers=operator, sre=admin,cn=auditors=auditor,")
	if err != nil {
		t.Fatal(err)
	}
	if m["approvers"] != account.RoleOperator || m["sre"] != account.RoleAdmin || m["cn=auditors"] != account.RoleAuditor || len(m) != 3 {
		t.Errorf("map = %v", m)
	}
	if got, want := m.String(), "approvers=operator,cn=auditors=auditor,sre=admin"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
	for _, bad := range []string{"approvers", "=admin", "x=", "x=root", "x=admin,x=auditor"} {
		if _, err := ParseRoleMap(bad); err == nil {
			t.Errorf("ParseRoleMap(%q) accepted", bad)
		}
	}
	if err := m.Merge(RoleMap{"sre": account.RoleOperator}); err == nil {
		t.Error("Merge accepted a group mapped to two roles")
	}
}

func TestRefusalMessageNamesReason(t *testing.T) {
	err := refuse(ReasonNonce, "the nonce differs", errors.New("x"))
	if !bytes.Contains([]byte(err.Error()), []byte("nonce")) || !errors.Is(err, err.Err) {
		t.Errorf("Error() = %q", err)
	}
}

// Two relying parties over one store are two replicas behind a load
// balancer: a login begun on one finishes on the other, once.
func TestFlowFinishesOnAnotherReplica(t *testing.T) {
	p := startProvider(t)
	shared := oneshot.NewMemory(10, nil)
	a := newRP(t, p, func(c *Config) { c.Finished = shared })
	b := newRP(t, p, func(c *Config) { c.Finished = shared })
	p.QueueUser(&mockoidc.MockUser{Subject: "s-repl", Groups: []string{"approvers"}})
	authURL, f, err := a.Begin(context.Background(), "/x", 0)
	if err != nil {
		t.Fatal(err)
	}
	q := authorize(t, authURL)
	id, err := b.Finish(context.Background(), q, f)
	if err != nil {
		t.Fatalf("finish on the other replica: %v", err)
	}
	if id.Subject != "s-repl" || id.ReturnTo != "/x" {
		t.Errorf("identity = %q, return %q", id.Subject, id.ReturnTo)
	}
	_, err = a.Finish(context.Background(), q, f)
	wantRefusal(t, err, ReasonState)
}

// A login that must be fresh asks the provider to authenticate again
// (prompt=login, max_age) and refuses an ID token that does not show it did.
func TestFreshLoginNeedsARecentAuthTime(t *testing.T) {
	const window = 5 * time.Minute
	p := startProvider(t)
	rp := newRP(t, p)
	hourAgo := time.Now().Add(-time.Hour).Truncate(time.Second)
	fresh := func(t *testing.T) (Identity, error) {
		t.Helper()
		authURL, f, err := rp.Begin(context.Background(), "/account", window)
		if err != nil {
			t.Fatal(err)
		}
		return rp.Finish(context.Background(), authorize(t, authURL), f)
	}

	// An ordinary login rides on the provider's session of an hour ago.
	p.Queue(&ssotest.User{Subject: "u-f", Groups: []string{"approvers"}, SignedInAt: hourAgo})
	id, err := login(t, rp)
	if err != nil || !id.AuthTime.Equal(hourAgo) {
		t.Fatalf("ordinary login: auth time %v, %v; want %v", id.AuthTime, err, hourAgo)
	}
	// A fresh login makes the provider authenticate again.
	p.Queue(&ssotest.User{Subject: "u-f", Groups: []string{"approvers"}, SignedInAt: hourAgo})
	id, err = fresh(t)
	if err != nil || time.Since(id.AuthTime) > time.Minute {
		t.Fatalf("fresh login: auth time %v, %v; want now", id.AuthTime, err)
	}
	if a := p.Authorizations(); a[len(a)-1].Get("prompt") != "login" || a[len(a)-1].Get("max_age") != "300" {
		t.Errorf("the provider was asked prompt=%q max_age=%q", a[len(a)-1].Get("prompt"), a[len(a)-1].Get("max_age"))
	}

	cases := []struct {
		name string
		user mockoidc.User
	}{
		{"auth_time older than the window", &claimsUser{sub: "u-f", edit: func(c *claims) {
			c.Extra = map[string]any{"auth_time": hourAgo.Unix()}
		}}},
		{"no auth_time", &ssotest.User{Subject: "u-f", Groups: []string{"approvers"}, NoAuthTime: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p.QueueUser(c.user)
			_, err := fresh(t)
			wantRefusal(t, err, ReasonNotFresh)
		})
	}
}

// A provider may put the profile, email and groups in the userinfo
// response only; the ID token's claims come first, and userinfo must name
// the same subject.
func TestClaimsFromUserinfo(t *testing.T) {
	p := startProvider(t, func(p *provider) { p.ClaimsInUserinfo = true })
	rp := newRP(t, p)
	p.User("00u-ui", "uma", "uma@example.com", "sre")
	id, err := login(t, rp)
	if err != nil {
		t.Fatal(err)
	}
	if id.PreferredUsername != "uma" || id.Email != "uma@example.com" || id.Role != account.RoleAdmin || !id.HasRole {
		t.Errorf("identity from userinfo = %q %q %v role %q (%v)", id.PreferredUsername, id.Email, id.Groups, id.Role, id.HasRole)
	}
	raw, _, _ := jwt.NewParser().ParseUnverified(id.IDToken, jwt.MapClaims{})
	if c := raw.Claims.(jwt.MapClaims); c["preferred_username"] != nil || c["groups"] != nil {
		t.Fatalf("the ID token carries %v: the test would not reach userinfo", c)
	}

	p.Queue(&ssotest.User{Subject: "00u-ui", Username: "uma", Groups: []string{"approvers"}, ClaimsInUserinfo: true,
		UserinfoSubject: "00u-someone-else"})
	_, err = login(t, rp)
	wantRefusal(t, err, ReasonUserinfo)

	// What the ID token says wins over userinfo.
	p.QueueUser(&claimsUser{sub: "00u-ui", edit: func(c *claims) {
		c.Extra = map[string]any{"preferred_username": "from-token", "email": "t@example.com", "name": "T"}
	}})
	if id, err := login(t, rp); err != nil || id.PreferredUsername != "from-token" {
		t.Errorf("username = %q, %v; want the ID token's", id.PreferredUsername, err)
	}
}

// Discovery, keys and the code exchange go to the issuer: plain http only
// on this machine.
func TestNewRefusesPlainHTTPIssuerElsewhere(t *testing.T) {
	// Nothing leaves this process, whatever New does.
	offline := &http.Client{Transport: &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("no network in this test")
	}}}
	for _, issuer := range []string{"http://idp.example.com/realms/main", "http://10.0.0.5:8080", "http://[2001:db8::1]/"} {
		_, err := New(context.Background(), Config{Issuer: issuer, ClientID: "c", RedirectURL: callback, HTTPClient: offline})
		if err == nil || !strings.Contains(err.Error(), "must be https") {
			t.Errorf("issuer %s: New = %v, want a refusal saying https", issuer, err)
		}
	}
	// Loopback issuers pass that check (and then fail discovery: nothing listens).
	for _, issuer := range []string{"http://127.0.0.1:1", "http://127.9.9.9:1/x", "http://localhost:1", "http://[::1]:1"} {
		_, err := New(context.Background(), Config{Issuer: issuer, ClientID: "c", RedirectURL: callback, HTTPClient: offline})
		if err == nil || strings.Contains(err.Error(), "must be https") {
			t.Errorf("issuer %s: New = %v, want only a discovery failure", issuer, err)
		}
	}
}

// The end-session endpoint's origin goes into the console's
// Content-Security-Policy: only a plain http(s) origin is given.
func TestEndSessionOrigin(t *testing.T) {
	cases := map[string]string{
		"https://IdP.example:8443/logout?x=1":    "https://idp.example:8443",
		"https://idp.example/realms/main/logout": "https://idp.example",
		"https://idp.example;script-src */x":     "",
		"https://idp.example%3Bscript-src%20*/x": "",
		"javascript:alert(1)//":                  "",
		"https://user@idp.example/logout":        "",
		"":                                       "",
	}
	for endSession, want := range cases {
		p := startProvider(t, func(p *provider) { p.EndSession, p.NoEndSession = endSession, endSession == "" })
		rp := newRP(t, p)
		if got := rp.EndSessionOrigin(); got != want {
			t.Errorf("end_session_endpoint %q: origin %q, want %q", endSession, got, want)
		}
	}
}

// An ID token that names no signature algorithm ("none") or is unsigned is
// refused, whatever its claims say.
func TestUnsignedIDTokenRefused(t *testing.T) {
	enc := base64.RawURLEncoding.EncodeToString
	for name, rewrite := range map[string]func(string) string{
		"alg none": func(signed string) string {
			parts := strings.Split(signed, ".")
			return enc([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + parts[1] + "."
		},
		"signature dropped": func(signed string) string { return signed[:strings.LastIndexByte(signed, '.')+1] },
	} {
		t.Run(name, func(t *testing.T) {
			p := startProvider(t, func(p *provider) { p.IDToken = rewrite })
			rp := newRP(t, p)
			p.User("u-none", "nobody", "", "sre")
			_, err := login(t, rp)
			wantRefusal(t, err, ReasonSignature)
		})
	}
}
