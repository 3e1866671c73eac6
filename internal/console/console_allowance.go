package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/reveal"
	"github.com/countersign/countersign/internal/scope"
	"github.com/countersign/countersign/internal/server"
	"github.com/countersign/countersign/internal/tools"
	"github.com/countersign/countersign/web/templates"
)

// Allowances in the browser (docs/allowances.md): a pending call's page
// offers "Approve this and more like it"; GET /calls/:id/allowance shows
// the call whole with the scope the choices make, in words and with its
// digest, and POST /calls/:id/allowance approves the call and gives the
// allowance bound to that digest and the page's presentation token.
// /allowances lists them; /allowances/:id shows one, to confirm or revoke.

func (c *Console) routesAllowances(e *echo.Echo, post func(string, echo.HandlerFunc, ...echo.MiddlewareFunc)) {
	e.GET("/calls/:id/allowance", c.allowanceReview, c.requireSession, c.requireDecider)
	post("/calls/:id/allowance", c.giveAllowance, c.requireDecider)
	// Anyone logged in reads them (auditors included); deciding takes a
	// decider.
	e.GET("/allowances", c.allowancesPage, c.requireSession)
	e.GET("/allowances/:id", c.allowancePage, c.requireSession)
	post("/allowances/:id/confirm", c.confirmAllowance, c.requireDecider)
	post("/allowances/:id/revoke", c.revokeAllowance, c.requireDecider)
}

// allowanceOffer is what call's page offers under "Approve this and more
// like it", nil when its tool does not opt in or asks for a passkey.
func allowanceOffer(call *queue.Call, t *tools.Tool) *templates.AllowanceOffer {
	a := t.Allowance
	if a == nil || t.AsksPasskey() || call.RequirePasskey || t.DefinitionDigest != call.ToolDigest {
		return nil
	}
	o := &templates.AllowanceOffer{CallID: call.ID, MaxUses: a.MaxUses, MaxMinutes: int(a.MaxFor / time.Minute),
		Target: call.Target, VaryTarget: a.Varies(tools.VaryTarget)}
	args := t.Bound(call.Args)
	for _, ptr := range a.Vary {
		if ptr == tools.VaryTarget {
			continue
		}
		v, ok := canonical.Lookup(args, ptr)
		if !ok {
			continue // absent from the base call: it stays absent
		}
		kind, schemaMax, hasMax, enum := t.VaryOf(ptr)
		m := templates.OfferMember{Pointer: ptr, SchemaMax: schemaMax, HasMax: hasMax, Base: fmt.Sprint(v)}
		switch kind {
		case tools.VaryInteger:
			m.Integer = true
		case tools.VaryEnum:
			m.Enum = enum
		default:
			continue
		}
		o.Members = append(o.Members, m)
	}
	return o
}

// choiceOf reads the operator's choices from a form (the offer's or the
// review's), as typed.
func choiceOf(form url.Values, o *templates.AllowanceOffer) templates.AllowanceChoice {
	ch := templates.AllowanceChoice{Uses: strings.TrimSpace(form.Get("uses")), Minutes: strings.TrimSpace(form.Get("minutes")),
		Until: form.Get("until"), TargetPrefix: form.Get("target_prefix"), Repeat: form.Get("repeat") == "1",
		Max: map[string]string{}, In: map[string][]string{}}
	for _, m := range o.Members {
		if m.Integer {
			if v := strings.TrimSpace(form.Get("max:" + m.Pointer)); v != "" {
				ch.Max[m.Pointer] = v
			}
		} else if vs := form["in:"+m.Pointer]; len(vs) > 0 {
			ch.In[m.Pointer] = vs
		}
	}
	return ch
}

// errChoice is a choice that is not a number where one is asked.
var errChoice = errors.New("console: a choice is not a whole number")

// choices turns what the operator typed into scope.Choices at now: the
// until is fixed from the minutes once, then carried as it was shown.
func choices(ch *templates.AllowanceChoice, o *templates.AllowanceOffer, now time.Time) (scope.Choices, error) {
	var out scope.Choices
	n, err := strconv.Atoi(ch.Uses)
	if err != nil {
		return out, fmt.Errorf("%w: how many calls (1 to %d)", errChoice, o.MaxUses)
	}
	out.Uses = n
	if ch.Until != "" {
		if out.Until, err = time.Parse(time.RFC3339, ch.Until); err != nil {
			return out, fmt.Errorf("%w: until", errChoice)
		}
	} else {
		m, err := strconv.Atoi(ch.Minutes)
		if err != nil {
			return out, fmt.Errorf("%w: for how many minutes (1 to %d)", errChoice, o.MaxMinutes)
		}
		out.Until = now.Add(time.Duration(m) * time.Minute).UTC().Truncate(time.Second)
		ch.Until = out.Until.Format(time.RFC3339)
	}
	if ch.TargetPrefix != o.Target {
		out.TargetPrefix = ch.TargetPrefix
	}
	out.RepeatCalls = ch.Repeat
	out.Members = map[string]scope.Member{}
	for ptr, v := range ch.Max {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return out, fmt.Errorf("%w: the maximum of %s", errChoice, ptr)
		}
		out.Members[ptr] = scope.Member{Max: &n}
	}
	for ptr, in := range ch.In {
		out.Members[ptr] = scope.Member{In: slices.Clone(in)}
	}
	return out, nil
}

