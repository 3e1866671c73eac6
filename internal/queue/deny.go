package queue

import (
	"context"
	"strings"

	"github.com/countersign/countersign/internal/audit"
)

// Deny ends call id with the operator's reason, which the agent receives.
func (s *Service) Deny(ctx context.Context, operator, channel, id, reason string) (*Call, error) {
	reason = strings.TrimSpace(reason)
	var out *Call
	err := s.update(ctx, func(tx Tx, emit func(Event)) error {
		if err := mayDecide(tx, operator); err != nil {
			return err
		}
		if reason == "" {
			return ErrReasonRequired
		}
		if len(reason) > MaxReasonBytes {
			return ErrReasonTooLong
		}
		c, err := s.loadPending(tx, id, emit)
		if err != nil {
			return err
		}
		if err := s.deny(tx, c, operator, channel, reason, nil, emit); err != nil {
			return err
		}
		out = c
		return nil
	})
	return out, err
}

// deny ends pending call c with operator's reason, with its audit entry
// (details added to the digest and the reason), in the decision's
// transaction.
func (s *Service) deny(tx Tx, c *Call, operator, channel, reason string, details map[string]any, emit func(Event)) error {
	now := s.now()
	c.Status = StatusDenied
	c.DecidedAt = now
	c.Denial = &Denial{By: operator, Channel: channel, Reason: reason, At: now}
	if err := tx.UpdateCall(c); err != nil {
		return err
	}
	if details == nil {
		details = map[string]any{}
	}
	details["digest"], details["reason"] = c.Digest, reason
	if err := tx.Append(s.entry(audit.KindDenied, c, operator, channel, details)); err != nil {
		return err
	}
	emit(Event{Kind: audit.KindDenied, Call: c})
	return nil
}

// Cancel withdraws one of the principal's pending calls.
func (s *Service) Cancel(ctx context.Context, who Principal, id string) (*Call, error) {
	var out *Call
	err := s.update(ctx, func(tx Tx, emit func(Event)) error {
		c, err := tx.Call(id)
		if err != nil {
			return err
		}
		if !c.SubmittedByToken(who) {
			return ErrNotFound
		}
		if c.PlanID != "" {
			return ErrPlanItem
		}
		if c.Status != StatusPending {
			return &NotPendingError{Status: c.Status}
		}
		c.Status = StatusCancelled
		c.DecidedAt = s.now()
		if err := tx.UpdateCall(c); err != nil {
			return err
		}
		if err := tx.Append(s.entry(audit.KindCancelled, c, who.Actor, audit.ChannelAPI, nil)); err != nil {
			return err
		}
		emit(Event{Kind: audit.KindCancelled, Call: c})
		out = c
		return nil
	})
	return out, err
}
