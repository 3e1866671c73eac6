package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/sessions"
	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/problem"
	"github.com/countersign/countersign/internal/reveal"
	"github.com/countersign/countersign/internal/server"
	"github.com/countersign/countersign/web/templates"
)

// A console session: the browser holds a signed, encrypted cookie whose only
// content is a random id; the row in the database (keyed by the id's
// SHA-256) holds the user, the times and the CSRF token. Before login the
// cookie holds a different random id that is never stored, only used to
// key the login form's token; login always issues a new id.

const (
	viewerKey = "countersign.viewer"
	cookieSID = "sid" // the session id after login
	// cookieAuthAt is, for single sign-on, the provider's auth_time in
	// Unix seconds.
	cookieAuthAt = "auth_at"
	cookiePre    = "pre" // the login form's id before login
	// formLimit bounds a console form body.
	formLimit = server.MaxFormBytes
	// loginFormAge is how long a login form stays usable.
	loginFormAge = time.Hour
)

// viewer is the logged-in person behind a request.
type viewer struct {
	idHash  string
	user    account.User
	csrf    string
	method  string    // how the session logged in
	idToken string    // the provider's ID token, for RP-initiated logout
	loginAt time.Time // when the session logged in
	// authAt is when the person last proved who they are: the login, or
	// for single sign-on when the provider last authenticated them
	// (auth_time), which a login riding on the provider's session does not
	// move.
	authAt time.Time

	passkeysOnce sync.Once
	passkeys     int // how many passkeys the viewer has, read once per request or socket
}

func (v *viewer) templ() *templates.Viewer {
	tv := &templates.Viewer{Name: reveal.String(v.user.Shown()), Role: string(v.user.Role), CanDecide: v.user.Role.CanDecide(),
		IsAdmin: v.user.Role.CanAdminister(), CSRF: v.csrf}
	if v.user.SSO() {
		tv.Principal = reveal.String(v.user.Name)
	}
	return tv
}

func viewerOf(ec echo.Context) *viewer {
	v, _ := ec.Get(viewerKey).(*viewer)
	return v
}

// newID returns 256 random bits, URL-safe.
func newID() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func hashID(id string) string {
	h := sha256.Sum256([]byte("countersign/session:" + id))
	return hex.EncodeToString(h[:])
}

// cookieValues decodes the console cookie; a missing, forged, expired or
// undecodable cookie reads as empty.
func (c *Console) cookieValues(r *http.Request) map[any]any {
	s, err := c.cookies.New(r, c.cookieName)
	if err != nil || s == nil {
		return map[any]any{}
	}
	return s.Values
}

// setCookie replaces the console cookie with values; maxAge < 0 deletes it.
func (c *Console) setCookie(ec echo.Context, values map[any]any, maxAge time.Duration) error {
	s := sessions.NewSession(c.cookies, c.cookieName)
	s.Values = values
	opts := *c.cookies.Options
	opts.MaxAge = int(maxAge / time.Second)
	if maxAge < 0 {
		opts.MaxAge = -1
	}
	s.Options = &opts
	return c.cookies.Save(ec.Request(), ec.Response(), s)
}

// sessionOver says why a session may no longer be used, or "" if it may.
func (c *Console) sessionOver(s account.Session, now time.Time) string {
	switch {
	case s.Revoked():
		return s.RevokeReason
	case s.User.Disabled():
		return "disabled"
	case now.Sub(s.CreatedAt) >= c.cfg.AbsoluteTimeout:
		return "expired"
	case now.Sub(s.LastSeen) >= c.cfg.IdleTimeout:
		return "idle"
	case s.Method == account.MethodPassword && !c.localLoginAllows(s.User):
		// Opened by a password where this console takes none (it was
		// started with --local-login off or admins-only since, or another
		// replica allows more): a mode that refuses the login refuses
		// the session too.
		return "local_login_off"
	}
	return ""
}

// localLoginAllows reports whether this console's --local-login mode lets
// u log in with a password.
func (c *Console) localLoginAllows(u account.User) bool {
	switch c.cfg.LocalLogin {
	case LocalOff:
		return false
	case LocalAdminsOnly:
		return u.Role.CanAdminister()
	}
	return true
}

