package queue

import (
	"context"
	"slices"
	"time"

	"github.com/countersign/countersign/internal/account"
)

// Standing is how one person stands toward approving one call, read from
// what the console knows when it renders a page: the rule by which a
// call's page offers Approve, and by which the navigation counts the calls
// a person has to decide. It is a reading for pages only; the decision
// checks every part of it again in its transaction, on the call as stored
// (checkApprovalFor), and a delegator's own standing besides.
type Standing struct {
	// Decider is set when the person's account decides (operator or
	// admin, not disabled).
	Decider bool
	// Pending is set when the call waits for a decision of its own: it is
	// pending and no plan item (a plan's items are decided with the plan).
	Pending bool
	// Complete is set when the call holds every approval it requires: a
	// counter-proposal waiting for its agent to accept it.
	Complete bool
	// Frozen is the freeze in force that stops the call, or nil.
	Frozen *Freeze
	// ToolChanged is set when the tool's definition is no longer the one
	// the call was made under.
	ToolChanged bool
	// OwnCall is set when the call was proposed under a name the person
	// goes by.
	OwnCall bool
	// Owner is the call's owner that names the person, or "".
	Owner string
	// Allowed is set when the tool's approvers (with the escalation tiers
	// the call reached) allow the person's own role or groups.
	Allowed bool
	// Approved is set when the person is named in an approval of the call
	// already, as its approver or as whom it was for.
	Approved bool
	// For are the people on whose behalf the person may approve: those
	// who delegated their approvals to the person, live now, and are named
	// in no approval of the call. Read only when Allowed is not set.
	For []string
}

// Reasons a person may not approve a call, first that applies first
// (Standing.Refusal).
const (
	RefusedNotDecider  = "not_decider"
	RefusedNotPending  = "not_pending"
	RefusedComplete    = "complete"
	RefusedFrozen      = "frozen"
	RefusedToolChanged = "tool_changed"
	RefusedOwnCall     = "own_call"
	RefusedOwner       = "owner"
	RefusedNotApprover = "not_approver"
	RefusedApproved    = "approved"
)

// StandingOf is u's standing toward c: fz are the freezes in force,
// toolChanged what Service.ToolChanged says of c, and delegators the
// people with a delegation to u live now (nil when not read).
func StandingOf(c *Call, u account.User, fz []Freeze, toolChanged bool, delegators []string) Standing {
	s := Standing{
		Decider: u.CanDecide(), Pending: c.Status == StatusPending && c.PlanID == "",
		Complete: len(c.Approvals) >= c.ApprovalsRequired,
		Frozen:   FreezeOf(fz, c.Tool, c.Actor), ToolChanged: toolChanged,
		OwnCall: c.ProposedBy(u), Owner: c.OwnedBy(u), Allowed: c.Approvers.Allows(string(u.Role), u.Groups),
		Approved: c.ApprovedBy(u.Name),
	}
	if !s.Allowed {
		for _, d := range delegators {
			if d != u.Name && !c.ApprovedBy(d) && !slices.Contains(s.For, d) {
				s.For = append(s.For, d)
			}
		}
	}
	return s
}

// Refusal names the first reason the person may not approve the call, or
// "" when a page offers Approve: a decider, a call waiting for its own
// decision that still needs an approval, not frozen, made under the tool's current definition, not
// proposed under the person's name nor owned by them, approvers that allow
// them (or someone who delegated to them), and no approval of theirs yet.
func (s Standing) Refusal() string {
	switch {
	case !s.Decider:
		return RefusedNotDecider
	case !s.Pending:
		return RefusedNotPending
	case s.Complete:
		return RefusedComplete
	case s.Frozen != nil:
		return RefusedFrozen
	case s.ToolChanged:
		return RefusedToolChanged
	case s.OwnCall:
		return RefusedOwnCall
	case s.Owner != "":
		return RefusedOwner
	case !s.Allowed && len(s.For) == 0:
		return RefusedNotApprover
	case s.Approved:
		return RefusedApproved
	}
	return ""
}

// MayApprove reports whether a page offers the person Approve.
func (s Standing) MayApprove() bool { return s.Refusal() == "" }

// PendingGroup is a number of pending calls (plan items left out) that
// agree on everything Standing reads of a call: tool, actor, the tool
// definition they were made under, owners, approvers, the approvals they
// require and the names in their approvals. Call holds those fields only, with Status pending.
type PendingGroup struct {
	Call *Call
	// Count is how many calls the group holds, Due how many of them have
	// a decision deadline before the time PendingGroups was given.
	Count, Due int
}

// PendingGroups reads the pending calls grouped by what Standing reads of
// them, with how many of each are due before due: one read, however many
// people's standings are then counted from it.
func (s *Service) PendingGroups(ctx context.Context, due time.Time) ([]PendingGroup, error) {
	return s.store.PendingGroups(ctx, due)
}
