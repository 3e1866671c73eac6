package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/account"
)

// Delegations (docs/team.md): one person lends their approver standing to
// another for a window while they are away. A delegation passes only the
// delegator's roles and groups, read at each decision; the own-call ban
// and owners are checked against both people, and a quorum counts each
// name of an approval (who, and for whom) once.

// Audit kinds of delegations.
const (
	KindDelegationGiven = "delegation_given"
	KindDelegationEnded = "delegation_ended"
)

// Bounds of delegations: the longest window, and how many may be live
// per person (given and received together) and in all.
const (
	MaxDelegationFor        = 14 * 24 * time.Hour
	MaxDelegationsPerPerson = 3
	MaxDelegationsLive      = 1000
)

// Why a delegation ended (Delegation.EndReason). One that ran out, or
// whose account was disabled, is not written as ended: it is read as
// ended (Delegation.State).
const (
	DelegationEndedByPerson = "ended"
	// DelegationEndedDisabled: one of its two accounts was disabled
	// (EndDelegationsOf).
	DelegationEndedDisabled = "account_disabled"
)

// Delegation states as pages show them (Delegation.State).
const (
	DelegationLive     = "live"
	DelegationEnded    = "ended"
	DelegationExpired  = "expired"
	DelegationDisabled = "account_disabled"
)

// Refusals of giving, ending and using delegations.
var (
	// ErrDelegationNotFound is a delegation id nothing is stored under.
	ErrDelegationNotFound = errors.New("queue: delegation not found")
	// ErrSelfDelegation is a delegation to oneself, or to another account
	// of the same person.
	ErrSelfDelegation = errors.New("queue: a person cannot delegate to themselves")
	// ErrMutualDelegation is a delegation back to someone who delegates to
	// the delegator now.
	ErrMutualDelegation = errors.New("queue: the delegate delegates to the delegator already; no mutual delegation")
	// ErrDelegationExists is a second live delegation from the same
	// delegator to the same delegate: it would pass nothing more, and
	// would take more of both people's MaxDelegationsPerPerson.
	ErrDelegationExists = errors.New("queue: the delegator delegates to the delegate already")
	// ErrDelegationWindow is an until that is not in the future or is
	// more than MaxDelegationFor away.
	ErrDelegationWindow = fmt.Errorf("queue: a delegation ends in the future and lasts at most %s", MaxDelegationFor)
	// ErrTooManyDelegations refuses a delegation beyond the live ones a
	// person, or the console, may have.
	ErrTooManyDelegations = errors.New("queue: too many live delegations")
	// ErrMayNotDelegate is a delegation given, or ended, by someone who is
	// neither its delegator (or delegate, to end it) nor an admin.
	ErrMayNotDelegate = errors.New("queue: only the delegator or an admin gives a delegation, and only its two people or an admin end it")
	// ErrNotDelegated refuses an approval for someone with no live
	// delegation to the approver: it never existed, ended, ran out, or
	// one of the two accounts was disabled or no longer decides.
	ErrNotDelegated = errors.New("queue: no live delegation lets you approve for that person")
	// ErrDelegationOutlived is an allowance given for a delegator that
	// would outlive the delegation.
	ErrDelegationOutlived = errors.New("queue: a delegate cannot give what outlives the delegation")
)

// Delegation is Delegator lending their approver standing to Delegate
// from GivenAt until Until (at most MaxDelegationFor), given by GivenBy
// (the delegator, or an admin on their behalf).
type Delegation struct {
	// ID is "dlg_" and a sortable random id.
	ID                           string
	Delegator, Delegate, GivenBy string
	GivenAt, Until               time.Time
	// EndedAt, EndReason and EndedBy are set when a person ended it
	// before its Until.
	EndedAt   time.Time
	EndReason string
	EndedBy   string
}

// LiveAt reports whether d is in force at now, as stored: not ended, and
// before its Until. Both accounts must also be enabled and decide, which
// the decision checks (State says so for pages).
func (d *Delegation) LiveAt(now time.Time) bool {
	return d.EndedAt.IsZero() && now.Before(d.Until)
}

// DelegationInput is a delegation to give: By gives it (Delegator, or an
// admin), through Channel, ending at Until.
type DelegationInput struct {
	By, Channel         string
	Delegator, Delegate string
	Until               time.Time
}

