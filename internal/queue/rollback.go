package queue

import (
	"context"
	"errors"
	"time"

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
// forgotten the uses, revocations and ends made after it was taken: every
// allowance that has not ended (allowance_revoked), every approved plan
// whose items are not all minted (plan_cancelled: its unminted items stop,
// its unredeemed grants are revoked), and every live delegation
// (delegation_ended). Any other standing permission the store comes to
// keep must end here as well. It returns the ids of what it ended. The
// caller records the new mark after this returns.
func (s *Service) AcceptRollback(ctx context.Context, admin, channel string, r Rollback) (RollbackEnded, error) {
	var out RollbackEnded
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
		return out, err
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
			out.Allowances = ended
			return out, err
		}
		ended, page = append(ended, more...), len(more)
	}
	out.Allowances = ended
	err = s.endForgottenPlansAndDelegations(ctx, admin, channel, &out)
	return out, err
}

// RollbackEnded names what an accepted rollback ended.
type RollbackEnded struct {
	Allowances, Plans, Delegations []string
}

// maxPlansListedOnRollback bounds the one listing of live plans an
// accepted rollback reads.
const maxPlansListedOnRollback = 100_000

// DelegationEndedRollback: an admin accepted a database restored from an
// older copy, which may have forgotten the delegation's end.
const DelegationEndedRollback = "rollback"

// endForgottenPlansAndDelegations ends, after the rollback is recorded,
// every approved plan and every live delegation the restored copy holds,
// a page a transaction, each audited in admin's name.
func (s *Service) endForgottenPlansAndDelegations(ctx context.Context, admin, channel string, out *RollbackEnded) error {
	// Every live plan is due by the end of time: the listing holds the
	// pending and the approved ones (ids only; pending plans are bounded
	// per token), and only the approved stand.
	ids, err := s.store.DuePlans(ctx, time.Unix(1<<40, 0), maxPlansListedOnRollback)
	if err != nil {
		return err
	}
	for _, id := range ids {
		err := s.update(ctx, func(tx Tx, emit func(Event)) error {
			p, items, err := s.loadPlan(tx, id)
			if err != nil || p.Status != PlanApproved {
				return err
			}
			out.Plans = append(out.Plans, p.ID)
			return s.endPlan(tx, p, items, PlanCancelled, admin, channel, RollbackReason, emit)
		})
		if err != nil {
			return err
		}
	}
	now := s.now()
	live, err := s.store.Delegations(ctx, DelegationFilter{LiveAt: now, Limit: MaxDelegationsLive})
	if err != nil || len(live) == 0 {
		return err
	}
	return s.update(ctx, func(tx Tx, emit func(Event)) error {
		for _, d := range live {
			ok, err := tx.EndDelegation(d.ID, DelegationEndedRollback, admin, now)
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			if err := tx.Append(s.entry(KindDelegationEnded, nil, admin, channel, map[string]any{
				"delegation": d.ID, "delegator": d.Delegator, "delegate": d.Delegate, "reason": DelegationEndedRollback,
				"rollback": true})); err != nil {
				return err
			}
			ended := *d
			ended.EndedAt, ended.EndReason, ended.EndedBy = now, DelegationEndedRollback, admin
			emit(delegationEvent(KindDelegationEnded, &ended))
			out.Delegations = append(out.Delegations, d.ID)
		}
		return nil
	})
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
