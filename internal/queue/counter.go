package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/policy"
	"github.com/countersign/countersign/internal/present"
	"github.com/countersign/countersign/internal/tools"
)

// CounteredMemory is how long an identical resubmission of a countered
// call is refused with previously_countered, naming the counter.
const CounteredMemory = 10 * time.Minute

// ErrNotCounterable refuses a counter-proposal of a call whose tool does
// not opt in (counter: in the tools file), or an edit of a member the
// tool's counter block does not list.
var ErrNotCounterable = errors.New("queue: this tool's calls cannot be countered; its tools file entry has no counter block")

// ErrCounterUnchanged refuses a counter-proposal whose edit changes
// nothing the digest covers: approve or deny the call instead.
var ErrCounterUnchanged = errors.New("queue: the edit changes nothing the digest covers; approve or deny the call instead")

// ErrNotCounter refuses accepting a call that is not a counter-proposal.
var ErrNotCounter = errors.New("queue: only a counter-proposal is accepted; this call is not one")

// CounteredError is ErrPreviouslyCountered: an identical resubmission of
// a call an operator countered, with the counter to use instead.
type CounteredError struct {
	CallID, CounterID string
	At                time.Time
}

// ErrPreviouslyCountered is what CounteredError unwraps to.
var ErrPreviouslyCountered = errors.New("queue: an operator countered this same call; accept or decline the counter-proposal")

func (e *CounteredError) Error() string {
	return fmt.Sprintf("queue: the same call (%s) was countered at %s by %s; accept or decline that counter-proposal",
		e.CallID, e.At.Format(time.RFC3339), e.CounterID)
}

func (e *CounteredError) Unwrap() error { return ErrPreviouslyCountered }

// CounterDeniedError is a counter-proposal a rule denies: the edit is
// refused and the original stays pending.
type CounterDeniedError struct{ Rule, Reason string }

func (e *CounterDeniedError) Error() string {
	return fmt.Sprintf("queue: rule %s denies the edited call: %s", e.Rule, e.Reason)
}

// CounterInput is an operator's counter-proposal of a pending call.
type CounterInput struct {
	Operator, Channel, CallID string
	// Digest is the original's digest as the operator was shown it.
	Digest string
	// Edits maps what changes to its new value as JSON text: "target" (a
	// JSON string) or a JSON Pointer into args the tool's counter block
	// lists.
	Edits map[string]json.RawMessage
	// Presented is the presentation token of the counter's review page
	// (present.PageCounter), which showed the original and the new digest.
	Presented string
	// Confirm is what the editor typed where the tool asks for the target
	// (or a word) to be typed, as the review showed the edited call, and
	// AcceptWarnings acknowledges the edited call's deception warning: the
	// editor's approval carries them as any person's does (Confirmation).
	Confirm        string
	AcceptWarnings bool
	// Listed is, for a counter through the operator API, the listing token
	// a listing gave the original call (ListingToken).
	Listed string
}

// CounterDraft is a checked, not yet stored counter-proposal: the edited
// call and its digest, for the review page.
type CounterDraft struct {
	Original *Call
	Tool     string
	Target   string
	Args     canonical.Object
	Envelope []byte
	Digest   string
	// Changed lists what the edit changes ("target" and pointers), sorted.
	Changed []string
	tool    *tools.Tool
	rule    policy.Decision
}

