package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/policy"
	"github.com/countersign/countersign/internal/tools"
)

// Submit parses, validates and stores a proposal from an agent. It returns
// the call and whether it was newly created (false when an identical
// envelope from the same actor is still pending or approved).
func (s *Service) Submit(ctx context.Context, who Principal, body []byte) (*Call, bool, error) {
	p, perr := canonical.ParseProposal(body)
	return s.submit(ctx, who, body, p, perr, nil, nil)
}

// SubmitProposal is Submit of a proposal that the caller parsed strictly
// itself, with internal/canonical and canonical.ProposalFrom (the MCP
// gateway reads a tools/call's arguments with the number paths of the
// mirrored tool's pinned schema). When parsing failed, perr is the
// canonical.Problems it found and p.Tool names the tool that was called:
// the rejection is recorded and counted against (actor, tool) exactly as
// Submit's. Everything after parsing is Submit's.
func (s *Service) SubmitProposal(ctx context.Context, who Principal, p canonical.Proposal, perr error) (*Call, bool, error) {
	return s.submit(ctx, who, nil, p, perr, nil, nil)
}

// SubmitAndRedeem is SubmitProposal for a caller that is also the call's
// executor (the MCP gateway): when the submission's own transaction
// approves the new call (a rule, an allowance) and mints its grant, the
// grant is redeemed for who in that same transaction, with every check
// RedeemCall makes (signature and claims, the call's validation, then time,
// status, rollback, freeze and nonce under the write lock, on the call as
// the transaction wrote it) and its audit entry: one commit instead of two.
// The redemption is nil when the call was not approved by its submission,
// was not new (an identical call returned), or did not validate at
// redemption (RedeemCall then refuses it with its problems); the caller
// redeems as before when it wants to.
//
// held are outcomes the caller learned of calls it redeemed before: they
// are written first in the same transaction (writeHeld), so that a caller
// making call after call commits once per call. heldWritten reports
// whether they were committed; when it is false (the submission was
// refused before its transaction, or its transaction failed), none was,
// and the caller still holds them.
func (s *Service) SubmitAndRedeem(ctx context.Context, who Principal, p canonical.Proposal, perr error, held []HeldOutcome) (
	c *Call, created bool, r *Redemption, heldWritten bool, err error) {
	var out *Redemption
	var before func(tx Tx, emit func(Event)) error
	if len(held) > 0 {
		before = func(tx Tx, emit func(Event)) error {
			heldWritten = false
			if err := s.writeHeld(tx, emit, held); err != nil {
				return err
			}
			tx.AfterCommit(func() { heldWritten = true })
			return nil
		}
	}
	c, created, err = s.submit(ctx, who, nil, p, perr, before, func(tx Tx, emit func(Event), c *Call) error {
		out = nil
		if c.Status != StatusApproved || c.Grant == "" {
			return nil
		}
		res, r, problems := s.verifyRedemption(who, c.Grant, p)
		if len(problems) > 0 {
			return nil
		}
		if err := s.redeemIn(tx, emit, who, res, r, c); err != nil {
			return err
		}
		out = r
		return nil
	})
	if err != nil || out == nil {
		return c, created, nil, heldWritten, err
	}
	if out.Accepted {
		c = out.Call
		if !s.leaseWakesBefore(c.LeaseUntil) {
			s.kickLeases()
		}
	}
	return c, created, out, heldWritten, nil
}

