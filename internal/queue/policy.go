package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/policy"
	"github.com/countersign/countersign/internal/tools"
)

// ChannelPolicy is the channel of a decision made by a rule.
const ChannelPolicy = "policy"

// Audit kinds of the kill switch and of loading a tools file.
const (
	KindFrozen      = "frozen"
	KindUnfrozen    = "unfrozen"
	KindToolsLoaded = "tools_loaded"
)

// ErrToolChanged is a call whose tool is no longer defined as it was when
// the call was submitted (or is gone): nothing made under the old
// definition is approved or redeemed. The agent must propose it again.
var ErrToolChanged = errors.New("queue: the tool's definition changed since the call was made; propose it again")

// ErrFreezeScope is a freeze or unfreeze request that cannot be applied.
var ErrFreezeScope = errors.New("queue: no freeze in force matches")

// ErrFreezeReason is a freeze without a reason, or with one longer than
// MaxReasonBytes. It is an ErrReasonRequired.
var ErrFreezeReason = fmt.Errorf("%w: a freeze needs a reason of at most %d bytes", ErrReasonRequired, MaxReasonBytes)

// Freeze stops approvals and redemptions of the calls it matches.
type Freeze struct {
	ID     int64
	Tool   string // "" matches every tool
	Actor  string // "" matches every actor
	Reason string
	By     string
	At     time.Time
	// Unseen are the tool and actor of a freeze just made that the
	// console had not seen (FreezeRequest.AllowUnknown); not stored.
	Unseen []string
}

// Scope describes what the freeze matches, e.g. "payments.refund by
// agent:billing-bot" or "every tool".
func (f Freeze) Scope() string {
	if server, ok := strings.CutSuffix(f.Tool, ServerWildcard); ok {
		if f.Actor == "" {
			return "every tool of the MCP server " + server
		}
		return "every tool of the MCP server " + server + " by " + f.Actor
	}
	switch {
	case f.Tool == "" && f.Actor == "":
		return "every call"
	case f.Actor == "":
		return f.Tool
	case f.Tool == "":
		return "every call by " + f.Actor
	}
	return f.Tool + " by " + f.Actor
}

// FrozenError is an approval, submission or redemption refused by a freeze.
type FrozenError struct{ Freeze Freeze }

func (e *FrozenError) Error() string {
	return fmt.Sprintf("queue: %s is frozen since %s: %s", e.Freeze.Scope(), e.Freeze.At.Format(time.RFC3339), e.Freeze.Reason)
}

// PolicyDeniedError is a submission denied by a rule; the call is stored
// as denied.
type PolicyDeniedError struct {
	CallID string
	Rule   string
	Reason string
}

func (e *PolicyDeniedError) Error() string {
	return fmt.Sprintf("queue: call %s denied by rule %s: %s", e.CallID, e.Rule, e.Reason)
}

// ToolChanged reports whether c was made under a definition of its tool
// other than the current one, or its tool is gone.
func (s *Service) ToolChanged(c *Call) bool {
	if s.tools == nil {
		return true
	}
	t, ok := s.tools.Tool(c.Tool)
	return !ok || t.DefinitionDigest == "" || t.DefinitionDigest != c.ToolDigest
}

// frozen returns the freeze that stops c, if any.
// FreezeOf returns the freeze among fz (the freezes in force, as Freezes
// reads them) that stops calls of tool by actor, as a decision's
// transaction finds it: the oldest whose tool is tool or every tool and
// whose actor is actor or every actor, else the oldest of the tool's MCP
// server; nil when none does. Pages use it to say so before anyone clicks;
// the transaction decides.
func FreezeOf(fz []Freeze, tool, actor string) *Freeze {
	match := func(t string) *Freeze {
		var out *Freeze
		for i := range fz {
			f := &fz[i]
			if (f.Tool == "" || f.Tool == t) && (f.Actor == "" || f.Actor == actor) && (out == nil || f.ID < out.ID) {
				out = f
			}
		}
		return out
	}
	if f := match(tool); f != nil {
		return f
	}
	if server, _, ok := canonical.SplitMirrored(tool); ok {
		return match(server + ServerWildcard)
	}
	return nil
}

