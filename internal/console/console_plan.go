package console

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/reveal"
	"github.com/countersign/countersign/internal/server"
	"github.com/countersign/countersign/web/templates"
)

// Plans (docs/plans.md): a plan's page shows every item whole with its
// digest and the plan digest, and approves the whole plan once, with the
// page's presentation token; the queue shows one card per pending plan.

func (c *Console) routesPlans(e *echo.Echo, post func(string, echo.HandlerFunc, ...echo.MiddlewareFunc)) {
	e.GET("/plans/:id", c.planPage, c.requireSession)
	post("/plans/:id/approve", c.approvePlan, c.requireDecider)
	post("/plans/:id/deny", c.denyPlan, c.requireDecider)
	post("/plans/:id/revoke", c.revokePlan, c.requireDecider)
}

func (c *Console) planPage(ec echo.Context) error {
	return c.renderPlan(ec, http.StatusOK, nil, "")
}

// renderPlan shows plan :id with the refusal err, if any, or a message.
func (c *Console) renderPlan(ec echo.Context, status int, refusal error, message string) error {
	v := viewerOf(ec)
	now := c.now()
	p, items, err := c.q.ReadPlan(ec.Request().Context(), ec.Param("id"))
	if err != nil {
		return err
	}
	shown := p.Shown(items)
	pv := templates.PlanView{Page: c.page(v, "Plan of "+strconv.Itoa(len(items))+" calls", "queue", "", now),
		ID: p.ID, Status: string(shown), Ordered: p.Ordered, Rationale: reveal.Of(p.Rationale), Actor: reveal.Of(p.Actor),
		DigestGroups: groupsOfFour(p.Digest), Digest: p.Digest, Required: p.ApprovalsRequired, DecideBy: p.DecideBy,
		ValidUntil: p.ValidUntil, MaxFor: spanWords(p.MaxFor), Reason: p.Reason, CSRF: v.csrf, Message: message}
	if len(items) > 0 {
		pv.Received = len(items[0].Approvals)
	}
	decide := v.user.Role.CanDecide()
	pv.CanDecide = decide && p.Status == queue.PlanPending && now.Before(p.DecideBy)
	pv.CanRevoke = decide && p.Status == queue.PlanApproved
	for _, it := range items {
		cv, err := c.callContent(it)
		if err != nil {
			return err
		}
		cv.Rationale = nil // the plan's, shown once above the items
		iv := templates.PlanItemView{CallView: cv, Index: it.PlanIndex, Digest: it.Digest, State: string(it.Shown())}
		if queue.Deceptive(it) {
			pv.Warned = true
		}
		if reg := c.q.Tools(); reg != nil {
			if t, ok := reg.Tool(it.Tool); ok && t.Confirm != nil {
				iv.Confirm, iv.ConfirmExpected = t.Confirm.Describe(), t.Confirm.Expected(shownText(reveal.Of(it.Target)))
			}
		}
		pv.Items = append(pv.Items, iv)
	}
	for _, d := range []time.Duration{15 * time.Minute, time.Hour, 4 * time.Hour} {
		if d < p.MaxFor {
			pv.ValidFor = append(pv.ValidFor, templates.ValidChoice{Seconds: int64(d / time.Second), Words: spanWords(d)})
		}
	}
	pv.ValidFor = append(pv.ValidFor, templates.ValidChoice{Seconds: int64(p.MaxFor / time.Second), Words: spanWords(p.MaxFor)})
	if pv.CanDecide {
		pv.NoApprove = noPlanApproval(v, items)
		pv.CanApprove = pv.NoApprove == ""
		if pv.CanApprove {
			pv.Presented = c.q.PresentPlan(v.user.Name, p, items)
		}
	}
	if refusal != nil {
		ae := server.ErrorOf(refusal)
		if ae.Status >= 500 {
			return refusal
		}
		pv.Error = ae.Message
		if status == http.StatusOK {
			status = ae.Status
		}
	}
	return c.render(ec, status, templates.PlanPage(pv))
}

