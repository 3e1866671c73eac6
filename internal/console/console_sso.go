package console

import (
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/reveal"
	"github.com/countersign/countersign/internal/server"
	"github.com/countersign/countersign/internal/sso"
	"github.com/countersign/countersign/web/templates"
)

// Single sign-on: /auth/oidc/login sends the browser to the provider with
// a fresh state, nonce and PKCE verifier, and keeps them (the sso.Flow) in
// a signed, encrypted cookie on this browser, under keys every replica
// shares, so that whichever replica the callback reaches can finish it and
// a login under way stores nothing on the server; /auth/oidc/callback
// finishes the login, records the account and opens the session.

const (
	ssoLoginPath    = "/auth/oidc/login"
	ssoCallbackPath = "/auth/oidc/callback"
)

// CallbackPath is where the provider sends browsers back: the redirect URI
// to register is the public URL followed by it.
const CallbackPath = ssoCallbackPath

// localPath returns next when it is a path on this console ("/calls/x"),
// else "/": a login never sends the browser elsewhere.
func localPath(next string) string {
	if next == "" || !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n\t") {
		return "/"
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil {
		return "/"
	}
	return next
}

// ssoLogin starts a single-sign-on login.
func (c *Console) ssoLogin(ec echo.Context) error {
	next := localPath(ec.QueryParam("next"))
	var freshWithin time.Duration
	if ec.QueryParam("fresh") == "1" {
		freshWithin = FreshLogin
	}
	authURL, flow, err := c.cfg.SSO.Begin(ec.Request().Context(), next, freshWithin)
	if err != nil {
		return err
	}
	v, err := c.ssoCodec.Encode(c.ssoCookieName, flow)
	if err != nil {
		return err
	}
	// Lax, not Strict: the provider's redirect back is a cross-site
	// top-level navigation, and the cookie must come with it.
	ec.SetCookie(&http.Cookie{Name: c.ssoCookieName, Value: v, Path: "/", MaxAge: int(sso.FlowTTL.Seconds()),
		HttpOnly: true, Secure: c.secure, SameSite: http.SameSiteLaxMode})
	ec.Response().Header().Set("Cache-Control", "no-store")
	return ec.Redirect(http.StatusSeeOther, authURL)
}

// ssoCallback finishes a single-sign-on login.
func (c *Console) ssoCallback(ec echo.Context) error {
	r := ec.Request()
	var flow sso.Flow
	if ck, err := r.Cookie(c.ssoCookieName); err == nil {
		if err := c.ssoCodec.Decode(c.ssoCookieName, ck.Value, &flow); err != nil {
			flow = sso.Flow{}
		}
	}
	// The cookie is single-use too: gone whatever happens next.
	ec.SetCookie(&http.Cookie{Name: c.ssoCookieName, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: c.secure, SameSite: http.SameSiteLaxMode})
	id, err := c.cfg.SSO.Finish(r.Context(), r.URL.Query(), flow)
	var refusal *sso.Refusal
	if errors.As(err, &refusal) {
		c.log.Info("single sign-on refused", slog.String("reason", string(refusal.Reason)), slog.Any("error", err),
			slog.String("remote", ec.RealIP()))
		return c.renderLogin(ec, http.StatusForbidden, "", "Sign-in failed: "+refusal.Message+". Try again.")
	}
	if err != nil {
		return err
	}
	sid, csrf := newID(), newID()
	login := account.OIDCLogin{Principal: id.Principal, Issuer: id.Issuer, Subject: id.Subject,
		PreferredUsername: id.PreferredUsername, DisplayName: id.DisplayName, Email: id.Email, Groups: id.Groups}
	if id.HasRole {
		login.Role = id.Role
	}
	u, ended, err := c.accounts.LoginOIDC(r.Context(), login, account.NewSession{IDHash: hashID(sid), CSRF: csrf, IDToken: id.IDToken})
	var shadow *account.ShadowError
	switch {
	case errors.Is(err, account.ErrNoRole):
		c.hub.endUser(id.Principal)
		c.log.Info("single sign-on without a role", slog.String("principal", id.Principal), slog.Any("groups", id.Groups))
		groups := make([]string, len(id.Groups))
		for i, g := range id.Groups {
			groups[i] = reveal.String(g)
		}
		return c.render(ec, http.StatusForbidden, templates.NoRolePage(templates.NoRoleView{
			Page: templates.Page{Title: "No role", Now: c.now()}, Principal: reveal.String(id.Principal),
			Shown: reveal.String(shownOf(id)), Groups: groups, LogoutURL: c.providerLogoutURL(id.IDToken)}))
	case errors.As(err, &shadow), errors.Is(err, account.ErrReservedName), errors.Is(err, account.ErrLoginDisabled),
		errors.Is(err, account.ErrBadPrincipal):
		c.log.Warn("single sign-on refused", slog.String("principal", id.Principal), slog.Any("error", err))
		return c.renderLogin(ec, http.StatusForbidden, "", "Sign-in refused: "+reveal.String(server.ErrorOf(err).Message))
	case err != nil:
		return err
	}
	if len(ended) > 0 {
		c.hub.endSessions(ended...)
	}
	values := map[any]any{cookieSID: sid}
	if !id.AuthTime.IsZero() {
		values[cookieAuthAt] = strconv.FormatInt(id.AuthTime.Unix(), 10)
	}
	if err := c.setCookie(ec, values, c.cfg.AbsoluteTimeout); err != nil {
		return err
	}
	c.log.Info("console login", slog.String("user", u.Name), slog.String("method", account.MethodOIDC),
		slog.String("role", string(u.Role)), slog.String("remote", ec.RealIP()))
	// The session cookie is SameSite=Strict, and this response ends a
	// navigation that began on the provider's site: a redirect from here
	// would still count as cross-site and arrive without the cookie. A
	// page of our own moves on instead, as a same-site navigation.
	return c.render(ec, http.StatusOK, templates.ContinuePage(templates.ContinueView{
		Page: templates.Page{Title: "Signed in", Now: c.now()}, Next: localPath(id.ReturnTo)}))
}

// providerAuthAt reads the auth_time kept in the session cookie: never
// later than the session's own login, and the zero time (not fresh) when
// the provider did not say.
func providerAuthAt(unix string, login time.Time) time.Time {
	n, err := strconv.ParseInt(unix, 10, 64)
	if err != nil {
		return time.Time{}
	}
	if at := time.Unix(n, 0); at.Before(login) {
		return at
	}
	return login
}

func shownOf(id sso.Identity) string {
	switch {
	case id.PreferredUsername != "":
		return id.PreferredUsername
	case id.DisplayName != "":
		return id.DisplayName
	}
	return id.Email
}

// providerLogoutURL is the provider's end-session URL that comes back to
// the login page, or "" when the provider offers none.
func (c *Console) providerLogoutURL(idToken string) string {
	if c.cfg.SSO == nil {
		return ""
	}
	back := ""
	if c.origin != "" {
		back = c.origin + "/login"
	}
	u, ok := c.cfg.SSO.LogoutURL(idToken, back)
	if !ok {
		return ""
	}
	return u
}

// FormTargets are the origins the console's forms lead to besides its own:
// the single-sign-on provider's end-session endpoint, where logging out
// redirects (server.Pages).
func (c *Console) FormTargets() []string {
	if c.cfg.SSO == nil {
		return nil
	}
	if o := c.cfg.SSO.EndSessionOrigin(); o != "" {
		return []string{o}
	}
	return nil
}
