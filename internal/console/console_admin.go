package console

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/policy"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/replay"
	"github.com/countersign/countersign/internal/reveal"
	"github.com/countersign/countersign/internal/server"
	"github.com/countersign/countersign/web/templates"
)

func (c *Console) adminView(ctx context.Context, v *viewer) (templates.AdminView, error) {
	av := templates.AdminView{Page: c.page(v, "Administration", "admin", "", c.now())}
	if c.cfg.EvidencePack != nil {
		now := c.now().UTC()
		av.EvidencePack, av.PackSince, av.PackUntil = true, now.AddDate(0, -1, 0).Format(time.DateOnly), now.Format(time.DateOnly)
	}
	users, err := c.accounts.Users(ctx)
	if err != nil {
		return av, err
	}
	for _, u := range users {
		row := templates.UserRow{Name: u.Name, Shown: reveal.Of(u.Shown()), Role: string(u.Role), CreatedAt: u.CreatedAt,
			DisabledAt: u.DisabledAt, Self: u.Name == v.user.Name, SSO: u.SSO(), LastLoginAt: u.LastLoginAt}
		if u.SSO() {
			row.Principal = reveal.Of(u.Name)
			row.Email = optText(u.Email)
			row.Groups = optText(strings.Join(u.Groups, ", "))
		}
		av.Users = append(av.Users, row)
	}
	toks, err := c.accounts.Tokens(ctx)
	if err != nil {
		return av, err
	}
	owners := c.ownersShown()
	for _, t := range toks {
		av.Tokens = append(av.Tokens, templates.TokenRow{ID: t.ID, Actor: reveal.Of(t.Actor), Audience: reveal.Of(t.Audience), Note: reveal.Of(t.Note),
			Owners: optText(owners(t.Owners)), CreatedAt: t.CreatedAt, RevokedAt: t.RevokedAt})
	}
	return av, nil
}

