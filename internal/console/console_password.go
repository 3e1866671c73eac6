package console

import (
	"errors"
	"log/slog"
	"net/http"

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
	if !c.checkPassword(ctx, v.user.PasswordHash, current) {
		return c.renderPassword(ec, http.StatusForbidden, "The current password is wrong. Type the password you logged in with.")
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
	if _, err := c.accounts.SetPassword(ctx, v.user.Name, hash, true, v.user.Name, audit.ChannelWeb); err != nil {
		return err
	}
	c.log.Info("console password changed", slog.String("user", v.user.Name))
	return ec.Redirect(http.StatusSeeOther, "/account?notice=password")
}
