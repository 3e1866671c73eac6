package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/plan"
	"github.com/countersign/countersign/internal/policy"
	"github.com/countersign/countersign/internal/present"
)

// PlanStatus is where a plan is in its life. Pending, approved and the
// shown-only halted are live; the others are final.
type PlanStatus string

// Plan statuses.
const (
	PlanPending   PlanStatus = "pending"
	PlanApproved  PlanStatus = "approved"
	PlanDenied    PlanStatus = "denied"
	PlanCancelled PlanStatus = "cancelled"
	PlanExpired   PlanStatus = "expired"
	// PlanHalted is how an approved plan is shown once one of its items
	// reported failed or unknown, or its lease expired: no further item
	// is minted. It is not stored.
	PlanHalted PlanStatus = "halted"
)

// Final reports whether the plan can no longer change.
func (s PlanStatus) Final() bool { return s == PlanDenied || s == PlanCancelled || s == PlanExpired }

// Bounds of plans.
const (
	// MaxPlanBytes bounds a plan's body, items and rationale included.
	MaxPlanBytes = 256 << 10
	// MaxPendingPlansPerToken bounds the plans one token keeps waiting
	// for a decision.
	MaxPendingPlansPerToken = 5
)

// Plan is an agent's list of exact calls (its items, calls with PlanID)
// that a person approves once, by its digest.
type Plan struct {
	ID          string
	Actor       string
	Audience    string
	SubmittedBy string // the API token that submitted it; only it sees and mints the plan
	Rationale   string
	Ordered     bool
	// Digest is plan.Digest of Ordered and the items' digests in order.
	Digest string
	// Items is how many items the plan holds.
	Items int
	// ApprovalsRequired is the most any item requires.
	ApprovalsRequired int
	// MaxFor is the shortest plan max_for of the items' tools: the
	// longest the plan stays valid once approved.
	MaxFor    time.Duration
	Status    PlanStatus
	CreatedAt time.Time
	// DecideBy is the earliest decide_by of its items: a plan nobody
	// decided by then expires.
	DecideBy  time.Time
	DecidedAt time.Time
	// DecidedBy is who approved (the last approval), denied or cancelled
	// it, and Reason the denial's or revocation's reason.
	DecidedBy, Reason string
	// ValidUntil is, on an approved plan, when its items stop being
	// minted.
	ValidUntil time.Time
}

// Errors of plans.
var (
	ErrPlanNotFound = errors.New("queue: plan not found")
	// ErrPlanItem refuses deciding one item of a plan on its own.
	ErrPlanItem = errors.New("queue: this call is an item of a plan; it is decided only through its plan")
	// ErrTooManyPendingPlans refuses a plan from a token that keeps
	// MaxPendingPlansPerToken plans waiting.
	ErrTooManyPendingPlans = fmt.Errorf("queue: this token keeps %d plans waiting for a decision, as many as it may; wait for one to be decided or cancel one", MaxPendingPlansPerToken)
	// ErrPlanTooLarge refuses a plan body over MaxPlanBytes.
	ErrPlanTooLarge = fmt.Errorf("queue: a plan's body is at most %d bytes; split it into smaller plans", MaxPlanBytes)
	// ErrPlanNotApproved refuses minting an item of a plan that is still
	// pending.
	ErrPlanNotApproved = errors.New("queue: the plan is not approved yet; wait for its decision")
	// ErrPlanOrder refuses minting item k of an ordered plan before item
	// k-1 reported succeeded.
	ErrPlanOrder = errors.New("queue: the plan is ordered; the item before this one has not reported succeeded")
	// ErrPlanHalted refuses minting once an item of the plan reported
	// failed or unknown, or its lease expired.
	ErrPlanHalted = errors.New("queue: the plan is halted: an item reported failed or unknown, or its lease expired; a person must look at it")
	// ErrPlanRequirement refuses minting an item whose rules now ask for
	// more than the plan's approval gave it.
	ErrPlanRequirement = errors.New("queue: the rules now require more approvals (or a passkey) for this item than the plan was approved with; submit it again")
	// ErrPlanApprover refuses minting an item when one of the plan's
	// approvers may no longer approve it.
	ErrPlanApprover = errors.New("queue: an approver of the plan may no longer approve this item (disabled, role or groups changed); submit it again")
)

// PlanStateError refuses a change of a plan in a status that does not
// allow it.
type PlanStateError struct {
	Status PlanStatus
}

// ErrPlanNotPending is what PlanStateError unwraps to.
var ErrPlanNotPending = errors.New("queue: the plan is no longer pending")

