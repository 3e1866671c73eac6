// Package answer builds the agent API's answers, the shapes of package
// wire, from the domain's values: a stored call, a redemption, a lease, an
// audit checkpoint, an error. The server, the control socket and the
// command line answer with what it builds.
package answer

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/grant"
	"github.com/countersign/countersign/internal/mcp/catalog"
	"github.com/countersign/countersign/internal/problem"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/wire"
)

// at is a time as the API gives it: UTC, every digit kept.
func at(t time.Time) time.Time { return t.UTC() }

// second is a time as the API gives it to the second: UTC, the fraction
// dropped.
func second(t time.Time) time.Time { return t.UTC().Truncate(time.Second) }

// CallAsStored is the call object with the people it names as stored (a
// single-sign-on operator by their principal), for operators' own tools:
// the command line and the control socket. Agents receive Call with the
// names people see.
func CallAsStored(c *queue.Call, now time.Time) (wire.Call, error) {
	return Call(c, func(name string) string { return name }, now)
}

// Call is the call object at now (which judges whether an approved call's
// grant is still live) with each person named by name. It fails only when
// the stored arguments cannot be written as JSON.
func Call(c *queue.Call, name func(string) string, now time.Time) (wire.Call, error) {
	args, err := c.Args.MarshalJSON()
	if err != nil {
		return wire.Call{}, fmt.Errorf("answer: call %s: args: %w", c.ID, err)
	}
	v := wire.Call{
		ID:            c.ID,
		Status:        wire.Status(c.Shown()),
		Actor:         c.Actor,
		Audience:      c.Audience,
		Tool:          c.Tool,
		Target:        c.Target,
		Args:          args,
		Digest:        c.Digest,
		CreatedAt:     at(c.CreatedAt),
		DecideBy:      at(c.DecideBy),
		Approvals:     approvals(c, name),
		Rationale:     c.Rationale,
		CounteredFrom: c.CounteredFrom,
	}
	if !c.AcceptedAt.IsZero() {
		v.AcceptedAt = at(c.AcceptedAt)
	}
	if len(c.Owners) > 0 {
		v.Owners = account.PublicOwners(c.Owners, name)
	}
	for _, a := range c.Approvals {
		if a.Comment != "" {
			v.Comments = append(v.Comments, wire.Comment{By: name(a.Operator), Comment: a.Comment, At: at(a.At)})
		}
	}
	if c.Shown() == queue.StatusApproved {
		v.Grant = c.Grant
		v.GrantExpiresAt = second(c.GrantExpiresAt)
	}
	v.GrantState = wire.GrantState(c.GrantState(now))
	if r := c.Revoked; r != nil {
		v.Revocation = &wire.Revocation{By: name(r.By), Reason: r.Reason, At: at(r.At)}
	}
	if d := c.Denial; d != nil {
		v.Decision = &wire.Decision{By: name(d.By), Reason: d.Reason, At: at(d.At)}
	}
	v.DecidedByRule = c.DecidedByRule()
	if c.Status == queue.StatusRedeemed {
		v.RedeemedAt = at(c.RedeemedAt)
		v.LeaseUntil = at(c.LeaseUntil)
	}
	if o := c.Outcome; o != nil {
		v.Outcome = &wire.Outcome{Status: o.Status, Detail: o.Detail, At: at(o.At)}
	}
	if r := c.Resolution; r != nil {
		v.Resolution = &wire.Resolution{Verdict: r.Verdict, By: name(r.By), Note: r.Note, Evidence: r.Evidence, At: at(r.At)}
	}
	v.Lineage = lineage(c, &v, name)
	return v, nil
}

// Plan is the plan object of p and its items at now, each person named by
// name.
func Plan(p *queue.Plan, items []*queue.Call, name func(string) string, now time.Time) (wire.Plan, error) {
	shown := p.Shown(items)
	v := wire.Plan{ID: p.ID, Status: wire.PlanStatus(shown), Digest: p.Digest, Ordered: p.Ordered, Rationale: p.Rationale,
		Reason: p.Reason, CreatedAt: at(p.CreatedAt), DecideBy: at(p.DecideBy), Items: make([]wire.Call, len(items)),
		Approvals: wire.Approvals{Required: p.ApprovalsRequired}}
	if !p.DecidedAt.IsZero() {
		v.DecidedAt = at(p.DecidedAt)
	}
	if !p.ValidUntil.IsZero() {
		v.ValidUntil = at(p.ValidUntil)
	}
	for i, c := range items {
		item, err := Call(c, name, now)
		if err != nil {
			return wire.Plan{}, err
		}
		InPlan(&item, p, shown, c)
		v.Items[i] = item
	}
	if len(items) > 0 {
		// Every item carries each approval of the plan.
		v.Approvals.Received = len(items[0].Approvals)
		v.Approvals.Given = approvals(items[0], name).Given
		for i := range v.Approvals.Given {
			v.Approvals.Given[i].Digest = p.Digest // each was given for the plan's digest
		}
	}
	return v, nil
}