// submit stores a proposal (Submit). before, when set, runs first in the
// submission's transaction (not in a refusal's made without one); then,
// when set, runs last in the transaction that stores a new call, with the
// call as the transaction leaves it.
func (s *Service) submit(ctx context.Context, who Principal, body []byte, p canonical.Proposal, perr error,
	before func(tx Tx, emit func(Event)) error, then func(tx Tx, emit func(Event), c *Call) error) (*Call, bool, error) {
	var t *tools.Tool
	var problems canonical.Problems
	var kind ProposalKind
	if perr != nil {
		problems = problemsOf(perr)
		kind = KindInvalidArguments
		if len(problems) == 1 && isParseCode(problems[0].Code) {
			kind = KindParse
		}
	} else if t, problems = s.tools.Check(p); len(problems) > 0 {
		kind = KindInvalidArguments
		if t == nil {
			kind = KindUnknownTool
		}
	}
	toolName := p.Tool
	if toolName == "" {
		toolName = toolHint(body)
	}
	if len(problems) > 0 {
		return nil, false, s.reject(ctx, who, s.retryTool(toolName), &ProposalError{Kind: kind, Tool: toolName, Problems: problems})
	}
	if t.Audience != who.Audience {
		err := &AudienceError{Tool: t.Name, ToolAudience: t.Audience, TokenAudience: who.Audience}
		var out error = err
		if aerr := s.update(ctx, func(tx Tx, emit func(Event)) error {
			out = err
			blocked, err := s.retryBlocked(tx, who.Actor, t.Name)
			if err != nil || blocked {
				out = ErrRetryLimit
				return err
			}
			if err := tx.Append(s.entry(audit.KindRejected, nil, who.Actor, audit.ChannelAPI, map[string]any{
				"tool": t.Name, "codes": []string{"audience_not_allowed"}, "audience": who.Audience})); err != nil {
				return err
			}
			return s.countRefusal(tx, who.Actor, t.Name, emit)
		}); aerr != nil {
			return nil, false, aerr
		}
		return nil, false, out
	}
	env := p.Envelope(who.Actor, who.Audience)
	env.Args = t.Bound(p.Args)
	envBytes, err := env.Canonical()
	if err != nil {
		return nil, false, fmt.Errorf("queue: canonical envelope: %w", err)
	}
	now := s.now()
	c := &Call{
		ID: NewCallID(), Actor: who.Actor, Audience: who.Audience, Tool: p.Tool, Target: p.Target,
		Args: p.Args, Rationale: p.Rationale, Envelope: envBytes, Digest: canonical.DigestOf(envBytes),
		Status: StatusPending, ApprovalsRequired: t.Approvals, GrantTTL: t.GrantTTL,
		CreatedAt: now, DecideBy: now.Add(t.DecideWithin), ToolDigest: t.DefinitionDigest,
		OutcomeWithin: t.OutcomeWithin, SubmittedBy: who.TokenID,
		Owners: append([]string(nil), who.Owners...), Approvers: t.Approvers, RequirePasskey: t.RequirePasskey,
		Escalate: t.Escalate,
	}
	// The rules run before the write lock is taken; what they decide is
	// applied in the transaction that stores the call.
	decision := s.decide(t, c)
	if decision.Action == policy.Ask {
		c.ApprovalsRequired = max(t.Approvals, decision.Approvals)
		c.RequirePasskey = c.RequirePasskey || decision.RequirePasskey
	}
	if decision.Rule != nil && len(decision.Rule.Notify) > 0 {
		c.Notify = append([]string(nil), decision.Rule.Notify...)
	}
	// A rule that approves mints the grant in the submission's
	// transaction; it is signed now, before the write lock (see presign).
	var pre *presigned
	if decision.Automatic() && decision.Action == policy.Approve {
		pre = s.presign(c, now)
	}
	var result *Call
	created := false
	err = s.update(ctx, func(tx Tx, emit func(Event)) error {
		if before != nil {
			if err := before(tx, emit); err != nil {
				return err
			}
		}
		if sc, ok := tx.(submitChecker); ok {
			if err := sc.SubmitChecks(who.Actor, p.Tool, c.Digest, who.TokenID, s.maxPending); err != nil {
				return err
			}
		}
		rs, err := tx.Retry(who.Actor, p.Tool)
		if err != nil {
			return err
		}
		if rs.Blocked() {
			return ErrRetryLimit
		}
		if all, err := tx.Retry(who.Actor, AnyTool); err != nil {
			return err
		} else if all.Blocked() {
			return ErrRetryLimit
		}
		prev, err := tx.LatestByDigest(who.Actor, c.Digest, who.TokenID)
		switch {
		case errors.Is(err, ErrNotFound):
		case err != nil:
			return err
		case prev.SubmittedBy == who.TokenID && prev.ToolDigest == c.ToolDigest && (prev.Status == StatusPending && prev.DecideBy.After(now) ||
			prev.Status == StatusApproved && prev.GrantExpiresAt.After(now)):
			// An identical call made under another definition of the tool
			// is not this call: it can never be approved or redeemed
			// (tool_changed), so a new one is made.
			result = prev
			return nil
		case prev.Status == StatusCountered && prev.SubmittedBy == who.TokenID && now.Sub(prev.DecidedAt) < CounteredMemory:
			if err := tx.Append(s.entry(audit.KindRejected, prev, who.Actor, audit.ChannelAPI, map[string]any{
				"tool": p.Tool, "codes": []string{"previously_countered"}, "digest": c.Digest, "counter": prev.CounteredBy})); err != nil {
				return err
			}
			return commitAnd(&CounteredError{CallID: prev.ID, CounterID: prev.CounteredBy, At: prev.DecidedAt})
		case prev.Status == StatusDenied && now.Sub(prev.DecidedAt) < DeniedMemory:
			reason := ""
			if prev.Denial != nil {
				reason = prev.Denial.Reason
			}
			if err := tx.Append(s.entry(audit.KindRejected, prev, who.Actor, audit.ChannelAPI, map[string]any{
				"tool": p.Tool, "codes": []string{"previously_denied"}, "digest": c.Digest})); err != nil {
				return err
			}
			// Resubmitting what a person denied is a loop like any other:
			// it counts against (actor, tool).
			if err := s.countRefusal(tx, who.Actor, p.Tool, emit); err != nil {
				return err
			}
			// The denied call is named only to the token that submitted it
			// (invariant 20): another token of the actor learns that the
			// call was denied, and why, but not which call it was.
			denied := &DeniedError{Reason: reason, At: prev.DecidedAt}
			if prev.SubmittedBy == who.TokenID {
				denied.CallID = prev.ID
			}
			return commitAnd(denied)
		}
		// A token keeps a bounded number of calls waiting: an agent that
		// proposes valid calls without end fills neither the queue nor the
		// database, and its refusal is its own (tokens without an id, as
		// in-process callers have, are not counted).
		if who.TokenID != "" {
			if n, err := tx.PendingBy(who.TokenID, s.maxPending); err != nil {
				return err
			} else if n >= s.maxPending {
				return ErrTooManyPending
			}
		}
		if f, err := frozen(tx, p.Tool, who.Actor); err != nil {
			return err
		} else if f != nil {
			if err := tx.Append(s.entry(audit.KindRejected, nil, who.Actor, audit.ChannelAPI, map[string]any{
				"tool": p.Tool, "codes": []string{"frozen"}, "digest": c.Digest, "freeze": f.ID})); err != nil {
				return err
			}
			return commitAnd(&FrozenError{Freeze: *f})
		}
		if rs.Count > 0 {
			if err := tx.SetRetry(who.Actor, p.Tool, RetryState{}); err != nil {
				return err
			}
		}
		if err := tx.InsertCall(c); err != nil {
			return err
		}
		if len(c.Escalate) > 0 {
			// Only a tool with escalation tiers schedules its next one.
			if err := tx.SetEscalation(c, c.NextTierDue()); err != nil {
				return err
			}
		}
		details := map[string]any{
			"tool": c.Tool, "target": c.Target, "audience": c.Audience, "digest": c.Digest,
			"args": c.Args, "rationale": c.Rationale, "decide_by": formatTime(c.DecideBy),
			"approvals_required": int64(c.ApprovalsRequired), "tool_digest": c.ToolDigest}
		if len(c.Owners) > 0 {
			details["owners"] = c.Owners
		}
		if !c.Approvers.Empty() {
			details["approvers"] = map[string]any{"roles": nonNil(c.Approvers.Roles), "groups": nonNil(c.Approvers.Groups)}
		}
		if c.RequirePasskey {
			details["approve_with"] = tools.ApproveWithPasskey
		}
		if err := tx.Append(s.entry(audit.KindSubmitted, c, who.Actor, audit.ChannelAPI, details)); err != nil {
			return err
		}
		result, created = c, true
		emit(Event{Kind: audit.KindSubmitted, Call: c})
		if err := s.applyRule(tx, c, decision, pre, emit); err != nil {
			return err
		}
		if err := s.coverByAllowance(tx, c, env, t, decision, emit); err != nil {
			return err
		}
		if then != nil {
			return then(tx, emit, c)
		}
		return nil
	})
	var denied *PolicyDeniedError
	if errors.As(err, &denied) {
		return c, true, err
	}
	if err != nil {
		return nil, false, err
	}
	if created && c.Status == StatusPending && (!s.wakesBefore(c.DecideBy) || len(c.Escalate) > 0 && !s.wakesBefore(c.NextTierDue())) {
		s.kickExpiry()
	}
	return result, created, nil
}

