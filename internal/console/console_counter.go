package console

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/reveal"
	"github.com/countersign/countersign/internal/server"
	"github.com/countersign/countersign/internal/tools"
	"github.com/countersign/countersign/web/templates"
)

// Counter-proposals in the browser (docs/counters.md): a pending call's
// page offers "Approve with an edit" with the members its tool lists;
// GET /calls/:id/counter checks the edit exactly as a proposal and, when
// it is a valid call, shows each change and the new digest with the
// page's presentation token; POST /calls/:id/counter stores the counter
// (queue.Service.Counter) bound to both digests and that token.

func (c *Console) routesCounter(e *echo.Echo, post func(string, echo.HandlerFunc, ...echo.MiddlewareFunc)) {
	e.GET("/calls/:id/counter", c.counterReview, c.requireSession, c.requireDecider)
	post("/calls/:id/counter", c.giveCounter, c.requireDecider)
}

// counterOffer is what call's page offers under "Approve with an edit",
// nil when its tool does not opt in or its definition changed since.
func counterOffer(call *queue.Call, t *tools.Tool) *templates.CounterOffer {
	if t.Counter == nil || t.DefinitionDigest != call.ToolDigest {
		return nil
	}
	o := &templates.CounterOffer{CallID: call.ID}
	for _, ptr := range t.Counter.Edit {
		if ptr == tools.CounterTarget {
			o.Members = append(o.Members, templates.CounterMember{Pointer: ptr, Value: call.Target, String: true})
			continue
		}
		m := templates.CounterMember{Pointer: ptr, String: t.TakesString(ptr)}
		if v, ok := canonical.Lookup(call.Args, ptr); ok {
			m.Value = valueText(v)
		} else {
			m.Absent = true
		}
		o.Members = append(o.Members, m)
	}
	return o
}

// valueText is a member's value as the edit form and the review show it:
// a string as its text, anything else as canonical JSON.
func valueText(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, err := canonical.Encode(v)
	if err != nil {
		return "?"
	}
	return string(b)
}

// counterEdits reads an edit from a form: the new value of each member
// whose field differs from the call's value (text for a string member,
// JSON for any other), and what was typed in every field, as typed.
func counterEdits(form url.Values, o *templates.CounterOffer) (map[string]json.RawMessage, map[string]string) {
	edits, typed := map[string]json.RawMessage{}, map[string]string{}
	for _, m := range o.Members {
		vs, ok := form[m.Field()]
		if !ok || len(vs) == 0 {
			continue
		}
		text := vs[0]
		typed[m.Field()] = text
		if !m.String {
			text = strings.TrimSpace(text)
		}
		if (!m.Absent && text == m.Value) || (m.Absent && text == "") {
			continue
		}
		if m.String {
			b, _ := json.Marshal(text)
			edits[m.Pointer] = b
		} else {
			edits[m.Pointer] = json.RawMessage(text)
		}
	}
	return edits, typed
}

// problemNoCounter is the refusal of a counter-proposal of call: not
// pending, or its tool offers none here.
func problemNoCounter(call *queue.Call) error {
	if call.Status != queue.StatusPending {
		return &queue.NotPendingError{Status: call.Status}
	}
	return queue.ErrNotCounterable
}

func (c *Console) counterReview(ec echo.Context) error {
	return c.renderCounter(ec, http.StatusOK, ec.QueryParams(), nil)
}

