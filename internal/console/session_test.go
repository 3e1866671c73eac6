package console

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
)

func findCookie(resp *http.Response, name string) *http.Cookie {
	for _, c := range resp.Cookies() {
		if c.Name == name {
			return c
		}
	}
	return nil
}

func TestSessionCookieFlags(t *testing.T) {
	tests := []struct {
		name       string
		publicURL  string
		cookie     string
		wantSecure bool
	}{
		{"http", "", "countersign", false},
		{"https", "https://console.example", "__Host-countersign", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newConsoleEnv(t, func(c *Config) {
				if tt.publicURL != "" {
					c.PublicURL = tt.publicURL
				}
			})
			e.addUser("olivia", account.RoleOperator, rolePassword)
			h := e.srv.Handler()
			base := e.url
			if tt.publicURL != "" {
				base = tt.publicURL
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", base+"/login", nil))
			pre := findCookie(rec.Result(), tt.cookie)
			if pre == nil {
				t.Fatalf("GET /login set no %s cookie: %v", tt.cookie, rec.Result().Header["Set-Cookie"])
			}
			doc := fragmentDoc(t, rec.Body.String())
			token, _ := doc.Find(`input[name="csrf"]`).Attr("value")
			form := url.Values{"csrf": {token}, "name": {"olivia"}, "password": {rolePassword}}
			req := httptest.NewRequest("POST", base+"/login", strings.NewReader(form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.AddCookie(pre)
			rec = httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusSeeOther {
				t.Fatalf("login = %d: %s", rec.Code, rec.Body.String())
			}
			sess := findCookie(rec.Result(), tt.cookie)
			if sess == nil {
				t.Fatal("login set no session cookie")
			}
			raw := rec.Result().Header.Get("Set-Cookie")
			for _, c := range []*http.Cookie{pre, sess} {
				if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Domain != "" || c.Secure != tt.wantSecure {
					t.Errorf("cookie %s: HttpOnly %v SameSite %v Path %q Domain %q Secure %v; want HttpOnly, Strict, /, no domain, Secure %v",
						c.Name, c.HttpOnly, c.SameSite, c.Path, c.Domain, c.Secure, tt.wantSecure)
				}
			}
			if sess.MaxAge != int((12 * time.Hour).Seconds()) {
				t.Errorf("session cookie Max-Age = %d, want the absolute timeout", sess.MaxAge)
			}
			if strings.Contains(raw, "olivia") || len(sess.Value) > 400 {
				t.Errorf("the cookie carries more than an id: %q", raw)
			}
		})
	}
}

func TestLoginRotatesSessionID(t *testing.T) {
	e := newConsoleEnv(t)
	e.addUser("olivia", account.RoleOperator, rolePassword)
	b := e.browser()
	b.get("/login")
	u, _ := url.Parse(e.url)
	preCookies := b.jar.Cookies(u)
	if len(preCookies) != 1 {
		t.Fatalf("pre-login cookies = %d", len(preCookies))
	}
	pre := preCookies[0].Value
	b.login("olivia", rolePassword)
	post := b.jar.Cookies(u)[0].Value
	if post == pre {
		t.Fatal("the cookie did not change at login")
	}
	if p := b.get("/"); p.status != http.StatusOK {
		t.Fatalf("after login GET / = %d", p.status)
	}
	// The pre-login cookie, replayed, is still anonymous.
	old := e.browser()
	old.jar.SetCookies(u, []*http.Cookie{{Name: "countersign", Value: pre, Path: "/"}})
	if p := old.get("/"); p.status != http.StatusSeeOther || p.header.Get("Location") != "/login" {
		t.Errorf("pre-login cookie after login: GET / = %d → %q, want 303 → /login", p.status, p.header.Get("Location"))
	}
	// A second login gets yet another id.
	b2 := e.browser()
	b2.login("olivia", rolePassword)
	if again := b2.jar.Cookies(u)[0].Value; again == post || again == pre {
		t.Error("a second login reused a session id")
	}
	var n int
	e.db.SQL().QueryRow(`SELECT COUNT(*) FROM sessions WHERE user_name = 'olivia'`).Scan(&n)
	if n != 2 {
		t.Errorf("sessions stored = %d, want 2", n)
	}
	var stored string
	e.db.SQL().QueryRow(`SELECT id_hash FROM sessions LIMIT 1`).Scan(&stored)
	if len(stored) != 64 {
		t.Errorf("stored session key %q is not a SHA-256", stored)
	}
}

// A socket of a session that ends must close with the session-ended
// message and a code that tells the page not to reconnect.
func expectSessionEnded(t *testing.T, conn *websocket.Conn) {
	t.Helper()
	code, msgs := wsReadClose(t, conn)
	if code != websocket.ClosePolicyViolation {
		t.Errorf("close code = %d, want %d", code, websocket.ClosePolicyViolation)
	}
	if len(msgs) == 0 || !strings.Contains(msgs[len(msgs)-1], `data-state="ended"`) {
		t.Errorf("last messages %q, want the session-ended fragment", msgs)
	}
}

func TestLogoutEndsSessionAndSocket(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	call := e.submit("agent:billing-bot", "payments-host", conRefundBody)
	b := e.browser()
	b.login("olivia", rolePassword)
	tok := b.csrf()
	cookie := b.cookieHeader()
	conn, _ := b.mustDial("/ws")
	other := e.browser()
	other.login("olivia", rolePassword)
	otherConn, _ := other.mustDial("/ws")

	if p := b.post("/logout", url.Values{}); p.status != http.StatusForbidden {
		t.Errorf("logout without the CSRF token = %d, want 403", p.status)
	}
	p := b.post("/logout", url.Values{"csrf": {tok}})
	if p.status != http.StatusSeeOther || p.header.Get("Location") != "/login?notice=logged-out" {
		t.Fatalf("logout = %d → %q", p.status, p.header.Get("Location"))
	}
	expectSessionEnded(t, conn)

	// The old cookie no longer works for pages, decisions or sockets.
	stale := e.browser()
	req, _ := http.NewRequest("GET", e.url+"/", nil)
	req.Header.Set("Cookie", cookie)
	if p := stale.do(req); p.status != http.StatusSeeOther {
		t.Errorf("old cookie GET / = %d, want 303 to login", p.status)
	}
	form := url.Values{"csrf": {tok}, "digest": {call.Digest}}
	req, _ = http.NewRequest("POST", e.url+"/calls/"+call.ID+"/approve", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Cookie", cookie)
	req.Header.Set("Origin", e.url)
	if p := stale.do(req); p.status != http.StatusUnauthorized {
		t.Errorf("old cookie approve = %d, want 401", p.status)
	}
	if c, _ := e.q.Call(context.Background(), call.ID); len(c.Approvals) != 0 {
		t.Error("an approval was recorded with a logged-out cookie")
	}
	h := http.Header{"Origin": {e.url}, "Cookie": {cookie}}
	if _, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(e.url, "http")+"/ws", h); err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("old cookie socket: err %v, status %v; want 401", err, resp)
	}

	// The other session of the same user is untouched.
	otherConn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, _, err := otherConn.ReadMessage(); !isTimeout(err) {
		t.Errorf("the other session's socket: %v, want it still open", err)
	}
	if p := other.get("/"); p.status != http.StatusOK {
		t.Errorf("the other session: GET / = %d", p.status)
	}
}

// A login beyond account.MaxSessionsPerAccount ends the account's oldest
// session as a logout does: its socket on this console closes at once (the
// sweep that would find it later is an hour away here), its cookie stops
// working, and the account's other sessions go on.
func TestLoginBeyondTheSessionBoundEndsTheOldest(t *testing.T) {
	e := newConsoleEnv(t, func(c *Config) { c.SweepInterval = time.Hour })
	addRoleUsers(e)
	login := func() *consoleBrowser {
		e.clock.Advance(time.Second) // each login later than the one before
		b := e.browser()
		b.login("olivia", rolePassword)
		return b
	}
	oldest := login()
	conn, _ := oldest.mustDial("/ws")
	next := login()
	for range account.MaxSessionsPerAccount - 2 {
		login()
	}
	if p := oldest.get("/"); p.status != http.StatusOK {
		t.Fatalf("the oldest of %d sessions: GET / = %d, want 200", account.MaxSessionsPerAccount, p.status)
	}
	login()
	expectSessionEnded(t, conn)
	if p := oldest.get("/"); p.status != http.StatusSeeOther {
		t.Errorf("the ended session: GET / = %d, want 303 to login", p.status)
	}
	if p := next.get("/"); p.status != http.StatusOK {
		t.Errorf("the next oldest session: GET / = %d, want 200", p.status)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(interface{ Timeout() bool })
	return ok && ne.Timeout()
}

func TestDisableEndsSessionsAndSockets(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	e.addUser("otto", account.RoleOperator, rolePassword)
	olivia := e.browser()
	olivia.login("olivia", rolePassword)
	conn, _ := olivia.mustDial("/ws")
	admin := e.browser()
	admin.login("adam", rolePassword)

	p := admin.post("/admin/users/olivia/disable", url.Values{"csrf": {admin.csrf()}})
	if p.status != http.StatusOK {
		t.Fatalf("disable = %d: %s", p.status, p.find("admin-error").Text())
	}
	expectSessionEnded(t, conn)
	if p := olivia.get("/"); p.status != http.StatusSeeOther {
		t.Errorf("disabled user's cookie: GET / = %d, want 303", p.status)
	}
	if p := e.browser().tryLogin("olivia", rolePassword); p.status != http.StatusUnauthorized {
		t.Errorf("disabled user login = %d, want 401", p.status)
	}

	// Disabled from the command line (straight in the database): the sweep
	// finds the session over and closes the socket.
	otto := e.browser()
	otto.login("otto", rolePassword)
	ottoConn, _ := otto.mustDial("/ws")
	if err := accountsOf(e.db).DisableUser(context.Background(), "otto", "cli:root", audit.ChannelCLI); err != nil {
		t.Fatal(err)
	}
	expectSessionEnded(t, ottoConn)
}

func TestIdleTimeout(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	b := e.browser()
	b.login("olivia", rolePassword)
	for i := range 4 {
		e.clock.Advance(29 * time.Minute)
		if p := b.get("/"); p.status != http.StatusOK {
			t.Fatalf("request %d after 29 idle minutes = %d, want 200", i, p.status)
		}
	}
	conn, _ := b.mustDial("/ws")
	e.clock.Advance(30 * time.Minute)
	expectSessionEnded(t, conn)
	if p := b.get("/"); p.status != http.StatusSeeOther || p.header.Get("Location") != "/login" {
		t.Errorf("after 30 idle minutes GET / = %d → %q, want 303 → /login", p.status, p.header.Get("Location"))
	}
	var reason string
	e.db.SQL().QueryRow(`SELECT revoke_reason FROM sessions`).Scan(&reason)
	if reason != "idle" {
		t.Errorf("revoke reason = %q, want idle", reason)
	}
}

func TestAbsoluteTimeout(t *testing.T) {
	e := newConsoleEnv(t, func(c *Config) { c.IdleTimeout = time.Hour; c.AbsoluteTimeout = 3 * time.Hour })
	addRoleUsers(e)
	b := e.browser()
	b.login("olivia", rolePassword)
	for elapsed := 50 * time.Minute; elapsed < 3*time.Hour; elapsed += 50 * time.Minute {
		e.clock.Advance(50 * time.Minute)
		if p := b.get("/"); p.status != http.StatusOK {
			t.Fatalf("active at %v = %d, want 200", elapsed, p.status)
		}
	}
	conn, _ := b.mustDial("/ws")
	e.clock.Advance(30 * time.Minute) // 3 h 50 min after login, 30 min since the last request
	expectSessionEnded(t, conn)
	if p := b.get("/"); p.status != http.StatusSeeOther {
		t.Errorf("past the absolute timeout GET / = %d, want 303", p.status)
	}
	var reason string
	e.db.SQL().QueryRow(`SELECT revoke_reason FROM sessions`).Scan(&reason)
	if reason != "expired" {
		t.Errorf("revoke reason = %q, want expired", reason)
	}
	b.login("olivia", rolePassword)
	if p := b.get("/"); p.status != http.StatusOK {
		t.Errorf("a new login after expiry: GET / = %d", p.status)
	}
}

func TestLoginRateLimitPerAccount(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	b := e.browser()
	for i := range account.AccountPolicy.Free + 1 {
		if p := b.tryLogin("olivia", "wrong password"); p.status != http.StatusUnauthorized {
			t.Fatalf("failure %d = %d, want 401", i+1, p.status)
		}
	}
	// Even the right password waits now.
	p := b.tryLogin("olivia", rolePassword)
	if p.status != http.StatusTooManyRequests {
		t.Fatalf("login while throttled = %d, want 429", p.status)
	}
	if got := p.find("login-error").Text(); !strings.Contains(got, "Try again in 1 s") {
		t.Errorf("message = %q, want 'Try again in 1 s'", got)
	}
	if p.header.Get("Retry-After") != "1" {
		t.Errorf("Retry-After = %q, want 1", p.header.Get("Retry-After"))
	}
	// Another account from another address is not affected.
	if p := e.browser().tryLogin("aude", rolePassword); p.status != http.StatusSeeOther {
		t.Errorf("another account = %d, want 303", p.status)
	}
	// The wait doubles and stops at the maximum: never a lockout.
	maxWait := 0
	for range 20 {
		var wait int
		for {
			p = b.tryLogin("olivia", "wrong password")
			if p.status != http.StatusTooManyRequests {
				break
			}
			wait, _ = strconv.Atoi(p.header.Get("Retry-After"))
			e.clock.Advance(time.Duration(wait) * time.Second)
		}
		maxWait = max(maxWait, wait)
	}
	if limit := int(account.AccountPolicy.Max / time.Second); maxWait != limit {
		t.Errorf("longest wait = %d s, want the cap %d s", maxWait, limit)
	}
	e.clock.Advance(account.AccountPolicy.Max)
	b.login("olivia", rolePassword)
}

func TestLoginRateLimitPerAddress(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	b := e.browser()
	for i := range account.AddressPolicy.Free + 1 {
		if p := b.tryLogin("guess"+strconv.Itoa(i), "wrong password"); p.status != http.StatusUnauthorized {
			t.Fatalf("failure %d = %d, want 401", i+1, p.status)
		}
	}
	if p := b.tryLogin("olivia", rolePassword); p.status != http.StatusTooManyRequests {
		t.Errorf("a fresh account from a throttled address = %d, want 429", p.status)
	}
	e.clock.Advance(time.Second)
	b.login("olivia", rolePassword)
}

func TestLoginFormProtected(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	b := e.browser()
	lp := b.get("/login")
	token, _ := lp.doc.Find(`input[name="csrf"]`).Attr("value")
	good := url.Values{"csrf": {token}, "name": {"olivia"}, "password": {rolePassword}}
	bad := url.Values{"csrf": {"x" + token}, "name": {"olivia"}, "password": {rolePassword}}
	if p := e.browser().post("/login", good); p.status != http.StatusForbidden {
		t.Errorf("login without the form's cookie = %d, want 403", p.status)
	}
	if p := b.post("/login", bad); p.status != http.StatusForbidden {
		t.Errorf("login with a wrong token = %d, want 403", p.status)
	}
	if p := b.post("/login", good, "Sec-Fetch-Site", "cross-site"); p.status != http.StatusForbidden {
		t.Errorf("cross-site login = %d, want 403", p.status)
	}
	if p := b.post("/login", good, "Origin", "http://evil.example"); p.status != http.StatusForbidden {
		t.Errorf("login from another origin = %d, want 403", p.status)
	}
	if p := b.post("/login", good, "Origin", "null", "Sec-Fetch-Site", "cross-site"); p.status != http.StatusForbidden {
		t.Errorf("login from a sandboxed cross-site frame = %d, want 403", p.status)
	}
	// Under Referrer-Policy: no-referrer a browser's own form post carries
	// Origin: null.
	if p := b.post("/login", good, "Origin", "null"); p.status != http.StatusSeeOther {
		t.Errorf("login with Origin: null from the page itself = %d, want 303", p.status)
	}
}