func (c *Console) allowanceReview(ec echo.Context) error {
	return c.renderAllowanceReview(ec, http.StatusOK, ec.QueryParams(), nil)
}

// renderAllowanceReview shows the review step for the call of the route
// with the choices in form, and refusal if any: the call whole, the scope
// in words and its digest, and the give form when the choices make a
// scope.
func (c *Console) renderAllowanceReview(ec echo.Context, status int, form url.Values, refusal error) error {
	v, ctx := viewerOf(ec), ec.Request().Context()
	call, err := c.q.Call(ctx, ec.Param("id"))
	if err != nil {
		return err
	}
	now := c.now()
	t, ok := c.q.Tools().Tool(call.Tool)
	var offer *templates.AllowanceOffer
	if ok {
		offer = allowanceOffer(call, t)
	}
	if offer == nil || call.Status != queue.StatusPending {
		return c.refused(ec, call.ID, problemNoAllowance(call), form)
	}
	if err := mayGive(call, v); err != nil {
		return c.refused(ec, call.ID, err, form)
	}
	cv, err := c.callContent(call)
	if err != nil {
		return err
	}
	rv := templates.AllowanceReviewView{Page: c.page(v, "Approve this and more like it", "queue", "", now), Call: cv,
		Digest: call.Digest, Offer: *offer, Choice: choiceOf(form, offer), CSRF: v.csrf, Comment: form.Get("comment"),
		Warned: queue.Deceptive(call)}
	if t.Confirm != nil {
		rv.Confirm, rv.ConfirmExpected = t.Confirm.Describe(), t.Confirm.Expected(shownText(reveal.Of(call.Target)))
	}
	ch, err := choices(&rv.Choice, offer, now)
	if err == nil {
		var base scope.Call
		var sc *scope.Scope
		if base, err = queue.ScopeCall(call); err == nil {
			sc, err = scope.Materialise(base, t, ch, now)
		}
		if err == nil {
			rv.Words, rv.ScopeDigest = scope.Words(sc, t, nil), sc.Digest()
			rv.Presented = c.q.PresentAllowance(v.user.Name, call, rv.ScopeDigest)
		}
	}
	if refusal == nil {
		refusal = err
	}
	if refusal != nil {
		if errors.Is(refusal, errChoice) {
			rv.Error = strings.TrimPrefix(refusal.Error(), "console: ") + ": type it again"
		} else {
			ae := server.ErrorOf(refusal)
			if ae.Status >= 500 {
				return refusal
			}
			rv.Error = ae.Message
			rv.ErrorList = ae.Code == "allowances_per_tool" || ae.Code == "allowances_per_giver"
			if status == http.StatusOK && ec.Request().Method == http.MethodPost {
				status = ae.Status
			}
		}
	}
	return c.render(ec, status, templates.AllowanceReviewPage(rv))
}

// mayGive refuses the review of an allowance to a viewer who could not
// approve its base call, as the call's page offers it only to who can:
// the call is theirs, they own its agent, the tool's reviewer condition
// leaves them out, or they approved it already. The give checks all of it
// again (queue.Service.GiveAllowance).
func mayGive(call *queue.Call, v *viewer) error {
	switch {
	case call.ProposedBy(v.user):
		return queue.ErrOwnCall
	case call.OwnedBy(v.user) != "":
		return &queue.OwnerError{Operator: v.user.Name, Owner: call.OwnedBy(v.user)}
	case !call.Approvers.Allows(string(v.user.Role), v.user.Groups):
		return &queue.ApproversError{Operator: v.user.Name, Who: call.Approvers.Describe()}
	case call.ApprovedBy(v.user.Name):
		return queue.ErrAlreadyApproved
	}
	return nil
}

// problemNoAllowance is the refusal of an allowance from call: not
// pending, or its tool does not offer one.
func problemNoAllowance(call *queue.Call) error {
	if call.Status != queue.StatusPending {
		return &queue.NotPendingError{Status: call.Status}
	}
	return fmt.Errorf("%w: %s", scope.ErrNoAllowance, call.Tool)
}

