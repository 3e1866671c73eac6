package server

import (
	"errors"
	"net/http"
	"sort"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/web/templates"
)

// notices are the confirmations a redirect may ask a page to show; only
// these fixed texts are ever shown.
var notices = map[string]string{
	"approved": "You approved this call.",
	"denied":   "You denied this call. The agent receives your reason.",
	"cleared":  "The block was cleared; the agent may propose again.",
}

func (c *console) queuePage(ec echo.Context) error {
	v := viewerOf(ec)
	qv, err := c.queueView(ec.Request().Context(), v, c.now(), parseQueueQuery(ec.QueryParams()))
	if err != nil {
		return err
	}
	qv.Message = notices[ec.QueryParam("notice")]
	if len(qv.Cards) == 0 {
		qv.Connect = c.connectHelp(ec, v)
	}
	return c.render(ec, http.StatusOK, templates.QueuePage(qv))
}

// connectHelp is the "connect an agent" help for a console with no live
// agent token, or nil.
func (c *console) connectHelp(ec echo.Context, v *viewer) *templates.ConnectHelp {
	toks, err := c.accounts.Tokens(ec.Request().Context())
	if err != nil {
		return nil // the help is a courtesy; the queue page stands without it
	}
	for _, t := range toks {
		if t.RevokedAt.IsZero() {
			return nil
		}
	}
	base := c.origin
	if base == "" {
		scheme := "http"
		if ec.Request().TLS != nil {
			scheme = "https"
		}
		base = scheme + "://" + ec.Request().Host
	}
	h := &templates.ConnectHelp{BaseURL: base, IsAdmin: v.user.Role.CanAdminister()}
	if reg := c.q.Tools(); reg != nil {
		seen := map[string]bool{}
		for _, t := range reg.Tools() {
			if !seen[t.Audience] {
				seen[t.Audience] = true
				h.Audiences = append(h.Audiences, t.Audience)
			}
		}
		sort.Strings(h.Audiences)
	}
	for _, p := range c.cfg.MCPEndpoints {
		h.MCP = append(h.MCP, base+p)
	}
	return h
}

func (c *console) callPage(ec echo.Context) error {
	call, err := c.q.Call(ec.Request().Context(), ec.Param("id"))
	if err != nil {
		return err
	}
	cv := c.callView(call, viewerOf(ec), c.now())
	cv.Status.Notice = notices[ec.QueryParam("notice")]
	return c.render(ec, http.StatusOK, templates.CallPage(cv))
}

func (c *console) approve(ec echo.Context) error {
	v, id := viewerOf(ec), ec.Param("id")
	digest := strings.TrimSpace(ec.Request().PostForm.Get("digest"))
	if _, err := c.q.Approve(ec.Request().Context(), v.user.Name, audit.ChannelWeb, id, digest); err != nil {
		return c.refused(ec, id, err, "")
	}
	return ec.Redirect(http.StatusSeeOther, "/calls/"+id+"?notice=approved")
}

func (c *console) deny(ec echo.Context) error {
	v, id := viewerOf(ec), ec.Param("id")
	reason := ec.Request().PostForm.Get("reason")
	if _, err := c.q.Deny(ec.Request().Context(), v.user.Name, audit.ChannelWeb, id, reason); err != nil {
		return c.refused(ec, id, err, reason)
	}
	return ec.Redirect(http.StatusSeeOther, "/calls/"+id+"?notice=denied")
}

// refused shows the call again with the reason a decision was refused,
// with the status that reason carries (409 for a changed digest or a call
// no longer pending, 403 for one's own call).
func (c *console) refused(ec echo.Context, id string, err error, reason string) error {
	if errors.Is(err, queue.ErrNotFound) {
		return err
	}
	ae := DecisionError(err)
	if ae.Status >= 500 {
		return err
	}
	call, lerr := c.q.Call(ec.Request().Context(), id)
	if lerr != nil {
		return err
	}
	cv := c.callView(call, viewerOf(ec), c.now())
	cv.Status.Message = ae.Message
	cv.Status.Reason = reason
	return c.render(ec, ae.Status, templates.CallPage(cv))
}

func (c *console) clearBlock(ec echo.Context) error {
	v := viewerOf(ec)
	form := ec.Request().PostForm
	err := c.q.ClearRetry(ec.Request().Context(), v.user.Name, audit.ChannelWeb, form.Get("actor"), form.Get("tool"))
	if err != nil {
		ae := DecisionError(err)
		if ae.Status >= 500 {
			return err
		}
		qv, qerr := c.queueView(ec.Request().Context(), v, c.now(), parseQueueQuery(nil))
		if qerr != nil {
			return err
		}
		qv.Error = ae.Message
		return c.render(ec, ae.Status, templates.QueuePage(qv))
	}
	return ec.Redirect(http.StatusSeeOther, "/?notice=cleared")
}
