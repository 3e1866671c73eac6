package console

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/reveal"
	"github.com/countersign/countersign/internal/server"
	"github.com/countersign/countersign/web/templates"
)

// The Unresolved view: redeemed calls whose outcome nobody knows (the
// executor reported unknown, or its lease expired), where an operator who
// is not the call's actor records whether it ran.

const (
	unresolvedPath = "/unresolved"
	// maxUnresolvedCards bounds the page; the oldest come first.
	maxUnresolvedCards = 200
	// viewUnresolved is the socket's view parameter of the page.
	viewUnresolved = "unresolved"
)

func (c *Console) routesUnresolved(e *echo.Echo, post func(path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc)) {
	e.GET(unresolvedPath, c.unresolvedPage, c.requireSession)
	post("/calls/:id/resolve", c.resolve, c.requireDecider)
}

func (c *Console) unresolvedPage(ec echo.Context) error {
	uv, err := c.unresolvedView(ec.Request().Context(), viewerOf(ec), c.now())
	if err != nil {
		return err
	}
	if ec.QueryParam("notice") == "resolved" {
		uv.Message = "You recorded the resolution. The agent sees it on the call."
	}
	return c.render(ec, http.StatusOK, templates.UnresolvedPage(uv))
}

func (c *Console) unresolvedView(ctx context.Context, v *viewer, now time.Time) (templates.UnresolvedView, error) {
	calls, err := c.q.UnresolvedCalls(ctx, maxUnresolvedCards+1)
	if err != nil {
		return templates.UnresolvedView{}, err
	}
	uv := templates.UnresolvedView{Page: c.page(v, "Unresolved", "unresolved", "/ws?view="+viewUnresolved, now)}
	if len(calls) > maxUnresolvedCards {
		calls, uv.More = calls[:maxUnresolvedCards], true
	}
	for _, call := range calls {
		uv.Cards = append(uv.Cards, c.unresolvedCard(call, v, now))
	}
	return uv, nil
}

func (c *Console) unresolvedCard(call *queue.Call, v *viewer, now time.Time) templates.UnresolvedCard {
	card := templates.UnresolvedCard{
		ID: call.ID, Tool: reveal.Of(call.Tool), Target: reveal.Of(call.Target), Actor: reveal.Of(call.Actor),
		RedeemedAt: call.RedeemedAt, LeaseUntil: call.LeaseUntil, RedeemedBy: call.RedeemedBy, Now: now,
	}
	if call.Outcome != nil {
		card.Outcome, card.OutcomeDetail, card.OutcomeAt = call.Outcome.Status, optText(call.Outcome.Detail), call.Outcome.At
	}
	card.Deceptive = card.Tool.Deceptive() || card.Target.Deceptive() || card.Actor.Deceptive() ||
		(card.OutcomeDetail != nil && card.OutcomeDetail.Deceptive())
	card.Resolve, card.OwnCall, card.OwnedByViewer = c.resolveForm(call, v, "unresolved")
	return card
}

// resolveForm is the form for v on an unresolved call, or nil when v may
// not resolve it: ownCall when that is because v proposed it, owner (the
// owner that names v) when v runs the agent.
func (c *Console) resolveForm(call *queue.Call, v *viewer, from string) (form *templates.ResolveForm, ownCall bool, owner string) {
	if !call.Unresolved() || v == nil || !v.user.Role.CanDecide() {
		return nil, false, ""
	}
	if call.ProposedBy(v.user) {
		return nil, true, ""
	}
	if o := call.OwnedBy(v.user); o != "" {
		return nil, false, reveal.String(o)
	}
	return &templates.ResolveForm{CallID: call.ID, CSRF: v.csrf, From: from}, false, ""
}

// resolutionShown lays out a recorded resolution. The evidence is a link
// only when it still passes the check it passed when it was recorded.
func resolutionShown(r *queue.Resolution) *templates.ResolutionShown {
	if r == nil {
		return nil
	}
	rs := &templates.ResolutionShown{Verdict: r.Verdict, By: reveal.Of(r.By), Note: reveal.Of(r.Note), At: r.At,
		Evidence: optText(r.Evidence)}
	if ok, err := queue.CheckEvidence(r.Evidence); err == nil && ok != "" {
		rs.EvidenceURL = ok
	}
	return rs
}

// resolve records a person's resolution from the Unresolved page or the
// call's page, and goes back there.
func (c *Console) resolve(ec echo.Context) error {
	v, id := viewerOf(ec), ec.Param("id")
	form := ec.Request().PostForm
	from := form.Get("from")
	verdict, note, evidence := form.Get("verdict"), form.Get("note"), form.Get("evidence")
	_, err := c.q.Resolve(ec.Request().Context(), v.user.Name, audit.ChannelWeb, id, verdict, note, evidence)
	if err == nil {
		if from == "call" {
			return ec.Redirect(http.StatusSeeOther, "/calls/"+url.PathEscape(id)+"?notice=resolved")
		}
		return ec.Redirect(http.StatusSeeOther, unresolvedPath+"?notice=resolved")
	}
	if errors.Is(err, queue.ErrNotFound) {
		return err
	}
	ae := server.ErrorOf(err)
	if ae.Status >= 500 {
		return err
	}
	ctx, now := ec.Request().Context(), c.now()
	call, lerr := c.q.Call(ctx, id)
	if lerr != nil {
		return err
	}
	keep := func(f *templates.ResolveForm) {
		if f != nil {
			f.Verdict, f.Note, f.Evidence, f.Error = verdict, note, evidence, ae.Message
		}
	}
	if from == "call" {
		cv, verr := c.callView(call, v, now)
		if verr != nil {
			return verr
		}
		cv.Status.Message = ae.Message
		keep(cv.Status.Resolve)
		return c.render(ec, ae.Status, templates.CallPage(cv))
	}
	uv, uerr := c.unresolvedView(ctx, v, now)
	if uerr != nil {
		return err
	}
	uv.Error = ae.Message
	for i := range uv.Cards {
		if uv.Cards[i].ID == id {
			keep(uv.Cards[i].Resolve)
		}
	}
	return c.render(ec, ae.Status, templates.UnresolvedPage(uv))
}