// renderCounter shows the counter-proposal page of the call of the route
// with the edit in form, and refusal if any: every problem of the edit
// with the form as typed, or, for a valid edit, each change, the new
// digest and the form approving it.
func (c *Console) renderCounter(ec echo.Context, status int, form url.Values, refusal error) error {
	v, ctx := viewerOf(ec), ec.Request().Context()
	call, err := c.q.Call(ctx, ec.Param("id"))
	if err != nil {
		return err
	}
	t, ok := c.q.Tools().Tool(call.Tool)
	var offer *templates.CounterOffer
	if ok {
		offer = counterOffer(call, t)
	}
	if offer == nil || call.Status != queue.StatusPending {
		return c.refused(ec, call.ID, problemNoCounter(call), form)
	}
	if err := mayGive(call, v); err != nil {
		return c.refused(ec, call.ID, err, form)
	}
	cv, err := c.callContent(call)
	if err != nil {
		return err
	}
	edits, typed := counterEdits(form, offer)
	view := templates.CounterView{Page: c.page(v, "Approve with an edit", "queue", "", c.now()), Call: cv, Offer: *offer,
		Typed: typed, Digest: call.Digest, CSRF: v.csrf}
	if len(typed) > 0 {
		d, err := c.q.DraftCounter(call, edits)
		var pe *queue.ProposalError
		switch {
		case errors.As(err, &pe):
			for _, p := range pe.Problems {
				view.Problems = append(view.Problems, templates.CounterProblem{Path: p.Path, Message: p.Message})
			}
			if status == http.StatusOK && ec.Request().Method == http.MethodPost {
				status = http.StatusUnprocessableEntity
			}
		case err != nil:
			if refusal == nil {
				refusal = err
			}
		default:
			view.Changes = counterChanges(call, d)
			view.NewDigest, view.NewDigestGroups = d.Digest, groupsOfFour(d.Digest)
			view.Presented = c.q.PresentCounter(v.user.Name, call, d.Digest)
			view.Forwarded = t.Counter.Forward && !d.Narrows()
			view.Warned = d.Deceptive()
			if t.Confirm != nil {
				view.Confirm, view.ConfirmExpected = t.Confirm.Describe(), t.Confirm.Expected(shownText(reveal.Of(d.Target)))
			}
		}
	}
	if refusal != nil {
		ae := server.ErrorOf(refusal)
		if ae.Status >= 500 {
			return refusal
		}
		view.Error = ae.Message
		if ce := (*queue.ConfirmationError)(nil); errors.As(refusal, &ce) {
			// The shared words name the call page and the command line; here
			// the field is this page's, under the edited call's digest.
			view.Error = fmt.Sprintf("to approve the edited call, type %s exactly as shown (%q) in the field above "+
				"\"Approve the edited call\" on this page; nothing was approved", ce.Describe, ce.Want)
		}
		if status == http.StatusOK && ec.Request().Method == http.MethodPost {
			status = ae.Status
		}
	}
	return c.render(ec, status, templates.CounterPage(view))
}

// counterChanges is each member d changes of call, old and new.
func counterChanges(call *queue.Call, d *queue.CounterDraft) []templates.CounterChange {
	out := make([]templates.CounterChange, 0, len(d.Changed))
	for _, k := range d.Changed {
		if k == tools.CounterTarget {
			out = append(out, templates.CounterChange{Pointer: k, Old: call.Target, New: d.Target})
			continue
		}
		ch := templates.CounterChange{Pointer: k, Old: "absent", New: "absent"}
		if v, ok := canonical.Lookup(call.Args, k); ok {
			ch.Old = valueText(v)
		}
		if v, ok := canonical.Lookup(d.Args, k); ok {
			ch.New = valueText(v)
		}
		out = append(out, ch)
	}
	return out
}

func (c *Console) giveCounter(ec echo.Context) error {
	v, form, ctx := viewerOf(ec), ec.Request().PostForm, ec.Request().Context()
	call, err := c.q.Call(ctx, ec.Param("id"))
	if err != nil {
		return err
	}
	t, ok := c.q.Tools().Tool(call.Tool)
	var offer *templates.CounterOffer
	if ok {
		offer = counterOffer(call, t)
	}
	if offer == nil {
		return c.refused(ec, call.ID, problemNoCounter(call), form)
	}
	edits, _ := counterEdits(form, offer)
	out, err := c.q.Counter(ctx, queue.CounterInput{Operator: v.user.Name, Channel: audit.ChannelWeb, CallID: call.ID,
		Digest: strings.TrimSpace(form.Get("digest")), Edits: edits, Presented: form.Get("presented"),
		Confirm: form.Get("confirm"), AcceptWarnings: form.Get("ack_warnings") == "1"})
	if err != nil {
		return c.renderCounter(ec, http.StatusOK, form, err)
	}
	return ec.Redirect(http.StatusSeeOther, "/calls/"+out.ID+"?notice=edited")
}
