package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/present"
	"github.com/countersign/countersign/internal/scope"
	"github.com/countersign/countersign/internal/tools"
)

// GiveInput is an operator's "approve this and more like it" on a pending
// call: the call's digest and the scope's digest they were shown, and the
// choices the scope was made from.
type GiveInput struct {
	Operator, Channel string
	// CallID and Digest are the base call and the digest its page showed.
	CallID, Digest string
	// ScopeDigest is the digest of the scope the page showed (with its
	// words); Choices are what the operator chose. The scope is made
	// again from the call as stored and the tool as defined now, and must
	// have exactly this digest.
	ScopeDigest string
	Choices     scope.Choices
	// Comment, Confirm, AcceptWarnings and Presented are those of the
	// base call's approval (ApproveInput).
	Comment        string
	Confirm        string
	AcceptWarnings bool
	Presented      string
}

// GiveAllowance gives an allowance from a pending call, in one
// transaction: the scope is made again from the call as stored and the
// tool as it is now and must have the digest the operator was shown; the
// operator must be allowed to approve the call (not their own, not an
// owner of its agent, an approver of the tool, an enabled operator or
// admin) and within the bounds of live allowances of the tool and of a
// giver; the base call is approved by the operator as any approval is,
// and the allowance is stored with the operator as its first confirmer
// and audited (allowance_given). A tool needing M approvals makes an
// allowance that needs M confirmers (ConfirmAllowance) before it covers
// anything. It returns the allowance and the base call after its
// approval.
func (s *Service) GiveAllowance(ctx context.Context, in GiveInput) (*Allowance, *Call, error) {
	comment := strings.TrimSpace(in.Comment)
	if len(comment) > MaxReasonBytes {
		return nil, nil, fmt.Errorf("%w (at most %d bytes)", ErrCommentTooLong, MaxReasonBytes)
	}
	if err := account.CheckReserved(in.Operator); err != nil {
		return nil, nil, fmt.Errorf("queue: operator %q: %w", in.Operator, err)
	}
	var a *Allowance
	var base *Call
	err := s.update(ctx, func(tx Tx, emit func(Event)) error {
		u, err := decider(tx, in.Operator)
		if err != nil {
			return err
		}
		c, err := s.loadPending(tx, in.CallID, emit)
		if err != nil {
			return err
		}
		if err := s.checkApproval(tx, c, u, in.Digest); err != nil {
			return err
		}
		if c.RequirePasskey {
			return fmt.Errorf("%w: %s", scope.ErrPasskeyTool, c.Tool)
		}
		if err := Confirmation(s.Tools(), c, in.Confirm, in.AcceptWarnings); err != nil {
			return err
		}
		t, _ := s.tools.Tool(c.Tool) // checkApproval found it unchanged
		now := s.now()
		seen, err := s.presentedAllowance(in.Channel, in.Presented, u.Name, c, in.ScopeDigest, now)
		if err != nil {
			return err
		}
		shape, err := ScopeCall(c)
		if err != nil {
			return err
		}
		sc, err := scope.Materialise(shape, t, in.Choices, now)
		if err != nil {
			return err
		}
		if sc.Digest() != in.ScopeDigest {
			return ErrScopeMismatch
		}
		if err := s.withinAllowanceBounds(tx, c.Tool, u.Name, now); err != nil {
			return err
		}
		a = &Allowance{ID: newAllowanceID(now), Actor: sc.Actor, Audience: sc.Audience, Tool: sc.Tool, ToolDigest: sc.ToolDigest,
			BaseCall: c.ID, BaseDigest: c.Digest, Scope: sc.JSON(), ScopeDigest: in.ScopeDigest,
			Uses: sc.Uses, OncePerCall: sc.OncePerCall, Until: sc.Until, Giver: u.Name, Confirmers: []string{u.Name},
			ConfirmersNeeded: max(c.ApprovalsRequired, 1), GivenAt: now}
		if err := tx.InsertAllowance(a); err != nil {
			return err
		}
		shown, err := canonical.Parse(a.Scope)
		if err != nil {
			return fmt.Errorf("queue: allowance %s: its scope does not parse: %w", a.ID, err)
		}
		details := s.allowanceDetails(a)
		details["scope"], details["words"], details["base_digest"] = shown, scope.Words(sc, t, nil), c.Digest
		details["uses"], details["once_per_call"], details["until"] = int64(a.Uses), a.OncePerCall, formatTime(a.Until)
		// The allowance's entry comes before the base call's approval,
		// so that the call's last entry says what happened to the call.
		if err := tx.Append(s.entry(KindAllowanceGiven, c, u.Name, in.Channel, details)); err != nil {
			return err
		}
		emit(Event{Kind: KindAllowanceGiven, Allowance: a})
		if err := s.addApproval(tx, c, u, Approval{Operator: u.Name, Channel: in.Channel, At: now, Comment: comment,
			Method: methodOf(in.Channel, false), Digest: c.Digest, Presented: seen},
			map[string]any{"allowance_given": a.ID}, nil, emit); err != nil {
			return err
		}
		base = c
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return a, base, nil
}

// scopeCall is c as a scope sees it.
// ScopeCall is c as an allowance's scope sees it: the actor, audience,
// tool, target and arguments of its hashed envelope, what its digest
// covers, never the columns stored beside it. An IntegrityError when the
// envelope does not hash to the digest or does not parse.
func ScopeCall(c *Call) (scope.Call, error) {
	env, err := HashedEnvelope(c)
	if err != nil {
		return scope.Call{}, err
	}
	return envelopeScopeCall(c, env), nil
}

// envelopeScopeCall is ScopeCall with c's hashed envelope in hand.
func envelopeScopeCall(c *Call, env canonical.Envelope) scope.Call {
	return scope.Call{Actor: env.Actor, Audience: env.Audience, Tool: env.Tool, Target: env.Target,
		ToolDigest: c.ToolDigest, Args: env.Args}
}

// allowanceDetails are what every audit entry of an allowance says of it.
func (s *Service) allowanceDetails(a *Allowance) map[string]any {
	return map[string]any{"allowance": a.ID, "scope_digest": a.ScopeDigest, "tool": a.Tool, "actor": a.Actor,
		"audience": a.Audience, "giver": a.Giver, "confirmers": slices.Clone(a.Confirmers),
		"confirmers_needed": int64(a.ConfirmersNeeded), "used": int64(a.Used)}
}

// withinAllowanceBounds refuses one more allowance of tool, or by giver,
// when as many are live at now as the bounds allow.
func (s *Service) withinAllowanceBounds(tx Tx, tool, giver string, now time.Time) error {
	ofTool, ofGiver, err := tx.LiveAllowances(tool, giver, now, max(s.maxAllowancesTool, s.maxAllowancesGiver))
	switch {
	case err != nil:
		return err
	case ofTool >= s.maxAllowancesTool:
		return fmt.Errorf("%w (%d live allowances of %s)", ErrAllowancesPerTool, ofTool, tool)
	case ofGiver >= s.maxAllowancesGiver:
		return fmt.Errorf("%w (%d live allowances given by %s)", ErrAllowancesPerGiver, ofGiver, giver)
	}
	return nil
}

// ConfirmInput is a further person's confirmation of an allowance whose
// tool needs more than one approval.
type ConfirmInput struct {
	Operator, Channel string
	AllowanceID       string
	// ScopeDigest is the digest of the scope the confirmer was shown; it
	// must be the allowance's.
	ScopeDigest string
	// CallDigest, when set, also approves the allowance's base call (if
	// it is still pending) as any approval does, with the digest its page
	// showed; Confirm and AcceptWarnings are that approval's.
	CallDigest     string
	Confirm        string
	AcceptWarnings bool
	Presented      string
}

// ConfirmAllowance adds the operator as a confirmer of an allowance that
// does not have every confirmer it needs yet, in one transaction: the
// digest must be the allowance's; the allowance must not have ended, nor
// be past its until, nor be of a tool whose definition changed (either
// ends it, and that is committed with the refusal); and the operator must
// be allowed to approve its base call (not their own, not an owner of its
// agent, an approver of the tool, an enabled operator or admin) and be a
// person other than every confirmer. Audited (allowance_confirmed).
func (s *Service) ConfirmAllowance(ctx context.Context, in ConfirmInput) (*Allowance, error) {
	if err := account.CheckReserved(in.Operator); err != nil {
		return nil, fmt.Errorf("queue: operator %q: %w", in.Operator, err)
	}
	var out *Allowance
	err := s.update(ctx, func(tx Tx, emit func(Event)) error {
		u, err := decider(tx, in.Operator)
		if err != nil {
			return err
		}
		a, err := tx.Allowance(in.AllowanceID)
		if err != nil {
			return err
		}
		if err := s.usable(tx, a, emit); err != nil {
			return err
		}
		if in.ScopeDigest != a.ScopeDigest {
			return ErrScopeMismatch
		}
		if a.Confirmed() {
			return ErrAllowanceConfirmed
		}
		if slices.Contains(a.Confirmers, u.Name) {
			return ErrAlreadyConfirmer
		}
		for _, name := range a.Confirmers {
			other, err := tx.User(name)
			if errors.Is(err, account.ErrUserNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			if samePerson(u, other) {
				return &SamePersonError{Operator: u.Name, Other: name}
			}
		}
		base, err := tx.Call(a.BaseCall)
		if err != nil {
			return err
		}
		if err := mayConfirm(base, u); err != nil {
			return err
		}
		if base.Status == StatusDenied {
			return ErrBaseDenied
		}
		// The base call's approval is checked before anything is written:
		// a refusal of it refuses the confirmation too.
		approveBase := in.CallDigest != "" && base.Status == StatusPending && !base.ApprovedBy(u.Name)
		if approveBase {
			if base, err = s.loadPending(tx, base.ID, emit); err != nil {
				return err
			}
			if err := s.checkApproval(tx, base, u, in.CallDigest); err != nil {
				return err
			}
			if err := Confirmation(s.Tools(), base, in.Confirm, in.AcceptWarnings); err != nil {
				return err
			}
		}
		// A confirmation through the browser always comes from the
		// allowance's page, whose token covers its base call, its scope and
		// the allowance; the base call's approval records it.
		now := s.now()
		shown, err := s.presented(in.Channel, in.Presented, present.PageAllowance, u.Name, confirmItems(a), now)
		if err != nil {
			return err
		}
		if approveBase {
			if err := shownInTime(shown, base, now); err != nil {
				return err
			}
		}
		a.Confirmers = append(a.Confirmers, u.Name)
		if err := tx.SetConfirmers(a.ID, a.Confirmers); err != nil {
			return err
		}
		details := s.allowanceDetails(a)
		details["confirmed"] = a.Confirmed()
		if shown != nil {
			details["presented"] = map[string]any{"page": shown.Page, "at": shown.At.UTC().Format(time.RFC3339Nano)}
		}
		if err := tx.Append(s.entry(KindAllowanceConfirmed, base, u.Name, in.Channel, details)); err != nil {
			return err
		}
		emit(Event{Kind: KindAllowanceConfirmed, Allowance: a})
		if approveBase {
			if err := s.addApproval(tx, base, u, Approval{Operator: u.Name, Channel: in.Channel, At: now,
				Method: methodOf(in.Channel, false), Digest: base.Digest, Presented: shown},
				map[string]any{"allowance_confirmed": a.ID}, nil, emit); err != nil {
				return err
			}
		}
		out = a
		return nil
	})
	return out, err
}

// mayConfirm is who may confirm an allowance of c: who may approve c
// (mayApprove), whether or not they approved c itself.
func mayConfirm(c *Call, u account.User) error {
	if c.ProposedBy(u) {
		return ErrOwnCall
	}
	if o := c.OwnedBy(u); o != "" {
		return &OwnerError{Operator: u.Name, Owner: o}
	}
	if !c.Approvers.Allows(string(u.Role), u.Groups) {
		return &ApproversError{Operator: u.Name, Who: c.Approvers.Describe()}
	}
	return nil
}

// usable refuses an allowance that has ended, and ends (committed with the
// refusal) one whose tool changed, whose until passed or whose uses are
// spent.
func (s *Service) usable(tx Tx, a *Allowance, emit func(Event)) error {
	if a.Ended() {
		return &AllowanceEndedError{ID: a.ID, Reason: a.EndReason}
	}
	reason := s.spent(a, s.now())
	if reason == "" {
		return nil
	}
	if err := s.endAllowance(tx, a, reason, nil, emit); err != nil {
		return err
	}
	return commitAnd(&AllowanceEndedError{ID: a.ID, Reason: reason})
}

// spent says why an allowance that has not ended can no longer approve
// anything at now, or "": its tool's definition changed, its until
// passed, or it used its uses.
func (s *Service) spent(a *Allowance, now time.Time) string {
	var t *tools.Tool
	if s.tools != nil {
		t, _ = s.tools.Tool(a.Tool)
	}
	switch {
	case t == nil || t.DefinitionDigest != a.ToolDigest:
		return EndToolChanged
	case !now.Before(a.Until):
		return EndExpired
	case a.Used >= a.Uses:
		return EndUsedUp
	}
	return ""
}

// endAllowance ends a by itself (by "console") for reason, with its audit
// entry (extra added to the details) and event.
func (s *Service) endAllowance(tx Tx, a *Allowance, reason string, extra map[string]any, emit func(Event)) error {
	now := s.now()
	ended, err := tx.EndAllowance(a.ID, reason, "console", now)
	if err != nil || !ended {
		return err
	}
	a.EndedAt, a.EndReason, a.EndedBy = now, reason, "console"
	details := s.allowanceDetails(a)
	details["reason"] = reason
	for k, v := range extra {
		details[k] = v
	}
	if err := tx.Append(s.entry(KindAllowanceEnded, nil, "console", ChannelAllowance, details)); err != nil {
		return err
	}
	emit(Event{Kind: KindAllowanceEnded, Allowance: a})
	return nil
}

// RevokeInput is a person's revocation of an allowance, with a reason the
// agents of the grants it revokes receive.
type RevokeInput struct {
	Operator, Channel, AllowanceID, Reason string
}

// RevokeAllowance ends an allowance in the name of its giver, an operator
// allowed to approve its tool, or an admin (each an enabled account), and
// revokes in the same transaction every grant it minted that has not been
// redeemed: from the commit on, it approves nothing more and none of those
// grants is accepted. Audited (allowance_revoked, and revoked for each
// grant).
func (s *Service) RevokeAllowance(ctx context.Context, in RevokeInput) (*Allowance, error) {
	reason := strings.TrimSpace(in.Reason)
	if reason == "" {
		return nil, ErrReasonRequired
	}
	if len(reason) > MaxReasonBytes {
		return nil, fmt.Errorf("%w (at most %d bytes)", ErrReasonTooLong, MaxReasonBytes)
	}
	var out *Allowance
	err := s.update(ctx, func(tx Tx, emit func(Event)) error {
		u, err := decider(tx, in.Operator)
		if err != nil {
			return err
		}
		a, err := tx.Allowance(in.AllowanceID)
		if err != nil {
			return err
		}
		if a.Ended() {
			return &AllowanceEndedError{ID: a.ID, Reason: a.EndReason}
		}
		if !s.mayRevoke(a, u) {
			return ErrMayNotRevoke
		}
		now := s.now()
		if ended, err := tx.EndAllowance(a.ID, EndRevoked, u.Name, now); err != nil {
			return err
		} else if !ended {
			return &AllowanceEndedError{ID: a.ID}
		}
		a.EndedAt, a.EndReason, a.EndedBy = now, EndRevoked, u.Name
		ids, err := tx.AllowanceCalls(a.ID)
		if err != nil {
			return err
		}
		revoked := []string{}
		for _, id := range ids {
			c, err := tx.Call(id)
			if err != nil {
				return err
			}
			if c.Status != StatusApproved || c.Revoked != nil || c.GrantJTI == "" {
				continue // redeemed, revoked already, or never granted
			}
			r := Revocation{CallID: c.ID, JTI: c.GrantJTI, By: u.Name, Channel: in.Channel, Reason: reason, At: now}
			if err := tx.InsertRevocation(r); err != nil {
				return err
			}
			c.Revoked = &r
			if err := tx.Append(s.entry(audit.KindRevoked, c, u.Name, in.Channel, map[string]any{
				"jti": c.GrantJTI, "digest": c.Digest, "reason": reason, "allowance": a.ID})); err != nil {
				return err
			}
			emit(Event{Kind: audit.KindRevoked, Call: c})
			revoked = append(revoked, c.ID)
		}
		details := s.allowanceDetails(a)
		details["reason"], details["grants_revoked"] = reason, revoked
		if err := tx.Append(s.entry(KindAllowanceRevoked, nil, u.Name, in.Channel, details)); err != nil {
			return err
		}
		emit(Event{Kind: KindAllowanceRevoked, Allowance: a})
		out = a
		return nil
	})
	return out, err
}

// mayRevoke reports whether u may revoke a: its giver, an admin, or an
// operator the tool's reviewer condition allows to approve its calls (as
// the tool is defined now; only the giver and admins when it is gone).
func (s *Service) mayRevoke(a *Allowance, u account.User) bool {
	if u.Name == a.Giver || u.Role.CanAdminister() {
		return true
	}
	if s.tools == nil {
		return false
	}
	t, ok := s.tools.Tool(a.Tool)
	return ok && t.Approvers.Allows(string(u.Role), u.Groups)
}

// Allowances lists allowances, newest first.
func (s *Service) Allowances(ctx context.Context, f AllowanceFilter) ([]*Allowance, error) {
	return s.store.Allowances(ctx, f)
}

// Allowance reads one allowance.
func (s *Service) Allowance(ctx context.Context, id string) (*Allowance, error) {
	return s.store.Allowance(ctx, id)
}