// noPlanApproval says why the viewer may not approve the plan's items, or
// "" when they may: the rule of who may approve each item, as the
// approval's transaction checks it.
func noPlanApproval(v *viewer, items []*queue.Call) string {
	u := v.user
	for _, it := range items {
		switch {
		case it.ProposedBy(u):
			return "These calls were proposed under your own name, so you cannot approve them. Another operator must."
		case it.OwnedBy(u) != "":
			return fmt.Sprintf("You own the agent that proposed this plan (owner %s), so you cannot approve it. Another operator must.", it.OwnedBy(u))
		case !it.Approvers.Allows(string(u.Role), u.Groups):
			return fmt.Sprintf("Only %s may approve call %d of this plan. You may deny the plan.", it.Approvers.Describe(), it.PlanIndex+1)
		case it.ApprovedBy(u.Name):
			return "You approved this plan. It needs another operator's approval."
		}
	}
	return ""
}

func (c *Console) approvePlan(ec echo.Context) error {
	v := viewerOf(ec)
	form := ec.Request().PostForm
	in := queue.ApprovePlanInput{Operator: v.user.Name, Channel: audit.ChannelWeb, PlanID: ec.Param("id"),
		Digest: form.Get("digest"), Comment: form.Get("comment"), Presented: form.Get("presented"),
		AcceptWarnings: form.Get("ack_warnings") == "1", Confirm: map[int]string{}}
	if secs, err := strconv.ParseInt(form.Get("valid_for"), 10, 64); err == nil && secs > 0 {
		in.ValidFor = time.Duration(secs) * time.Second
	}
	for k, vals := range form {
		if n, ok := strings.CutPrefix(k, "confirm_"); ok && len(vals) == 1 {
			if i, err := strconv.Atoi(n); err == nil && i >= 0 && i < 50 {
				in.Confirm[i] = vals[0]
			}
		}
	}
	p, err := c.q.ApprovePlan(ec.Request().Context(), in)
	if err != nil {
		return c.renderPlan(ec, http.StatusOK, err, "")
	}
	msg := "You approved the plan. It needs another operator's approval."
	if p.Status == queue.PlanApproved {
		msg = "Approved: the agent may now run these calls, each with its own grant, until the time shown."
	}
	return c.renderPlan(ec, http.StatusOK, nil, msg)
}

func (c *Console) denyPlan(ec echo.Context) error {
	v := viewerOf(ec)
	if _, err := c.q.DenyPlan(ec.Request().Context(), v.user.Name, audit.ChannelWeb, ec.Param("id"), ec.Request().PostForm.Get("reason")); err != nil {
		return c.renderPlan(ec, http.StatusOK, err, "")
	}
	return c.renderPlan(ec, http.StatusOK, nil, "Denied: every call of the plan is denied, and the agent receives your reason.")
}

func (c *Console) revokePlan(ec echo.Context) error {
	v := viewerOf(ec)
	if _, err := c.q.RevokePlan(ec.Request().Context(), v.user.Name, audit.ChannelWeb, ec.Param("id"), ec.Request().PostForm.Get("reason")); err != nil {
		return c.renderPlan(ec, http.StatusOK, err, "")
	}
	return c.renderPlan(ec, http.StatusOK, nil, "Revoked: the grants not yet used are revoked and the calls not yet run are cancelled.")
}

// spanWords says a whole number of hours or minutes in words.
func spanWords(d time.Duration) string {
	n, unit := int(d/time.Minute), "minute"
	if d%time.Hour == 0 {
		n, unit = int(d/time.Hour), "hour"
	}
	if n == 1 {
		return "1 " + unit
	}
	return strconv.Itoa(n) + " " + unit + "s"
}

// maxQueuePlans bounds the plans the queue shows (at most 5 per token are
// pending).
const maxQueuePlans = 100

// planCards are the queue's pending plans, one card each.
func (c *Console) planCards(ctx context.Context) ([]templates.PlanCard, error) {
	plans, err := c.q.PendingPlans(ctx, maxQueuePlans)
	if err != nil {
		return nil, err
	}
	var out []templates.PlanCard
	for _, p := range plans {
		card := templates.PlanCard{ID: p.ID, Actor: reveal.Of(p.Actor), Rationale: reveal.Of(p.Rationale), Items: p.Items,
			Ordered: p.Ordered, DecideBy: p.DecideBy}
		_, items, err := c.q.ReadPlan(ctx, p.ID)
		if err != nil {
			return nil, err
		}
		seen := map[string]bool{}
		for _, it := range items {
			if !seen[it.Tool] {
				seen[it.Tool] = true
				card.Tools = append(card.Tools, reveal.Of(it.Tool))
			}
			card.Warned = card.Warned || queue.Deceptive(it)
		}
		out = append(out, card)
	}
	return out, nil
}
