package queue

import (
	"context"
	"slices"
	"time"

	"github.com/countersign/countersign/internal/audit"
)

// Escalation tiers (docs/team.md): a call still pending a tier's after
// past its submission reaches the tier, which adds approver roles and
// groups (tools.Approvers.Widen) and channels to notify. Reaching one
// changes nothing else: the approvals required, the passkey requirement,
// owners and the own-call ban stay as they are.

// Audit kinds of escalation tiers.
const (
	// KindEscalated is the entry, and the event, of a call reaching an
	// escalation tier.
	KindEscalated = "escalated"
)

// NextTierDue is when c reaches its next escalation tier; zero when no
// tier is left.
func (c *Call) NextTierDue() time.Time {
	if c.Reached >= len(c.Escalate) {
		return time.Time{}
	}
	return c.CreatedAt.Add(c.Escalate[c.Reached].After)
}

// escalate moves pending c through every tier due at now, in tx: each
// tier reached is audited (escalated) and the call is pushed once. It
// reports whether a tier was reached.
func (s *Service) escalate(tx Tx, c *Call, now time.Time, emit func(Event)) (bool, error) {
	reached := false
	for due := c.NextTierDue(); !due.IsZero() && !now.Before(due); due = c.NextTierDue() {
		t := c.Escalate[c.Reached]
		before := c.Approvers.Describe()
		c.Approvers = c.Approvers.Widen(t)
		for _, n := range t.Notify {
			if !slices.Contains(c.Notify, n) {
				c.Notify = append(c.Notify, n)
			}
		}
		c.Reached++
		if err := tx.Append(s.entry(KindEscalated, c, "console", audit.ChannelAPI, map[string]any{
			"tier": int64(c.Reached), "after": t.After.String(), "add_roles": nonNil(t.AddRoles),
			"add_groups": nonNil(t.AddGroups), "notify": nonNil(t.Notify), "approvers_before": before,
			"approvers": c.Approvers.Describe(), "required": int64(c.ApprovalsRequired)})); err != nil {
			return false, err
		}
		reached = true
	}
	if !reached {
		return false, nil
	}
	if err := tx.SetEscalation(c, c.NextTierDue()); err != nil {
		return false, err
	}
	emit(Event{Kind: KindEscalated, Call: c})
	return true, nil
}

// EscalateDue moves every pending call whose next tier is due through its
// due tiers, each call in its own transaction, and returns how many calls
// reached a tier. A call decided meanwhile leaves the schedule.
func (s *Service) EscalateDue(ctx context.Context) (int, error) {
	ids, err := s.store.DueEscalations(ctx, s.now(), 500)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		err := s.update(ctx, func(tx Tx, emit func(Event)) error {
			c, err := tx.Call(id)
			if err != nil {
				return err
			}
			if c.Status != StatusPending || !s.now().Before(c.DecideBy) {
				return tx.SetEscalation(c, time.Time{})
			}
			ok, err := s.escalate(tx, c, s.now(), emit)
			if ok {
				n++
			}
			return err
		})
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
