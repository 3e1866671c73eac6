package console

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/passkey"
	"github.com/countersign/countersign/internal/sso"
	"github.com/countersign/countersign/internal/sso/ssotest"
)

// ssoEnv is a console with single sign-on against an in-process provider,
// and the local accounts olivia (operator) and adele (admin).
type ssoEnv struct {
	*consoleEnv
	idp  *ssotest.Provider
	host string // the issuer's host, as principals name it
}

func newSSOEnv(t *testing.T, local LocalLogin, opts ...func(*ssotest.Provider)) *ssoEnv {
	t.Helper()
	return newSSOEnvWith(t, local, nil, opts...)
}

// newSSOEnvWith is newSSOEnv whose relying party's configuration edit
// changes, and which offers passkeys.
func newSSOEnvWith(t *testing.T, local LocalLogin, edit func(*sso.Config, *envConfig), opts ...func(*ssotest.Provider)) *ssoEnv {
	t.Helper()
	idp := ssotest.Start(t, opts...)
	e := newConsoleEnvWith(t, func(cfg *envConfig) {
		rc := sso.Config{
			Issuer: idp.Issuer(), ClientID: idp.ClientID, ClientSecret: idp.ClientSecret,
			RedirectURL: cfg.Console.PublicURL + CallbackPath,
			Roles:       sso.RoleMap{"approvers": account.RoleOperator, "sre": account.RoleAdmin, "audit": account.RoleAuditor},
			Finished:    cfg.Accounts.Oneshots("oidc", sso.MaxFinished),
		}
		if edit != nil {
			edit(&rc, cfg)
			pk, err := passkey.New(passkey.Config{RPID: "localhost", Origins: []string{"http://localhost"},
				Ceremonies: cfg.Accounts.Oneshots("passkey", passkey.MaxCeremonies), Now: cfg.Now})
			if err != nil {
				t.Fatal(err)
			}
			cfg.Console.Passkeys = pk
		}
		rp, err := sso.New(context.Background(), rc)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Console.SSO, cfg.Console.SSOName, cfg.Console.LocalLogin = rp, "Test IdP", local
	})
	e.addUser("olivia", account.RoleOperator, rolePassword)
	e.addUser("adele", account.RoleAdmin, rolePassword)
	u, _ := url.Parse(idp.Issuer())
	return &ssoEnv{consoleEnv: e, idp: idp, host: u.Host}
}

