package console

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/passkey"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/reveal"
	"github.com/countersign/countersign/internal/server"
	"github.com/countersign/countersign/web/templates"
)

// FreshLogin is how recent a login must be to register a passkey: someone
// who finds a session left open must not be able to add their own key.
const FreshLogin = 5 * time.Minute

// fresh reports whether the viewer proved who they are within FreshLogin:
// for single sign-on, the provider's auth_time counts, not the console's
// login, which may have ridden on an older session at the provider.
func (c *Console) fresh(v *viewer) bool { return c.now().Sub(v.authAt) < FreshLogin }

func (c *Console) accountView(ctx context.Context, v *viewer) (templates.AccountView, error) {
	av := templates.AccountView{Page: c.page(v, "Your account", "account", "", c.now()),
		Name: reveal.String(v.user.Shown()), Kind: string(v.user.Kind), Role: string(v.user.Role), Email: reveal.String(v.user.Email),
		DisplayName: reveal.String(v.user.DisplayName), LoginAt: v.loginAt, Method: v.method,
		PasskeysOn: c.cfg.Passkeys != nil, Fresh: c.fresh(v), FreshFor: span(FreshLogin)}
	for _, g := range v.user.Groups {
		av.Groups = append(av.Groups, reveal.String(g))
	}
	if v.user.SSO() {
		av.Principal = reveal.String(v.user.Name)
	}
	rows, err := c.delegationRows(ctx, v, c.now())
	if err != nil {
		return av, err
	}
	av.Delegations, av.CanDelegate, av.AsAdmin = rows, v.user.CanDecide(), v.user.Role == account.RoleAdmin
	if c.cfg.Passkeys == nil {
		return av, nil
	}
	av.RPID = c.cfg.Passkeys.RPID()
	pks, err := c.accounts.Passkeys(ctx, v.user.Name)
	if err != nil {
		return av, err
	}
	for _, p := range pks {
		av.Passkeys = append(av.Passkeys, templates.PasskeyRow{ID: p.IDString(), Name: reveal.String(p.Name), CreatedAt: p.CreatedAt, LastUsedAt: p.LastUsedAt})
	}
	return av, nil
}

func span(d time.Duration) string {
	if d%time.Minute == 0 {
		return strings.TrimSuffix(d.String(), "0s")
	}
	return d.String()
}

func (c *Console) renderAccount(ec echo.Context, status int, msg, errMsg string) error {
	av, err := c.accountView(ec.Request().Context(), viewerOf(ec))
	if err != nil {
		return err
	}
	av.Message, av.Error = msg, errMsg
	if c.cfg.Passkeys != nil {
		// Passkeys are bound to a host name; a page opened by another
		// name (an IP address, say) cannot use them.
		host := ec.Request().Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if rp := c.cfg.Passkeys.RPID(); host != rp && !strings.HasSuffix(host, "."+rp) {
			av.WrongHost = true
		}
	}
	return c.render(ec, status, templates.AccountPage(av))
}

func (c *Console) accountPage(ec echo.Context) error {
	msg := ""
	switch ec.QueryParam("notice") {
	case "registered":
		msg = "Your passkey is registered. You can approve calls with it."
	case "password":
		msg = "Your password is changed."
	}
	return c.renderAccount(ec, http.StatusOK, msg, "")
}

// reauth ends the session and sends the browser to log in again, back to
// the account page: registering a passkey needs a fresh login.
func (c *Console) reauth(ec echo.Context) error {
	return c.reauthTo(ec, "/account")
}

// reauthTo ends the session and sends the browser to log in again, back
// to next (a path of the console).
func (c *Console) reauthTo(ec echo.Context, next string) error {
	v := viewerOf(ec)
	if err := c.accounts.RevokeSession(ec.Request().Context(), v.idHash, "reauth", c.now()); err != nil {
		return err
	}
	c.hub.endSessions(v.idHash)
	if err := c.setCookie(ec, map[any]any{}, -1); err != nil {
		return err
	}
	if v.method == account.MethodOIDC && c.cfg.SSO != nil {
		return ec.Redirect(http.StatusSeeOther, ssoLoginPath+"?fresh=1&next="+next)
	}
	return ec.Redirect(http.StatusSeeOther, "/login?next="+next)
}

// passkeyUser is the viewer as the passkey ceremonies see them: handle,
// principal and registered credentials.
func (c *Console) passkeyUser(ctx context.Context, u account.User) (passkey.User, []account.Passkey, error) {
	handle := u.Handle
	if len(handle) == 0 {
		var err error
		if handle, err = c.accounts.UserHandle(ctx, u.Name); err != nil {
			return passkey.User{}, nil, err
		}
	}
	pks, err := c.accounts.Passkeys(ctx, u.Name)
	if err != nil {
		return passkey.User{}, nil, err
	}
	pu := passkey.User{Handle: handle, Name: u.Name, DisplayName: u.Shown()}
	for _, p := range pks {
		cred, err := credentialOf(p)
		if err != nil {
			return passkey.User{}, nil, err
		}
		pu.Credentials = append(pu.Credentials, cred)
	}
	return pu, pks, nil
}