// InPlan sets v.Plan, on the call object of item c of plan p shown as
// shown.
func InPlan(v *wire.Call, p *queue.Plan, shown queue.PlanStatus, c *queue.Call) {
	v.Plan = &wire.PlanRef{ID: p.ID, Index: c.PlanIndex, State: wire.PlanStatus(shown)}
	if !p.ValidUntil.IsZero() {
		v.Plan.ValidUntil = at(p.ValidUntil)
	}
}

// Countered sets v.CounteredBy, on the call object of a countered call,
// from its counter-proposal.
func Countered(v *wire.Call, counter *queue.Call) {
	v.CounteredBy = &wire.Counter{ID: counter.ID, Envelope: json.RawMessage(counter.Envelope), Digest: counter.Digest}
}

// approvals is the call object's approvals: how many the call needs and
// has, and who gave each, through which channel and how (a click, a
// passkey, a command, a rule).
func approvals(c *queue.Call, name func(string) string) wire.Approvals {
	v := wire.Approvals{Required: c.ApprovalsRequired, Received: len(c.Approvals)}
	if len(c.Approvals) == 0 {
		return v
	}
	v.Given = make([]wire.Approval, len(c.Approvals))
	for i, a := range c.Approvals {
		v.Given[i] = wire.Approval{By: name(a.Operator), Channel: a.Channel, Method: a.Method, Human: a.Human(),
			Digest: a.Digest, Via: a.Via, Presented: presented(a.Presented), At: at(a.At), For: forName(a.For, name)}
	}
	return v
}

// forName is the delegator an approval was given for, named as its
// approver is; "" for none.
func forName(behalf string, name func(string) string) string {
	if behalf == "" {
		return ""
	}
	return name(behalf)
}

func presented(p *queue.Presented) *wire.Presented {
	if p == nil {
		return nil
	}
	return &wire.Presented{Page: p.Page, At: at(p.At)}
}

// lineage is c's history from proposal to outcome (wire.Lineage), built
// from the call as stored: v is its call object so far, with the outcome
// and resolution.
func lineage(c *queue.Call, v *wire.Call, name func(string) string) wire.Lineage {
	l := wire.Lineage{
		Proposed:   wire.Step{Digest: c.Digest, By: c.Actor, Token: c.SubmittedBy, At: at(c.CreatedAt)},
		Outcome:    v.Outcome,
		Resolution: v.Resolution,
	}
	if c.EditedBy != "" {
		l.Proposed.EditedBy = name(c.EditedBy)
	}
	for _, a := range c.Approvals {
		if p := a.Presented; p != nil {
			l.Presented = append(l.Presented, wire.Step{Digest: a.Digest, By: name(a.Operator), Page: p.Page, At: at(p.At)})
		}
		l.Decided = append(l.Decided, wire.Step{Digest: a.Digest, By: name(a.Operator), Verdict: "approved",
			Method: a.Method, Human: a.Human(), Via: a.Via, At: at(a.At), For: forName(a.For, name)})
	}
	if d := c.Denial; d != nil {
		l.Decided = append(l.Decided, wire.Step{By: name(d.By), Verdict: "denied", At: at(d.At)})
	}
	if c.Status == queue.StatusRedeemed {
		// A redemption is accepted only when the digest recomputed from
		// the call the executor presented is the grant's, and the grant's
		// is the call's: what was redeemed is c.Digest.
		l.Redeemed = &wire.Step{Digest: c.Digest, By: c.Actor, Token: c.RedeemedBy, At: at(c.RedeemedAt)}
	}
	return l
}

// Lease is the answer to a heartbeat: the redeemed call's lease.
func Lease(c *queue.Call) wire.Lease {
	return wire.Lease{CallID: c.ID, LeaseUntil: at(c.LeaseUntil), ExtendMax: int64(c.OutcomeWithinOrDefault() / time.Second)}
}

// Redemption is the answer to a redemption, accepted or rejected, with the
// sentence that says what to do about a rejection.
func Redemption(r *queue.Redemption) wire.Redemption {
	out := wire.Redemption{Decision: r.Decision(), CallID: r.CallID, Checks: checks(r.Checks)}
	if r.Accepted {
		// The exact canonical bytes that were hashed, for the executor to
		// run, and its lease.
		out.Envelope = string(r.Call.Envelope)
		out.Digest = r.Call.Digest
		out.LeaseUntil = at(r.Call.LeaseUntil)
		out.OutcomeWithin = int64(r.Call.OutcomeWithinOrDefault() / time.Second)
	} else {
		out.Reason = r.Reason
		out.Message = redeemMessage(r.Reason)
	}
	if f := r.Freeze; f != nil {
		out.Message = fmt.Sprintf("%s is frozen by an operator since %s: %s. Nothing was consumed; the grant may still be redeemed once the freeze is lifted, while it lives.",
			f.Scope(), f.At.UTC().Format(time.RFC3339), f.Reason)
		out.Freeze = &wire.Freeze{Reason: f.Reason, Since: second(f.At)}
	}
	return out
}

func checks(cs []grant.Check) []wire.Check {
	if cs == nil {
		return nil
	}
	out := make([]wire.Check, len(cs))
	for i, c := range cs {
		out[i] = wire.Check{Name: c.Name, OK: c.OK}
	}
	return out
}