func (c *Console) giveAllowance(ec echo.Context) error {
	v, form, ctx := viewerOf(ec), ec.Request().PostForm, ec.Request().Context()
	call, err := c.q.Call(ctx, ec.Param("id"))
	if err != nil {
		return err
	}
	t, ok := c.q.Tools().Tool(call.Tool)
	var offer *templates.AllowanceOffer
	if ok {
		offer = allowanceOffer(call, t)
	}
	if offer == nil {
		return c.refused(ec, call.ID, problemNoAllowance(call), form)
	}
	choice := choiceOf(form, offer)
	if choice.Until == "" {
		return c.renderAllowanceReview(ec, http.StatusBadRequest, form, fmt.Errorf("%w: until", errChoice))
	}
	ch, err := choices(&choice, offer, c.now())
	if err != nil {
		return c.renderAllowanceReview(ec, http.StatusBadRequest, form, err)
	}
	a, _, err := c.q.GiveAllowance(ctx, queue.GiveInput{Operator: v.user.Name, Channel: audit.ChannelWeb, CallID: call.ID,
		Digest: strings.TrimSpace(form.Get("digest")), ScopeDigest: form.Get("scope_digest"), Choices: ch,
		Comment: form.Get("comment"), Confirm: form.Get("confirm"), AcceptWarnings: form.Get("ack_warnings") == "1",
		Presented: form.Get("presented")})
	if err != nil {
		return c.renderAllowanceReview(ec, http.StatusOK, form, err)
	}
	notice := "given"
	if !a.Confirmed() {
		notice = "waiting"
	}
	return ec.Redirect(http.StatusSeeOther, "/allowances/"+a.ID+"?notice="+notice)
}

// allowanceLine is a as pages show it to v, its scope in words.
func (c *Console) allowanceLine(a *queue.Allowance, v *viewer, now time.Time) templates.AllowanceLine {
	l := templates.AllowanceLine{ID: a.ID, Tool: a.Tool, Actor: a.Actor, ScopeDigest: a.ScopeDigest, Giver: c.shownName(a.Giver),
		ConfirmersNeeded: a.ConfirmersNeeded, Uses: a.Uses, Used: a.Used, Left: a.Left(), Until: a.Until, GivenAt: a.GivenAt,
		EndedAt: a.EndedAt, State: a.State(now), EndReason: a.EndReason, EndedBy: a.EndedBy, BaseCall: a.BaseCall,
		CanRevoke: c.mayRevoke(a, v)}
	for _, name := range a.Confirmers {
		l.Confirmers = append(l.Confirmers, c.shownName(name))
	}
	l.Words = "(its tool is no longer defined here: it covers nothing)"
	if t, ok := c.q.Tools().Tool(a.Tool); ok {
		if sc, err := scope.Parse(a.Scope); err == nil && sc.Digest() == a.ScopeDigest {
			l.Words = scope.Words(sc, t, nil)
		} else {
			l.Words = "(its stored scope does not match its digest: it covers nothing)"
		}
	}
	return l
}

// mayRevoke says whether v is offered the revocation of a: its giver, an
// admin, or an operator the tool's reviewer condition allows, while it has
// not ended (queue.Service.RevokeAllowance decides, and checks again).
func (c *Console) mayRevoke(a *queue.Allowance, v *viewer) bool {
	switch {
	case a.Ended() || !v.user.Role.CanDecide():
		return false
	case v.user.Name == a.Giver || v.user.Role.CanAdminister():
		return true
	}
	t, ok := c.q.Tools().Tool(a.Tool)
	return ok && t.Approvers.Allows(string(v.user.Role), v.user.Groups)
}

var allowanceNotices = map[string]string{
	"given": "Approved, and the allowance is given: calls it covers are approved as they arrive.",
	"waiting": "Your approval of the call is recorded, and the allowance is given; it covers nothing until the people its calls need have confirmed it " +
		"on this page: send them its link.",
	"confirmed": "Your confirmation is recorded.",
	"revoked":   "Revoked: it approves nothing more, and the grants it minted that were not redeemed are revoked.",
}

func (c *Console) allowancesPage(ec echo.Context) error {
	v, ctx, now := viewerOf(ec), ec.Request().Context(), c.now()
	list, err := c.q.Allowances(ctx, queue.AllowanceFilter{})
	if err != nil {
		return err
	}
	av := templates.AllowancesView{Page: c.page(v, "Allowances", "allowances", "", now), CSRF: v.csrf,
		Notice: allowanceNotices[ec.QueryParam("notice")]}
	for _, a := range list {
		l := c.allowanceLine(a, v, now)
		if a.Live(now) {
			av.Live = append(av.Live, l)
		} else {
			av.Ended = append(av.Ended, l)
		}
	}
	return c.render(ec, http.StatusOK, templates.AllowancesPage(av))
}

