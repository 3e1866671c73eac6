package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/notify"
	"github.com/countersign/countersign/internal/queue"
)

// Enqueue writes notices to the outbox inside the change's transaction.
func (t *storeTx) Enqueue(ns []queue.Notice) error {
	return enqueue(t.ctx, t.tx, ns)
}

func enqueue(ctx context.Context, tx *writeTx, ns []queue.Notice) error {
	for _, n := range ns {
		wp := 0
		if n.WhilePending {
			wp = 1
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO outbox (event_id, kind, channel, call_id, body, at, scheduled_at, due_at,
			while_pending) VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT (event_id, channel) DO NOTHING`,
			n.EventID, n.Kind, n.Channel, n.CallID, n.Body, ms(n.At), ms(n.DueAt), ms(n.DueAt), wp)
		if err != nil {
			return fmt.Errorf("db: enqueue %s for %s: %w", n.Kind, n.Channel, err)
		}
	}
	return nil
}

// Outbox is the database's side of notification delivery (notify.Outbox).
// Claims run inside SQLite's write lock, so with several processes on one
// database a row is leased to one of them at a time.
type Outbox struct{ *DB }

// Outbox returns the notification outbox.
func (d *DB) Outbox() Outbox { return Outbox{d} }

var _ notify.Outbox = Outbox{}

const outboxColumns = `seq, event_id, kind, channel, call_id, body, at, scheduled_at, due_at, while_pending, state,
	attempts, last_error, last_attempt_at, delivered_at, receipt, lease_owner, lease_until`

func scanDelivery(r rowScanner) (notify.Delivery, error) {
	var d notify.Delivery
	var at, scheduled, due, leaseUntil int64
	var lastAttempt, delivered sql.NullInt64
	var wp int
	var state string
	err := r.Scan(&d.Seq, &d.EventID, &d.Kind, &d.Channel, &d.CallID, &d.Body, &at, &scheduled, &due, &wp, &state,
		&d.Attempts, &d.LastError, &lastAttempt, &delivered, &d.Receipt, &d.LeaseOwner, &leaseUntil)
	if err != nil {
		return d, err
	}
	d.At, d.ScheduledAt, d.DueAt = time.UnixMilli(at).UTC(), time.UnixMilli(scheduled).UTC(), time.UnixMilli(due).UTC()
	d.WhilePending, d.State = wp == 1, notify.State(state)
	d.LastAttemptAt, d.DeliveredAt = fromMS(lastAttempt), fromMS(delivered)
	if leaseUntil > 0 {
		d.LeaseUntil = time.UnixMilli(leaseUntil).UTC()
	}
	return d, nil
}

func scanDeliveries(rows *sql.Rows) ([]notify.Delivery, error) {
	defer rows.Close()
	var out []notify.Delivery
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			return nil, fmt.Errorf("db: scan delivery: %w", err)
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// unblocked is true for a row that is first in line for its channel and
// call: no earlier unfinished row of the same channel and call exists.
// (PostgreSQL: the same condition, with FOR UPDATE SKIP LOCKED on the
// claim.)
const unblocked = `(o.call_id = '' OR NOT EXISTS (SELECT 1 FROM outbox p WHERE p.call_id = o.call_id
	AND p.channel = o.channel AND p.state = 'pending' AND (p.at < o.at OR (p.at = o.at AND p.seq < o.seq))))`

// Claim implements notify.Outbox.
func (o Outbox) Claim(ctx context.Context, owner string, now time.Time, lease time.Duration, limit int) (claimed, skipped []notify.Delivery, err error) {
	err = o.update(ctx, func(ctx context.Context, tx *writeTx) error {
		claimed, skipped = nil, nil
		rows, err := tx.QueryContext(ctx, `UPDATE outbox SET state = 'skipped', lease_owner = '', lease_until = 0
			WHERE seq IN (SELECT o.seq FROM outbox o INDEXED BY outbox_conditional JOIN calls c ON c.id = o.call_id
				WHERE o.state = 'pending' AND o.while_pending = 1 AND o.lease_until <= ? AND c.status != 'pending')
			RETURNING `+outboxColumns, ms(now))
		if err != nil {
			return fmt.Errorf("db: skip decided calls' reminders: %w", err)
		}
		if skipped, err = scanDeliveries(rows); err != nil {
			return err
		}
		rows, err = tx.QueryContext(ctx, `UPDATE outbox SET lease_owner = ?, lease_until = ?
			WHERE seq IN (SELECT o.seq FROM outbox o INDEXED BY outbox_due
				WHERE o.state = 'pending' AND o.due_at <= ? AND o.lease_until <= ? AND `+unblocked+`
				ORDER BY o.due_at, o.seq LIMIT ?)
			RETURNING `+outboxColumns, owner, ms(now.Add(lease)), ms(now), ms(now), limit)
		if err != nil {
			return fmt.Errorf("db: claim deliveries: %w", err)
		}
		claimed, err = scanDeliveries(rows)
		return err
	})
	if err != nil {
		return nil, nil, err // nothing claimed: the rows may be another database's
	}
	sort.Slice(claimed, func(i, j int) bool {
		if !claimed[i].DueAt.Equal(claimed[j].DueAt) {
			return claimed[i].DueAt.Before(claimed[j].DueAt)
		}
		return claimed[i].Seq < claimed[j].Seq
	})
	return claimed, skipped, err
}

// Finish implements notify.Outbox.
func (o Outbox) Finish(ctx context.Context, owner string, r notify.Result) error {
	return o.update(ctx, func(ctx context.Context, tx *writeTx) error {
		var res sql.Result
		var err error
		switch {
		case r.Delivered:
			res, err = tx.ExecContext(ctx, `UPDATE outbox SET state = 'delivered', delivered_at = ?, receipt = ?, last_error = '',
				attempts = attempts + 1, last_attempt_at = ?, lease_owner = '', lease_until = 0
				WHERE seq = ? AND state = 'pending' AND lease_owner = ?`, ms(r.At), r.Receipt, ms(r.At), r.Seq, owner)
		case r.Dead:
			res, err = tx.ExecContext(ctx, `UPDATE outbox SET state = 'dead', last_error = ?, attempts = attempts + 1,
				last_attempt_at = ?, lease_owner = '', lease_until = 0
				WHERE seq = ? AND state = 'pending' AND lease_owner = ?`, r.Error, ms(r.At), r.Seq, owner)
		default:
			res, err = tx.ExecContext(ctx, `UPDATE outbox SET due_at = ?, last_error = ?, attempts = attempts + 1,
				last_attempt_at = ?, receipt = ?, lease_owner = '', lease_until = 0
				WHERE seq = ? AND state = 'pending' AND lease_owner = ?`, ms(r.RetryAt), r.Error, ms(r.At), r.Receipt, r.Seq, owner)
		}
		if err != nil {
			return fmt.Errorf("db: record delivery %d: %w", r.Seq, err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return notify.ErrLeaseLost
		}
		return nil
	})
}

// NextDue implements notify.Outbox.
func (o Outbox) NextDue(ctx context.Context) (time.Time, bool, error) {
	var n sql.NullInt64
	err := o.sql.QueryRowContext(ctx, `SELECT MIN(MAX(o.due_at, o.lease_until)) FROM outbox o INDEXED BY outbox_due
		WHERE o.state = 'pending' AND `+unblocked).Scan(&n)
	if err != nil {
		return time.Time{}, false, classify(fmt.Errorf("db: next due delivery: %w", err))
	}
	return fromMS(n), n.Valid, nil
}

// Receipt implements notify.Outbox.
func (o Outbox) Receipt(ctx context.Context, channel, callID string) (string, error) {
	var r string
	err := o.sql.QueryRowContext(ctx, `SELECT receipt FROM outbox WHERE call_id = ? AND channel = ? AND state = 'delivered'
		AND receipt != '' ORDER BY at, seq LIMIT 1`, callID, channel).Scan(&r)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", classify(fmt.Errorf("db: receipt: %w", err))
	}
	return r, nil
}

// Deliveries implements notify.Outbox.
func (o Outbox) Deliveries(ctx context.Context, q notify.Query) ([]notify.Delivery, error) {
	var where []string
	var args []any
	if q.Channel != "" {
		where, args = append(where, "channel = ?"), append(args, q.Channel)
	}
	if q.State != "" {
		where, args = append(where, "state = ?"), append(args, string(q.State))
	}
	if q.CallID != "" {
		where, args = append(where, "call_id = ?"), append(args, q.CallID)
	}
	if q.Before > 0 {
		where, args = append(where, "seq < ?"), append(args, q.Before)
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 100
	}
	query := `SELECT ` + outboxColumns + ` FROM outbox`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, " AND ")
	}
	rows, err := o.sql.QueryContext(ctx, query+` ORDER BY seq DESC LIMIT ?`, append(args, limit)...)
	if err != nil {
		return nil, classify(fmt.Errorf("db: deliveries: %w", err))
	}
	return scanDeliveries(rows)
}

// Retry implements notify.Outbox.
func (o Outbox) Retry(ctx context.Context, seq int64, now time.Time, by string) error {
	return o.update(ctx, func(ctx context.Context, tx *writeTx) error {
		var state, eventID, kind, channel, callID string
		var leaseUntil int64
		err := tx.QueryRowContext(ctx, `SELECT state, lease_until, event_id, kind, channel, call_id FROM outbox WHERE seq = ?`,
			seq).Scan(&state, &leaseUntil, &eventID, &kind, &channel, &callID)
		if errors.Is(err, sql.ErrNoRows) {
			return notify.ErrNoDelivery
		}
		if err != nil {
			return fmt.Errorf("db: read delivery %d: %w", seq, err)
		}
		if state != string(notify.StateDead) && (state != string(notify.StatePending) || leaseUntil > ms(now)) {
			return notify.ErrNotRetryable
		}
		_, err = tx.ExecContext(ctx, `UPDATE outbox SET state = 'pending', due_at = ?, scheduled_at = ?, lease_owner = '',
			lease_until = 0 WHERE seq = ?`, ms(now), ms(now), seq)
		if err != nil {
			return fmt.Errorf("db: retry delivery %d: %w", seq, err)
		}
		return o.appendAudit(ctx, tx, notify.RetriedEntry(now, by, seq, state, eventID, kind, channel, callID))
	})
}

// pruneBatch is how many outbox rows one transaction of Prune deletes.
var pruneBatch = 1000

// Prune implements notify.Outbox. It deletes in transactions of at most
// pruneBatch rows, so that a large backlog neither holds the writer from
// every other write for the whole delete nor keeps the pages it changes in
// the writer's memory (its savepoint journals are memory) all at once.
func (o Outbox) Prune(ctx context.Context, before time.Time) (int, error) {
	total := 0
	for {
		var n int64
		err := o.update(ctx, func(ctx context.Context, tx *writeTx) error {
			res, err := tx.ExecContext(ctx, `DELETE FROM outbox WHERE seq IN (SELECT seq FROM outbox
				WHERE state != 'pending' AND MAX(at, COALESCE(last_attempt_at, 0)) < ? LIMIT ?)`, ms(before), pruneBatch)
			if err != nil {
				return fmt.Errorf("db: prune outbox: %w", err)
			}
			n, _ = res.RowsAffected()
			return nil
		})
		if err != nil {
			return total, err // this batch's deletes were rolled back
		}
		total += int(n)
		if n < int64(pruneBatch) {
			return total, nil
		}
	}
}

// PushSubscriptions implements notify.Subscriptions: the subscriptions of
// enabled accounts that may decide.
func (o Outbox) PushSubscriptions(ctx context.Context) ([]notify.Subscription, error) {
	rows, err := o.sql.QueryContext(ctx, `SELECT p.endpoint, p.p256dh, p.auth, p.account, p.created_at FROM push_subscriptions p
		JOIN users u ON u.name = p.account WHERE u.disabled_at IS NULL AND u.role IN ('operator', 'admin') ORDER BY p.created_at`)
	if err != nil {
		return nil, classify(fmt.Errorf("db: push subscriptions: %w", err))
	}
	defer rows.Close()
	var out []notify.Subscription
	for rows.Next() {
		var s notify.Subscription
		var created int64
		if err := rows.Scan(&s.Endpoint, &s.P256dh, &s.Auth, &s.Account, &created); err != nil {
			return nil, fmt.Errorf("db: scan push subscription: %w", err)
		}
		s.CreatedAt = time.UnixMilli(created).UTC()
		out = append(out, s)
	}
	return out, rows.Err()
}

// SavePushSubscription stores a browser's subscription for its account,
// or renews the keys of one the account holds, and audits it in the same
// transaction. An endpoint another account holds is ErrPushEndpointTaken;
// a new one beyond an account's or the console's bound is
// ErrTooManyPushSubscriptions or ErrPushSubscriptionsFull.
func (o Outbox) SavePushSubscription(ctx context.Context, s notify.Subscription) error {
	return o.update(ctx, func(ctx context.Context, tx *writeTx) error {
		var holder string
		err := tx.QueryRowContext(ctx, `SELECT account FROM push_subscriptions WHERE endpoint = ?`, s.Endpoint).Scan(&holder)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			var mine, all int
			if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FILTER (WHERE account = ?), COUNT(*) FROM push_subscriptions`,
				s.Account).Scan(&mine, &all); err != nil {
				return fmt.Errorf("db: count push subscriptions: %w", err)
			}
			if mine >= notify.MaxPushSubscriptionsPerAccount {
				return notify.ErrTooManyPushSubscriptions
			}
			if all >= notify.MaxPushSubscriptions {
				return notify.ErrPushSubscriptionsFull
			}
			_, err = tx.ExecContext(ctx, `INSERT INTO push_subscriptions (endpoint, p256dh, auth, account, created_at)
				VALUES (?,?,?,?,?)`, s.Endpoint, s.P256dh, s.Auth, s.Account, ms(s.CreatedAt))
		case err != nil:
			return fmt.Errorf("db: read push subscription: %w", err)
		case holder != s.Account:
			return notify.ErrPushEndpointTaken
		default:
			_, err = tx.ExecContext(ctx, `UPDATE push_subscriptions SET p256dh = ?, auth = ?, created_at = ? WHERE endpoint = ?`,
				s.P256dh, s.Auth, ms(s.CreatedAt), s.Endpoint)
		}
		if err != nil {
			return fmt.Errorf("db: save push subscription: %w", err)
		}
		return o.appendAudit(ctx, tx, notify.SubscribedEntry(s, holder != ""))
	})
}

// DeletePushSubscription implements notify.Subscriptions.
func (o Outbox) DeletePushSubscription(ctx context.Context, endpoint string, now time.Time) error {
	return o.deletePush(ctx, `DELETE FROM push_subscriptions WHERE endpoint = ? RETURNING account`, now, "",
		endpoint)
}

// DeleteAccountPushSubscription forgets endpoint if account holds it, and
// audits it.
func (o Outbox) DeleteAccountPushSubscription(ctx context.Context, account, endpoint string, now time.Time) error {
	return o.deletePush(ctx, `DELETE FROM push_subscriptions WHERE endpoint = ? AND account = ? RETURNING account`, now,
		account, endpoint, account)
}

func (o Outbox) deletePush(ctx context.Context, query string, now time.Time, by string, args ...any) error {
	return o.update(ctx, func(ctx context.Context, tx *writeTx) error {
		var holder string
		err := tx.QueryRowContext(ctx, query, args...).Scan(&holder)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("db: delete push subscription: %w", err)
		}
		return o.appendAudit(ctx, tx, notify.UnsubscribedEntry(now, by, holder, args[0].(string)))
	})
}
