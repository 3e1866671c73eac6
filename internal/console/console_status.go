package console

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/reveal"
	"github.com/countersign/countersign/web/templates"
)

// statusPath starts the address of a call's status page:
// /status/{call id}/{token}.
const statusPath = "/status/"

// statusSecret names the console secret that status links are keyed with;
// it lives in the database, so every replica makes and accepts the same
// links.
const statusSecret = "call-status-link"

// statusRefresh is how often an open status page reads its call again (in
// place, without reloading) while the call can still change.
const statusRefresh = 5 * time.Second

// StatusLinks makes and checks the capability addresses of calls' status
// pages. A status page shows one call to whoever holds its link, without
// a console login: the agent's own user, sent there by the MCP gateway's
// URL elicitation or approval_url. The token in the link is an HMAC-SHA256
// of the call id under a secret of the console, so a link names exactly
// one call and cannot be guessed or turned into another call's link.
type StatusLinks struct {
	key  []byte
	base string
}

// NewStatusLinks reads (or makes, on the first start) the key of status
// links. Links are absolute under publicURL, or paths when it is "".
func NewStatusLinks(ctx context.Context, accounts *account.Service, publicURL string) (*StatusLinks, error) {
	key, err := accounts.ConsoleSecret(ctx, statusSecret, 32)
	if err != nil {
		return nil, err
	}
	return &StatusLinks{key: key, base: strings.TrimRight(publicURL, "/")}, nil
}

// URL is the address of a call's status page.
func (l *StatusLinks) URL(callID string) string { return l.base + l.Path(callID) }

// Path is the status page's path, without the public URL.
func (l *StatusLinks) Path(callID string) string {
	return statusPath + url.PathEscape(callID) + "/" + l.token(callID)
}

func (l *StatusLinks) token(callID string) string {
	m := hmac.New(sha256.New, l.key)
	m.Write([]byte("countersign/v1/call-status:" + callID))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// valid reports whether token is the call's own, in constant time.
func (l *StatusLinks) valid(callID, token string) bool {
	return hmac.Equal([]byte(token), []byte(l.token(callID)))
}

// LogPath hides the token of a status page's path, for logs: the token is
// a credential to the page (server.Pages).
func (c *Console) LogPath(p string) string { return redactStatusPath(p) }

// redactStatusPath hides the token of a status page's path.
func redactStatusPath(p string) string {
	rest, ok := strings.CutPrefix(p, statusPath)
	if !ok {
		return p
	}
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		return statusPath + rest[:i] + "/…"
	}
	return p
}

// statusPage shows one call, read-only, to the holder of its link: what the
// digest covers, revealed exactly as on the call page, and the call's state
// as the agent's API shows it (never its grant). Nothing on it decides, and
// no other call is reachable from it. A wrong token and an unknown call are
// the same 404.
func (c *Console) statusPage(ec echo.Context) error {
	id, token := ec.Param("id"), ec.Param("token")
	notFound := func() error {
		c.ErrorPage(ec, http.StatusNotFound, "No such status page: the link is wrong or incomplete. Use the whole link you were given.")
		return nil
	}
	if !c.links.valid(id, token) {
		return notFound()
	}
	call, err := c.q.Call(ec.Request().Context(), id)
	if errors.Is(err, queue.ErrNotFound) {
		return notFound()
	}
	if err != nil {
		return err
	}
	now := c.now()
	cv, err := c.callContent(call)
	if err != nil {
		return err
	}
	if cv.MCP != nil {
		cv.MCP.DefinitionURL = "" // the definition page needs a login
	}
	v := templates.CallStatusView{CallView: cv, ConsoleURL: c.absolute(ec, "/calls/"+url.PathEscape(call.ID))}
	v.Page = templates.Page{Title: "Status of call " + call.ID, Now: now}
	v.Status = c.publicStatus(ec.Request().Context(), call, now)
	if live(call) && call.GrantState(now) != queue.GrantExpired {
		v.Page.Refresh = int(statusRefresh / time.Second)
	}
	ec.Response().Header().Set("X-Robots-Tag", "noindex, nofollow")
	return c.render(ec, http.StatusOK, templates.CallStatusPage(v))
}

// live reports whether a call can still change in a way its status page
// shows: waiting for a decision, approved and not yet run, or run without
// an outcome.
func live(call *queue.Call) bool {
	switch call.Shown() {
	case queue.StatusPending, queue.StatusApproved:
		return true
	case queue.StatusRedeemed:
		return call.Outcome == nil || call.Unresolved()
	}
	return false
}

// publicStatus is the state of a call as the agent's API shows it: no
// decide, revoke or resolve controls, and not the grant; every approval
// with who gave it and how, and the people it names (approvers, the
// operator who denied, revoked or resolved it, the owners) named as the
// API names them to agents: as people see them, never by a single-sign-on
// principal (account.PublicNames).
func (c *Console) publicStatus(ctx context.Context, call *queue.Call, now time.Time) templates.StatusView {
	name := c.accounts.PublicNames(ctx)
	s := templates.StatusView{
		CallID: call.ID, Status: string(call.Shown()), Digest: call.Digest,
		Required: call.ApprovalsRequired, Received: len(call.Approvals),
		DecideBy: call.DecideBy, DecidedAt: call.DecidedAt, GrantExpiresAt: call.GrantExpiresAt,
		RedeemedAt: call.RedeemedAt, LeaseUntil: call.LeaseUntil, Now: now, Rule: call.DecidedByRule(), GrantState: call.GrantState(now),
		ToolChanged: (call.Status == queue.StatusPending || call.Status == queue.StatusApproved) && c.q.ToolChanged(call),
	}
	if s.ToolChanged {
		s.ToolMadeUnder = call.ToolDigest
		if reg := c.q.Tools(); reg != nil {
			if t, ok := reg.Tool(call.Tool); ok {
				s.ToolHere = t.DefinitionDigest
			}
		}
	}
	for _, a := range call.Approvals {
		s.Approvals = append(s.Approvals, templates.Approval{By: reveal.Of(name(a.Operator)), Method: a.Method, Channel: a.Channel, Human: a.Human(), At: a.At, Comment: optText(a.Comment)})
	}
	// Who may approve, so that the agent's own user knows that its owners
	// may not.
	s.Tool, s.Target = reveal.Of(call.Tool), reveal.Of(call.Target)
	for _, o := range account.PublicOwners(call.Owners, name) {
		s.Owners = append(s.Owners, reveal.Of(o))
	}
	if !call.Approvers.Empty() {
		s.Approvers = reveal.String(call.Approvers.Describe())
	}
	s.RequirePasskey = call.RequirePasskey
	if call.Denial != nil {
		s.DeniedBy, s.DenyReason = optText(name(call.Denial.By)), optText(call.Denial.Reason)
	}
	if call.Outcome != nil {
		s.Outcome, s.OutcomeDetail = call.Outcome.Status, optText(call.Outcome.Detail)
	}
	s.Resolution = resolutionShown(call.Resolution)
	if s.Resolution != nil {
		s.Resolution.By = reveal.Of(name(call.Resolution.By))
	}
	if call.Revoked != nil {
		s.RevokedBy, s.RevokeReason, s.RevokedAt = optText(name(call.Revoked.By)), optText(call.Revoked.Reason), call.Revoked.At
	}
	return s
}

// absolute is a path of the console as the browser reaches it.
func (c *Console) absolute(ec echo.Context, path string) string {
	if c.origin != "" {
		return c.origin + path
	}
	scheme := "http"
	if ec.Request().TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + ec.Request().Host + path
}
