package notify

import (
	"encoding/json"
	"net/url"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/queue"
)

// Router decides, inside the transaction of a change, which channels hear
// of it and what they are told. It is read-only after construction and
// safe for concurrent use.
type Router struct {
	cfg       *Config
	publicURL string
	newID     func() string
	riskOf    func(tool string) (risk string, effects []string)
}

// SetRisk names where events read a tool's declared risk and effects;
// set before the router is used.
func (r *Router) SetRisk(f func(tool string) (risk string, effects []string)) { r.riskOf = f }

// NewRouter routes by cfg. Links point at cfg.PublicURL, or at publicURL
// when the configuration names none.
func NewRouter(cfg *Config, publicURL string) *Router {
	u := cfg.PublicURL
	if u == "" {
		u = strings.TrimRight(publicURL, "/")
	}
	return &Router{cfg: cfg, publicURL: u, newID: NewEventID}
}

// Route returns the route for tool, or nil when no route matches.
func (r *Router) Route(tool string) *Route {
	for i := range r.cfg.Routes {
		if r.cfg.Routes[i].Matches(tool) {
			return &r.cfg.Routes[i]
		}
	}
	return nil
}

// CallURL is the console page of a call.
func (r *Router) CallURL(id string) string {
	return r.publicURL + "/calls/" + url.PathEscape(id)
}

// kindOf maps the queue's committed changes to event types; changes that
// notify nobody map to "". A partial approval is not an event: the call is
// still waiting.
func kindOf(queueKind string) string {
	switch queueKind {
	case audit.KindSubmitted:
		return CallSubmitted
	case queue.KindEscalated:
		// A tier reached: the call's channels hear it, the tier's
		// among them (Call.Notify).
		return CallEscalated
	case audit.KindGranted:
		return CallApproved
	case audit.KindDenied:
		return CallDenied
	case audit.KindExpired:
		return CallExpired
	case audit.KindCancelled:
		return CallCancelled
	case audit.KindCountered:
		return CallCountered
	case audit.KindRedeemed:
		return CallRedeemed
	case audit.KindOutcome:
		return CallOutcome
	case audit.KindLeaseExpired:
		return CallLeaseExpired
	case audit.KindResolved:
		return CallResolved
	}
	return ""
}

// Notices returns the outbox rows that a committed change announces: to
// the channels of the call's route, and to those the rule that matched it
// named (Call.Notify). A submission also schedules its reminder and
// escalation, each delivered only if the call is still pending when it
// comes due.
func (r *Router) Notices(ev queue.Event) []queue.Notice {
	if ev.Allowance != nil {
		return r.allowanceNotices(ev)
	}
	if ev.Plan != nil {
		return r.planNotices(ev)
	}
	kind := kindOf(ev.Kind)
	if kind == "" || ev.Call == nil {
		return nil
	}
	c := ev.Call
	rt := r.Route(c.Tool)
	if rt == nil {
		rt = &Route{}
	}
	at := eventTime(kind, c)
	var out []queue.Notice
	channels := union(rt.Notify, c.Notify)
	if kind != CallSubmitted && escalated(rt, c) {
		channels = union(channels, rt.EscalateTo)
	}
	out = r.add(out, kind, channels, c, at, at, false, 0, ev.Editor)
	if kind != CallSubmitted {
		return out
	}
	var escalateAt time.Time
	if rt.EscalateAfter > 0 {
		escalateAt = c.CreatedAt.Add(rt.EscalateAfter)
		if escalateAt.Before(c.DecideBy) {
			out = r.add(out, CallEscalated, rt.EscalateTo, c, escalateAt, escalateAt, true, rt.EscalateAfter, "")
		}
	}
	if rt.RemindBefore > 0 {
		remindAt := c.DecideBy.Add(-rt.RemindBefore)
		if remindAt.After(c.CreatedAt) {
			to := channels
			if !escalateAt.IsZero() && escalateAt.Before(remindAt) {
				to = union(to, rt.EscalateTo)
			}
			out = r.add(out, CallReminder, to, c, remindAt, remindAt, true, 0, "")
		}
	}
	return out
}