func frozen(tx Tx, tool, actor string) (*Freeze, error) {
	f, err := tx.Frozen(tool, actor)
	if errors.Is(err, ErrNotFound) {
		return frozenServer(tx, tool, actor)
	}
	return f, err
}

// decide runs the tool's rules over a new call. A rule that cannot be
// evaluated is logged and counted, and the call goes to people.
func (s *Service) decide(t *tools.Tool, c *Call) policy.Decision {
	if s.policy == nil {
		return policy.Decision{Action: policy.Ask, Approvals: t.Approvals, RequirePasskey: t.RequirePasskey}
	}
	d := s.policy.Decide(t, policy.Input{Target: c.Target, Args: c.Args, Actor: c.Actor, Audience: c.Audience, Now: c.CreatedAt})
	if d.Err != nil {
		s.log.Warn("rule evaluation failed; the call goes to people", slog.String("tool", t.Name),
			slog.String("actor", c.Actor), slog.Any("error", d.Err), slog.Int("approvals", d.Approvals))
	}
	return d
}

// applyRule records an automatic decision on a call just inserted in tx:
// an approval by "policy:ID" that mints the grant, or a denial. The audit
// entry names the rule, the digest of its text, the tool's definition
// digest and the tools file's digest. A freeze that matches the call
// refuses the submission before this is reached.
func (s *Service) applyRule(tx Tx, c *Call, d policy.Decision, pre *presigned, emit func(Event)) error {
	if !d.Automatic() {
		return nil
	}
	now := s.now()
	by := d.Rule.Principal()
	details := map[string]any{
		"digest": c.Digest, "rule": d.Rule.ID, "rule_digest": d.Rule.Digest,
		"tool_digest": c.ToolDigest, "tools_digest": s.policy.ToolsDigest(),
	}
	switch d.Action {
	case policy.Approve:
		a := Approval{Operator: by, Channel: ChannelPolicy, At: now, Method: MethodPolicy, Digest: c.Digest}
		if err := tx.AddApproval(c.ID, a); err != nil {
			return err
		}
		c.Approvals = append(c.Approvals, a)
		c.ApprovalsRequired = 1
		details["received"], details["required"] = int64(1), int64(1)
		details["method"], details["human"] = a.Method, a.Human()
		if err := tx.Append(s.entry(audit.KindApproved, c, by, ChannelPolicy, details)); err != nil {
			return err
		}
		if err := s.mint(tx, c, now, pre); err != nil {
			return err
		}
		emit(Event{Kind: audit.KindGranted, Call: c})
		return nil
	case policy.Deny:
		c.Status = StatusDenied
		c.DecidedAt = now
		c.Denial = &Denial{By: by, Channel: ChannelPolicy, Reason: d.Reason, At: now}
		if err := tx.UpdateCall(c); err != nil {
			return err
		}
		details["reason"] = d.Reason
		if err := tx.Append(s.entry(audit.KindDenied, c, by, ChannelPolicy, details)); err != nil {
			return err
		}
		emit(Event{Kind: audit.KindDenied, Call: c})
		return commitAnd(&PolicyDeniedError{CallID: c.ID, Rule: d.Rule.ID, Reason: d.Reason})
	}
	return nil
}

// DecidedByRule returns the rule id when a rule approved or denied the
// call, else "".
func (c *Call) DecidedByRule() string {
	if c.Denial != nil && strings.HasPrefix(c.Denial.By, policy.PrincipalPrefix) {
		return strings.TrimPrefix(c.Denial.By, policy.PrincipalPrefix)
	}
	for _, a := range c.Approvals {
		if strings.HasPrefix(a.Operator, policy.PrincipalPrefix) {
			return strings.TrimPrefix(a.Operator, policy.PrincipalPrefix)
		}
	}
	return ""
}

// Freeze stops approvals and redemptions of the calls of tool by actor
// (either empty for all) until an admin lifts it. Whoever may decide calls
// may freeze them (mayFreeze), checked inside the freeze's transaction.
//
// The tool and actor must name what the console knows (checkFreezeNames):
// a name that matches nothing is refused with a NameError.
func (s *Service) Freeze(ctx context.Context, by, channel, tool, actor, reason string) (*Freeze, error) {
	return s.freeze(ctx, FreezeRequest{By: by, Channel: channel, Tool: tool, Actor: actor, Reason: reason})
}