func (c *Console) allowancePage(ec echo.Context) error {
	return c.renderAllowance(ec, http.StatusOK, nil, nil)
}

// renderAllowance shows the allowance of the route, with refusal if any
// and what was typed in form.
func (c *Console) renderAllowance(ec echo.Context, status int, form url.Values, refusal error) error {
	v, ctx, now := viewerOf(ec), ec.Request().Context(), c.now()
	a, err := c.q.Allowance(ctx, ec.Param("id"))
	if err != nil {
		return err
	}
	av := templates.AllowanceView{Page: c.page(v, "Allowance "+a.ID, "allowances", "", now), A: c.allowanceLine(a, v, now),
		CSRF: v.csrf, Notice: allowanceNotices[ec.QueryParam("notice")], Reason: form.Get("reason")}
	if a.Live(now) && !a.Confirmed() {
		if err := c.confirmView(ctx, &av, a, v); err != nil {
			return err
		}
	}
	if refusal != nil {
		ae := server.ErrorOf(refusal)
		if ae.Status >= 500 {
			return refusal
		}
		av.Error = ae.Message
		if status == http.StatusOK {
			status = ae.Status
		}
	}
	return c.render(ec, status, templates.AllowancePage(av))
}

// confirmView fills av's confirmation of a, which waits for confirmers:
// the form, with the base call whole when the confirmation also approves
// it (still pending, and not approved by v yet), and what the call asks
// to be typed; or why v may not confirm it.
func (c *Console) confirmView(ctx context.Context, av *templates.AllowanceView, a *queue.Allowance, v *viewer) error {
	base, err := c.q.Call(ctx, a.BaseCall)
	if err != nil {
		return err
	}
	switch {
	case !v.user.Role.CanDecide():
		av.NoConfirm = "Operators and admins confirm allowances; your role reads them."
		return nil
	case base.Status == queue.StatusDenied:
		av.NoConfirm = "Its base call was denied, so nobody can confirm it; revoke it, and give a new one from a call you would approve."
		return nil
	case slices.Contains(a.Confirmers, v.user.Name):
		av.NoConfirm = "You are one of its confirmers; another person must confirm it."
		return nil
	case base.ProposedBy(v.user) || base.OwnedBy(v.user) != "" || !base.Approvers.Allows(string(v.user.Role), v.user.Groups):
		av.NoConfirm = "Only a person who may approve its base call confirms it (" + base.Approvers.Describe() +
			", neither the agent nor one of its owners)."
		return nil
	}
	// The confirmation carries the page's token, which covers the base
	// call, the scope and the allowance, whether or not it approves the
	// base call too.
	av.CanConfirm, av.Presented = true, c.q.PresentConfirm(v.user.Name, a)
	if base.Status != queue.StatusPending || base.ApprovedBy(v.user.Name) {
		return nil
	}
	cv, err := c.callContent(base)
	if err != nil {
		return err
	}
	av.Base, av.BaseDigest = &cv, base.Digest
	if t, ok := c.q.Tools().Tool(base.Tool); ok && t.Confirm != nil {
		av.Confirm, av.ConfirmExpected = t.Confirm.Describe(), t.Confirm.Expected(shownText(reveal.Of(base.Target)))
	}
	return nil
}

func (c *Console) confirmAllowance(ec echo.Context) error {
	v, form, ctx := viewerOf(ec), ec.Request().PostForm, ec.Request().Context()
	id := ec.Param("id")
	_, err := c.q.ConfirmAllowance(ctx, queue.ConfirmInput{Operator: v.user.Name, Channel: audit.ChannelWeb, AllowanceID: id,
		ScopeDigest: form.Get("scope_digest"), CallDigest: strings.TrimSpace(form.Get("digest")), Confirm: form.Get("confirm"),
		AcceptWarnings: form.Get("ack_warnings") == "1", Presented: form.Get("presented")})
	if err != nil {
		return c.renderAllowance(ec, http.StatusOK, form, err)
	}
	return ec.Redirect(http.StatusSeeOther, "/allowances/"+id+"?notice=confirmed")
}

func (c *Console) revokeAllowance(ec echo.Context) error {
	v, form, ctx := viewerOf(ec), ec.Request().PostForm, ec.Request().Context()
	id := ec.Param("id")
	if _, err := c.q.RevokeAllowance(ctx, queue.RevokeInput{Operator: v.user.Name, Channel: audit.ChannelWeb, AllowanceID: id,
		Reason: form.Get("reason")}); err != nil {
		return c.renderAllowance(ec, http.StatusOK, form, err)
	}
	return ec.Redirect(http.StatusSeeOther, "/allowances/"+id+"?notice=revoked")
}