// DraftCounter checks an edit of original (read outside any transaction)
// exactly as a proposal: every problem is listed in a *ProposalError with
// paths into the proposal. The rules run on the edited call; a deny
// refuses it (*CounterDeniedError). Nothing is stored.
func (s *Service) DraftCounter(original *Call, edits map[string]json.RawMessage) (*CounterDraft, error) {
	t, ok := s.tools.Tool(original.Tool)
	if !ok || t.Counter == nil {
		return nil, ErrNotCounterable
	}
	if t.DefinitionDigest != original.ToolDigest {
		return nil, ErrToolChanged
	}
	var problems canonical.Problems
	args, err := editableArgs(original.Args)
	if err != nil {
		return nil, err
	}
	target := original.Target
	keys := make([]string, 0, len(edits))
	for k := range edits {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := edits[k]
		if !t.Counter.Edits(k) {
			problems = append(problems, canonical.Problem{Code: "not_editable", Path: editPath(k), Offset: -1,
				Message: fmt.Sprintf("%s may not be edited; the tool's counter block lists %s", k, strings.Join(t.Counter.Edit, ", "))})
			continue
		}
		if !json.Valid(v) {
			problems = append(problems, canonical.Problem{Code: canonical.CodeMalformedJSON, Path: editPath(k), Offset: -1,
				Message: fmt.Sprintf("the new value of %s is not JSON: type a number such as 4000, true or false, or text in double quotes", k)})
			continue
		}
		if k == tools.CounterTarget {
			if err := json.Unmarshal(v, &target); err != nil {
				problems = append(problems, canonical.Problem{Code: canonical.CodeWrongType, Path: "/target", Offset: -1,
					Message: "the target must be a string"})
			}
			continue
		}
		if err := setPointer(args, k, v); err != nil {
			problems = append(problems, canonical.Problem{Code: "invalid_pointer", Path: editPath(k), Offset: -1, Message: err.Error()})
		}
	}
	// An edit that could not be applied keeps the call's value, so that
	// the rest of the edit is still checked and every problem is listed.
	proposal := map[string]any{"tool": original.Tool, "target": target, "args": args}
	if original.Rationale != "" {
		proposal["rationale"] = original.Rationale
	}
	body, err := json.Marshal(proposal)
	if err != nil {
		return nil, fmt.Errorf("queue: encode counter: %w", err)
	}
	p, perr := canonical.ParseProposal(body)
	if perr != nil {
		return nil, &ProposalError{Kind: KindInvalidArguments, Tool: original.Tool, Problems: append(problems, problemsOf(perr)...)}
	}
	if _, more := s.tools.Check(p); len(problems)+len(more) > 0 {
		return nil, &ProposalError{Kind: KindInvalidArguments, Tool: original.Tool, Problems: append(problems, more...)}
	}
	env := p.Envelope(original.Actor, original.Audience)
	env.Args = t.Bound(p.Args)
	envBytes, err := env.Canonical()
	if err != nil {
		return nil, fmt.Errorf("queue: canonical envelope: %w", err)
	}
	d := &CounterDraft{Original: original, Tool: p.Tool, Target: p.Target, Args: p.Args, Envelope: envBytes,
		Digest: canonical.DigestOf(envBytes), tool: t}
	if d.Digest == original.Digest {
		return nil, ErrCounterUnchanged
	}
	if p.Target != original.Target {
		d.Changed = append(d.Changed, tools.CounterTarget)
	}
	for _, k := range keys {
		if k == tools.CounterTarget {
			continue
		}
		was, _ := canonical.Lookup(original.Args, k)
		now, _ := canonical.Lookup(p.Args, k)
		if !sameValue(was, now) {
			d.Changed = append(d.Changed, k)
		}
	}
	probe := &Call{Actor: original.Actor, Audience: original.Audience, Tool: p.Tool, Target: p.Target, Args: p.Args,
		CreatedAt: s.now()}
	d.rule = s.decide(t, probe)
	if d.rule.Action == policy.Deny {
		rule, reason := "", ""
		if d.rule.Rule != nil {
			rule, reason = d.rule.Rule.ID, d.rule.Rule.Reason
		}
		return nil, &CounterDeniedError{Rule: rule, Reason: reason}
	}
	return d, nil
}