// idpClient follows the provider's redirects up to the console's callback
// and stops there.
func (e *ssoEnv) authorize(t *testing.T, authURL string) string {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(authURL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusFound || !strings.HasPrefix(loc, e.url+CallbackPath) {
		t.Fatalf("provider answered %d → %q, want a redirect to the callback", resp.StatusCode, loc)
	}
	return strings.TrimPrefix(loc, e.url)
}

// ssoLogin runs the whole redirect flow in b: the console's login route,
// the provider, and the callback. It returns the callback's page.
func (e *ssoEnv) ssoLogin(t *testing.T, b *consoleBrowser, next string) *htmlPage {
	t.Helper()
	path := ssoLoginPath
	if next != "" {
		path += "?next=" + url.QueryEscape(next)
	}
	p := b.get(path)
	if p.status != http.StatusSeeOther || !strings.HasPrefix(p.header.Get("Location"), e.idp.Issuer()) {
		t.Fatalf("login route = %d → %q, want a redirect to the provider", p.status, p.header.Get("Location"))
	}
	return b.get(e.authorize(t, p.header.Get("Location")))
}

func (e *ssoEnv) principal(sub string) string { return "oidc:" + e.host + "/" + sub }

func TestSSOLoginCreatesTheAccountAndASession(t *testing.T) {
	e := newSSOEnv(t, LocalAll)
	b := e.browser()
	lp := b.get("/login")
	if href, _ := lp.find("sso-login").Attr("href"); href != ssoLoginPath || !strings.Contains(lp.find("sso-login").Text(), "Test IdP") {
		t.Errorf("login page offers %q %q", href, lp.find("sso-login").Text())
	}
	if lp.find("login-form").Length() != 1 {
		t.Error("the local form is missing with --local-login=all")
	}
	e.idp.User("00u-bob", "bob", "bob@example.com", "approvers", "everyone")
	start := b.get(ssoLoginPath + "?next=" + url.QueryEscape("/history"))
	callback := e.authorize(t, start.header.Get("Location"))
	replay := e.browser()
	home, _ := url.Parse(e.url)
	replay.jar.SetCookies(home, b.jar.Cookies(home)) // a copy of the state cookie
	p := b.get(callback)
	if p.status != http.StatusOK || p.find("continue").Length() != 1 {
		t.Fatalf("callback = %d: %s", p.status, p.body)
	}
	if href, _ := p.find("continue-link").Attr("href"); href != "/history" {
		t.Errorf("continues to %q, want /history", href)
	}
	if refresh, _ := p.doc.Find(`meta[http-equiv="refresh"]`).Attr("content"); refresh != "0;url=/history" {
		t.Errorf("refresh = %q", refresh)
	}
	q := b.get("/")
	if q.status != http.StatusOK || strings.TrimSpace(q.find("whoami").Text()) != "bob · operator" {
		t.Fatalf("queue as bob = %d, whoami %q", q.status, q.find("whoami").Text())
	}
	u, err := e.c.cfg.Accounts.UserByName(context.Background(), e.principal("00u-bob"))
	if err != nil || u.Email != "bob@example.com" || u.Role != account.RoleOperator || !u.SSO() {
		t.Fatalf("stored account = %+v, %v", u, err)
	}
	acct := b.get("/account")
	if got := acct.find("account-principal").Text(); got != e.principal("00u-bob") {
		t.Errorf("account page principal = %q", got)
	}
	// The same callback again, in a fresh browser holding a copy of the
	// state cookie, is refused: the flow was used up.
	// The console remembers the finished login, whatever the provider
	// does with a code it has seen.
	if p := replay.get(callback); p.status != http.StatusForbidden || !strings.Contains(p.find("login-error").Text(), "already finished") {
		t.Errorf("replayed callback = %d %q, want 403, already finished", p.status, p.find("login-error").Text())
	}
	if p := b.get(callback); p.status != http.StatusForbidden {
		t.Errorf("replayed callback in the same browser = %d, want 403", p.status)
	}
}

func TestSSOCallbackRefusals(t *testing.T) {
	e := newSSOEnv(t, LocalAll)
	b := e.browser()
	e.idp.User("00u-c", "carl", "", "approvers")
	start := b.get(ssoLoginPath)
	callback := e.authorize(t, start.header.Get("Location"))

	// Another browser brings this callback: no state cookie, refused.
	other := e.browser()
	if p := other.get(callback); p.status != http.StatusForbidden || !strings.Contains(p.find("login-error").Text(), "Sign-in failed") {
		t.Errorf("callback in another browser = %d: %q", p.status, p.find("login-error").Text())
	}
	if p := other.get("/"); p.status != http.StatusSeeOther {
		t.Errorf("queue in the other browser = %d, want a redirect to log in", p.status)
	}
	// The login lives in the browser that started it, which still finishes
	// it (the code is useless without that browser's PKCE verifier), once.
	if p := b.get(callback); p.status != http.StatusOK {
		t.Errorf("callback in the browser that started the login = %d", p.status)
	}
	if p := b.get(callback); p.status != http.StatusForbidden {
		t.Errorf("the same callback again = %d, want 403", p.status)
	}
	// The provider's own error is passed on.
	start = b.get(ssoLoginPath)
	loc, _ := url.Parse(start.header.Get("Location"))
	p := b.get(CallbackPath + "?state=" + loc.Query().Get("state") + "&error=access_denied&error_description=nope")
	if p.status != http.StatusForbidden || !strings.Contains(p.find("login-error").Text(), "access_denied") {
		t.Errorf("provider error = %d %q", p.status, p.find("login-error").Text())
	}
}

func TestSSORoleFromGroupsAtEveryLogin(t *testing.T) {
	ctx := context.Background()
	e := newSSOEnv(t, LocalAll)
	b := e.browser()
	e.idp.User("00u-d", "dora", "dora@example.com", "approvers")
	if p := e.ssoLogin(t, b, ""); p.status != http.StatusOK {
		t.Fatalf("first login = %d", p.status)
	}
	conn, _ := b.mustDial("/ws")

	// Removed from the group: the next login gets the no-role page and no
	// session, and the earlier session ends with its socket.
	other := e.browser()
	e.idp.User("00u-d", "dora", "dora@example.com", "everyone")
	p := e.ssoLogin(t, other, "")
	if p.status != http.StatusForbidden || p.find("no-role").Length() != 1 {
		t.Fatalf("login without a mapped group = %d: %s", p.status, p.body)
	}
	if got := p.find("no-role-principal").Text(); got != e.principal("00u-d") {
		t.Errorf("no-role page names %q", got)
	}
	if got := p.find("no-role-groups").Text(); got != "everyone" {
		t.Errorf("no-role page groups %q", got)
	}
	if q := other.get("/"); q.status != http.StatusSeeOther {
		t.Errorf("the no-role login opened a session: %d", q.status)
	}
	if q := b.get("/"); q.status != http.StatusSeeOther {
		t.Errorf("the earlier session still works after the role was removed: %d", q.status)
	}
	expectSessionEnded(t, conn)
	u, _ := e.c.cfg.Accounts.UserByName(ctx, e.principal("00u-d"))
	if u.Role != "" {
		t.Errorf("role after losing the group = %q", u.Role)
	}

	// In the admin group now: admin at this login.
	e.idp.User("00u-d", "dora", "dora@example.com", "sre", "approvers")
	if p := e.ssoLogin(t, b, ""); p.status != http.StatusOK {
		t.Fatalf("login with sre = %d", p.status)
	}
	if q := b.get("/admin"); q.status != http.StatusOK {
		t.Errorf("admin page as a member of sre = %d", q.status)
	}
}

func TestSSONeverShadowsALocalAccount(t *testing.T) {
	e := newSSOEnv(t, LocalAll)
	b := e.browser()
	e.idp.User("00u-evil", "olivia", "mallory@example.com", "sre")
	p := e.ssoLogin(t, b, "")
	if p.status != http.StatusForbidden || !strings.Contains(p.find("login-error").Text(), "local account") {
		t.Fatalf("shadowing login = %d %q", p.status, p.find("login-error").Text())
	}
	if q := b.get("/"); q.status != http.StatusSeeOther {
		t.Errorf("a shadowing login opened a session")
	}
	// The reserved names stay reserved.
	e.idp.User("00u-console", "console", "", "approvers")
	if p := e.ssoLogin(t, e.browser(), ""); p.status != http.StatusForbidden || !strings.Contains(p.find("login-error").Text(), "reserved") ||
		strings.Contains(p.find("login-error").Text(), "account:") {
		t.Errorf("login as console = %d %q, want 403 saying the name is reserved, in words for people", p.status, p.find("login-error").Text())
	}
}

func TestLocalLoginModes(t *testing.T) {
	t.Run("admins-only", func(t *testing.T) {
		e := newSSOEnv(t, LocalAdminsOnly)
		lp := e.browser().get("/login")
		if lp.find("break-glass").Length() != 1 || lp.find("login-form").Length() != 1 {
			t.Error("admins-only login page should show the break-glass form")
		}
		if p := e.browser().tryLogin("olivia", rolePassword); p.status != http.StatusForbidden ||
			!strings.Contains(p.find("login-error").Text(), "only as administrators") {
			t.Errorf("operator local login = %d %q", p.status, p.find("login-error").Text())
		}
		e.browser().login("adele", rolePassword)
	})
	t.Run("off", func(t *testing.T) {
		e := newSSOEnv(t, LocalOff)
		b := e.browser()
		lp := b.get("/login")
		if lp.find("login-form").Length() != 0 || lp.find("sso-login").Length() != 1 {
			t.Error("with local login off the page should offer only single sign-on")
		}
		p := b.post("/login", url.Values{"csrf": {"x"}, "name": {"adele"}, "password": {rolePassword}})
		if p.status != http.StatusForbidden || !strings.Contains(p.find("login-error").Text(), "turned off") {
			t.Errorf("local login with it off = %d %q", p.status, p.find("login-error").Text())
		}
		if q := b.get("/"); q.status != http.StatusSeeOther {
			t.Error("a local login went through with local login off")
		}
	})
	t.Run("needs single sign-on", func(t *testing.T) {
		for _, l := range []LocalLogin{LocalAdminsOnly, LocalOff} {
			e := newConsoleEnv(t)
			_, err := New(Config{Queue: e.q, Accounts: e.c.cfg.Accounts, History: e.db.Store(), Audit: e.db, LocalLogin: l})
			if err == nil {
				t.Errorf("local login %s without single sign-on was accepted", l)
			}
		}
	})
}

func TestSSOLogoutAtTheProvider(t *testing.T) {
	e := newSSOEnv(t, LocalAll, func(p *ssotest.Provider) { p.EndSession = "https://idp.example/logout" })
	b := e.browser()
	e.idp.User("00u-f", "fay", "", "approvers")
	e.ssoLogin(t, b, "")
	p := b.post("/logout", url.Values{"csrf": {b.csrf()}})
	loc, _ := url.Parse(p.header.Get("Location"))
	if p.status != http.StatusSeeOther || loc.Host != "idp.example" || loc.Query().Get("id_token_hint") == "" ||
		loc.Query().Get("post_logout_redirect_uri") != e.url+"/login" {
		t.Fatalf("logout = %d → %s, want the provider's end-session URL with the hint", p.status, loc)
	}
	if csp := p.header.Get("Content-Security-Policy"); !strings.Contains(csp, "; form-action 'self' https://idp.example;") {
		t.Errorf("CSP %q does not let the logout form's redirect reach the provider", csp)
	}
	if q := b.get("/"); q.status != http.StatusSeeOther {
		t.Error("the local session survived the logout")
	}
	// A provider without end-session endpoint widens nothing.
	plain := newSSOEnv(t, LocalAll, func(p *ssotest.Provider) { p.NoEndSession = true })
	if csp := plain.browser().get("/login").header.Get("Content-Security-Policy"); !strings.Contains(csp, "; form-action 'self';") {
		t.Errorf("CSP without an end-session endpoint = %q", csp)
	}
	// A local account logs out locally only.
	lb := e.browser()
	lb.login("olivia", rolePassword)
	if p := lb.post("/logout", url.Values{"csrf": {lb.csrf()}}); p.header.Get("Location") != "/login?notice=logged-out" {
		t.Errorf("local logout → %q", p.header.Get("Location"))
	}
}

func TestAdminEndsASingleSignOnUsersSessions(t *testing.T) {
	e := newSSOEnv(t, LocalAll)
	b := e.browser()
	e.idp.User("00u-g", "gus", "", "approvers")
	e.ssoLogin(t, b, "")
	conn, _ := b.mustDial("/ws")
	admin := e.browser()
	admin.login("adele", rolePassword)
	page := admin.get("/admin")
	row := page.doc.Find(`[data-testid="user-row"][data-user="` + e.principal("00u-g") + `"]`)
	if row.Find(`[data-testid="user-name"]`).Text() != "gus" || row.Find(`[data-testid="end-sessions"]`).Length() != 1 {
		t.Fatalf("admin row = %q", row.Text())
	}
	p := admin.post("/admin/users/end-sessions", url.Values{"csrf": {admin.csrf()}, "name": {e.principal("00u-g")}})
	if p.status != http.StatusOK || !strings.Contains(p.find("admin-notice").Text(), "Ended 1 session of ") {
		t.Fatalf("end sessions = %d %q", p.status, p.find("admin-notice").Text())
	}
	expectSessionEnded(t, conn)
	if q := b.get("/"); q.status != http.StatusSeeOther {
		t.Error("gus's session survived")
	}
	// Disabling works with the principal's '/' escaped in the path.
	p = admin.post("/admin/users/"+url.PathEscape(e.principal("00u-g"))+"/disable", url.Values{"csrf": {admin.csrf()}})
	if p.status != http.StatusOK || !strings.Contains(p.find("admin-notice").Text(), "Disabled") {
		t.Fatalf("disable = %d %q %q", p.status, p.find("admin-notice").Text(), p.find("admin-error").Text())
	}
	e.idp.User("00u-g", "gus", "", "approvers")
	if p := e.ssoLogin(t, e.browser(), ""); p.status != http.StatusForbidden || !strings.Contains(p.find("login-error").Text(), "disabled") {
		t.Errorf("disabled account signs on = %d %q", p.status, p.find("login-error").Text())
	}
}

func TestLocalPath(t *testing.T) {
	for in, want := range map[string]string{
		"": "/", "/": "/", "/calls/x": "/calls/x", "/history?tool=a": "/history?tool=a",
		"//evil.example/": "/", "https://evil.example/": "/", "/\\evil.example": "/", "javascript:alert(1)": "/",
		"evil": "/", "/x\r\nSet-Cookie: a=b": "/",
	} {
		if got := localPath(in); got != want {
			t.Errorf("localPath(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestLocalLoginModeEndsLocalSessions: a console started with
// --local-login off (or admins-only) on a database where local logins were
// allowed before, or beside a replica that still allows them, does not
// honour the local sessions its mode would not have opened; single sign-on
// sessions stay.
func TestLocalLoginModeEndsLocalSessions(t *testing.T) {
	e := newSSOEnv(t, LocalAll)
	olivia, adele, fay := e.browser(), e.browser(), e.browser()
	olivia.login("olivia", rolePassword)
	adele.login("adele", rolePassword)
	e.idp.User("00u-f", "fay", "", "approvers")
	e.ssoLogin(t, fay, "")
	for _, tc := range []struct {
		mode          LocalLogin
		olivia, adele bool // whose session the console honours
	}{
		{LocalAdminsOnly, false, true},
		{LocalOff, false, false},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			r := startReplicaConsole(t, sqliteReplica(t, e.db.Path()), e.clock, func(c *envConfig) {
				cc := &c.Console
				rp, err := sso.New(context.Background(), sso.Config{Issuer: e.idp.Issuer(), ClientID: e.idp.ClientID,
					ClientSecret: e.idp.ClientSecret, RedirectURL: cc.PublicURL + CallbackPath,
					Roles: sso.RoleMap{"approvers": account.RoleOperator}})
				if err != nil {
					t.Fatal(err)
				}
				cc.SSO, cc.SSOName, cc.LocalLogin = rp, "Test IdP", tc.mode
			})
			for _, b := range []struct {
				name string
				b    *consoleBrowser
				want bool
			}{{"olivia (local operator)", olivia, tc.olivia}, {"adele (local admin)", adele, tc.adele}, {"fay (single sign-on)", fay, true}} {
				res, err := b.b.client.Get(r.url + "/")
				if err != nil {
					t.Fatal(err)
				}
				res.Body.Close()
				if got := res.StatusCode == http.StatusOK; got != b.want {
					t.Errorf("%s's session on a console with local login %s: %d, want honoured %t", b.name, tc.mode, res.StatusCode, b.want)
				}
			}
		})
	}
}

// Logins started and never finished store nothing: one client starting
// more than the store could hold refuses nobody else's login.
func TestSSOLoginFloodRefusesNobody(t *testing.T) {
	const bound = 20
	e := newSSOEnvWith(t, LocalAll, func(c *sso.Config, cfg *envConfig) { c.Finished = cfg.Accounts.Oneshots("oidc", bound) })
	flood := e.browser()
	for i := range 3 * bound {
		if p := flood.get(ssoLoginPath); p.status != http.StatusSeeOther {
			t.Fatalf("login %d from one client = %d, want a redirect to the provider", i, p.status)
		}
	}
	e.idp.User("00u-real", "rhea", "rhea@example.com", "approvers")
	b := e.browser()
	if p := e.ssoLogin(t, b, ""); p.status != http.StatusOK || p.find("continue").Length() != 1 {
		t.Fatalf("another client's login after the flood = %d: %s", p.status, p.find("login-error").Text())
	}
	if q := b.get("/"); q.status != http.StatusOK {
		t.Errorf("queue after the login = %d", q.status)
	}
}

// Registering a passkey needs a fresh login: for single sign-on, a login
// riding on an old session at the provider is not one; the console's
// re-authentication makes the provider authenticate again and checks that
// it did.
func TestSSOFreshLoginMeansTheProviderAuthenticatedAgain(t *testing.T) {
	e := newSSOEnvWith(t, LocalAll, func(*sso.Config, *envConfig) {})
	hourAgo := time.Now().Add(-time.Hour)
	pia := func(edit ...func(*ssotest.User)) {
		u := &ssotest.User{Subject: "00u-pia", Username: "pia", Groups: []string{"approvers"}, SignedInAt: hourAgo}
		for _, f := range edit {
			f(u)
		}
		e.idp.Queue(u)
	}
	b := e.browser()
	pia()
	e.ssoLogin(t, b, "/account")
	acct := b.get("/account")
	if acct.find("passkey-not-fresh").Length() != 1 || acct.find("passkey-register-form").Length() != 0 {
		t.Fatalf("a login on the provider's hour-old session offers passkey registration")
	}
	if p := b.post("/account/passkeys/begin", url.Values{"csrf": {b.csrf()}}, "Accept", "application/json"); p.status != http.StatusForbidden {
		t.Errorf("begin registration = %d, want 403", p.status)
	}

	reauth := func(b *consoleBrowser) *htmlPage {
		t.Helper()
		p := b.post("/account/reauth", url.Values{"csrf": {b.csrf()}})
		if p.status != http.StatusSeeOther || p.header.Get("Location") != ssoLoginPath+"?fresh=1&next=/account" {
			t.Fatalf("reauth = %d → %q", p.status, p.header.Get("Location"))
		}
		start := b.get(p.header.Get("Location"))
		q := mustURL(t, start.header.Get("Location")).Query()
		if q.Get("prompt") != "login" || q.Get("max_age") != "300" {
			t.Errorf("re-authentication asks prompt=%q max_age=%q, want login, 300", q.Get("prompt"), q.Get("max_age"))
		}
		return b.get(e.authorize(t, start.header.Get("Location")))
	}
	pia()
	if p := reauth(b); p.status != http.StatusOK {
		t.Fatalf("re-authentication = %d: %s", p.status, p.find("login-error").Text())
	}
	if acct := b.get("/account"); acct.find("passkey-register-form").Length() != 1 {
		t.Error("after re-authenticating at the provider, no passkey registration")
	}

	// A provider that does not authenticate again, or does not say when
	// it did, gives no fresh login.
	for _, edit := range []func(*ssotest.User){
		func(u *ssotest.User) { u.IgnoresReauthentication = true },
		func(u *ssotest.User) { u.NoAuthTime = true },
	} {
		pia(edit)
		if p := reauth(b); p.status != http.StatusForbidden || !strings.Contains(p.find("login-error").Text(), "sign-in at the provider") &&
			!strings.Contains(p.find("login-error").Text(), "auth_time") {
			t.Errorf("re-authentication without a new sign-in = %d %q, want 403", p.status, p.find("login-error").Text())
		}
		b = e.browser()
		pia()
		e.ssoLogin(t, b, "")
	}
}

func mustURL(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// A provider that puts the profile, email and groups only in its userinfo
// response still gives the person their name and role.
func TestSSOClaimsFromUserinfo(t *testing.T) {
	e := newSSOEnv(t, LocalAll, func(p *ssotest.Provider) { p.ClaimsInUserinfo = true })
	b := e.browser()
	e.idp.User("00u-uli", "uli", "uli@example.com", "approvers")
	if p := e.ssoLogin(t, b, ""); p.status != http.StatusOK || p.find("continue").Length() != 1 {
		t.Fatalf("callback = %d: %s", p.status, p.find("no-role").Text()+p.find("login-error").Text())
	}
	if q := b.get("/"); strings.TrimSpace(q.find("whoami").Text()) != "uli · operator" {
		t.Errorf("whoami = %q, want uli · operator", q.find("whoami").Text())
	}
	u, err := e.c.cfg.Accounts.UserByName(context.Background(), e.principal("00u-uli"))
	if err != nil || u.Email != "uli@example.com" || !slices.Equal(u.Groups, []string{"approvers"}) {
		t.Errorf("stored account = %+v, %v", u, err)
	}
}
