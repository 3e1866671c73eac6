package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/grant"
)

// Redemption is the answer to a redemption request.
type Redemption struct {
	Accepted bool
	CallID   string
	Reason   string // empty when accepted
	Checks   []grant.Check
	Call     *Call // the redeemed call, when accepted
	// Freeze is the freeze that refused the redemption (reason frozen).
	Freeze *Freeze
}

// Decision is "accepted" or "rejected".
func (r *Redemption) Decision() string {
	if r.Accepted {
		return "accepted"
	}
	return "rejected"
}

// maxRedeemDepth allows args at canonical.MaxArgsDepth inside
// {"call":{"args":...}}.
const maxRedeemDepth = canonical.MaxArgsDepth + 2

// ParseRedemption strictly reads {"grant": "...", "call": {"tool","target","args"}}.
func ParseRedemption(body []byte) (string, canonical.Proposal, canonical.Problems) {
	v, err := canonical.ParseWith(body, canonical.Options{MaxDepth: maxRedeemDepth})
	if err != nil {
		return "", canonical.Proposal{}, canonical.Problems{*err.(*canonical.Problem)}
	}
	var problems canonical.Problems
	add := func(code, path, msg string) {
		problems = append(problems, canonical.Problem{Code: code, Path: path, Message: msg, Offset: -1})
	}
	o, ok := v.(canonical.Object)
	if !ok {
		add(canonical.CodeWrongType, "", "the body must be an object with grant and call")
		return "", canonical.Proposal{}, problems
	}
	for _, m := range o {
		if m.Name != "grant" && m.Name != "call" {
			add(canonical.CodeUnknownField, canonical.Pointer(m.Name), fmt.Sprintf("%+q is not a member of a redemption (allowed: grant, call)", m.Name))
		}
	}
	var token string
	if g, ok := o.Get("grant"); !ok {
		add(canonical.CodeMissingField, "/grant", "grant is required")
	} else if token, ok = g.(string); !ok {
		add(canonical.CodeWrongType, "/grant", "grant must be a string")
	}
	var p canonical.Proposal
	if c, ok := o.Get("call"); !ok {
		add(canonical.CodeMissingField, "/call", "call is required: the exact tool, target and args to run")
	} else {
		var ps canonical.Problems
		p, ps = canonical.ProposalFrom(c, "/call", false)
		problems = append(problems, ps...)
	}
	return token, p, problems
}

// Redeem checks a grant against the call presented and the redeeming
// token's context, and consumes it at most once. Nothing is consumed unless
// every check passes; an error from storage means no acceptance.
func (s *Service) Redeem(ctx context.Context, who Principal, body []byte) (*Redemption, error) {
	token, p, problems := ParseRedemption(body)
	if len(problems) > 0 {
		return nil, &ProposalError{Kind: KindParse, Problems: problems}
	}
	r, err := s.RedeemCall(ctx, who, token, p)
	var pe *ProposalError
	if errors.As(err, &pe) {
		for i := range pe.Problems {
			pe.Problems[i].Path = "/call" + pe.Problems[i].Path
		}
	}
	return r, err
}

// RedeemCall is Redeem of a call that the caller has already parsed
// strictly (the MCP gateway presents the very proposal it submitted).
//
// The call presented is validated against its tool exactly as a proposal
// is, informational members included, once the grant's own checks have
// passed: a call that does not validate is refused with every problem (a
// *ProposalError, paths from the call's root), audited as a refused
// redemption, and consumes nothing. A tool that is gone is refused by the
// status check (tool_changed).
func (s *Service) RedeemCall(ctx context.Context, who Principal, token string, p canonical.Proposal) (*Redemption, error) {
	res, out, problems := s.verifyRedemption(who, token, p)
	if len(problems) > 0 {
		return nil, s.refuseInvalid(ctx, who, res.Claims, problems)
	}
	err := s.update(ctx, func(tx Tx, emit func(Event)) error { return s.redeemIn(tx, emit, who, res, out, nil) })
	if err != nil {
		return nil, err
	}
	if out.Accepted && !s.leaseWakesBefore(out.Call.LeaseUntil) {
		s.kickLeases()
	}
	return out, nil
}