func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// problemsOf returns the problems of a parse error: canonical.Problems, or
// the single *canonical.Problem of canonical.ParseWith.
func problemsOf(err error) canonical.Problems {
	var ps canonical.Problems
	if errors.As(err, &ps) {
		return ps
	}
	var p *canonical.Problem
	if errors.As(err, &p) {
		return canonical.Problems{*p}
	}
	return canonical.Problems{{Code: canonical.CodeMalformedJSON, Message: err.Error(), Offset: -1}}
}

// isParseCode reports whether code comes from reading the JSON text itself
// rather than from checking its content.
func isParseCode(code string) bool {
	switch code {
	case canonical.CodeMalformedJSON, canonical.CodeInvalidUTF8, canonical.CodeDuplicateKey,
		canonical.CodeFloatNotAllowed, canonical.CodeInexactNumber, canonical.CodeOutOfRange, canonical.CodeTooDeep,
		canonical.CodeTooLarge:
		return true
	}
	return false
}

// toolHint finds the tool a body meant to call when the body did not parse
// as a whole, so its rejection counts against the right (actor, tool) pair.
// Only a top-level "tool" member counts (a decoy inside args is skipped), it
// is read from at most the first 64 KiB, and only a well-formed name is
// used; two top-level tool members that disagree name none.
func toolHint(body []byte) string {
	sc := hintScanner{b: body[:min(len(body), 64<<10)]}
	if !sc.byte('{') {
		return ""
	}
	found := ""
	for {
		key, ok := sc.str()
		if !ok || !sc.byte(':') {
			return found
		}
		sc.space()
		if key == "tool" && sc.peek() == '"' {
			name, ok := sc.str()
			if !ok {
				return found
			}
			if found != "" && found != name {
				return ""
			}
			found = name
		} else if !sc.skipValue() {
			return found
		}
		if !sc.byte(',') {
			break
		}
	}
	if found == "" {
		return ""
	}
	v, err := canonical.Parse([]byte(`{"tool":` + strconv.Quote(found) + `,"target":"x","args":{}}`))
	if err != nil {
		return ""
	}
	if p, problems := canonical.ProposalFrom(v, "", false); len(problems) == 0 {
		return p.Tool
	}
	return ""
}

