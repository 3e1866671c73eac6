package queue

import (
	"context"
	"errors"

	"github.com/countersign/countersign/internal/audit"
)

// ErrNotAdmin is an accept-rollback by someone who is not an enabled admin.
var ErrNotAdmin = errors.New("queue: only an enabled admin account may accept a rollback")

// RollbackReason is the reason recorded for what an accepted rollback ends.
const RollbackReason = "the database was restored from an older copy, which has forgotten later uses and revocations; an admin accepted the rollback"

// AcceptRollback records, in one transaction with its audit entry, that an
// admin accepted the database although it is behind the data directory's
// high-water mark. From then on every grant issued at or before this moment
// is refused at redemption (revoked): the restored database does not know
// which of them were redeemed. Everything the copy holds alive that counts
// its own uses ends too, in the admin's name and audited, since the copy has
// forgotten the uses and revocations made after it was taken: every
// allowance that has not ended (allowance_revoked). Any other standing
// permission the store comes to keep (a plan's items not yet minted, a
// delegation) must end in endForgotten as well. It returns the ids of the
// allowances ended. The caller records the new mark after this returns.
func (s *Service) AcceptRollback(ctx context.Context, admin, channel string, r Rollback) ([]string, error) {
	var ended []string
	err := s.update(ctx, func(tx Tx, emit func(Event)) error {
		u, err := tx.User(admin)
		if err != nil || u.Disabled() || !u.Role.CanAdminister() {
			return ErrNotAdmin
		}
		r.AcceptedAt, r.AcceptedBy = s.now(), admin
		if err := tx.InsertRollback(r); err != nil {
			return err
		}
		if err := tx.Append(s.entry(audit.KindRollbackAccepted, nil, admin, channel, map[string]any{
			"mark_seq": r.MarkSeq, "mark_head": r.MarkHead, "db_seq": r.DBSeq, "db_head": r.DBHead,
			"grants_refused_before": formatTime(r.AcceptedAt)})); err != nil {
			return err
		}
		ended, err = s.endForgotten(ctx, tx, admin, channel, emit)
		return err
	})
	if err != nil {
		return nil, err
	}
	// One listing holds at most MaxAllowancesListed: end the rest, a page
	// a transaction, until a listing finds nothing alive. The rollback is
	// recorded already, so their grants are refused meanwhile.
	for page := len(ended); page >= MaxAllowancesListed; {
		var more []string
		err := s.update(ctx, func(tx Tx, emit func(Event)) error {
			var err error
			more, err = s.endForgotten(ctx, tx, admin, channel, emit)
			return err
		})
		if err != nil {
			return ended, err
		}
		ended, page = append(ended, more...), len(more)
	}
	return ended, nil
}

// endForgotten ends, in tx, up to MaxAllowancesListed allowances that have
// not ended, in admin's name, each audited as allowance_revoked with
// RollbackReason. The listing reads committed state; writes serialize, so
// nothing commits between it and tx.
func (s *Service) endForgotten(ctx context.Context, tx Tx, admin, channel string, emit func(Event)) ([]string, error) {
	alive, err := s.store.Allowances(ctx, AllowanceFilter{Live: true, Limit: MaxAllowancesListed})
	if err != nil {
		return nil, err
	}
	ended := []string{}
	now := s.now()
	for _, a := range alive {
		ok, err := tx.EndAllowance(a.ID, EndRevoked, admin, now)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		a.EndedAt, a.EndReason, a.EndedBy = now, EndRevoked, admin
		details := s.allowanceDetails(a)
		details["reason"], details["grants_revoked"], details["rollback"] = RollbackReason, []string{}, true
		if err := tx.Append(s.entry(KindAllowanceRevoked, nil, admin, channel, details)); err != nil {
			return nil, err
		}
		emit(Event{Kind: KindAllowanceRevoked, Allowance: a})
		ended = append(ended, a.ID)
	}
	return ended, nil
}
