package queue

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/policy"
	"github.com/countersign/countersign/internal/scope"
	"github.com/countersign/countersign/internal/tools"
)

// maxOpenAllowancesRead bounds the allowances of one (actor, audience,
// tool) a submission reads: the live ones are bounded per tool, and those
// that ended by themselves are ended when read.
const maxOpenAllowancesRead = 64

// coverByAllowance approves c, just stored as pending in tx and decided by
// no rule (env is its hashed envelope), when an allowance of its actor, audience and tool covers it
// (docs/allowances.md): one approval per confirmer (channel allowance),
// the use counted, and the grant minted, all in the submission's
// transaction. Anything that is not plainly covered leaves the call
// pending for people, without partial credit. A tool without an
// allowance block costs nothing here: not a statement is run.
func (s *Service) coverByAllowance(tx Tx, c *Call, env canonical.Envelope, t *tools.Tool, d policy.Decision, emit func(Event)) error {
	// A rule's evaluation error, a passkey, and (below) a deception
	// warning each mean "not covered"; a rule that approved or denied
	// decided the call already.
	if t.Allowance == nil || t.AsksPasskey() || c.RequirePasskey || d.Err != nil || d.Automatic() {
		return nil
	}
	open, err := tx.AllowancesFor(c.Actor, c.Audience, c.Tool, maxOpenAllowancesRead)
	if err != nil || len(open) == 0 {
		return err
	}
	if DeceptiveWith(c, env.Args) {
		return nil
	}
	for _, a := range open {
		used, err := s.tryAllowance(tx, a, c, env, t, emit)
		if err != nil || used {
			return err
		}
	}
	return nil
}

// tryAllowance approves c by a if a covers it now, and reports whether it
// did. An allowance found spent (its tool changed, its until passed, its
// uses used) or with a confirmer who can no longer decide is ended on the
// spot.
func (s *Service) tryAllowance(tx Tx, a *Allowance, c *Call, env canonical.Envelope, t *tools.Tool, emit func(Event)) (bool, error) {
	now := s.now()
	if reason := s.spent(a, now); reason != "" {
		return false, s.endAllowance(tx, a, reason, nil, emit)
	}
	if !a.Confirmed() || len(a.Confirmers) < c.ApprovalsRequired {
		return false, nil // no partial credit: the call needs more people than the allowance has
	}
	if a.OncePerCall && c.Digest == a.BaseDigest {
		return false, nil // the base call was approved once, when the allowance was given
	}
	sc, err := s.scopes.parse(a)
	if err != nil {
		// The stored scope is not what was given: the database was
		// edited. Nothing is approved by it.
		s.log.Error("allowance scope does not match its digest; it covers nothing", slog.String("allowance", a.ID), slog.Any("error", err))
		return false, nil
	}
	if ok, _ := scope.Covers(sc, t, envelopeScopeCall(c, env)); !ok {
		return false, nil
	}
	if t.Confirm != nil && t.Confirm.Target && sc.Target.Prefix {
		// The giver typed the base call's target; a call with another
		// target must have its own typed by a person.
		return false, nil
	}
	users, ended, err := s.confirmersNow(tx, a, c, emit)
	if err != nil || ended || users == nil {
		return false, err
	}
	ok, err := tx.UseAllowance(AllowanceUse{AllowanceID: a.ID, CallID: c.ID, Digest: c.Digest, Once: a.OncePerCall, At: now})
	if err != nil || !ok {
		return false, err
	}
	a.Used++
	for _, u := range users {
		details := map[string]any{"allowance": a.ID, "scope_digest": a.ScopeDigest,
			"giver": a.Giver, "uses_left": int64(a.Left())}
		if err := s.recordApproval(tx, c, u, Approval{Operator: u.Name, Channel: ChannelAllowance, At: now,
			Method: MethodAllowance, Via: a.ID, Digest: c.Digest}, details); err != nil {
			return false, err
		}
	}
	if err := s.mintIfComplete(tx, c, now, nil, emit); err != nil {
		return false, err
	}
	if a.Used >= a.Uses {
		if err := s.endAllowance(tx, a, EndUsedUp, map[string]any{"last_call": c.ID}, emit); err != nil {
			return false, err
		}
	}
	return true, nil
}

// confirmersNow reads a's confirmers as they stand now and judges them
// against c: each must be an enabled account whose role decides and whom
// the tool's reviewer condition allows (else the allowance ends:
// confirmer_disabled, and ended is true), and none may have proposed c or
// own its agent, nor be the same person as another (else users is nil: c
// waits for people, and the allowance stands).
func (s *Service) confirmersNow(tx Tx, a *Allowance, c *Call, emit func(Event)) (users []account.User, ended bool, err error) {
	users = make([]account.User, 0, len(a.Confirmers))
	for _, name := range a.Confirmers {
		u, err := tx.User(name)
		why := ""
		switch {
		case errors.Is(err, account.ErrUserNotFound):
			why = "gone"
		case err != nil:
			return nil, false, err
		case u.Disabled():
			why = "disabled"
		case !u.Role.CanDecide():
			why = "no deciding role"
		case !c.Approvers.Allows(string(u.Role), u.Groups):
			why = "not an approver of the tool"
		}
		if why != "" {
			return nil, true, s.endAllowance(tx, a, EndConfirmerDisabled, map[string]any{"confirmer": name, "why": why}, emit)
		}
		if c.ProposedBy(u) || c.OwnedBy(u) != "" {
			return nil, false, nil
		}
		for _, v := range users {
			if samePerson(u, v) {
				return nil, false, nil
			}
		}
		users = append(users, u)
	}
	return users, false, nil
}

// scopeCache keeps the scopes of allowances as parsed and checked against
// their digests, so that a submission an allowance covers neither parses
// its scope again nor hashes it: an entry is used only for the very bytes
// it was made from, which are immutable once given (the store refuses to
// change an allowance's scope), and an edited row is parsed and checked
// afresh. It holds at most maxCachedScopes entries and starts over when
// full.
type scopeCache struct {
	mu sync.Mutex
	m  map[string]cachedScope
}

type cachedScope struct {
	raw    []byte
	digest string
	scope  *scope.Scope
}

const maxCachedScopes = 256

// parse returns a's scope, or an error when its stored bytes do not parse
// or do not hash to its scope digest.
func (c *scopeCache) parse(a *Allowance) (*scope.Scope, error) {
	c.mu.Lock()
	e, ok := c.m[a.ID]
	c.mu.Unlock()
	if ok && e.digest == a.ScopeDigest && bytes.Equal(e.raw, a.Scope) {
		return e.scope, nil
	}
	sc, err := scope.Parse(a.Scope)
	if err != nil {
		return nil, err
	}
	if d := sc.Digest(); d != a.ScopeDigest {
		return nil, fmt.Errorf("scope digest %s, stored %s", d, a.ScopeDigest)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxCachedScopes {
		c.m = make(map[string]cachedScope)
	}
	c.m[a.ID] = cachedScope{raw: bytes.Clone(a.Scope), digest: a.ScopeDigest, scope: sc}
	return sc, nil
}
