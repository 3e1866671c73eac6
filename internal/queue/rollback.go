package queue

import (
	"context"
	"errors"

	"github.com/countersign/countersign/internal/audit"
)

// ErrNotAdmin is an accept-rollback by someone who is not an enabled admin.
var ErrNotAdmin = errors.New("queue: only an enabled admin account may accept a rollback")

// AcceptRollback records, in one transaction with its audit entry, that an
// admin accepted the database although it is behind the data directory's
// high-water mark. From then on every grant issued at or before this moment
// is refused at redemption (revoked): the restored database does not know
// which of them were redeemed. The caller records the new mark after this
// returns.
func (s *Service) AcceptRollback(ctx context.Context, admin, channel string, r Rollback) error {
	return s.update(ctx, func(tx Tx, emit func(Event)) error {
		u, err := tx.User(admin)
		if err != nil || u.Disabled() || !u.Role.CanAdminister() {
			return ErrNotAdmin
		}
		r.AcceptedAt, r.AcceptedBy = s.now(), admin
		if err := tx.InsertRollback(r); err != nil {
			return err
		}
		return tx.Append(s.entry(audit.KindRollbackAccepted, nil, admin, channel, map[string]any{
			"mark_seq": r.MarkSeq, "mark_head": r.MarkHead, "db_seq": r.DBSeq, "db_head": r.DBHead,
			"grants_refused_before": formatTime(r.AcceptedAt)}))
	})
}
