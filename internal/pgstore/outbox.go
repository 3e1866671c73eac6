package pgstore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/countersign/countersign/internal/notify"
	"github.com/countersign/countersign/internal/queue"
)

// Enqueue writes notices to the outbox inside the change's transaction.
func (t *txn) Enqueue(ns []queue.Notice) error {
	for _, n := range ns {
		wp := 0
		if n.WhilePending {
			wp = 1
		}
		if _, err := t.tx.Exec(t.ctx, `INSERT INTO outbox (event_id, kind, channel, call_id, body, at, scheduled_at, due_at,
			while_pending) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9) ON CONFLICT (event_id, channel) DO NOTHING`,
			n.EventID, n.Kind, n.Channel, n.CallID, n.Body, ms(n.At), ms(n.DueAt), ms(n.DueAt), wp); err != nil {
			return fmt.Errorf("pgstore: enqueue %s for %s: %w", n.Kind, n.Channel, err)
		}
	}
	return nil
}

// Outbox is the database's side of notification delivery (notify.Outbox),
// shared by every replica's dispatcher. Claims are write transactions, so
// they run one at a time under the chain head lock and a row is leased to
// one dispatcher at a time.
type Outbox struct{ *DB }

// Outbox returns the notification outbox.
func (d *DB) Outbox() Outbox { return Outbox{d} }

var _ notify.Outbox = Outbox{}

const outboxColumns = `seq, event_id, kind, channel, call_id, body, at, scheduled_at, due_at, while_pending, state,
	attempts, last_error, last_attempt_at, delivered_at, receipt, lease_owner, lease_until`

func scanDelivery(r rowScanner) (notify.Delivery, error) {
	var d notify.Delivery
	var at, scheduled, due, leaseUntil int64
	var lastAttempt, delivered *int64
	var wp, attempts int32
	var state string
	var lastError []byte
	err := r.Scan(&d.Seq, &d.EventID, &d.Kind, &d.Channel, &d.CallID, &d.Body, &at, &scheduled, &due, &wp, &state,
		&attempts, &lastError, &lastAttempt, &delivered, &d.Receipt, &d.LeaseOwner, &leaseUntil)
	if err != nil {
		return d, err
	}
	d.Attempts, d.LastError = int(attempts), string(lastError)
	d.At, d.ScheduledAt, d.DueAt = time.UnixMilli(at).UTC(), time.UnixMilli(scheduled).UTC(), time.UnixMilli(due).UTC()
	d.WhilePending, d.State = wp == 1, notify.State(state)
	d.LastAttemptAt, d.DeliveredAt = fromMS(lastAttempt), fromMS(delivered)
	if leaseUntil > 0 {
		d.LeaseUntil = time.UnixMilli(leaseUntil).UTC()
	}
	return d, nil
}