// Deceptive reports whether the edited call carries a deception warning,
// which the editor's approval must acknowledge.
func (d *CounterDraft) Deceptive() bool {
	o := d.Original
	return Deceptive(&Call{ID: o.ID, Actor: o.Actor, Audience: o.Audience, Tool: d.Tool, Target: d.Target, Args: d.Args,
		Rationale: o.Rationale, Envelope: d.Envelope, Digest: d.Digest})
}

// Narrows reports whether every change of the draft narrows the call: an
// integer the schema bounds below, lowered, or a string enum moved to
// another of its listed values. A changed target never narrows.
func (d *CounterDraft) Narrows() bool {
	for _, k := range d.Changed {
		if k == tools.CounterTarget {
			return false
		}
		kind, _, _, _ := d.tool.VaryOf(k)
		switch kind {
		case tools.VaryEnum:
		case tools.VaryInteger:
			was, _ := canonical.Lookup(d.Original.Args, k)
			now, _ := canonical.Lookup(d.Args, k)
			w, ok1 := was.(int64)
			n, ok2 := now.(int64)
			if !ok1 || !ok2 || n >= w {
				return false
			}
		default:
			return false
		}
	}
	return true
}

func editPath(k string) string {
	if k == tools.CounterTarget {
		return "/target"
	}
	return "/args" + k
}

// sameValue compares two canonical values by their canonical encoding.
func sameValue(a, b any) bool {
	ea, err1 := canonical.Encode(a)
	eb, err2 := canonical.Encode(b)
	return err1 == nil && err2 == nil && string(ea) == string(eb)
}

// editableArgs is args as plain JSON values, whose members an edit sets
// before the whole is parsed again as a proposal.
func editableArgs(args canonical.Object) (map[string]any, error) {
	b, err := canonical.Encode(args)
	if err != nil {
		return nil, fmt.Errorf("queue: encode args: %w", err)
	}
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("queue: decode args: %w", err)
	}
	if m == nil {
		m = map[string]any{}
	}
	return m, nil
}

// setPointer sets the member at ptr of args to v, making the objects on
// the way when they are absent.
func setPointer(args map[string]any, ptr string, v json.RawMessage) error {
	tokens, err := canonical.SplitPointer(ptr)
	if err != nil || len(tokens) == 0 {
		return fmt.Errorf("%s is not a JSON Pointer into args", ptr)
	}
	cur := args
	for _, tok := range tokens[:len(tokens)-1] {
		next, ok := cur[tok]
		if !ok {
			m := map[string]any{}
			cur[tok] = m
			cur = m
			continue
		}
		m, ok := next.(map[string]any)
		if !ok {
			return fmt.Errorf("%s does not lead through objects", ptr)
		}
		cur = m
	}
	cur[tokens[len(tokens)-1]] = v
	return nil
}