// verifyRedemption runs a redemption's checks that need no transaction:
// the grant's signature and claims against who and the call presented,
// and, when they pass, the call's validation against its tool (problems,
// which the redemption is refused with).
func (s *Service) verifyRedemption(who Principal, token string, p canonical.Proposal) (*grant.Result, *Redemption, canonical.Problems) {
	t, known := s.tools.Tool(p.Tool)
	args := p.Args
	if known {
		args = t.Bound(p.Args)
	}
	presented := grant.Presented{Tool: p.Tool, Target: p.Target, Args: args}
	res := s.signer.Verify(token, grant.Context{Actor: who.Actor, Audience: who.Audience}, presented, s.now())
	out := &Redemption{}
	if res.Claims != nil {
		out.CallID = res.Claims.CallID
	}
	if known && res.Reason == "" {
		if problems := t.Validate(p); len(problems) > 0 {
			return &res, out, problems
		}
	}
	return &res, out, nil
}

// redeemIn runs the redemption verified as res inside tx, under the write
// lock: the time again, the call's status, identity and grant, a rollback
// or a freeze since, the nonce, and records what it decided in out.
// written, when not nil, is a call tx itself wrote: when the grant is its
// own, it is checked as the transaction left it rather than read back.
func (s *Service) redeemIn(tx Tx, emit func(Event), who Principal, res *grant.Result, out *Redemption, written *Call) error {
	var c *Call
	if res.Reason == "" {
		// Time again, now that the write lock is held.
		now := s.now()
		if ok, reason := grant.CheckTime(res.Claims, now); !ok {
			res.Set(grant.StepTime, false, reason)
		}
	}
	if res.Reason == "" {
		var err error
		if written != nil && written.ID == res.Claims.CallID {
			c = written
		} else {
			c, err = tx.Call(res.Claims.CallID)
		}
		switch {
		case errors.Is(err, ErrNotFound):
			res.Set(grant.StepStatus, false, grant.ReasonRevoked)
		case err != nil:
			return err
		case c.Actor != who.Actor || c.Digest != res.Claims.Digest || c.GrantJTI != res.Claims.JTI:
			// A validly signed grant that this database did not issue
			// for this call: refuse as revoked.
			res.Set(grant.StepStatus, false, grant.ReasonRevoked)
		case c.Status == StatusRedeemed:
			// Redeemed already, whatever the nonce ledger says: a call
			// row that says so is enough to refuse a replay, even where
			// the ledger row went missing.
			res.Set(grant.StepStatus, true, "")
			res.Set(grant.StepNonce, false, grant.ReasonReplayed)
		case c.Status != StatusApproved, c.Revoked != nil:
			res.Set(grant.StepStatus, false, grant.ReasonRevoked)
		case s.ToolChanged(c):
			res.Set(grant.StepStatus, false, grant.ReasonToolChanged)
		default:
			cut, err := tx.LastRollback()
			if err != nil {
				return err
			}
			f, err := frozen(tx, c.Tool, c.Actor)
			if err != nil {
				return err
			}
			if !cut.IsZero() && res.Claims.IssuedAt <= cut.Unix() {
				// Issued before a rollback was accepted: the restored
				// database cannot know whether it was redeemed.
				res.Set(grant.StepStatus, false, grant.ReasonRevoked)
			} else if f != nil {
				res.Set(grant.StepStatus, false, grant.ReasonFrozen)
				out.Freeze = f
			} else {
				res.Set(grant.StepStatus, true, "")
			}
		}
	}
	if res.Reason == "" {
		fresh, err := tx.ConsumeNonce(res.Claims.JTI, c.ID, s.now())
		if err != nil {
			return err
		}
		if !fresh {
			res.Set(grant.StepNonce, false, grant.ReasonReplayed)
		} else {
			res.Set(grant.StepNonce, true, "")
		}
	}
	out.Checks, out.Reason = res.Checks, res.Reason
	checks := checksDetail(res.Checks)
	if res.Reason != "" {
		details := map[string]any{"checks": checks, "reason": res.Reason}
		if res.Claims != nil {
			details["jti"] = res.Claims.JTI
		}
		if out.Freeze != nil {
			details["freeze"] = out.Freeze.ID
		}
		if c == nil {
			c = &Call{ID: out.CallID}
		}
		if err := tx.Append(s.entry(audit.KindRedemptionRefused, c, who.Actor, audit.ChannelAPI, details)); err != nil {
			return err
		}
		emit(Event{Kind: audit.KindRedemptionRefused, Reason: res.Reason, Call: nilIfEmpty(c)})
		return nil
	}
	c.Status = StatusRedeemed
	c.RedeemedAt = s.now()
	s.startLease(c, who, c.RedeemedAt)
	if err := tx.UpdateCall(c); err != nil {
		return err
	}
	// What was redeemed: the digest recomputed from the call the
	// executor presented (equal to the grant's, or it was refused). The
	// members in canonical order, as a map of them would be encoded.
	if err := tx.Append(s.entryOf(audit.KindRedeemed, c, who.Actor, audit.ChannelAPI, canonical.Object{
		{Name: "checks", Value: checks}, {Name: "digest", Value: res.Digest}, {Name: "jti", Value: res.Claims.JTI},
		{Name: "lease_until", Value: formatTime(c.LeaseUntil)}, {Name: "token", Value: who.TokenID}})); err != nil {
		return err
	}
	out.Accepted = true
	out.Call = c
	emit(Event{Kind: audit.KindRedeemed, Call: c})
	return nil
}