// currentViewer authenticates the request's cookie against the database,
// ends a session that has timed out, and records activity.
func (c *Console) currentViewer(ec echo.Context) (*viewer, error) {
	if v := viewerOf(ec); v != nil {
		return v, nil
	}
	values := c.cookieValues(ec.Request())
	sid, _ := values[cookieSID].(string)
	if sid == "" {
		return nil, errNoSession
	}
	ctx := ec.Request().Context()
	idHash := hashID(sid)
	s, err := c.accounts.Session(ctx, idHash)
	if errors.Is(err, account.ErrSessionNotFound) {
		return nil, errNoSession
	}
	if err != nil {
		return nil, err
	}
	now := c.now()
	if reason := c.sessionOver(s, now); reason != "" {
		if !s.Revoked() {
			if err := c.accounts.RevokeSession(ctx, idHash, reason, now); err != nil {
				return nil, err
			}
			c.hub.endSessions(idHash)
		}
		return nil, errNoSession
	}
	// Record activity, at most a few times per idle period.
	if now.Sub(s.LastSeen) >= min(time.Minute, c.cfg.IdleTimeout/10) {
		if err := c.accounts.TouchSession(ctx, idHash, now); err != nil {
			return nil, err
		}
	}
	v := &viewer{idHash: idHash, user: s.User, csrf: s.CSRF, method: s.Method, idToken: s.IDToken, loginAt: s.CreatedAt, authAt: s.CreatedAt}
	if s.Method == account.MethodOIDC {
		authAt, _ := values[cookieAuthAt].(string)
		v.authAt = providerAuthAt(authAt, s.CreatedAt)
	}
	ec.Set(viewerKey, v)
	return v, nil
}

// requireSession lets only logged-in people through. A page asked for
// without a session redirects to the login page.
func (c *Console) requireSession(next echo.HandlerFunc) echo.HandlerFunc {
	return func(ec echo.Context) error {
		_, err := c.currentViewer(ec)
		if errors.Is(err, errNoSession) {
			r := ec.Request()
			if (r.Method == http.MethodGet || r.Method == http.MethodHead) && r.URL.Path != "/ws" {
				return ec.Redirect(http.StatusSeeOther, "/login")
			}
			return problem.New(http.StatusUnauthorized, "unauthorized", "your session has ended; log in again")
		}
		if err != nil {
			return err
		}
		if err := c.mustChangeFirst(ec, viewerOf(ec)); err != nil {
			return err
		}
		return next(ec)
	}
}

func (c *Console) requireDecider(next echo.HandlerFunc) echo.HandlerFunc {
	return func(ec echo.Context) error {
		if v := viewerOf(ec); v == nil || !v.user.Role.CanDecide() {
			return problem.New(http.StatusForbidden, "forbidden", "your role (auditor) may read calls but not decide them")
		}
		return next(ec)
	}
}

func (c *Console) requireAdmin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(ec echo.Context) error {
		if v := viewerOf(ec); v == nil || !v.user.Role.CanAdminister() {
			return problem.New(http.StatusForbidden, "forbidden", "only admins manage accounts and tokens")
		}
		return next(ec)
	}
}

// allowedOrigin reports whether a browser Origin is the console's own:
// the public URL's origin, or the origin of the host the request came to.
func (c *Console) allowedOrigin(r *http.Request, origin string) bool {
	origin = strings.ToLower(origin)
	if c.origin != "" && origin == c.origin {
		return true
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return r.Host != "" && origin == scheme+"://"+strings.ToLower(r.Host)
}

// checkRequestSource refuses a state-changing request that a browser
// marked as coming from another site, or whose Origin is not ours. It is a
// second line: the synchronizer token is checked as well.
func (c *Console) checkRequestSource(r *http.Request) error {
	site := r.Header.Get("Sec-Fetch-Site")
	switch site {
	case "cross-site", "same-site":
		return problem.New(http.StatusForbidden, "forbidden", "refused: this request came from another site")
	}
	// Under Referrer-Policy: no-referrer, browsers send "Origin: null" on
	// their own form posts; the fetch metadata and the form token decide.
	o := r.Header.Get("Origin")
	if o == "null" && (site == "same-origin" || site == "") {
		return nil
	}
	if o != "" && !c.allowedOrigin(r, o) {
		return problem.New(http.StatusForbidden, "forbidden", "refused: this request came from another origin")
	}
	return nil
}

// parseForm reads a console form body of at most formLimit bytes.
func parseForm(ec echo.Context) error {
	r := ec.Request()
	r.Body = http.MaxBytesReader(ec.Response(), r.Body, formLimit)
	if err := r.ParseForm(); err != nil {
		return problem.New(http.StatusBadRequest, "bad_request", "could not read the form")
	}
	return nil
}

// requireCSRF checks the synchronizer token of the viewer's session on a
// state-changing request, in constant time.
func (c *Console) requireCSRF(next echo.HandlerFunc) echo.HandlerFunc {
	return func(ec echo.Context) error {
		if err := c.checkRequestSource(ec.Request()); err != nil {
			return err
		}
		if err := parseForm(ec); err != nil {
			return err
		}
		v := viewerOf(ec)
		got := ec.Request().PostForm.Get("csrf")
		if v == nil || got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(v.csrf)) != 1 {
			return problem.New(http.StatusForbidden, "forbidden", "the form's security token is missing or stale; reload the page and try again")
		}
		return next(ec)
	}
}