func redeemMessage(reason string) string {
	switch reason {
	case "replayed":
		return "this grant was already redeemed; a grant runs a call once"
	case "expired":
		return "the grant has expired; propose the call again for a new approval"
	case "not_yet_valid":
		return "the grant is not valid yet; check the executor's clock"
	case "digest_mismatch", "tool_mismatch", "target_mismatch":
		return "the call presented is not the call that was approved; present exactly the approved tool, target and args"
	case "actor_mismatch", "audience_mismatch":
		return "this grant was issued to another actor or host"
	case "revoked":
		return "the call was cancelled or its grant revoked"
	case grant.ReasonToolChanged:
		return "this console's tools file defines the tool differently from the definition the call was made under (it changed, or the replicas run different files), so it no longer runs; propose the call again"
	}
	return "the grant is not valid; nothing was consumed"
}

// Checkpoint is the answer of the audit checkpoint.
func Checkpoint(cp audit.Checkpoint) wire.Checkpoint {
	return wire.Checkpoint{Seq: cp.Seq, Head: cp.Head, Time: cp.Time, KID: cp.KID, PublicKey: cp.PublicKey, Signature: cp.Signature}
}

// Error is the error body of e: {"error": {...}}.
func Error(e *problem.Error) wire.ErrorBody {
	return wire.ErrorBody{Error: ErrorOf(e)}
}

// ErrorOf is e in the API's error shape.
func ErrorOf(e *problem.Error) wire.Error {
	out := wire.Error{Code: e.Code, Message: e.Message, Reason: e.Reason, CallID: e.CallID, Hint: e.Hint, CounteredBy: e.CounteredBy}
	if e.Problems != nil {
		out.Problems = make([]wire.Problem, len(e.Problems))
		for i, p := range e.Problems {
			out.Problems[i] = wire.Problem{Code: p.Code, Path: p.Path, Message: p.Message}
		}
	}
	return out
}

// Delegation is d as the operator API shows it at now.
func Delegation(d *queue.Delegation, now time.Time) wire.Delegation {
	v := wire.Delegation{ID: d.ID, Delegator: d.Delegator, Delegate: d.Delegate, GivenBy: d.GivenBy, GivenAt: at(d.GivenAt),
		Until: at(d.Until), Live: d.LiveAt(now), EndReason: d.EndReason, EndedBy: d.EndedBy}
	if !d.EndedAt.IsZero() {
		v.EndedAt = at(d.EndedAt)
	}
	return v
}

// Allowance is the allowance a as the operator API and the command line
// show it at now.
func Allowance(a *queue.Allowance, now time.Time) wire.Allowance {
	v := wire.Allowance{ID: a.ID, State: a.State(now), Actor: a.Actor, Audience: a.Audience, Tool: a.Tool, Uses: a.Uses, Used: a.Used,
		OncePerCall: a.OncePerCall, Until: at(a.Until), Giver: a.Giver, Confirmers: append([]string{}, a.Confirmers...),
		ConfirmersNeeded: a.ConfirmersNeeded, ScopeDigest: a.ScopeDigest, BaseCall: a.BaseCall, GivenAt: at(a.GivenAt),
		EndReason: a.EndReason, EndedBy: a.EndedBy}
	if !a.EndedAt.IsZero() {
		v.EndedAt = at(a.EndedAt)
	}
	return v
}

// MCPDefinition is a pinned definition of an MCP server's tool as the
// operator API and the command line show it; prev is the definition of the
// tool approved before it, if any; full adds the definition's text.
func MCPDefinition(pin catalog.Pin, prev *catalog.Pin, full bool) wire.MCPDefinition {
	v := wire.MCPDefinition{Server: pin.Server, Tool: pin.Tool, Digest: pin.Digest, Status: string(pin.Status),
		FirstSeen: at(pin.FirstSeen), Reasons: pin.Reasons, DecidedBy: pin.DecidedBy, Changed: prev != nil}
	if !pin.DecidedAt.IsZero() {
		v.DecidedAt = at(pin.DecidedAt)
	}
	if prev != nil {
		v.PreviousDigest = prev.Digest
	}
	if full {
		v.Definition = json.RawMessage(pin.Definition)
		if !json.Valid(v.Definition) {
			// A quarantined listing is kept as it was read; it is shown
			// as a JSON string then.
			v.Definition, _ = json.Marshal(string(pin.Definition))
		}
	}
	return v
}

// MCPDefinitions lists the current definitions of every MCP server's
// tools in cat, those awaiting review first.
func MCPDefinitions(cat *catalog.Catalog) wire.MCPDefinitions {
	out := wire.MCPDefinitions{Definitions: []wire.MCPDefinition{}}
	for _, pendingFirst := range []bool{true, false} {
		for _, server := range cat.Servers() {
			for _, e := range cat.Entries(server) {
				if (e.Status == catalog.Pending) != pendingFirst {
					continue
				}
				out.Definitions = append(out.Definitions, MCPDefinition(e.Pin, e.Previous, false))
			}
		}
	}
	return out
}