// credentialOf reads a stored passkey back into the library's record.
func credentialOf(p account.Passkey) (passkey.Credential, error) {
	var cred passkey.Credential
	if err := json.Unmarshal(p.Record, &cred.Credential); err != nil {
		return cred, err
	}
	cred.Name, cred.CreatedAt = p.Name, p.CreatedAt
	cred.Authenticator.SignCount = p.SignCount
	return cred, nil
}

// jsonError answers a passkey endpoint's refusal in the API's error shape.
func jsonError(ec echo.Context, status int, code, msg string) error {
	return ec.JSON(status, map[string]any{"error": map[string]any{"code": code, "message": msg}})
}

// passkeyRefusal turns a ceremony's error into an answer for the page.
func (c *Console) passkeyRefusal(ec echo.Context, err error) error {
	var r *passkey.Refusal
	if errors.As(err, &r) {
		return jsonError(ec, http.StatusBadRequest, "passkey_"+string(r.Reason), r.Message)
	}
	if errors.Is(err, passkey.ErrPromptsFull) {
		ae := server.ErrorOf(err)
		ec.Response().Header().Set("Retry-After", "120")
		return jsonError(ec, ae.Status, ae.Code, ae.Message)
	}
	return err
}

// beginRegistration returns the options for navigator.credentials.create.
func (c *Console) beginRegistration(ec echo.Context) error {
	v := viewerOf(ec)
	if c.cfg.Passkeys == nil {
		return jsonError(ec, http.StatusNotFound, "passkeys_off", "passkeys are not available on this console")
	}
	if !c.fresh(v) {
		return jsonError(ec, http.StatusForbidden, "login_not_fresh", "registering a passkey needs a login within the last "+span(FreshLogin)+"; log in again")
	}
	ctx := ec.Request().Context()
	pu, pks, err := c.passkeyUser(ctx, v.user)
	if err != nil {
		return err
	}
	if len(pks) >= account.MaxPasskeys {
		ae := server.ErrorOf(account.ErrTooManyPasskeys)
		return jsonError(ec, ae.Status, ae.Code, ae.Message)
	}
	opts, id, err := c.cfg.Passkeys.BeginRegistration(ctx, pu)
	if err != nil {
		return c.passkeyRefusal(ec, err)
	}
	return ec.JSON(http.StatusOK, map[string]any{"ceremony": id, "options": opts})
}

// finishRegistration checks the authenticator's answer and stores the new
// passkey, audited.
func (c *Console) finishRegistration(ec echo.Context) error {
	v := viewerOf(ec)
	if c.cfg.Passkeys == nil {
		return jsonError(ec, http.StatusNotFound, "passkeys_off", "passkeys are not available on this console")
	}
	if !c.fresh(v) {
		return jsonError(ec, http.StatusForbidden, "login_not_fresh", "registering a passkey needs a login within the last "+span(FreshLogin)+"; log in again")
	}
	form := ec.Request().PostForm
	name := strings.TrimSpace(form.Get("name"))
	if err := passkey.CheckName(name); err != nil {
		return jsonError(ec, http.StatusBadRequest, "bad_name", "give the passkey a name of 1 to 64 characters")
	}
	ctx := ec.Request().Context()
	pu, _, err := c.passkeyUser(ctx, v.user)
	if err != nil {
		return err
	}
	cred, err := c.cfg.Passkeys.FinishRegistration(ctx, form.Get("ceremony"), pu, name, []byte(form.Get("response")))
	if err != nil {
		return c.passkeyRefusal(ec, err)
	}
	record, err := json.Marshal(cred.Credential)
	if err != nil {
		return err
	}
	err = c.accounts.AddPasskey(ctx, account.Passkey{ID: cred.ID, User: v.user.Name, Name: name, PublicKey: cred.PublicKey,
		SignCount: cred.Authenticator.SignCount, Record: record, CreatedAt: c.now().UTC().Truncate(time.Millisecond)}, audit.ChannelWeb)
	switch {
	case errors.Is(err, account.ErrTooManyPasskeys):
		ae := server.ErrorOf(err)
		return jsonError(ec, ae.Status, ae.Code, ae.Message)
	case errors.Is(err, account.ErrPasskeyTaken):
		return jsonError(ec, http.StatusConflict, "passkey_taken", "this passkey is already registered")
	case err != nil:
		return err
	}
	c.log.Info("passkey registered", slog.String("user", v.user.Name), slog.String("name", name),
		slog.String("credential", cred.IDString()))
	return ec.JSON(http.StatusOK, map[string]any{"registered": cred.IDString(), "next": "/account?notice=registered"})
}