// allowanceNotices returns the rows announcing that an allowance was given
// or ended, to the channels of its tool's route. A confirmation announces
// nothing: the allowance was announced when given.
func (r *Router) allowanceNotices(ev queue.Event) []queue.Notice {
	a := ev.Allowance
	var kind, reason string
	at := a.GivenAt
	switch ev.Kind {
	case queue.KindAllowanceGiven:
		kind = AllowanceGiven
	case queue.KindAllowanceEnded, queue.KindAllowanceRevoked:
		kind, reason, at = AllowanceEnded, a.EndReason, a.EndedAt
	default:
		return nil
	}
	rt := r.Route(a.Tool)
	if rt == nil {
		return nil
	}
	id := r.newID()
	var out []queue.Notice
	var body []byte
	for _, name := range rt.Notify {
		ch := r.cfg.Channels[name]
		if ch == nil || !ch.Wants(kind) {
			continue
		}
		if body == nil {
			body, _ = json.Marshal(Event{ID: id, Type: kind, Timestamp: formatTime(at), Data: Data{
				Tool: a.Tool, Actor: a.Actor, Audience: a.Audience, Reason: reason, URL: r.publicURL + "/allowances/" + a.ID,
				Allowance: &Allowance{ID: a.ID, ScopeDigest: a.ScopeDigest, Giver: a.Giver, Confirmers: a.Confirmers,
					Uses: a.Uses, Used: a.Used, Until: formatTime(a.Until), EndedBy: a.EndedBy}}})
		}
		out = append(out, queue.Notice{EventID: id, Kind: kind, Channel: name, Body: body, At: at, DueAt: at})
	}
	return out
}

// planNotices returns the rows announcing that a plan was submitted, or
// approved or denied, to the channels of the routes of its items' tools
// and those the rules that matched its items named. The plan's other
// changes (cancelled, expired) announce nothing of the plan: each item's
// own change is announced as a call's.
func (r *Router) planNotices(ev queue.Event) []queue.Notice {
	p := ev.Plan
	var kind string
	at := p.CreatedAt
	switch ev.Kind {
	case audit.KindPlanSubmitted:
		kind = PlanSubmitted
	case audit.KindPlanApproved, audit.KindPlanDenied:
		kind, at = PlanDecided, p.DecidedAt
	default:
		return nil
	}
	var channels, tools []string
	seen := map[string]bool{}
	for _, c := range ev.Items {
		if rt := r.Route(c.Tool); rt != nil {
			channels = union(channels, rt.Notify)
		}
		channels = union(channels, c.Notify)
		if !seen[c.Tool] {
			seen[c.Tool] = true
			tools = append(tools, c.Tool)
		}
	}
	id := r.newID()
	d := Data{ID: p.ID, Tool: strings.Join(tools, ", "), Actor: p.Actor, Audience: p.Audience, Digest: p.Digest,
		Status: string(p.Status), CreatedAt: formatTime(p.CreatedAt), DecideBy: formatTime(p.DecideBy),
		URL: r.publicURL + "/plans/" + url.PathEscape(p.ID), Approvals: &Approvals{Required: p.ApprovalsRequired},
		Plan: &PlanData{ID: p.ID, Items: p.Items, Tools: tools, Ordered: p.Ordered}}
	if !p.ValidUntil.IsZero() {
		d.Plan.ValidUntil = formatTime(p.ValidUntil)
	}
	if len(ev.Items) > 0 {
		for _, a := range ev.Items[0].Approvals {
			d.Approvals.By = append(d.Approvals.By, a.Operator)
		}
		d.Approvals.Received = len(ev.Items[0].Approvals)
	}
	if p.Status == queue.PlanDenied {
		d.Decision = &Decision{By: p.DecidedBy, Reason: p.Reason}
	}
	body, _ := json.Marshal(Event{ID: id, Type: kind, Timestamp: formatTime(at), Data: d})
	var out []queue.Notice
	for _, name := range channels {
		ch := r.cfg.Channels[name]
		if ch == nil || !ch.Wants(kind) {
			continue
		}
		out = append(out, queue.Notice{EventID: id, Kind: kind, Channel: name, Body: body, At: at, DueAt: at})
	}
	return out
}

// ToolReview returns the rows announcing that tool needs an admin's review
// (its upstream definition changed, for example); page is the console path
// of the review.
func (r *Router) ToolReview(tool, reason, page string, at time.Time) []queue.Notice {
	rt := r.Route(tool)
	if rt == nil {
		return nil
	}
	id := r.newID()
	var out []queue.Notice
	for _, name := range rt.Notify {
		ch := r.cfg.Channels[name]
		if ch == nil || !ch.Wants(ToolReviewNeeded) {
			continue
		}
		body, _ := json.Marshal(Event{ID: id, Type: ToolReviewNeeded, Timestamp: formatTime(at),
			Data: Data{Tool: tool, Reason: reason, URL: r.publicURL + page}})
		out = append(out, queue.Notice{EventID: id, Kind: ToolReviewNeeded, Channel: name, Body: body, At: at, DueAt: at})
	}
	return out
}