func (s *Service) freeze(ctx context.Context, r FreezeRequest) (*Freeze, error) {
	by, channel, actor := r.By, r.Channel, r.Actor
	reason := strings.TrimSpace(r.Reason)
	if by == "" {
		return nil, ErrOperatorRequired
	}
	if reason == "" || len(reason) > MaxReasonBytes {
		return nil, ErrFreezeReason
	}
	f := &Freeze{Actor: actor, Reason: reason, By: by, At: s.now()}
	err := s.update(ctx, func(tx Tx, emit func(Event)) error {
		if err := mayFreeze(tx, by); err != nil {
			return err
		}
		tool, unseen, err := s.checkFreezeNames(tx, r)
		if err != nil {
			return err
		}
		f.Tool, f.Unseen = tool, unseen
		if err := tx.InsertFreeze(f); err != nil {
			return err
		}
		if err := tx.Append(s.entry(KindFrozen, nil, by, channel, map[string]any{
			"id": f.ID, "tool": f.Tool, "actor": actor, "reason": reason})); err != nil {
			return err
		}
		emit(Event{Kind: KindFrozen, Freeze: f})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return f, nil
}

// Unfreeze lifts the freezes in force with exactly this tool and actor.
// Only an enabled admin may (mayUnfreeze), checked inside the transaction
// that lifts them.
func (s *Service) Unfreeze(ctx context.Context, by, channel, tool, actor string) ([]Freeze, error) {
	if by == "" {
		return nil, ErrOperatorRequired
	}
	var lifted []Freeze
	err := s.update(ctx, func(tx Tx, emit func(Event)) error {
		if err := mayUnfreeze(tx, by); err != nil {
			return err
		}
		tool, err := s.unfreezeTool(tx, tool)
		if err != nil {
			return err
		}
		lifted, err = tx.LiftFreezes(tool, actor, by, s.now())
		if err != nil {
			return err
		}
		if len(lifted) == 0 {
			return fmt.Errorf("%w: %s", ErrFreezeScope, Freeze{Tool: tool, Actor: actor}.Scope())
		}
		ids := make([]any, len(lifted))
		for i, f := range lifted {
			ids[i] = f.ID
		}
		if err := tx.Append(s.entry(KindUnfrozen, nil, by, channel, map[string]any{
			"ids": ids, "tool": tool, "actor": actor})); err != nil {
			return err
		}
		for i := range lifted {
			emit(Event{Kind: KindUnfrozen, Freeze: &lifted[i]})
		}
		return nil
	})
	return lifted, err
}

// mayFreeze is the rule of who may freeze, read in the freeze's
// transaction: an enabled operator or admin, as for a decision.
func mayFreeze(tx Tx, by string) error { return mayDecide(tx, by) }

// mayUnfreeze is the rule of who may lift a freeze, read in the lift's
// transaction: an enabled admin only, so that an operator who froze a tool
// in an incident cannot lift the freeze alone.
func mayUnfreeze(tx Tx, by string) error {
	u, err := tx.User(by)
	if errors.Is(err, account.ErrUserNotFound) || (err == nil && (u.Disabled() || !u.Role.CanAdminister())) {
		return &AdminError{Operator: by}
	}
	return err
}

// RecordTools writes an audit entry naming the tools file in force: its
// digest and each tool's definition digest. The server calls it whenever
// it loads a tools file, so every later decision can be traced to it.
func (s *Service) RecordTools(ctx context.Context, principal, file string) error {
	defs := map[string]any{}
	for _, t := range s.tools.Tools() {
		defs[t.Name] = t.DefinitionDigest
	}
	return s.update(ctx, func(tx Tx, emit func(Event)) error {
		return tx.Append(s.entry(KindToolsLoaded, nil, principal, audit.ChannelCLI, map[string]any{
			"file": file, "tools_digest": s.tools.Digest(), "tools": defs}))
	})
}