func (e *PlanStateError) Error() string {
	return fmt.Sprintf("queue: the plan is %s", e.Status)
}

func (e *PlanStateError) Unwrap() error { return ErrPlanNotPending }

// NewPlanID returns a new plan id: pln_ and a sortable random id.
func NewPlanID() string { return "pln_" + strings.TrimPrefix(NewCallID(), "call_") }

// planBody is what SubmitPlan reads before each item is read as a call.
type planBody struct {
	items     []any
	rationale string
	ordered   bool
}

// readPlan checks a plan body's own members, listing every problem with
// JSON Pointers into the plan.
func readPlan(body []byte) (planBody, canonical.Problems) {
	var out planBody
	var problems canonical.Problems
	add := func(code, path, format string, args ...any) {
		problems = append(problems, canonical.Problem{Code: code, Path: path, Message: fmt.Sprintf(format, args...), Offset: -1})
	}
	v, err := canonical.ParseWith(body, canonical.Options{MaxBytes: MaxPlanBytes, MaxDepth: canonical.MaxArgsDepth + 3})
	if err != nil {
		return out, problemsOf(err)
	}
	o, ok := v.(canonical.Object)
	if !ok {
		add(canonical.CodeWrongType, "", "a plan must be a JSON object with items, rationale and ordered")
		return out, problems
	}
	for _, m := range o {
		switch m.Name {
		case "items", "rationale", "ordered":
		default:
			add(canonical.CodeUnknownField, "/"+m.Name, "%q is not a member of a plan (allowed: items, rationale, ordered)", m.Name)
		}
	}
	if it, ok := o.Get("items"); !ok {
		add(canonical.CodeMissingField, "/items", "items is required: a list of 1 to %d calls {tool, target, args}", plan.MaxItems)
	} else if list, ok := it.([]any); !ok {
		add(canonical.CodeWrongType, "/items", "items must be an array, not %s", canonical.TypeName(it))
	} else if len(list) == 0 || len(list) > plan.MaxItems {
		add("plan_items", "/items", "a plan holds 1 to %d items, not %d", plan.MaxItems, len(list))
	} else {
		out.items = list
	}
	if r, ok := o.Get("rationale"); !ok {
		add(canonical.CodeMissingField, "/rationale", "rationale is required: say what the plan does, for the person who approves it")
	} else if s, ok := r.(string); !ok {
		add(canonical.CodeWrongType, "/rationale", "rationale must be a string, not %s", canonical.TypeName(r))
	} else if canonical.IsBlank(s) {
		add(canonical.CodeEmptyString, "/rationale", "rationale must not be empty")
	} else if len(s) > canonical.MaxRationaleBytes {
		add(canonical.CodeTooLong, "/rationale", "rationale is %d bytes; at most %d are allowed", len(s), canonical.MaxRationaleBytes)
	} else {
		out.rationale = s
	}
	if b, ok := o.Get("ordered"); ok {
		if v, ok := b.(bool); !ok {
			add(canonical.CodeWrongType, "/ordered", "ordered must be true or false, not %s", canonical.TypeName(b))
		} else {
			out.ordered = v
		}
	}
	return out, problems
}

