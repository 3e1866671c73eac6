package notify

import (
	"context"
	"errors"
	"time"

	"github.com/countersign/countersign/internal/queue"
)

// State is where an outbox row is.
type State string

// Row states. A pending row may be leased to a dispatcher that is sending
// it; delivered, dead and skipped are final until an admin retries a dead
// row.
const (
	StatePending   State = "pending"
	StateDelivered State = "delivered"
	StateDead      State = "dead"    // retries exhausted, or refused for good
	StateSkipped   State = "skipped" // conditional on a pending call that was decided first
)

// Delivery is one outbox row: a notice and what has become of it.
type Delivery struct {
	Seq int64 // the store's id of the row, increasing with insertion
	queue.Notice
	State State
	// ScheduledAt starts the row's give-up clock: its first due time, or
	// when an admin last retried it.
	ScheduledAt   time.Time
	Attempts      int
	LastError     string
	LastAttemptAt time.Time
	DeliveredAt   time.Time
	// Receipt is the channel's handle on what it sent (a Slack message's
	// channel and timestamp, an email's Message-ID), so later events of the
	// same call can update or answer it.
	Receipt    string
	LeaseOwner string
	LeaseUntil time.Time
}

// Leased reports whether a dispatcher holds the row at now.
func (d Delivery) Leased(now time.Time) bool {
	return d.State == StatePending && d.LeaseOwner != "" && d.LeaseUntil.After(now)
}

// Result is what one attempt came to.
type Result struct {
	Seq       int64
	At        time.Time
	Delivered bool
	// Receipt is the channel's receipt when Delivered; on a failed
	// attempt that will be retried, what the channel finished (SendError.
	// Sent), which the next attempt gets as Message.Sent.
	Receipt string
	Error   string
	// RetryAt is when to try again; ignored when Delivered or Dead.
	RetryAt time.Time
	Dead    bool
}

// Query selects rows for the admin page.
type Query struct {
	Channel string // "" for every channel
	State   State  // "" for every state
	CallID  string
	Before  int64 // rows with Seq below this; 0 for the newest
	Limit   int
}

// Outbox is the store's side of delivery. The rows themselves are written
// by queue.Tx.Enqueue inside the transaction of the change they announce.
//
// Claims must be safe with several dispatchers on one database (replicas):
// a row is held by at most one unexpired lease. PostgreSQL can claim with
// SELECT … FOR UPDATE SKIP LOCKED; SQLite claims inside its write lock.
type Outbox interface {
	// Claim leases to owner, until now+lease, at most limit pending rows
	// that are due at now and not leased to anyone else (a lease that has
	// run out counts as none). Per channel and call only the earliest
	// unfinished row, by At then Seq, is claimable, so a channel hears of a
	// call's events in order. A due WhilePending row whose call is no
	// longer pending is not claimed but marked skipped, in the same
	// transaction, and returned in skipped.
	Claim(ctx context.Context, owner string, now time.Time, lease time.Duration, limit int) (claimed, skipped []Delivery, err error)
	// Finish records an attempt on a row owner holds; a retried failure
	// keeps r.Receipt as the row's receipt. It returns
	// ErrLeaseLost, changing nothing, when the row is no longer leased to
	// owner (another dispatcher took it over after the lease ran out).
	Finish(ctx context.Context, owner string, r Result) error
	// NextDue returns the earliest time a pending row becomes claimable
	// (its due time, or the end of its lease), false when none is pending.
	NextDue(ctx context.Context) (time.Time, bool, error)
	// Receipt returns the receipt of the earliest delivered row of channel
	// about callID that has one, "" when there is none.
	Receipt(ctx context.Context, channel, callID string) (string, error)
	// Deliveries lists rows newest first.
	Deliveries(ctx context.Context, q Query) ([]Delivery, error)
	// Retry makes a dead row, or a pending one waiting for its next
	// attempt, due at now with a fresh give-up clock, and audits it
	// (delivery_retried, by the admin by) in the same transaction.
	// Delivered and skipped rows are ErrNotRetryable; an unknown seq is
	// ErrNoDelivery.
	Retry(ctx context.Context, seq int64, now time.Time, by string) error
	// Prune deletes finished rows (delivered, skipped, dead) last touched
	// before before, and returns how many it deleted.
	Prune(ctx context.Context, before time.Time) (int, error)
}

// Errors of an Outbox.
var (
	ErrLeaseLost    = errors.New("notify: the row is no longer leased to this dispatcher")
	ErrNotRetryable = errors.New("notify: only a dead row or one waiting for its next attempt can be retried")
	ErrNoDelivery   = errors.New("notify: no such delivery")
)