// loginToken is the login form's CSRF token for a pre-login id.
func (c *Console) loginToken(pre string) string {
	m := hmac.New(sha256.New, c.loginKey)
	m.Write([]byte("countersign/login:" + pre))
	return hex.EncodeToString(m.Sum(nil))
}

func (c *Console) loginPage(ec echo.Context) error {
	if _, err := c.currentViewer(ec); err == nil {
		return ec.Redirect(http.StatusSeeOther, "/")
	}
	notice := ""
	if ec.QueryParam("notice") == "logged-out" {
		notice = "You are logged out."
	}
	return c.renderLoginNotice(ec, http.StatusOK, "", "", notice)
}

// renderLogin shows the login form, keeping the browser's pre-login id
// when it has one so that several tabs can log in.
func (c *Console) renderLogin(ec echo.Context, status int, name, msg string) error {
	return c.renderLoginNotice(ec, status, name, msg, "")
}

func (c *Console) renderLoginNotice(ec echo.Context, status int, name, msg, notice string) error {
	pre, _ := c.cookieValues(ec.Request())[cookiePre].(string)
	if pre == "" {
		pre = newID()
		if err := c.setCookie(ec, map[any]any{cookiePre: pre}, loginFormAge); err != nil {
			return err
		}
	}
	next := ec.QueryParam("next")
	if ec.Request().Method == http.MethodPost {
		next = ec.Request().PostForm.Get("next")
	}
	next = localPath(next)
	lv := templates.LoginView{Page: templates.Page{Title: "Log in", Now: c.now()}, CSRF: c.loginToken(pre),
		Name: name, Error: msg, Notice: notice, Local: string(c.cfg.LocalLogin)}
	if next != "/" {
		lv.Next = next
	}
	if c.cfg.SSO != nil {
		lv.SSOName = c.cfg.SSOName
		lv.SSOURL = ssoLoginPath
		if lv.Next != "" {
			lv.SSOURL += "?next=" + url.QueryEscape(lv.Next)
		}
	}
	return c.render(ec, status, templates.LoginPage(lv))
}

// Known devices. A browser that logged in successfully keeps a signed
// cookie naming the account and a random device id (OWASP's "device
// cookie"). A login for that account from that browser is throttled by the
// device's own allowance instead of the account's, so an attacker who
// trips the account's backoff from elsewhere does not lock its owner out;
// failures from the device count against the device, and a device in
// backoff is treated like any unknown browser.
const (
	deviceCookieAge = 30 * 24 * time.Hour
	deviceSep       = "\n" // account names never contain it
)

// knownDevice returns the device id in the browser's device cookie when it
// is validly signed for name, else "".
func (c *Console) knownDevice(r *http.Request, name string) string {
	ck, err := r.Cookie(c.deviceCookieName)
	if err != nil {
		return ""
	}
	var v string
	if err := c.deviceCodec.Decode(c.deviceCookieName, ck.Value, &v); err != nil {
		return ""
	}
	who, id, ok := strings.Cut(v, deviceSep)
	if !ok || who != name || id == "" {
		return ""
	}
	return id
}

// setDeviceCookie gives the browser a fresh device cookie for name.
func (c *Console) setDeviceCookie(ec echo.Context, name string) error {
	v, err := c.deviceCodec.Encode(c.deviceCookieName, name+deviceSep+newID())
	if err != nil {
		return err
	}
	ec.SetCookie(&http.Cookie{Name: c.deviceCookieName, Value: v, Path: "/", MaxAge: int(deviceCookieAge / time.Second),
		HttpOnly: true, Secure: c.secure, SameSite: http.SameSiteStrictMode})
	return nil
}

// tooManyLogins answers a throttled login attempt.
func (c *Console) tooManyLogins(ec echo.Context, wait time.Duration, shownName string) error {
	secs := int((wait + time.Second - 1) / time.Second)
	ec.Response().Header().Set("Retry-After", fmt.Sprint(secs))
	return c.renderLogin(ec, http.StatusTooManyRequests, shownName,
		fmt.Sprintf("Too many failed logins. Try again in %d s.", secs))
}

