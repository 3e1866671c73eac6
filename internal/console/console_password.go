package console

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/problem"
	"github.com/countersign/countersign/web/templates"
)

// passwordPath is where a local account changes its own password. An
// account whose password an administrator set must go there first: every
// other page redirects to it, and every other action is refused, until it
// has chosen its own (logging out stays open).
const passwordPath = "/account/password"

// mustChangeFirst holds a marked account to the password page; it returns
// nil when the request may go on.
func (c *Console) mustChangeFirst(ec echo.Context, v *viewer) error {
	if !v.user.MustChangePassword {
		return nil
	}
	r := ec.Request()
	switch {
	case r.URL.Path == passwordPath:
		return nil
	case r.URL.Path == "/logout" && r.Method == http.MethodPost:
		return nil
	case (r.Method == http.MethodGet || r.Method == http.MethodHead) && r.URL.Path != "/ws":
		return ec.Redirect(http.StatusSeeOther, passwordPath)
	}
	return problem.New(http.StatusForbidden, "password_change_required",
		"an administrator set your password: choose your own at "+passwordPath+" before doing anything else")
}

func (c *Console) renderPassword(ec echo.Context, status int, errMsg string) error {
	v := viewerOf(ec)
	return c.render(ec, status, templates.PasswordPage(templates.PasswordView{
		Page:   c.page(v, "Change your password", "account", "", c.now()),
		Forced: v.user.MustChangePassword, Error: errMsg}))
}

func (c *Console) passwordPage(ec echo.Context) error {
	if viewerOf(ec).user.SSO() {
		return account.ErrSSOPassword
	}
	return c.renderPassword(ec, http.StatusOK, "")
}

// changePassword sets the viewer's own password after checking the current
// one; it clears the mark an administrator's reset left.
func (c *Console) changePassword(ec echo.Context) error {
	v := viewerOf(ec)
	if v.user.SSO() {
		return account.ErrSSOPassword
	}
	form := ec.Request().PostForm
	current, next, repeat := form.Get("current"), form.Get("new"), form.Get("repeat")
	ctx := ec.Request().Context()
	// The current password is checked under the login throttle: a session
	// left open must not become a way to guess it.
	res, wait, err := c.accounts.ReserveLogin(ctx, account.LoginAttempt{Name: v.user.Name,
		Device: c.knownDevice(ec.Request(), v.user.Name), Address: ec.RealIP()})
	if errors.Is(err, account.ErrThrottleFull) || (err == nil && wait > 0) {
		secs := int((wait + time.Second - 1) / time.Second)
		ec.Response().Header().Set("Retry-After", fmt.Sprint(secs))
		return c.renderPassword(ec, http.StatusTooManyRequests, fmt.Sprintf("Too many wrong passwords. Try again in %d s.", secs))
	}
	if err != nil {
		return err
	}
	if !c.checkPassword(ctx, v.user.PasswordHash, current) {
		return c.renderPassword(ec, http.StatusForbidden, "The current password is wrong. Type the password you logged in with.")
	}
	if err := c.accounts.LoginSucceeded(ctx, res); err != nil {
		return err
	}
	if next != repeat {
		return c.renderPassword(ec, http.StatusBadRequest, "The two new passwords differ. Type the same one twice.")
	}
	if err := account.CheckPassword(next); err != nil {
		var ie *account.InputError
		msg := "Choose another password."
		if errors.As(err, &ie) {
			msg = "Choose another password: " + ie.Message + "."
		}
		return c.renderPassword(ec, http.StatusBadRequest, msg)
	}
	if next == current {
		return c.renderPassword(ec, http.StatusBadRequest, "The new password is the one you have. Choose another.")
	}
	hash, err := account.Hash(next)
	if err != nil {
		return err
	}
	// Every session of the account ends, this one too: whoever knew the
	// old password is logged out everywhere. This browser goes on in a new
	// session.
	ended, err := c.accounts.ChangeOwnPassword(ctx, v.user.Name, hash, audit.ChannelWeb)
	if err != nil {
		return err
	}
	c.hub.endUser(v.user.Name)
	sid, csrf := newID(), newID()
	overLimit, err := c.accounts.CreateSession(ctx, hashID(sid), v.user.Name, csrf, c.now())
	if err != nil {
		return err
	}
	if len(overLimit) > 0 {
		c.hub.endSessions(overLimit...)
	}
	if err := c.setCookie(ec, map[any]any{cookieSID: sid}, c.cfg.AbsoluteTimeout); err != nil {
		return err
	}
	c.log.Info("console password changed", slog.String("user", v.user.Name), slog.Int64("sessions_ended", ended))
	return ec.Redirect(http.StatusSeeOther, "/account?notice=password")
}