// removePasskey removes one of the viewer's passkeys.
func (c *Console) removePasskey(ec echo.Context) error {
	v := viewerOf(ec)
	id, err := base64.RawURLEncoding.DecodeString(ec.Request().PostForm.Get("id"))
	if err != nil || len(id) == 0 {
		return c.renderAccount(ec, http.StatusBadRequest, "", "no such passkey")
	}
	p, err := c.accounts.RemovePasskey(ec.Request().Context(), v.user.Name, id, v.user.Name, audit.ChannelWeb)
	if errors.Is(err, account.ErrPasskeyNotFound) {
		return c.renderAccount(ec, http.StatusNotFound, "", "no such passkey")
	}
	if err != nil {
		return err
	}
	return c.renderAccount(ec, http.StatusOK, "Removed the passkey "+reveal.String(p.Name)+".", "")
}

// delegationRows are the delegations v gave or received, for the
// account page: at most enough to show every live one and the latest
// ended ones.
func (c *Console) delegationRows(ctx context.Context, v *viewer, now time.Time) ([]templates.DelegationRow, error) {
	ds, err := c.q.Delegations(ctx, queue.DelegationFilter{Person: v.user.Name, Limit: 20})
	if err != nil {
		return nil, err
	}
	disabled := map[string]bool{}
	isDisabled := func(name string) bool {
		if d, ok := disabled[name]; ok {
			return d
		}
		u, err := c.accounts.UserByName(ctx, name)
		disabled[name] = err != nil || !u.CanDecide()
		return disabled[name]
	}
	rows := make([]templates.DelegationRow, 0, len(ds))
	for _, d := range ds {
		state := d.State(now, isDisabled)
		rows = append(rows, templates.DelegationRow{ID: d.ID, Delegator: reveal.Of(c.shownName(d.Delegator)),
			Delegate: reveal.Of(c.shownName(d.Delegate)), GivenBy: reveal.Of(c.shownName(d.GivenBy)),
			GivenAt: d.GivenAt, Until: d.Until, State: state, CanEnd: state == queue.DelegationLive, Gave: d.Delegator == v.user.Name})
	}
	return rows, nil
}

// delegationSpans are the windows the account page offers for a
// delegation, each at most queue.MaxDelegationFor.
var delegationSpans = map[string]time.Duration{
	"8h": 8 * time.Hour, "1d": 24 * time.Hour, "3d": 3 * 24 * time.Hour, "7d": 7 * 24 * time.Hour, "14d": 14 * 24 * time.Hour,
}

// giveDelegation delegates the viewer's approvals (or, for an admin,
// another operator's) to the person named, for the window chosen.
func (c *Console) giveDelegation(ec echo.Context) error {
	v, form := viewerOf(ec), ec.Request().PostForm
	span, ok := delegationSpans[form.Get("for")]
	if !ok {
		return c.renderAccount(ec, http.StatusBadRequest, "", "choose how long the delegation lasts: 8 hours, or 1, 3, 7 or 14 days")
	}
	delegator := strings.TrimSpace(form.Get("delegator"))
	if delegator == "" {
		delegator = v.user.Name
	}
	d, err := c.q.GiveDelegation(ec.Request().Context(), queue.DelegationInput{By: v.user.Name, Channel: audit.ChannelWeb,
		Delegator: delegator, Delegate: strings.TrimSpace(form.Get("delegate")), Until: c.now().Add(span)})
	if err != nil {
		return c.accountRefused(ec, err)
	}
	return c.renderAccount(ec, http.StatusOK, c.shownName(d.Delegate)+" may approve for "+c.shownName(d.Delegator)+
		" until "+d.Until.Format("2006-01-02 15:04 MST")+".", "")
}

// endDelegation ends a delegation the viewer gave or received (or any,
// for an admin).
func (c *Console) endDelegation(ec echo.Context) error {
	v := viewerOf(ec)
	d, err := c.q.EndDelegation(ec.Request().Context(), v.user.Name, audit.ChannelWeb, ec.Param("id"))
	if err != nil {
		return c.accountRefused(ec, err)
	}
	return c.renderAccount(ec, http.StatusOK, "Ended the delegation from "+c.shownName(d.Delegator)+" to "+c.shownName(d.Delegate)+".", "")
}

// accountRefused shows the account page with what a refusal says to do,
// or returns an error the console does not explain to people.
func (c *Console) accountRefused(ec echo.Context, err error) error {
	ae := server.ErrorOf(err)
	if ae.Status >= 500 {
		return err
	}
	var de *queue.DeciderError
	if errors.As(err, &de) {
		return c.renderAccount(ec, ae.Status, "", "Both people must be enabled accounts that decide (operator or admin): "+ae.Message)
	}
	return c.renderAccount(ec, ae.Status, "", ae.Message)
}