// login checks a name and password. Each attempt reserves its place in the
// throttles (the account's or the known device's, and the address's)
// before any password is hashed, so the documented backoff holds however
// many attempts arrive at once on however many consoles share the
// database: the reservation counts as a failure until the password turns
// out right.
func (c *Console) login(ec echo.Context) error {
	r := ec.Request()
	if err := c.checkRequestSource(r); err != nil {
		return err
	}
	if err := parseForm(ec); err != nil {
		return err
	}
	if c.cfg.LocalLogin == LocalOff {
		return c.renderLogin(ec, http.StatusForbidden, "", "Local accounts are turned off on this console; sign in with "+c.cfg.SSOName+".")
	}
	pre, _ := c.cookieValues(r)[cookiePre].(string)
	token := r.PostForm.Get("csrf")
	if pre == "" || subtle.ConstantTimeCompare([]byte(token), []byte(c.loginToken(pre))) != 1 {
		return c.renderLogin(ec, http.StatusForbidden, "", "The login form expired. Try again.")
	}
	name, password := r.PostForm.Get("name"), r.PostForm.Get("password")
	shownName := name
	if account.CheckName(name) != nil {
		shownName = ""
	}
	now := c.now()
	remote := ec.RealIP()
	ctx := r.Context()
	res, wait, err := c.accounts.ReserveLogin(ctx, account.LoginAttempt{Name: name, Device: c.knownDevice(r, name), Address: remote})
	if errors.Is(err, account.ErrThrottleFull) {
		// Refused before any password is checked: the throttle keeps as
		// many throttled keys as it may, and this attempt would add one.
		c.log.Warn("console login refused: the login throttle is full of throttled names and addresses",
			slog.String("name", shownName), slog.String("remote", remote), slog.Int("rows", c.accounts.ThrottleRows()))
		return c.tooManyLogins(ec, wait, shownName)
	}
	if err != nil {
		return err
	}
	if wait > 0 {
		return c.tooManyLogins(ec, wait, shownName)
	}
	user, err := c.accounts.UserByName(ctx, name)
	hash := user.PasswordHash
	switch {
	case errors.Is(err, account.ErrUserNotFound) || account.CheckName(name) != nil:
		hash, err = c.dummyHash, nil
	case err != nil:
		return errors.Join(err, c.accounts.CancelLogin(context.WithoutCancel(ctx), res))
	}
	ok := c.checkPassword(ctx, hash, password) && hash != c.dummyHash && !user.Disabled() && user.Kind != account.KindOIDC
	if !ok {
		c.log.Info("console login failed", slog.String("name", shownName), slog.String("remote", remote))
		return c.renderLogin(ec, http.StatusUnauthorized, shownName, "Wrong name or password, or the account is disabled.")
	}
	if err := c.accounts.LoginSucceeded(ctx, res); err != nil {
		return err
	}
	if c.cfg.LocalLogin == LocalAdminsOnly && !user.Role.CanAdminister() {
		c.log.Info("console login refused: local accounts are for administrators only", slog.String("user", user.Name))
		return c.renderLogin(ec, http.StatusForbidden, shownName,
			"Local accounts may log in here only as administrators (for emergencies); sign in with "+c.cfg.SSOName+".")
	}
	sid, csrf := newID(), newID()
	ended, err := c.accounts.CreateSession(ctx, hashID(sid), user.Name, csrf, now)
	if err != nil {
		return err
	}
	if len(ended) > 0 {
		c.hub.endSessions(ended...)
	}
	if err := c.setCookie(ec, map[any]any{cookieSID: sid}, c.cfg.AbsoluteTimeout); err != nil {
		return err
	}
	if err := c.setDeviceCookie(ec, user.Name); err != nil {
		return err
	}
	c.log.Info("console login", slog.String("user", user.Name), slog.String("remote", remote))
	return ec.Redirect(http.StatusSeeOther, localPath(r.PostForm.Get("next")))
}

// checkPassword verifies a password, at most two at a time: argon2id is
// built to be expensive.
func (c *Console) checkPassword(ctx context.Context, hash, password string) bool {
	select {
	case c.verifySlots <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	defer func() { <-c.verifySlots }()
	return c.verify(hash, password) == nil
}

func (c *Console) logout(ec echo.Context) error {
	v := viewerOf(ec)
	if err := c.accounts.RevokeSession(ec.Request().Context(), v.idHash, "logout", c.now()); err != nil {
		return err
	}
	c.hub.endSessions(v.idHash)
	if err := c.setCookie(ec, map[any]any{}, -1); err != nil {
		return err
	}
	// A single-sign-on session also ends at the provider when it offers
	// RP-initiated logout; it sends the browser back to the login page.
	if v.method == account.MethodOIDC {
		if u := c.providerLogoutURL(v.idToken); u != "" {
			return ec.Redirect(http.StatusSeeOther, u)
		}
	}
	return ec.Redirect(http.StatusSeeOther, "/login?notice=logged-out")
}
