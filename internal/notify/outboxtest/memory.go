// Package outboxtest holds the conformance suite every notify.Outbox must
// pass (Run), and Memory, an outbox in memory that passes it, for tests of
// the dispatcher and the channels.
package outboxtest

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/countersign/countersign/internal/notify"
	"github.com/countersign/countersign/internal/queue"
)

// Memory is a notify.Outbox in memory. Calls are pending until End.
type Memory struct {
	mu    sync.Mutex
	rows  []*notify.Delivery
	seq   int64
	ended map[string]bool
}

var _ notify.Outbox = (*Memory)(nil)

// NewMemory returns an empty outbox.
func NewMemory() *Memory { return &Memory{ended: map[string]bool{}} }

// Enqueue adds notices as a committed transaction would; a notice whose
// event and channel are already there is ignored.
func (m *Memory) Enqueue(ns ...queue.Notice) {
	m.mu.Lock()
	defer m.mu.Unlock()
next:
	for _, n := range ns {
		for _, r := range m.rows {
			if r.EventID == n.EventID && r.Channel == n.Channel {
				continue next
			}
		}
		m.seq++
		n.Body = append([]byte(nil), n.Body...)
		m.rows = append(m.rows, &notify.Delivery{Seq: m.seq, Notice: n, State: notify.StatePending, ScheduledAt: n.DueAt})
	}
}

// End marks a call as no longer pending.
func (m *Memory) End(callID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ended[callID] = true
}

// Rows returns a copy of every row, oldest first.
func (m *Memory) Rows() []notify.Delivery {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]notify.Delivery, len(m.rows))
	for i, r := range m.rows {
		out[i] = *r
	}
	return out
}

func leaseFree(r *notify.Delivery, now time.Time) bool {
	return r.LeaseOwner == "" || !r.LeaseUntil.After(now)
}

// blocked reports whether an earlier unfinished row of the same channel
// and call comes first.
func (m *Memory) blocked(r *notify.Delivery) bool {
	if r.CallID == "" {
		return false
	}
	for _, p := range m.rows {
		if p.Seq != r.Seq && p.State == notify.StatePending && p.Channel == r.Channel && p.CallID == r.CallID &&
			(p.At.Before(r.At) || (p.At.Equal(r.At) && p.Seq < r.Seq)) {
			return true
		}
	}
	return false
}

// Claim implements notify.Outbox.
func (m *Memory) Claim(ctx context.Context, owner string, now time.Time, lease time.Duration, limit int) ([]notify.Delivery, []notify.Delivery, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var skipped, claimed []notify.Delivery
	for _, r := range m.rows {
		if r.State == notify.StatePending && r.WhilePending && m.ended[r.CallID] && leaseFree(r, now) {
			r.State = notify.StateSkipped
			r.LeaseOwner, r.LeaseUntil = "", time.Time{}
			skipped = append(skipped, *r)
		}
	}
	var due []*notify.Delivery
	for _, r := range m.rows {
		if r.State == notify.StatePending && !r.DueAt.After(now) && leaseFree(r, now) && !m.blocked(r) {
			due = append(due, r)
		}
	}
	sort.Slice(due, func(i, j int) bool {
		if !due[i].DueAt.Equal(due[j].DueAt) {
			return due[i].DueAt.Before(due[j].DueAt)
		}
		return due[i].Seq < due[j].Seq
	})
	for _, r := range due {
		if len(claimed) == limit {
			break
		}
		r.LeaseOwner, r.LeaseUntil = owner, now.Add(lease)
		claimed = append(claimed, *r)
	}
	return claimed, skipped, nil
}

// Finish implements notify.Outbox.
func (m *Memory) Finish(ctx context.Context, owner string, res notify.Result) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.find(res.Seq)
	if r == nil || r.State != notify.StatePending || r.LeaseOwner != owner {
		return notify.ErrLeaseLost
	}
	r.Attempts++
	r.LastAttemptAt = res.At
	r.LeaseOwner, r.LeaseUntil = "", time.Time{}
	switch {
	case res.Delivered:
		r.State, r.DeliveredAt, r.Receipt, r.LastError = notify.StateDelivered, res.At, res.Receipt, ""
	case res.Dead:
		r.State, r.LastError = notify.StateDead, res.Error
	default:
		r.DueAt, r.LastError, r.Receipt = res.RetryAt, res.Error, res.Receipt
	}
	return nil
}

func (m *Memory) find(seq int64) *notify.Delivery {
	for _, r := range m.rows {
		if r.Seq == seq {
			return r
		}
	}
	return nil
}

// NextDue implements notify.Outbox.
func (m *Memory) NextDue(ctx context.Context) (time.Time, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var next time.Time
	found := false
	for _, r := range m.rows {
		if r.State != notify.StatePending || m.blocked(r) {
			continue
		}
		t := r.DueAt
		if r.LeaseOwner != "" && r.LeaseUntil.After(t) {
			t = r.LeaseUntil
		}
		if !found || t.Before(next) {
			next, found = t, true
		}
	}
	return next, found, nil
}

// Receipt implements notify.Outbox.
func (m *Memory) Receipt(ctx context.Context, channel, callID string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.rows {
		if r.Channel == channel && r.CallID == callID && r.State == notify.StateDelivered && r.Receipt != "" {
			return r.Receipt, nil
		}
	}
	return "", nil
}

// Deliveries implements notify.Outbox.
func (m *Memory) Deliveries(ctx context.Context, q notify.Query) ([]notify.Delivery, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	limit := q.Limit
	if limit <= 0 {
		limit = 100
	}
	var out []notify.Delivery
	for i := len(m.rows) - 1; i >= 0 && len(out) < limit; i-- {
		r := m.rows[i]
		if (q.Channel != "" && r.Channel != q.Channel) || (q.State != "" && r.State != q.State) ||
			(q.CallID != "" && r.CallID != q.CallID) || (q.Before > 0 && r.Seq >= q.Before) {
			continue
		}
		out = append(out, *r)
	}
	return out, nil
}

// Retry implements notify.Outbox; the memory outbox keeps no audit trail,
// so by is not recorded.
func (m *Memory) Retry(ctx context.Context, seq int64, now time.Time, by string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.find(seq)
	switch {
	case r == nil:
		return notify.ErrNoDelivery
	case r.State == notify.StateDead, r.State == notify.StatePending && leaseFree(r, now):
		r.State, r.DueAt, r.ScheduledAt = notify.StatePending, now, now
		r.LeaseOwner, r.LeaseUntil = "", time.Time{}
		return nil
	}
	return notify.ErrNotRetryable
}

// Prune implements notify.Outbox.
func (m *Memory) Prune(ctx context.Context, before time.Time) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	kept := m.rows[:0]
	n := 0
	for _, r := range m.rows {
		if r.State != notify.StatePending && touched(r).Before(before) {
			n++
			continue
		}
		kept = append(kept, r)
	}
	m.rows = kept
	return n, nil
}

func touched(r *notify.Delivery) time.Time {
	t := r.At
	if r.LastAttemptAt.After(t) {
		t = r.LastAttemptAt
	}
	return t
}