// ownersShown returns how the admin page lists a token's owners: each as
// the console names operators (shownName: a single-sign-on account by the
// name people see, its principal beside it), each shown form once. It
// remembers the accounts it read: make one per page.
func (c *Console) ownersShown() func(owners []string) string {
	seen := map[string]string{}
	return func(owners []string) string {
		var out []string
		for _, o := range owners {
			s, ok := seen[o]
			if !ok {
				s = c.shownName(o)
				seen[o] = s
			}
			if !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
		return strings.Join(out, ", ")
	}
}

// renderAdmin shows the admin page with a message or an error.
func (c *Console) renderAdmin(ec echo.Context, status int, msg, errMsg string, tok *templates.NewToken) error {
	av, err := c.adminView(ec.Request().Context(), viewerOf(ec))
	if err != nil {
		return err
	}
	av.Message, av.Error, av.NewToken = msg, errMsg, tok
	return c.render(ec, status, templates.AdminPage(av))
}

// adminRefused shows the admin page with the message of the error table
// for err; an error it does not know is the server's.
func (c *Console) adminRefused(ec echo.Context, err error) error {
	ae := server.ErrorOf(err)
	if ae.Status >= 500 {
		return err
	}
	return c.renderAdmin(ec, ae.Status, "", ae.Message, nil)
}

func (c *Console) adminPage(ec echo.Context) error {
	return c.renderAdmin(ec, http.StatusOK, "", "", nil)
}

func (c *Console) addUser(ec echo.Context) error {
	v, form := viewerOf(ec), ec.Request().PostForm
	name, password := strings.TrimSpace(form.Get("name")), form.Get("password")
	role, err := account.ParseRole(form.Get("role"))
	if err == nil {
		err = account.CheckName(name)
	}
	if err == nil {
		err = account.CheckPassword(password)
	}
	if err != nil {
		return c.adminRefused(ec, err)
	}
	hash, err := account.Hash(password)
	if err != nil {
		return err
	}
	if _, err := c.accounts.AddUser(ec.Request().Context(), name, role, hash, v.user.Name, audit.ChannelWeb); err != nil {
		if errors.Is(err, account.ErrUserExists) {
			return c.renderAdmin(ec, http.StatusConflict, "", "an account named "+reveal.String(name)+" already exists", nil)
		}
		return c.adminRefused(ec, err)
	}
	return c.renderAdmin(ec, http.StatusOK, "Added "+reveal.String(name)+" ("+string(role)+").", "", nil)
}

func (c *Console) disableUser(ec echo.Context) error {
	v := viewerOf(ec)
	// Single-sign-on names hold a '/', sent escaped in the path.
	name, err := url.PathUnescape(ec.Param("name"))
	if err != nil {
		return c.renderAdmin(ec, http.StatusNotFound, "", "no such account", nil)
	}
	if name == v.user.Name {
		return c.renderAdmin(ec, http.StatusConflict, "", "you cannot disable your own account", nil)
	}
	// Disabling ends the account's sessions and records its delegations
	// ended (they passed nothing from the moment it was disabled).
	_, err = c.q.DisableAccount(ec.Request().Context(), c.accounts, name, v.user.Name, audit.ChannelWeb)
	switch {
	case errors.Is(err, account.ErrUserNotFound):
		return c.renderAdmin(ec, http.StatusNotFound, "", "no account named "+reveal.String(name), nil)
	case errors.Is(err, account.ErrUserDisabled):
		return c.renderAdmin(ec, http.StatusConflict, "", reveal.String(name)+" is already disabled", nil)
	case err != nil:
		return err
	}
	c.hub.endUser(name)
	return c.renderAdmin(ec, http.StatusOK, "Disabled "+reveal.String(name)+"; their sessions and delegations have ended.", "", nil)
}

// endSessions ends every session of an account at once: its pages on this
// server close now, on other servers within their sweep interval.
func (c *Console) endSessions(ec echo.Context) error {
	v, name := viewerOf(ec), ec.Request().PostForm.Get("name")
	n, err := c.accounts.EndSessions(ec.Request().Context(), name, v.user.Name, audit.ChannelWeb)
	if errors.Is(err, account.ErrUserNotFound) {
		return c.renderAdmin(ec, http.StatusNotFound, "", "no account named "+reveal.String(name), nil)
	}
	if err != nil {
		return err
	}
	c.hub.endUser(name)
	sessions := " sessions of "
	if n == 1 {
		sessions = " session of "
	}
	msg := "Ended " + strconv.FormatInt(n, 10) + sessions + reveal.String(name) + "."
	if name == v.user.Name {
		msg += " Yours too: log in again."
	}
	return c.renderAdmin(ec, http.StatusOK, msg, "", nil)
}

func (c *Console) createToken(ec echo.Context) error {
	v, form := viewerOf(ec), ec.Request().PostForm
	actor, audience, note := strings.TrimSpace(form.Get("actor")), strings.TrimSpace(form.Get("audience")), strings.TrimSpace(form.Get("note"))
	if len(note) > 200 {
		return c.renderAdmin(ec, http.StatusBadRequest, "", "a token's note is at most 200 bytes", nil)
	}
	// The admin is shown the secret, so they are one of the agent's owners.
	spec := account.TokenSpec{Actor: actor, Audience: audience, Note: note, Owners: strings.Split(form.Get("owners"), ","),
		Holder: v.user.Name}
	t, secret, err := c.accounts.CreateTokenWith(ec.Request().Context(), spec, v.user.Name, audit.ChannelWeb)
	if err != nil {
		return c.adminRefused(ec, err)
	}
	return c.renderAdmin(ec, http.StatusOK, "", "", &templates.NewToken{ID: t.ID, Actor: reveal.Of(t.Actor), Audience: reveal.Of(t.Audience), Secret: secret})
}

func (c *Console) revokeToken(ec echo.Context) error {
	v, id := viewerOf(ec), ec.Param("id")
	err := c.accounts.RevokeToken(ec.Request().Context(), id, v.user.Name, audit.ChannelWeb)
	if errors.Is(err, account.ErrTokenNotFound) {
		return c.renderAdmin(ec, http.StatusNotFound, "", "no active token "+reveal.String(id), nil)
	}
	if err != nil {
		return err
	}
	return c.renderAdmin(ec, http.StatusOK, "Revoked "+reveal.String(id)+".", "", nil)
}

// freeze stops approvals and redemptions for a tool, an actor, or all.
func (c *Console) freeze(ec echo.Context) error {
	v, form := viewerOf(ec), ec.Request().PostForm
	tool, actor := strings.TrimSpace(form.Get("tool")), strings.TrimSpace(form.Get("actor"))
	f, err := c.q.FreezeWith(ec.Request().Context(), queue.FreezeRequest{By: v.user.Name, Channel: audit.ChannelWeb,
		Tool: tool, Actor: actor, Reason: form.Get("reason"), AllowUnknown: form.Get("allow_unknown") == "1"})
	if err != nil {
		return c.adminRefused(ec, err)
	}
	msg := reveal.String(f.Scope()) + " is frozen: no approval and no redemption until an admin lifts it"
	if len(f.Unseen) > 0 {
		msg += ". This console has not seen " + reveal.String(strings.Join(f.Unseen, " or ")) + " yet; the freeze applies once it appears"
	}
	return c.renderAdmin(ec, http.StatusOK, msg, "", nil)
}

// unfreeze lifts the freezes with exactly this tool and actor.
func (c *Console) unfreeze(ec echo.Context) error {
	v, form := viewerOf(ec), ec.Request().PostForm
	lifted, err := c.q.Unfreeze(ec.Request().Context(), v.user.Name, audit.ChannelWeb, form.Get("tool"), form.Get("actor"))
	if err != nil {
		return c.adminRefused(ec, err)
	}
	return c.renderAdmin(ec, http.StatusOK, lifted[0].Scope()+" is no longer frozen", "", nil)
}

// maxReplayFlagged bounds the calls listed on the page; the count is exact.
const maxReplayFlagged = 500

// replay runs history through a pasted candidate tools file.
func (c *Console) replay(ec echo.Context) error {
	form := ec.Request().PostForm
	src, sinceText := form.Get("tools"), strings.TrimSpace(form.Get("since"))
	fail := func(msg string) error {
		av, err := c.adminView(ec.Request().Context(), viewerOf(ec))
		if err != nil {
			return err
		}
		av.Error, av.ReplayTools, av.ReplaySince = msg, src, sinceText
		return c.render(ec, http.StatusBadRequest, templates.AdminPage(av))
	}
	if sinceText == "" {
		sinceText = "7d"
	}
	since, err := replay.ParseSince(sinceText, c.now())
	if err != nil {
		return fail(err.Error())
	}
	pol, err := policy.Parse([]byte(src))
	if err != nil {
		return fail("the tools file is refused:\n" + err.Error())
	}
	rep, err := replay.Run(ec.Request().Context(), c.history, pol, since, replay.Options{MaxFlagged: maxReplayFlagged})
	if err != nil {
		return err
	}
	rv := &templates.ReplayView{Since: rep.Since, ToolsDigest: rep.ToolsDigest, Calls: rep.Calls,
		Elapsed: rep.Elapsed.Round(time.Millisecond).String(), FlaggedTotal: rep.FlaggedTotal}
	for _, t := range rep.Tools {
		a, d := t.Changed()
		var other []string
		for _, ch := range t.SortedChanges() {
			if ch.From == replay.Ask && (ch.To == replay.Approve || ch.To == replay.Deny) {
				continue
			}
			other = append(other, ch.String()+" "+strconv.FormatInt(t.Changes[ch], 10))
		}
		rv.Rows = append(rv.Rows, templates.ReplayRow{Tool: t.Tool, Calls: t.Calls, ToApprove: a, ToDeny: d,
			Same: t.Unchanged, EvalErrors: t.EvalErrors, Other: strings.Join(other, ", ")})
	}
	for _, f := range rep.Flagged {
		rv.Flagged = append(rv.Flagged, templates.ReplayFlagged{CallID: f.CallID, Tool: f.Tool, Actor: f.Actor,
			Why: f.Why, Rule: f.Rule, CreatedAt: f.CreatedAt})
	}
	av, err := c.adminView(ec.Request().Context(), viewerOf(ec))
	if err != nil {
		return err
	}
	av.ReplayTools, av.ReplaySince, av.Replay = src, sinceText, rv
	return c.render(ec, http.StatusOK, templates.AdminPage(av))
}