// add appends one event's rows, one per channel that wants it; the channels
// share the event id. editor is who countered the call, for call.countered.
func (r *Router) add(out []queue.Notice, kind string, channels []string, c *queue.Call, at, due time.Time,
	whilePending bool, waited time.Duration, editor string) []queue.Notice {
	id := r.newID()
	var plain, withArgs []byte
	for _, name := range channels {
		ch := r.cfg.Channels[name]
		if ch == nil || !ch.Wants(kind) {
			continue
		}
		body := &plain
		if ch.IncludeArgs {
			body = &withArgs
		}
		if *body == nil {
			*body = r.body(id, kind, c, at, waited, ch.IncludeArgs, editor)
		}
		out = append(out, queue.Notice{EventID: id, Kind: kind, Channel: name, CallID: c.ID, Body: *body,
			At: at, DueAt: due, WhilePending: whilePending})
	}
	return out
}

func (r *Router) body(id, kind string, c *queue.Call, at time.Time, waited time.Duration, args bool, editor string) []byte {
	d := Data{
		ID: c.ID, Tool: c.Tool, Target: c.Target, Actor: c.Actor, Audience: c.Audience, Digest: c.Digest,
		Status: string(c.Status), CreatedAt: formatTime(c.CreatedAt), DecideBy: formatTime(c.DecideBy),
		URL:       r.CallURL(c.ID),
		Approvals: &Approvals{Required: c.ApprovalsRequired, Received: len(c.Approvals)},
	}
	if r.riskOf != nil {
		d.Risk, d.Effects = r.riskOf(c.Tool)
	}
	for _, a := range c.Approvals {
		d.Approvals.By = append(d.Approvals.By, a.Operator)
	}
	switch {
	case c.Denial != nil:
		d.Decision = &Decision{By: c.Denial.By, Reason: c.Denial.Reason}
	case c.Status == queue.StatusExpired:
		d.Decision = &Decision{By: "console", Reason: "no decision before decide_by"}
	case c.Status == queue.StatusCancelled:
		d.Decision = &Decision{By: c.Actor, Reason: "withdrawn by the agent"}
	}
	if c.Status == queue.StatusCountered {
		d.CounteredBy = c.CounteredBy
		if editor != "" {
			d.Decision = &Decision{By: editor, Reason: "answered it with an edited call, " + c.CounteredBy + ", for the agent to accept"}
		}
	}
	if c.Outcome != nil {
		d.Outcome = &Outcome{Status: c.Outcome.Status, Detail: c.Outcome.Detail}
	}
	if kind == CallLeaseExpired {
		d.LeaseUntil = formatTime(c.LeaseUntil)
	}
	if r := c.Resolution; r != nil && kind == CallResolved {
		d.Resolution = &Resolution{Verdict: r.Verdict, By: r.By, Note: r.Note, Evidence: r.Evidence}
	}
	if kind == CallEscalated {
		d.EscalatedAfter = int64(waited / time.Second)
	}
	if args {
		if b, err := canonical.Encode(argsOrEmpty(c.Args)); err == nil {
			d.Args = b
		}
	}
	body, _ := json.Marshal(Event{ID: id, Type: kind, Timestamp: formatTime(at), Data: d})
	return body
}

func argsOrEmpty(a canonical.Object) any {
	if a == nil {
		return canonical.Object{}
	}
	return a
}

// eventTime is when the change happened, from the call itself, so the
// notice's time is the committed one.
func eventTime(kind string, c *queue.Call) time.Time {
	var t time.Time
	switch kind {
	case CallSubmitted:
		t = c.CreatedAt
	case CallRedeemed:
		t = c.RedeemedAt
	case CallOutcome, CallLeaseExpired:
		if c.Outcome != nil {
			t = c.Outcome.At
		}
	case CallResolved:
		if c.Resolution != nil {
			t = c.Resolution.At
		}
	default:
		t = c.DecidedAt
	}
	if t.IsZero() {
		t = c.CreatedAt
	}
	return t
}

// escalated reports whether the call was still pending when its escalation
// came due, so the escalation channels hear how it ended.
func escalated(rt *Route, c *queue.Call) bool {
	if rt.EscalateAfter <= 0 || c.DecidedAt.IsZero() {
		return false
	}
	due := c.CreatedAt.Add(rt.EscalateAfter)
	return due.Before(c.DecideBy) && !c.DecidedAt.Before(due)
}

func union(a, b []string) []string {
	out := append([]string(nil), a...)
	for _, x := range b {
		if !contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}