// SubmitPlan parses, validates and stores a plan from an agent: its items
// are parsed and validated exactly as calls, every problem of every item
// listed (a *ProposalError, paths into the plan); each item's tool must
// opt in to plans, the rules run on each item (a deny refuses the plan),
// and no two items may be the same call. The items are stored as pending
// calls of the plan, which is not in the queue on its own.
func (s *Service) SubmitPlan(ctx context.Context, who Principal, body []byte) (*Plan, []*Call, error) {
	if len(body) > MaxPlanBytes {
		return nil, nil, ErrPlanTooLarge
	}
	pb, problems := readPlan(body)
	now := s.now()
	p := &Plan{ID: NewPlanID(), Actor: who.Actor, Audience: who.Audience, SubmittedBy: who.TokenID,
		Rationale: pb.rationale, Ordered: pb.ordered, Status: PlanPending, CreatedAt: now, ApprovalsRequired: 1}
	var items []*Call
	var digests []string
	seen := map[string]int{}
	for i, v := range pb.items {
		base := fmt.Sprintf("/items/%d", i)
		add := func(code, path, format string, args ...any) {
			problems = append(problems, canonical.Problem{Code: code, Path: base + path, Message: fmt.Sprintf(format, args...), Offset: -1})
		}
		prop, ps := canonical.ProposalFrom(v, base, false)
		if len(ps) > 0 {
			problems = append(problems, ps...)
			continue
		}
		t, ps := s.tools.Check(prop)
		if len(ps) > 0 {
			for _, pr := range ps {
				pr.Path = base + pr.Path
				problems = append(problems, pr)
			}
			continue
		}
		if t.Plan == nil {
			add("not_plan_tool", "/tool", "%s's calls cannot be plan items: its tools file entry has no plan block", t.Name)
			continue
		}
		if t.Audience != who.Audience {
			add("audience_not_allowed", "/tool", "%s is for audience %s; this token's audience is %s", t.Name, t.Audience, who.Audience)
			continue
		}
		env := prop.Envelope(who.Actor, who.Audience)
		env.Args = t.Bound(prop.Args)
		envBytes, err := env.Canonical()
		if err != nil {
			return nil, nil, fmt.Errorf("queue: canonical envelope: %w", err)
		}
		c := &Call{
			ID: NewCallID(), Actor: who.Actor, Audience: who.Audience, Tool: prop.Tool, Target: prop.Target,
			Args: prop.Args, Rationale: pb.rationale, Envelope: envBytes, Digest: canonical.DigestOf(envBytes),
			Status: StatusPending, ApprovalsRequired: t.Approvals, GrantTTL: t.GrantTTL,
			CreatedAt: now, DecideBy: now.Add(t.DecideWithin), ToolDigest: t.DefinitionDigest,
			OutcomeWithin: t.OutcomeWithin, SubmittedBy: who.TokenID,
			Owners: append([]string(nil), who.Owners...), Approvers: t.Approvers, RequirePasskey: t.RequirePasskey,
			PlanID: p.ID, PlanIndex: i,
		}
		if j, ok := seen[c.Digest]; ok {
			add("duplicate_item", "", "item %d is the same call as item %d (digest %s); a plan lists each call once", i, j, c.Digest)
			continue
		}
		seen[c.Digest] = i
		d := s.decide(t, c)
		switch {
		case d.Action == policy.Deny:
			rule := ""
			if d.Rule != nil {
				rule = d.Rule.ID
			}
			add("denied_by_rule", "", "rule %s denies this call: %s", rule, d.Reason)
			continue
		case d.Action == policy.Ask:
			c.ApprovalsRequired = max(t.Approvals, d.Approvals)
			c.RequirePasskey = c.RequirePasskey || d.RequirePasskey
		}
		if c.RequirePasskey {
			add("passkey_required", "", "this call must be approved with a passkey; such a call is never a plan item: propose it on its own")
			continue
		}
		if d.Rule != nil && len(d.Rule.Notify) > 0 {
			c.Notify = append([]string(nil), d.Rule.Notify...)
		}
		p.ApprovalsRequired = max(p.ApprovalsRequired, c.ApprovalsRequired)
		if p.MaxFor == 0 || t.Plan.MaxFor < p.MaxFor {
			p.MaxFor = t.Plan.MaxFor
		}
		if p.DecideBy.IsZero() || c.DecideBy.Before(p.DecideBy) {
			p.DecideBy = c.DecideBy
		}
		items = append(items, c)
		digests = append(digests, c.Digest)
	}
	if len(problems) > 0 {
		kind := KindInvalidArguments
		if len(problems) == 1 && isParseCode(problems[0].Code) {
			kind = KindParse
		}
		// A refused plan counts against (actor, tool) of the item of its
		// first problem, as a refused call does: an agent resending a plan
		// it cannot fix is stopped by the retry cap.
		return nil, nil, s.reject(ctx, who, s.retryTool(itemTool(pb.items, problems[0].Path)),
			&ProposalError{Kind: kind, Tool: "", Problems: problems})
	}
	digest, err := plan.Digest(p.Ordered, digests)
	if err != nil {
		return nil, nil, err
	}
	p.Digest, p.Items = digest, len(items)
	err = s.update(ctx, func(tx Tx, emit func(Event)) error {
		if who.TokenID != "" {
			if n, err := tx.PendingPlansBy(who.TokenID, now, MaxPendingPlansPerToken); err != nil {
				return err
			} else if n >= MaxPendingPlansPerToken {
				return ErrTooManyPendingPlans
			}
		}
		for _, c := range items {
			if blocked, err := s.retryBlocked(tx, c.Actor, c.Tool); err != nil {
				return err
			} else if blocked {
				return ErrRetryLimit
			}
			if f, err := frozen(tx, c.Tool, c.Actor); err != nil {
				return err
			} else if f != nil {
				return &FrozenError{Freeze: *f}
			}
		}
		if err := tx.InsertPlan(p); err != nil {
			return err
		}
		for _, c := range items {
			if err := tx.InsertCall(c); err != nil {
				return err
			}
			details := map[string]any{
				"tool": c.Tool, "target": c.Target, "audience": c.Audience, "digest": c.Digest,
				"args": c.Args, "rationale": c.Rationale, "decide_by": formatTime(c.DecideBy),
				"approvals_required": int64(c.ApprovalsRequired), "tool_digest": c.ToolDigest,
				"plan": p.ID, "plan_index": int64(c.PlanIndex)}
			if len(c.Owners) > 0 {
				details["owners"] = c.Owners
			}
			if !c.Approvers.Empty() {
				details["approvers"] = map[string]any{"roles": nonNil(c.Approvers.Roles), "groups": nonNil(c.Approvers.Groups)}
			}
			if err := tx.Append(s.entry(audit.KindSubmitted, c, who.Actor, audit.ChannelAPI, details)); err != nil {
				return err
			}
		}
		if err := tx.Append(s.entry(audit.KindPlanSubmitted, nil, who.Actor, audit.ChannelAPI, s.planDetails(p, nil))); err != nil {
			return err
		}
		emit(Event{Kind: audit.KindPlanSubmitted, Plan: p, Items: items})
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	if !s.wakesBefore(p.DecideBy) {
		s.kickExpiry()
	}
	return p, items, nil
}

// itemTool is the tool named by the item a problem's path points into
// (/items/N/...), "" when there is none.
func itemTool(items []any, path string) string {
	rest, ok := strings.CutPrefix(path, "/items/")
	if !ok {
		return ""
	}
	n, _, _ := strings.Cut(rest, "/")
	i, err := strconv.Atoi(n)
	if err != nil || i < 0 || i >= len(items) {
		return ""
	}
	if o, ok := items[i].(canonical.Object); ok {
		if name, ok := o.Get("tool"); ok {
			s, _ := name.(string)
			return s
		}
	}
	return ""
}

// planDetails are the audit details naming plan p, with more added.
func (s *Service) planDetails(p *Plan, more map[string]any) map[string]any {
	d := map[string]any{"plan": p.ID, "plan_digest": p.Digest, "ordered": p.Ordered, "items": int64(p.Items),
		"approvals_required": int64(p.ApprovalsRequired)}
	for k, v := range more {
		d[k] = v
	}
	return d
}

// loadPlan reads plan id and its items in tx, checking that the items
// still hash to the plan's digest.
func (s *Service) loadPlan(tx Tx, id string) (*Plan, []*Call, error) {
	p, err := tx.Plan(id)
	if err != nil {
		return nil, nil, err
	}
	items, err := tx.PlanItems(id)
	if err != nil {
		return nil, nil, err
	}
	digests := make([]string, len(items))
	for i, c := range items {
		if canonical.DigestOf(c.Envelope) != c.Digest {
			return nil, nil, fmt.Errorf("%w: call %s", ErrIntegrity, c.ID)
		}
		digests[i] = c.Digest
	}
	if d, err := plan.Digest(p.Ordered, digests); err != nil || d != p.Digest || len(items) != p.Items {
		return nil, nil, fmt.Errorf("%w: plan %s's items do not hash to its digest", ErrIntegrity, p.ID)
	}
	return p, items, nil
}

// livePlan refuses a change of p unless it is pending (want) or approved,
// expiring it on the spot when its time ran out; the expiry is committed
// with the refusal.
func (s *Service) livePlan(tx Tx, p *Plan, items []*Call, want PlanStatus, emit func(Event)) error {
	now := s.now()
	switch {
	case p.Status.Final():
		return &PlanStateError{Status: p.Status}
	case p.Status == PlanPending && !now.Before(p.DecideBy),
		p.Status == PlanApproved && !now.Before(p.ValidUntil):
		if err := s.endPlan(tx, p, items, PlanExpired, "console", audit.ChannelAPI, "", emit); err != nil {
			return err
		}
		return commitAnd(&PlanStateError{Status: PlanExpired})
	case want != "" && p.Status != want:
		if want == PlanApproved {
			return ErrPlanNotApproved
		}
		return &PlanStateError{Status: p.Status}
	}
	return nil
}

// ApprovePlanInput is one operator's approval of a whole plan, bound to
// the plan digest the operator was shown.
type ApprovePlanInput struct {
	Operator, Channel, PlanID string
	// Digest is the plan digest shown.
	Digest  string
	Comment string
	// Confirm holds, per item index, what the approver typed where the
	// item's tool asks for its target or a word; AcceptWarnings
	// acknowledges the items' deception warnings.
	Confirm        map[int]string
	AcceptWarnings bool
	// Presented is the plan page's presentation token (present.PagePlan).
	Presented string
	// Listed is, for an approval through the operator API, the listing
	// token its plan listing gave the plan (PlanListingToken); checked,
	// never recorded as a presentation.
	Listed string
	// ValidFor shortens how long the approved plan stays valid; zero or
	// more than the plan's MaxFor means MaxFor.
	ValidFor time.Duration
}

// ApprovePlan records the operator's approval of a plan, on each of its
// items (MethodPlan, Via the plan), after every check an approval of each
// item alone would make: the requirement is the strictest of the items
// (the most approvals, an approver every item's condition allows, none of
// any item's owners, never one's own calls). The approval that completes
// the plan's requirement approves the plan: its items stay pending until
// the agent mints them, one by one, until ValidUntil.
func (s *Service) ApprovePlan(ctx context.Context, in ApprovePlanInput) (*Plan, error) {
	comment := strings.TrimSpace(in.Comment)
	if len(comment) > MaxReasonBytes {
		return nil, fmt.Errorf("%w (at most %d bytes)", ErrCommentTooLong, MaxReasonBytes)
	}
	if err := account.CheckReserved(in.Operator); err != nil {
		return nil, fmt.Errorf("queue: operator %q: %w", in.Operator, err)
	}
	var out *Plan
	err := s.update(ctx, func(tx Tx, emit func(Event)) error {
		u, err := decider(tx, in.Operator)
		if err != nil {
			return err
		}
		p, items, err := s.loadPlan(tx, in.PlanID)
		if err != nil {
			return err
		}
		if err := s.livePlan(tx, p, items, PlanPending, emit); err != nil {
			return err
		}
		if in.Digest != p.Digest {
			return ErrDigestMismatch
		}
		now := s.now()
		if err := s.checkListed(in.Channel, in.Listed, in.Operator, planItems(p, items), now); err != nil {
			return err
		}
		shown, err := s.presented(in.Channel, in.Presented, present.PagePlan, in.Operator, planItems(p, items), now)
		if err != nil {
			return err
		}
		if shown != nil && now.Sub(shown.At) > p.DecideBy.Sub(p.CreatedAt) {
			return fmt.Errorf("%w (%w: rendered %s)", ErrPresentation, present.ErrStale, shown.At.UTC().Format(time.RFC3339))
		}
		for i, c := range items {
			if c.Status != StatusPending {
				return &NotPendingError{Status: c.Status}
			}
			if err := s.checkApproval(tx, c, u, c.Digest); err != nil {
				return fmt.Errorf("item %d: %w", i, err)
			}
			if err := Confirmation(s.Tools(), c, in.Confirm[i], in.AcceptWarnings); err != nil {
				return fmt.Errorf("item %d: %w", i, err)
			}
			if err := approvableFrom(s.Tools(), c, in.Channel); err != nil {
				return fmt.Errorf("item %d: %w", i, err)
			}
		}
		// On its page a plan is approved by a person who read it (method
		// plan); through the operator API by a script holding a person's
		// token (method command, unattested).
		method := MethodPlan
		if in.Channel == audit.ChannelAPI {
			method = MethodCommand
		}
		for _, c := range items {
			a := Approval{Operator: in.Operator, Channel: in.Channel, At: now, Comment: comment, Digest: c.Digest,
				Method: method, Via: p.ID, Presented: shown}
			if err := s.recordApproval(tx, c, u, a, map[string]any{"plan": p.ID, "plan_digest": p.Digest}); err != nil {
				return err
			}
		}
		if len(items[0].Approvals) >= p.ApprovalsRequired {
			life := p.MaxFor
			if in.ValidFor > 0 && in.ValidFor < life {
				life = in.ValidFor
			}
			p.Status, p.DecidedAt, p.DecidedBy, p.ValidUntil = PlanApproved, now, in.Operator, now.Add(life)
			if err := tx.UpdatePlan(p); err != nil {
				return err
			}
			if err := tx.Append(s.entry(audit.KindPlanApproved, nil, in.Operator, in.Channel, s.planDetails(p, map[string]any{
				"valid_until": formatTime(p.ValidUntil), "received": int64(len(items[0].Approvals))}))); err != nil {
				return err
			}
			emit(Event{Kind: audit.KindPlanApproved, Plan: p, Items: items})
		}
		out = p
		return nil
	})
	if err == nil && out.Status == PlanApproved && !s.wakesBefore(out.ValidUntil) {
		s.kickExpiry()
	}
	return out, err
}

// planItems are what a plan page presents: each item, then the plan
// digest.
func planItems(p *Plan, items []*Call) []present.Item {
	out := make([]present.Item, 0, len(items)+1)
	for _, c := range items {
		out = append(out, present.Item{CallID: c.ID, Digest: c.Digest})
	}
	return append(out, present.PlanItem(p.Digest))
}

// PresentPlan is the presentation token of plan p's page for viewer,
// showing its items and its digest; "" when the service checks no
// presentations.
func (s *Service) PresentPlan(viewer string, p *Plan, items []*Call) string {
	if s.present == nil {
		return ""
	}
	return s.present.Token(present.Shown{Page: present.PagePlan, Viewer: viewer, At: s.now(), Items: planItems(p, items)})
}

// PlanListingToken is the token the operator API's plan listing gives plan
// p for viewer (present.PageListing over its items and its digest): an
// approval through the API carries it to name the plan as it was listed.
// "" when the service checks no listings.
func (s *Service) PlanListingToken(viewer string, p *Plan, items []*Call) string {
	return s.listingToken(viewer, planItems(p, items))
}

// DenyPlan ends a pending plan with the operator's reason: every item is
// denied with it.
func (s *Service) DenyPlan(ctx context.Context, operator, channel, id, reason string) (*Plan, error) {
	reason = strings.TrimSpace(reason)
	var out *Plan
	err := s.update(ctx, func(tx Tx, emit func(Event)) error {
		if err := mayDecide(tx, operator); err != nil {
			return err
		}
		if reason == "" {
			return ErrReasonRequired
		}
		if len(reason) > MaxReasonBytes {
			return ErrReasonTooLong
		}
		p, items, err := s.loadPlan(tx, id)
		if err != nil {
			return err
		}
		if err := s.livePlan(tx, p, items, PlanPending, emit); err != nil {
			return err
		}
		if err := s.endPlan(tx, p, items, PlanDenied, operator, channel, reason, emit); err != nil {
			return err
		}
		out = p
		return nil
	})
	return out, err
}

// CancelPlan is the submitting agent's withdrawal of its plan, pending or
// approved: every unredeemed grant of its items is revoked and the items
// not yet minted are cancelled.
func (s *Service) CancelPlan(ctx context.Context, who Principal, id string) (*Plan, error) {
	var out *Plan
	err := s.update(ctx, func(tx Tx, emit func(Event)) error {
		p, items, err := s.loadPlan(tx, id)
		if err != nil {
			return err
		}
		if p.SubmittedBy != who.TokenID || p.Actor != who.Actor {
			return ErrPlanNotFound
		}
		if err := s.livePlan(tx, p, items, "", emit); err != nil {
			return err
		}
		if err := s.endPlan(tx, p, items, PlanCancelled, who.Actor, audit.ChannelAPI, "cancelled by the agent", emit); err != nil {
			return err
		}
		out = p
		return nil
	})
	return out, err
}

// RevokePlan is an operator's revocation of a plan, pending or approved,
// with a reason: as CancelPlan, by a person.
func (s *Service) RevokePlan(ctx context.Context, operator, channel, id, reason string) (*Plan, error) {
	reason = strings.TrimSpace(reason)
	if reason == "" {
		return nil, ErrReasonRequired
	}
	if len(reason) > MaxReasonBytes {
		return nil, ErrReasonTooLong
	}
	var out *Plan
	err := s.update(ctx, func(tx Tx, emit func(Event)) error {
		if err := mayDecide(tx, operator); err != nil {
			return err
		}
		p, items, err := s.loadPlan(tx, id)
		if err != nil {
			return err
		}
		if err := s.livePlan(tx, p, items, "", emit); err != nil {
			return err
		}
		if err := s.endPlan(tx, p, items, PlanCancelled, operator, channel, reason, emit); err != nil {
			return err
		}
		out = p
		return nil
	})
	return out, err
}

// endPlan ends p as status (denied, cancelled or expired) in tx: pending
// items end with it (denied with the reason, cancelled, expired), and the
// live grants of minted, unredeemed items are revoked.
func (s *Service) endPlan(tx Tx, p *Plan, items []*Call, status PlanStatus, by, channel, reason string, emit func(Event)) error {
	now := s.now()
	for _, c := range items {
		switch {
		case c.Status == StatusPending:
			c.DecidedAt = now
			kind, details := "", map[string]any{"plan": p.ID, "digest": c.Digest}
			switch status {
			case PlanDenied:
				c.Status, kind = StatusDenied, audit.KindDenied
				c.Denial = &Denial{By: by, Channel: channel, Reason: reason, At: now}
				details["reason"] = reason
			case PlanCancelled:
				c.Status, kind = StatusCancelled, audit.KindCancelled
			default:
				c.Status, kind = StatusExpired, audit.KindExpired
				details["decide_by"] = formatTime(c.DecideBy)
			}
			if err := tx.UpdateCall(c); err != nil {
				return err
			}
			if err := tx.Append(s.entry(kind, c, by, channel, details)); err != nil {
				return err
			}
			emit(Event{Kind: kind, Call: c})
		case c.Status == StatusApproved && c.Revoked == nil && c.GrantJTI != "" && now.Before(c.GrantExpiresAt):
			why := reason
			if why == "" {
				why = "the plan " + string(status)
			}
			r := Revocation{CallID: c.ID, JTI: c.GrantJTI, By: by, Channel: channel, Reason: why, At: now}
			if err := tx.InsertRevocation(r); err != nil {
				return err
			}
			c.Revoked = &r
			if err := tx.Append(s.entry(audit.KindRevoked, c, by, channel, map[string]any{
				"jti": c.GrantJTI, "digest": c.Digest, "reason": why, "plan": p.ID})); err != nil {
				return err
			}
			emit(Event{Kind: audit.KindRevoked, Call: c})
		}
	}
	p.Status, p.DecidedAt, p.DecidedBy, p.Reason = status, now, by, reason
	if err := tx.UpdatePlan(p); err != nil {
		return err
	}
	kind := map[PlanStatus]string{PlanDenied: audit.KindPlanDenied, PlanCancelled: audit.KindPlanCancelled,
		PlanExpired: audit.KindPlanExpired}[status]
	more := map[string]any{}
	if reason != "" {
		more["reason"] = reason
	}
	if err := tx.Append(s.entry(kind, nil, by, channel, s.planDetails(p, more))); err != nil {
		return err
	}
	emit(Event{Kind: kind, Plan: p, Items: items})
	return nil
}

// Halted reports whether an item of the plan reported failed or unknown,
// or its lease expired: no further item is minted.
func Halted(items []*Call) bool {
	for _, c := range items {
		if o := c.Outcome; o != nil && o.Status != OutcomeSucceeded {
			return true
		}
	}
	return false
}

// Shown is the plan's status as agents and people see it: halted for an
// approved plan one of whose items went wrong, else the stored status.
func (p *Plan) Shown(items []*Call) PlanStatus {
	if p.Status == PlanApproved && Halted(items) {
		return PlanHalted
	}
	return p.Status
}

// MintPlanItem mints the grant of item n of an approved plan, for the
// token that submitted it. The minting transaction re-runs everything an
// approval checks on the item as stored: the envelope's integrity, its
// tool unchanged, no freeze, the rules with now at minting (a deny denies
// the item; a rule asking for more than the plan's approval refuses), and
// the standing of every approver. An item has at most one grant: minting
// an item already minted returns it unchanged. With an ordered plan item
// n mints only after item n-1 reported succeeded; an item that reported
// failed or unknown, or whose lease expired, halts the plan.
func (s *Service) MintPlanItem(ctx context.Context, who Principal, id string, n int) (*Call, error) {
	var out *Call
	err := s.update(ctx, func(tx Tx, emit func(Event)) error {
		p, items, err := s.loadPlan(tx, id)
		if err != nil {
			return err
		}
		if p.SubmittedBy != who.TokenID || p.Actor != who.Actor {
			return ErrPlanNotFound
		}
		if n < 0 || n >= len(items) {
			return ErrNotFound
		}
		c := items[n]
		if c.Status == StatusApproved || c.Status == StatusRedeemed {
			out = c // one grant per item: minting again returns it
			return nil
		}
		if c.Status != StatusPending {
			return &NotPendingError{Status: c.Status}
		}
		if err := s.livePlan(tx, p, items, PlanApproved, emit); err != nil {
			return err
		}
		if Halted(items) {
			return ErrPlanHalted
		}
		if p.Ordered && n > 0 {
			if o := items[n-1].Outcome; o == nil || o.Status != OutcomeSucceeded {
				return ErrPlanOrder
			}
		}
		if s.ToolChanged(c) {
			return ErrToolChanged
		}
		if f, err := frozen(tx, c.Tool, c.Actor); err != nil {
			return err
		} else if f != nil {
			return &FrozenError{Freeze: *f}
		}
		t, _ := s.tools.Tool(c.Tool)
		now := s.now()
		probe := *c
		probe.CreatedAt = now
		d := s.decide(t, &probe)
		switch d.Action {
		case policy.Deny:
			rule, reason := "", d.Reason
			by := policy.PrincipalPrefix
			if d.Rule != nil {
				rule, by = d.Rule.ID, d.Rule.Principal()
			}
			if err := s.deny(tx, c, by, ChannelPolicy, reason, map[string]any{"rule": rule, "plan": p.ID, "at_minting": true}, emit); err != nil {
				return err
			}
			return commitAnd(&PolicyDeniedError{CallID: c.ID, Rule: rule, Reason: reason})
		case policy.Ask:
			if d.RequirePasskey || d.Approvals > len(c.Approvals) {
				return ErrPlanRequirement
			}
		}
		for _, a := range c.Approvals {
			u, err := decider(tx, a.Operator)
			if err != nil {
				return fmt.Errorf("%w (%s: %w)", ErrPlanApprover, a.Operator, err)
			}
			if c.ProposedBy(u) || c.OwnedBy(u) != "" || !c.Approvers.Allows(string(u.Role), u.Groups) {
				return fmt.Errorf("%w (%s)", ErrPlanApprover, a.Operator)
			}
		}
		if err := s.mint(tx, c, now, nil); err != nil {
			return err
		}
		emit(Event{Kind: audit.KindGranted, Call: c})
		out = c
		return nil
	})
	if err != nil {
		return nil, err // nothing of a transaction that did not commit
	}
	return out, nil
}

// WaitPlan returns plan id as PlanFor does, waiting up to d (at most
// MaxWait) while it is pending: it returns as soon as the plan is decided
// or ends, when d passes, or when the queue shuts down, with the plan as
// it is then. A plan long-poll follows the call long-poll's rules.
func (s *Service) WaitPlan(ctx context.Context, who Principal, id string, d time.Duration) (*Plan, []*Call, error) {
	d = min(d, MaxWait)
	ch, done := s.planWaits.add(id)
	defer done()
	p, items, err := s.PlanFor(ctx, who, id)
	if err != nil || p.Status != PlanPending || d <= 0 {
		return p, items, err
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ch:
	case <-timer.C:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	case <-s.stopping:
	}
	return s.PlanFor(context.WithoutCancel(ctx), who, id)
}

// planWaiters wakes plan long-polls: each waiter is a one-slot channel
// that a decision or end of its plan fills. Waking never blocks.
type planWaiters struct {
	mu sync.Mutex
	m  map[string]map[chan struct{}]struct{}
}

func (w *planWaiters) add(id string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	if w.m == nil {
		w.m = map[string]map[chan struct{}]struct{}{}
	}
	set := w.m[id]
	if set == nil {
		set = map[chan struct{}]struct{}{}
		w.m[id] = set
	}
	set[ch] = struct{}{}
	w.mu.Unlock()
	return ch, func() {
		w.mu.Lock()
		delete(set, ch)
		if len(set) == 0 {
			delete(w.m, id)
		}
		w.mu.Unlock()
	}
}

func (w *planWaiters) wake(id string) {
	w.mu.Lock()
	for ch := range w.m[id] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	w.mu.Unlock()
}

// PlanFor reads plan id and its items for the token that submitted it.
func (s *Service) PlanFor(ctx context.Context, who Principal, id string) (*Plan, []*Call, error) {
	p, items, err := s.ReadPlan(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	if p.SubmittedBy != who.TokenID || p.Actor != who.Actor {
		return nil, nil, ErrPlanNotFound
	}
	return p, items, nil
}

// ReadPlan reads plan id and its items, outside any write transaction.
func (s *Service) ReadPlan(ctx context.Context, id string) (*Plan, []*Call, error) {
	p, err := s.store.Plan(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	items, err := s.store.PlanItems(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	return p, items, nil
}

// PendingPlans lists the plans waiting for a decision, by deadline.
func (s *Service) PendingPlans(ctx context.Context, limit int) ([]*Plan, error) {
	return s.store.PendingPlans(ctx, s.now(), limit)
}