// hintScanner reads just enough JSON to walk an object's top-level members
// in a body that may be malformed anywhere.
type hintScanner struct {
	b []byte
	i int
}

func (s *hintScanner) space() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\n' || s.b[s.i] == '\r') {
		s.i++
	}
}

func (s *hintScanner) peek() byte {
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// byte consumes c after white space.
func (s *hintScanner) byte(c byte) bool {
	s.space()
	if s.peek() != c {
		return false
	}
	s.i++
	return true
}

// str reads a string after white space; only plain strings (no escapes) are
// returned, since no valid tool name needs one.
func (s *hintScanner) str() (string, bool) {
	s.space()
	if s.peek() != '"' {
		return "", false
	}
	start, escaped := s.i+1, false
	for s.i++; s.i < len(s.b); s.i++ {
		switch s.b[s.i] {
		case '\\':
			escaped = true
			s.i++
		case '"':
			out := string(s.b[start:s.i])
			s.i++
			if escaped {
				return "\x00", true // never a tool name, but the member is read
			}
			return out, true
		}
	}
	return "", false
}

// skipValue skips one value, nested or not.
func (s *hintScanner) skipValue() bool {
	s.space()
	depth := 0
	for s.i < len(s.b) {
		switch c := s.b[s.i]; c {
		case '"':
			if _, ok := s.str(); !ok {
				return false
			}
			if depth == 0 {
				return true
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return true // the end of the enclosing object
			}
			depth--
			if depth == 0 {
				s.i++
				return true
			}
		case ',':
			if depth == 0 {
				return true
			}
		}
		s.i++
	}
	return false
}

// reject records a content rejection and applies the retry cap. It returns
// perr, or ErrRetryLimit when the pair is already blocked.
func (s *Service) reject(ctx context.Context, who Principal, tool string, perr *ProposalError) error {
	s.log.Info("proposal rejected", slog.String("actor", who.Actor), slog.String("tool", tool),
		slog.String("kind", string(perr.Kind)), slog.Any("codes", perr.Problems.Codes()))
	var out error = perr
	err := s.update(ctx, func(tx Tx, emit func(Event)) error {
		out = perr
		blocked, err := s.retryBlocked(tx, who.Actor, tool)
		if err != nil {
			return err
		}
		if blocked {
			out = ErrRetryLimit
			return nil
		}
		problems := make([]any, 0, len(perr.Problems))
		for _, p := range perr.Problems {
			problems = append(problems, map[string]any{"code": p.Code, "path": p.Path, "message": p.Message})
		}
		details := map[string]any{"tool": tool, "codes": perr.Problems.Codes(), "problems": problems}
		if perr.Tool != tool {
			details["tool_named"] = perr.Tool // what the agent called it, when no tool of the registry
		}
		if err := tx.Append(s.entry(audit.KindRejected, nil, who.Actor, audit.ChannelAPI, details)); err != nil {
			return err
		}
		return s.countRefusal(tx, who.Actor, tool, emit)
	})
	if err != nil {
		return err
	}
	return out
}