// Counter answers pending call in.CallID with an edited call, its
// counter-proposal, in one transaction: the original ends as countered
// (naming the counter), and the counter is a new pending call with the
// original's actor, audience and submitting token, CounteredFrom and
// EditedBy set. Its requirement is the stricter of the original's and its
// own; the original's approvals do not carry over, and the editor's
// approval counts as one (MethodCounter) unless the call must be approved
// with a passkey. Its grant is minted only once its agent accepted it
// (Accept) and its approvals are complete.
func (s *Service) Counter(ctx context.Context, in CounterInput) (*Call, error) {
	seen, err := s.store.Call(ctx, in.CallID)
	if err != nil {
		return nil, err
	}
	if seen.Status != StatusPending {
		return nil, &NotPendingError{Status: seen.Status}
	}
	d, err := s.DraftCounter(seen, in.Edits)
	if err != nil {
		return nil, err
	}
	t := d.tool
	var out *Call
	err = s.update(ctx, func(tx Tx, emit func(Event)) error {
		u, err := decider(tx, in.Operator)
		if err != nil {
			return err
		}
		orig, err := s.loadPending(tx, in.CallID, emit)
		if err != nil {
			return err
		}
		if orig.Digest != seen.Digest || string(orig.Envelope) != string(seen.Envelope) {
			return ErrDigestMismatch
		}
		if err := s.checkApproval(tx, orig, u, in.Digest); err != nil {
			return err
		}
		// The editor's approval of the counter is an approval of the tool
		// through in.Channel: the tool's approve_from binds it.
		if err := approvableFrom(s.Tools(), orig, in.Channel); err != nil {
			return err
		}
		now := s.now()
		if err := s.checkListed(in.Channel, in.Listed, in.Operator, callItem(orig), now); err != nil {
			return err
		}
		shown, err := s.presented(in.Channel, in.Presented, present.PageCounter, in.Operator,
			[]present.Item{{CallID: orig.ID, Digest: orig.Digest}, present.CounterItem(d.Digest)}, now)
		if err != nil {
			return err
		}
		if err := shownInTime(shown, orig, now); err != nil {
			return err
		}
		c := &Call{
			ID: NewCallID(), Actor: orig.Actor, Audience: orig.Audience, Tool: d.Tool, Target: d.Target,
			Args: d.Args, Rationale: orig.Rationale, Envelope: d.Envelope, Digest: d.Digest,
			Status: StatusPending, ApprovalsRequired: max(orig.ApprovalsRequired, t.Approvals), GrantTTL: t.GrantTTL,
			CreatedAt: now, DecideBy: now.Add(t.DecideWithin), ToolDigest: t.DefinitionDigest,
			OutcomeWithin: t.OutcomeWithin, SubmittedBy: orig.SubmittedBy,
			Owners: append([]string(nil), orig.Owners...), Approvers: orig.Approvers,
			// The tiers the original reached stay reached (Approvers has
			// what they added); the rest are counted from the counter's
			// submission.
			Escalate: orig.Escalate, Reached: orig.Reached,
			RequirePasskey: orig.RequirePasskey || t.RequirePasskey,
			CounteredFrom:  orig.ID, EditedBy: in.Operator,
		}
		if d.rule.Action == policy.Ask {
			c.ApprovalsRequired = max(c.ApprovalsRequired, d.rule.Approvals)
			c.RequirePasskey = c.RequirePasskey || d.rule.RequirePasskey
		}
		if t.Counter.Forward && !d.Narrows() {
			// The MCP gateway runs a forwarded counter itself: an edit
			// that does not only narrow the call needs a person other
			// than its editor.
			c.ApprovalsRequired = max(c.ApprovalsRequired, 2)
		}
		if d.rule.Rule != nil && len(d.rule.Rule.Notify) > 0 {
			c.Notify = append([]string(nil), d.rule.Rule.Notify...)
		}
		for _, tier := range c.Escalate[:c.Reached] {
			for _, n := range tier.Notify {
				if !slices.Contains(c.Notify, n) {
					c.Notify = append(c.Notify, n)
				}
			}
		}
		if err := tx.InsertCall(c); err != nil {
			return err
		}
		if due := c.NextTierDue(); !due.IsZero() {
			if err := tx.SetEscalation(c, due); err != nil {
				return err
			}
		}
		orig.Status, orig.DecidedAt, orig.CounteredBy = StatusCountered, now, c.ID
		if err := tx.UpdateCall(orig); err != nil {
			return err
		}
		if err := tx.Append(s.entry(audit.KindCountered, orig, in.Operator, in.Channel, map[string]any{
			"digest": orig.Digest, "counter": c.ID, "counter_digest": c.Digest, "changed": stringsAny(d.Changed)})); err != nil {
			return err
		}
		emit(Event{Kind: audit.KindCountered, Call: orig, Editor: in.Operator})
		details := map[string]any{
			"tool": c.Tool, "target": c.Target, "audience": c.Audience, "digest": c.Digest,
			"args": c.Args, "rationale": c.Rationale, "decide_by": formatTime(c.DecideBy),
			"approvals_required": int64(c.ApprovalsRequired), "tool_digest": c.ToolDigest,
			"countered_from": orig.ID, "edited_by": in.Operator}
		if len(c.Owners) > 0 {
			details["owners"] = c.Owners
		}
		if !c.Approvers.Empty() {
			details["approvers"] = map[string]any{"roles": nonNil(c.Approvers.Roles), "groups": nonNil(c.Approvers.Groups)}
		}
		if c.RequirePasskey {
			details["approve_with"] = tools.ApproveWithPasskey
		}
		if err := tx.Append(s.entry(audit.KindSubmitted, c, c.Actor, in.Channel, details)); err != nil {
			return err
		}
		emit(Event{Kind: audit.KindSubmitted, Call: c})
		if !c.RequirePasskey {
			if err := Confirmation(s.Tools(), c, in.Confirm, in.AcceptWarnings); err != nil {
				return err
			}
			a := Approval{Operator: in.Operator, Channel: in.Channel, At: now, Digest: c.Digest,
				Method: MethodCounter, Presented: shown}
			if err := s.addApproval(tx, c, u, a, map[string]any{}, nil, emit); err != nil {
				return err
			}
		}
		out = c
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !s.wakesBefore(out.DecideBy) {
		s.kickExpiry()
	}
	return out, nil
}

func stringsAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// awaitsAccept reports whether c is a counter-proposal its agent has not
// accepted yet: its grant is not minted before.
func (c *Call) awaitsAccept() bool { return c.CounteredFrom != "" && c.AcceptedAt.IsZero() }

// Accept is the submitting agent's acceptance of counter-proposal id. The
// counter's grant is minted in the same transaction when its approvals
// are complete, after the checks an approval makes on the call as stored
// (tool unchanged, no freeze), else by the approval that completes them.
// Accepting twice changes nothing.
func (s *Service) Accept(ctx context.Context, who Principal, id string) (*Call, error) {
	var out *Call
	err := s.update(ctx, func(tx Tx, emit func(Event)) error {
		c, err := tx.Call(id)
		if err != nil {
			return err
		}
		if !c.SubmittedByToken(who) {
			return ErrNotFound
		}
		if c.CounteredFrom == "" {
			return ErrNotCounter
		}
		if !c.AcceptedAt.IsZero() {
			out = c
			return nil
		}
		if c, err = s.loadPending(tx, id, emit); err != nil {
			return err
		}
		now := s.now()
		if len(c.Approvals) >= c.ApprovalsRequired {
			if s.ToolChanged(c) {
				return ErrToolChanged
			}
			if f, err := frozen(tx, c.Tool, c.Actor); err != nil {
				return err
			} else if f != nil {
				return &FrozenError{Freeze: *f}
			}
		}
		c.AcceptedAt = now
		if err := tx.UpdateCall(c); err != nil {
			return err
		}
		if err := tx.Append(s.entry(audit.KindCounterAccepted, c, who.Actor, audit.ChannelAPI, map[string]any{
			"digest": c.Digest, "countered_from": c.CounteredFrom})); err != nil {
			return err
		}
		if len(c.Approvals) >= c.ApprovalsRequired {
			if err := s.mint(tx, c, now, nil); err != nil {
				return err
			}
			emit(Event{Kind: audit.KindGranted, Call: c})
		}
		out = c
		return nil
	})
	return out, err
}

// PresentCounter is the presentation token of the review page of a
// counter-proposal of orig (present.PageCounter): the original with its
// digest and the edited call's digest, for viewer; "" when the service
// checks no presentations.
func (s *Service) PresentCounter(viewer string, orig *Call, counterDigest string) string {
	if s.present == nil {
		return ""
	}
	return s.present.Token(present.Shown{Page: present.PageCounter, Viewer: viewer, At: s.now(),
		Items: []present.Item{{CallID: orig.ID, Digest: orig.Digest}, present.CounterItem(counterDigest)}})
}
