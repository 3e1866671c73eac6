package console

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/reveal"
	"github.com/countersign/countersign/internal/server"
	"github.com/countersign/countersign/web/templates"
)

// tokensPath is the page of the viewer's own operator tokens.
const tokensPath = "/account/tokens"

// routesTokens serves the viewer's own operator tokens: anyone logged in
// sees and revokes theirs; making one needs a fresh login, and the token
// is the viewer's own (nobody makes one for someone else).
func (c *Console) routesTokens(e *echo.Echo, post func(string, echo.HandlerFunc, ...echo.MiddlewareFunc)) {
	e.GET(tokensPath, c.tokensPage, c.requireSession)
	post(tokensPath, c.makeToken)
	post(tokensPath+"/revoke", c.revokeOperatorToken)
	post(tokensPath+"/reauth", c.reauthTokens)
}

func (c *Console) renderTokens(ec echo.Context, status int, msg, errMsg string, made *templates.NewOperatorToken) error {
	v := viewerOf(ec)
	now := c.now()
	list, err := c.accounts.OperatorTokens(ec.Request().Context(), v.user.Name)
	if err != nil {
		return err
	}
	tv := templates.OperatorTokensView{Page: c.page(v, "Your operator tokens", "account", "", now), New: made,
		Max: account.MaxOperatorTokensPerAccount, Fresh: c.fresh(v), Decider: v.user.Role.CanDecide(), FreshFor: span(FreshLogin), APIOn: c.cfg.OperatorAPI,
		Message: msg, Error: errMsg}
	for _, t := range list {
		row := templates.OperatorTokenRow{ID: t.ID, Scope: t.Scope, Note: reveal.String(t.Note), State: t.State(now),
			CreatedAt: t.CreatedAt, ExpiresAt: t.ExpiresAt}
		if row.State == "live" {
			tv.Live++
		}
		tv.Tokens = append(tv.Tokens, row)
	}
	return c.render(ec, status, templates.OperatorTokensPage(tv))
}

func (c *Console) tokensPage(ec echo.Context) error {
	return c.renderTokens(ec, http.StatusOK, "", "", nil)
}

// makeToken makes an operator token for the viewer, after a fresh login,
// and shows its secret once.
func (c *Console) makeToken(ec echo.Context) error {
	v, form := viewerOf(ec), ec.Request().PostForm
	if !c.fresh(v) {
		return c.renderTokens(ec, http.StatusForbidden, "", "Making a token needs a login within the last "+span(FreshLogin)+": log in again.", nil)
	}
	days, err := strconv.Atoi(form.Get("days"))
	if err != nil || days < 1 || days > 30 {
		return c.renderTokens(ec, http.StatusBadRequest, "", "Choose a life from 1 to 30 days.", nil)
	}
	t, secret, err := c.accounts.CreateOperatorToken(ec.Request().Context(), account.OperatorTokenSpec{Person: v.user.Name,
		Scope: form.Get("scope"), Note: form.Get("note"), Life: time.Duration(days) * 24 * time.Hour}, audit.ChannelWeb)
	if err != nil {
		if ae := server.ErrorOf(err); ae.Status < 500 {
			return c.renderTokens(ec, ae.Status, "", ae.Message, nil)
		}
		return err
	}
	return c.renderTokens(ec, http.StatusOK, "", "", &templates.NewOperatorToken{ID: t.ID, Scope: t.Scope, Secret: secret, ExpiresAt: t.ExpiresAt})
}

func (c *Console) revokeOperatorToken(ec echo.Context) error {
	v, id := viewerOf(ec), ec.Request().PostForm.Get("id")
	err := c.accounts.RevokeOperatorToken(ec.Request().Context(), v.user.Name, id, audit.ChannelWeb)
	if errors.Is(err, account.ErrOperatorTokenNotFound) {
		return c.renderTokens(ec, http.StatusNotFound, "", "None of your live tokens is "+reveal.String(id)+": reload the page.", nil)
	}
	if err != nil {
		return err
	}
	return c.renderTokens(ec, http.StatusOK, "Revoked "+reveal.String(id)+": it is refused from the next request on.", "", nil)
}

// reauthTokens ends the session and sends the browser to log in again,
// back to the tokens page.
func (c *Console) reauthTokens(ec echo.Context) error {
	return c.reauthTo(ec, tokensPath)
}