// GiveDelegation gives a delegation, in one transaction, and audits it
// (delegation_given). Both people are enabled accounts that decide and
// two different people; the window ends in the future, at most
// MaxDelegationFor away; no live delegation goes the other way or the
// same way; and neither person has MaxDelegationsPerPerson live ones
// already.
func (s *Service) GiveDelegation(ctx context.Context, in DelegationInput) (*Delegation, error) {
	var out *Delegation
	err := s.update(ctx, func(tx Tx, emit func(Event)) error {
		now := s.now()
		by, err := decider(tx, in.By)
		if err != nil {
			return err
		}
		if by.Name != in.Delegator && by.Role != account.RoleAdmin {
			return ErrMayNotDelegate
		}
		from, err := decider(tx, in.Delegator)
		if err != nil {
			return err
		}
		to, err := decider(tx, in.Delegate)
		if err != nil {
			return err
		}
		if from.Name == to.Name || samePerson(from, to) {
			return ErrSelfDelegation
		}
		// An admin gives a delegation on someone's behalf only to a third
		// person: one to themselves would take the delegator's standing
		// (groups the identity provider never gave the admin) without the
		// delegator's say.
		if by.Name != from.Name && (by.Name == to.Name || samePerson(by, to)) {
			return fmt.Errorf("%w: an admin may not give themselves a delegation on %s's behalf; %s gives it", ErrMayNotDelegate, from.Name, from.Name)
		}
		if !in.Until.After(now) || in.Until.Sub(now) > MaxDelegationFor {
			return ErrDelegationWindow
		}
		if _, err := tx.LiveDelegation(to.Name, from.Name, now); err == nil {
			return ErrMutualDelegation
		} else if !errors.Is(err, ErrDelegationNotFound) {
			return err
		}
		if _, err := tx.LiveDelegation(from.Name, to.Name, now); err == nil {
			return ErrDelegationExists
		} else if !errors.Is(err, ErrDelegationNotFound) {
			return err
		}
		for _, p := range []string{from.Name, to.Name} {
			ofPerson, all, err := tx.LiveDelegations(p, now, MaxDelegationsLive)
			if err != nil {
				return err
			}
			if ofPerson >= MaxDelegationsPerPerson {
				return fmt.Errorf("%w: %s has %d (at most %d per person)", ErrTooManyDelegations, p, ofPerson, MaxDelegationsPerPerson)
			}
			if all >= MaxDelegationsLive {
				return fmt.Errorf("%w: %d are live (at most %d in all)", ErrTooManyDelegations, all, MaxDelegationsLive)
			}
		}
		d := &Delegation{ID: "dlg_" + strings.TrimPrefix(newCallID(now), "call_"), Delegator: from.Name, Delegate: to.Name,
			GivenBy: by.Name, GivenAt: now, Until: in.Until.UTC().Truncate(time.Millisecond)}
		if err := tx.InsertDelegation(d); err != nil {
			return err
		}
		if err := tx.Append(s.entry(KindDelegationGiven, nil, by.Name, in.Channel, map[string]any{
			"delegation": d.ID, "delegator": d.Delegator, "delegate": d.Delegate, "until": formatTime(d.Until)})); err != nil {
			return err
		}
		emit(delegationEvent(KindDelegationGiven, d))
		out = d
		return nil
	})
	return out, err
}

// EndDelegation ends delegation id before its until, by one of its two
// people or an admin, and audits it (delegation_ended). Ending one that
// has ended or run out changes nothing and says so.
func (s *Service) EndDelegation(ctx context.Context, by, channel, id string) (*Delegation, error) {
	var out *Delegation
	err := s.update(ctx, func(tx Tx, emit func(Event)) error {
		now := s.now()
		u, err := tx.User(by)
		if err != nil {
			if errors.Is(err, account.ErrUserNotFound) {
				return ErrMayNotDelegate
			}
			return err
		}
		d, err := tx.Delegation(id)
		if err != nil {
			return err
		}
		if u.Disabled() || (u.Name != d.Delegator && u.Name != d.Delegate && u.Role != account.RoleAdmin) {
			return ErrMayNotDelegate
		}
		if !d.LiveAt(now) {
			return fmt.Errorf("%w: delegation %s has ended", ErrNotDelegated, d.ID)
		}
		ok, err := tx.EndDelegation(d.ID, DelegationEndedByPerson, u.Name, now)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: delegation %s has ended", ErrNotDelegated, d.ID)
		}
		d.EndedAt, d.EndReason, d.EndedBy = now, DelegationEndedByPerson, u.Name
		if err := tx.Append(s.entry(KindDelegationEnded, nil, u.Name, channel, map[string]any{
			"delegation": d.ID, "delegator": d.Delegator, "delegate": d.Delegate, "reason": d.EndReason})); err != nil {
			return err
		}
		emit(delegationEvent(KindDelegationEnded, d))
		out = d
		return nil
	})
	return out, err
}

