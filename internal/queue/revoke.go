package queue

import (
	"context"
	"fmt"
	"strings"

	"github.com/countersign/countersign/internal/audit"
)

// RevokeGrant revokes the grant of an approved call that has not been
// redeemed, in the name of an operator who may decide, with a reason the
// agent receives: the grant is refused at redemption (revoked) from the
// moment this commits, and the call is shown as revoked. A revocation only
// ever stops a call, so the own-call ban does not apply to it.
func (s *Service) RevokeGrant(ctx context.Context, operator, channel, id, reason string) (*Call, error) {
	reason = strings.TrimSpace(reason)
	if reason == "" {
		return nil, ErrReasonRequired
	}
	if len(reason) > MaxReasonBytes {
		return nil, fmt.Errorf("%w (at most %d bytes)", ErrReasonTooLong, MaxReasonBytes)
	}
	var out *Call
	err := s.update(ctx, func(tx Tx, emit func(Event)) error {
		if err := mayDecide(tx, operator); err != nil {
			return err
		}
		c, err := tx.Call(id)
		if err != nil {
			return err
		}
		if c.Status != StatusApproved || c.Revoked != nil || c.GrantJTI == "" {
			return fmt.Errorf("%w (it is %s)", ErrNotApproved, c.Shown())
		}
		r := Revocation{CallID: c.ID, JTI: c.GrantJTI, By: operator, Channel: channel, Reason: reason, At: s.now()}
		if err := tx.InsertRevocation(r); err != nil {
			return err
		}
		c.Revoked = &r
		if err := tx.Append(s.entry(audit.KindRevoked, c, operator, channel, map[string]any{
			"jti": c.GrantJTI, "digest": c.Digest, "reason": reason})); err != nil {
			return err
		}
		emit(Event{Kind: audit.KindRevoked, Call: c})
		out = c
		return nil
	})
	return out, err
}