func scanDeliveries(rows pgx.Rows, err error) ([]notify.Delivery, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []notify.Delivery
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			return nil, fmt.Errorf("pgstore: scan delivery: %w", err)
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// unblocked is true for a row that is first in line for its channel and
// call: no earlier unfinished row of the same channel and call exists.
const unblocked = `(o.call_id = '' OR NOT EXISTS (SELECT 1 FROM outbox p WHERE p.call_id = o.call_id
	AND p.channel = o.channel AND p.state = 'pending' AND (p.at < o.at OR (p.at = o.at AND p.seq < o.seq))))`

// Claim implements notify.Outbox.
func (o Outbox) Claim(ctx context.Context, owner string, now time.Time, lease time.Duration, limit int) (claimed, skipped []notify.Delivery, err error) {
	err = o.update(ctx, func(t *txn) error {
		var err error
		skipped, err = scanDeliveries(t.tx.Query(ctx, `UPDATE outbox SET state = 'skipped', lease_owner = '', lease_until = 0
			WHERE seq IN (SELECT o.seq FROM outbox o JOIN calls c ON c.id = o.call_id
				WHERE o.state = 'pending' AND o.while_pending = 1 AND o.lease_until <= $1 AND c.status <> 'pending')
			RETURNING `+outboxColumns, ms(now)))
		if err != nil {
			return fmt.Errorf("pgstore: skip decided calls' reminders: %w", err)
		}
		claimed, err = scanDeliveries(t.tx.Query(ctx, `UPDATE outbox SET lease_owner = $1, lease_until = $2
			WHERE seq IN (SELECT o.seq FROM outbox o
				WHERE o.state = 'pending' AND o.due_at <= $3 AND o.lease_until <= $3 AND `+unblocked+`
				ORDER BY o.due_at, o.seq LIMIT $4)
			RETURNING `+outboxColumns, owner, ms(now.Add(lease)), ms(now), limit))
		if err != nil {
			return fmt.Errorf("pgstore: claim deliveries: %w", err)
		}
		return nil
	})
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
	return o.update(ctx, func(t *txn) error {
		var n int64
		var err error
		exec := func(sql string, args ...any) {
			tag, e := t.tx.Exec(ctx, sql, args...)
			n, err = tag.RowsAffected(), e
		}
		switch {
		case r.Delivered:
			exec(`UPDATE outbox SET state = 'delivered', delivered_at = $1, receipt = $2, last_error = '',
				attempts = attempts + 1, last_attempt_at = $1, lease_owner = '', lease_until = 0
				WHERE seq = $3 AND state = 'pending' AND lease_owner = $4`, ms(r.At), r.Receipt, r.Seq, owner)
		case r.Dead:
			exec(`UPDATE outbox SET state = 'dead', last_error = $1, attempts = attempts + 1,
				last_attempt_at = $2, lease_owner = '', lease_until = 0
				WHERE seq = $3 AND state = 'pending' AND lease_owner = $4`, []byte(r.Error), ms(r.At), r.Seq, owner)
		default:
			exec(`UPDATE outbox SET due_at = $1, last_error = $2, attempts = attempts + 1,
				last_attempt_at = $3, receipt = $4, lease_owner = '', lease_until = 0
				WHERE seq = $5 AND state = 'pending' AND lease_owner = $6`, ms(r.RetryAt), []byte(r.Error), ms(r.At), r.Receipt, r.Seq, owner)
		}
		if err != nil {
			return fmt.Errorf("pgstore: record delivery %d: %w", r.Seq, err)
		}
		if n != 1 {
			return notify.ErrLeaseLost
		}
		return nil
	})
}

// NextDue implements notify.Outbox.
func (o Outbox) NextDue(ctx context.Context) (time.Time, bool, error) {
	var n *int64
	err := o.pool.QueryRow(ctx, `SELECT MIN(GREATEST(o.due_at, o.lease_until)) FROM outbox o
		WHERE o.state = 'pending' AND `+unblocked).Scan(&n)
	if err != nil {
		return time.Time{}, false, classify(fmt.Errorf("pgstore: next due delivery: %w", err))
	}
	return fromMS(n), n != nil, nil
}

// Receipt implements notify.Outbox.
func (o Outbox) Receipt(ctx context.Context, channel, callID string) (string, error) {
	var r string
	err := o.pool.QueryRow(ctx, `SELECT receipt FROM outbox WHERE call_id = $1 AND channel = $2 AND state = 'delivered'
		AND receipt <> '' ORDER BY at, seq LIMIT 1`, callID, channel).Scan(&r)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", classify(fmt.Errorf("pgstore: receipt: %w", err))
	}
	return r, nil
}

// Deliveries implements notify.Outbox.
func (o Outbox) Deliveries(ctx context.Context, q notify.Query) ([]notify.Delivery, error) {
	var where []string
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, cond+" $"+strconv.Itoa(len(args)))
	}
	if q.Channel != "" {
		add("channel =", q.Channel)
	}
	if q.State != "" {
		add("state =", string(q.State))
	}
	if q.CallID != "" {
		add("call_id =", q.CallID)
	}
	if q.Before > 0 {
		add("seq <", q.Before)
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 100
	}
	query := `SELECT ` + outboxColumns + ` FROM outbox`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, " AND ")
	}
	args = append(args, limit)
	out, err := scanDeliveries(o.pool.Query(ctx, query+` ORDER BY seq DESC LIMIT $`+strconv.Itoa(len(args)), args...))
	if err != nil {
		return nil, classify(fmt.Errorf("pgstore: deliveries: %w", err))
	}
	return out, nil
}

// Retry implements notify.Outbox.
func (o Outbox) Retry(ctx context.Context, seq int64, now time.Time, by string) error {
	return o.update(ctx, func(t *txn) error {
		var state, eventID, kind, channel, callID string
		var leaseUntil int64
		err := t.tx.QueryRow(ctx, `SELECT state, lease_until, event_id, kind, channel, call_id FROM outbox WHERE seq = $1`,
			seq).Scan(&state, &leaseUntil, &eventID, &kind, &channel, &callID)
		if errors.Is(err, pgx.ErrNoRows) {
			return notify.ErrNoDelivery
		}
		if err != nil {
			return fmt.Errorf("pgstore: read delivery %d: %w", seq, err)
		}
		if state != string(notify.StateDead) && (state != string(notify.StatePending) || leaseUntil > ms(now)) {
			return notify.ErrNotRetryable
		}
		if _, err := t.tx.Exec(ctx, `UPDATE outbox SET state = 'pending', due_at = $1, scheduled_at = $1, lease_owner = '',
			lease_until = 0 WHERE seq = $2`, ms(now), seq); err != nil {
			return fmt.Errorf("pgstore: retry delivery %d: %w", seq, err)
		}
		return t.append(notify.RetriedEntry(now, by, seq, state, eventID, kind, channel, callID))
	})
}