// EndDelegationsOf records as ended, with reason, every delegation live
// now that person gave or received, each audited (delegation_ended), in
// one transaction, and returns how many it ended. A disabled account's
// delegations pass nothing from the moment it is disabled (every decision
// checks both accounts); this writes that down.
func (s *Service) EndDelegationsOf(ctx context.Context, person, by, channel, reason string) (int, error) {
	live, err := s.store.Delegations(ctx, DelegationFilter{Person: person, LiveAt: s.now(), Limit: 2 * MaxDelegationsPerPerson})
	if err != nil || len(live) == 0 {
		return 0, err
	}
	n := 0
	err = s.update(ctx, func(tx Tx, emit func(Event)) error {
		n = 0
		now := s.now()
		for _, d := range live {
			ok, err := tx.EndDelegation(d.ID, reason, by, now)
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			n++
			if err := tx.Append(s.entry(KindDelegationEnded, nil, by, channel, map[string]any{
				"delegation": d.ID, "delegator": d.Delegator, "delegate": d.Delegate, "reason": reason})); err != nil {
				return err
			}
			ended := *d
			ended.EndedAt, ended.EndReason, ended.EndedBy = now, reason, by
			emit(delegationEvent(KindDelegationEnded, &ended))
		}
		return nil
	})
	return n, err
}

// DisableAccount disables person's account through accounts (ending its
// sessions) and then records its live delegations ended: what every door
// that disables an account does, the admin page and the command line
// alike. It returns how many delegations it ended.
func (s *Service) DisableAccount(ctx context.Context, accounts *account.Service, person, by, channel string) (int, error) {
	if err := accounts.DisableUser(ctx, person, by, channel); err != nil {
		return 0, err
	}
	return s.EndDelegationsOf(ctx, person, by, channel, DelegationEndedDisabled)
}

// delegationEvent is the event of a delegation's change: a copy of d, so
// that subscribers never share the caller's.
func delegationEvent(kind string, d *Delegation) Event {
	c := *d
	return Event{Kind: kind, Delegation: &c}
}

// DelegationFilter selects delegations: those Person gave or received
// (every person's when ""), only those live at LiveAt when it is set, at
// most Limit.
type DelegationFilter struct {
	Person string
	LiveAt time.Time
	Limit  int
}

// Delegations lists delegations, newest first.
func (s *Service) Delegations(ctx context.Context, f DelegationFilter) ([]*Delegation, error) {
	return s.store.Delegations(ctx, f)
}

// delegatedStanding is the check of an approval by u for delegator, in
// the decision's transaction at now: a delegation from delegator to u is
// live, and delegator is an enabled account that decides. It returns the
// delegation and the delegator's account as it stands now, whose roles
// and groups the approval is judged by. u was checked by decider.
func delegatedStanding(tx Tx, u account.User, delegator string, now time.Time) (*Delegation, account.User, error) {
	if delegator == u.Name {
		return nil, account.User{}, fmt.Errorf("%w: you approve for yourself by approving", ErrSelfDelegation)
	}
	d, err := tx.LiveDelegation(delegator, u.Name, now)
	if errors.Is(err, ErrDelegationNotFound) {
		return nil, account.User{}, fmt.Errorf("%w: nothing delegated by %s to %s is live now", ErrNotDelegated, delegator, u.Name)
	}
	if err != nil {
		return nil, account.User{}, err
	}
	from, err := tx.User(delegator)
	if errors.Is(err, account.ErrUserNotFound) || err == nil && !from.CanDecide() {
		return nil, account.User{}, fmt.Errorf("%w: %s's account is disabled or no longer decides", ErrNotDelegated, delegator)
	}
	if err != nil {
		return nil, account.User{}, err
	}
	return d, from, nil
}

// State is how d stands at now for pages: live, expired, ended (by a
// person), or account_disabled when delegator or delegate (as read by
// the caller) is disabled.
func (d *Delegation) State(now time.Time, disabled func(name string) bool) string {
	switch {
	case d.EndReason == DelegationEndedDisabled:
		return DelegationDisabled
	case !d.EndedAt.IsZero():
		return DelegationEnded
	case !now.Before(d.Until):
		return DelegationExpired
	case disabled != nil && (disabled(d.Delegator) || disabled(d.Delegate)):
		return DelegationDisabled
	}
	return DelegationLive
}