// ReasonInvalidArguments is the reason recorded when the call presented
// for redemption does not validate against its tool. The agent is answered
// with the problems, not with a redemption.
const ReasonInvalidArguments = "invalid_arguments"

// refuseInvalid records a redemption refused because the call presented
// does not validate, and returns the problems.
func (s *Service) refuseInvalid(ctx context.Context, who Principal, claims *grant.Claims, problems canonical.Problems) error {
	s.log.Info("redemption refused: the call presented does not validate", slog.String("actor", who.Actor),
		slog.String("call", claims.CallID), slog.Any("codes", problems.Codes()))
	err := s.update(ctx, func(tx Tx, emit func(Event)) error {
		if err := tx.Append(s.entry(audit.KindRedemptionRefused, &Call{ID: claims.CallID}, who.Actor, audit.ChannelAPI, map[string]any{
			"reason": ReasonInvalidArguments, "jti": claims.JTI, "codes": problems.Codes()})); err != nil {
			return err
		}
		emit(Event{Kind: audit.KindRedemptionRefused, Reason: ReasonInvalidArguments})
		return nil
	})
	if err != nil {
		return err
	}
	return &ProposalError{Kind: KindInvalidArguments, Tool: claims.Tool, Problems: problems}
}

func nilIfEmpty(c *Call) *Call {
	if c == nil || c.Status == "" {
		return nil
	}
	return c
}

// checksDetail is how an audit entry records a redemption's checks: for
// each, an object of its name and whether it passed (null when it did not
// run). The objects' members are carved from one slice.
func checksDetail(checks []grant.Check) []any {
	out := make([]any, len(checks))
	members := make([]canonical.Member, 2*len(checks))
	for i, c := range checks {
		var ok any
		if c.OK != nil {
			ok = *c.OK
		}
		m := members[2*i : 2*i+2 : 2*i+2]
		m[0], m[1] = canonical.Member{Name: "name", Value: c.Name}, canonical.Member{Name: "ok", Value: ok}
		out[i] = canonical.Object(m)
	}
	return out
}