// Prune implements notify.Outbox.
func (o Outbox) Prune(ctx context.Context, before time.Time) (int, error) {
	var n int64
	err := o.update(ctx, func(t *txn) error {
		tag, err := t.tx.Exec(ctx, `DELETE FROM outbox WHERE state <> 'pending' AND GREATEST(at, COALESCE(last_attempt_at, 0)) < $1`, ms(before))
		if err != nil {
			return fmt.Errorf("pgstore: prune outbox: %w", err)
		}
		n = tag.RowsAffected()
		return nil
	})
	return int(n), err
}

// PushSubscriptions implements notify.Subscriptions: the subscriptions of
// enabled accounts that may decide.
func (o Outbox) PushSubscriptions(ctx context.Context) ([]notify.Subscription, error) {
	rows, err := o.pool.Query(ctx, `SELECT p.endpoint, p.p256dh, p.auth, p.account, p.created_at FROM push_subscriptions p
		JOIN users u ON u.name = p.account WHERE u.disabled_at IS NULL AND u.role IN ('operator', 'admin') ORDER BY p.created_at`)
	if err != nil {
		return nil, classify(fmt.Errorf("pgstore: push subscriptions: %w", err))
	}
	defer rows.Close()
	var out []notify.Subscription
	for rows.Next() {
		var s notify.Subscription
		var created int64
		if err := rows.Scan(&s.Endpoint, &s.P256dh, &s.Auth, &s.Account, &created); err != nil {
			return nil, classify(fmt.Errorf("pgstore: scan push subscription: %w", err))
		}
		s.CreatedAt = time.UnixMilli(created).UTC()
		out = append(out, s)
	}
	return out, classify(rows.Err())
}

// SavePushSubscription stores a browser's subscription for its account,
// or renews the keys of one the account holds, and audits it in the same
// transaction. An endpoint another account holds is ErrPushEndpointTaken;
// a new one beyond an account's or the console's bound is
// ErrTooManyPushSubscriptions or ErrPushSubscriptionsFull. Every write
// transaction holds the write lock, so two subscriptions are counted one
// after the other.
func (o Outbox) SavePushSubscription(ctx context.Context, s notify.Subscription) error {
	return o.update(ctx, func(t *txn) error {
		var holder string
		err := t.tx.QueryRow(ctx, `SELECT account FROM push_subscriptions WHERE endpoint = $1`, s.Endpoint).Scan(&holder)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			var mine, all int
			if err := t.tx.QueryRow(ctx, `SELECT COUNT(*) FILTER (WHERE account = $1), COUNT(*) FROM push_subscriptions`,
				s.Account).Scan(&mine, &all); err != nil {
				return fmt.Errorf("pgstore: count push subscriptions: %w", err)
			}
			if mine >= notify.MaxPushSubscriptionsPerAccount {
				return notify.ErrTooManyPushSubscriptions
			}
			if all >= notify.MaxPushSubscriptions {
				return notify.ErrPushSubscriptionsFull
			}
			_, err = t.tx.Exec(ctx, `INSERT INTO push_subscriptions (endpoint, p256dh, auth, account, created_at)
				VALUES ($1,$2,$3,$4,$5)`, s.Endpoint, s.P256dh, s.Auth, s.Account, ms(s.CreatedAt))
		case err != nil:
			return fmt.Errorf("pgstore: read push subscription: %w", err)
		case holder != s.Account:
			return notify.ErrPushEndpointTaken
		default:
			_, err = t.tx.Exec(ctx, `UPDATE push_subscriptions SET p256dh = $1, auth = $2, created_at = $3 WHERE endpoint = $4`,
				s.P256dh, s.Auth, ms(s.CreatedAt), s.Endpoint)
		}
		if err != nil {
			return fmt.Errorf("pgstore: save push subscription: %w", err)
		}
		return t.append(notify.SubscribedEntry(s, holder != ""))
	})
}

// DeletePushSubscription implements notify.Subscriptions.
func (o Outbox) DeletePushSubscription(ctx context.Context, endpoint string, now time.Time) error {
	return o.deletePush(ctx, `DELETE FROM push_subscriptions WHERE endpoint = $1 RETURNING account`, now, "", endpoint)
}

// DeleteAccountPushSubscription forgets endpoint if account holds it, and
// audits it.
func (o Outbox) DeleteAccountPushSubscription(ctx context.Context, account, endpoint string, now time.Time) error {
	return o.deletePush(ctx, `DELETE FROM push_subscriptions WHERE endpoint = $1 AND account = $2 RETURNING account`, now,
		account, endpoint, account)
}

func (o Outbox) deletePush(ctx context.Context, query string, now time.Time, by string, args ...any) error {
	return o.update(ctx, func(t *txn) error {
		var holder string
		err := t.tx.QueryRow(ctx, query, args...).Scan(&holder)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("pgstore: delete push subscription: %w", err)
		}
		return t.append(notify.UnsubscribedEntry(now, by, holder, args[0].(string)))
	})
}
