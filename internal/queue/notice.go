package queue

import "time"

// Notice is one notification about a change, for one channel. The change's
// own transaction writes it to the outbox, so a committed change always has
// its notices and a rolled-back one never does; internal/notify delivers
// them after commit, at least once.
type Notice struct {
	// EventID identifies the event; receivers deduplicate by it. The
	// notices of one event on several channels share it.
	EventID string
	// Kind is the event's type: call.submitted, call.approved, ...
	Kind    string
	Channel string
	// CallID is the call the event is about; empty for events about a tool.
	CallID string
	// Body is the event as JSON, exactly as the channel sends or renders it.
	Body []byte
	// At is when the event happened. Per channel and call, notices are
	// delivered in the order of At.
	At time.Time
	// DueAt is the earliest delivery time: At for most events, later for
	// reminders and escalations.
	DueAt time.Time
	// WhilePending makes the notice conditional: it is delivered only if
	// the call is still pending when it comes due, else it is skipped.
	WhilePending bool
}

// Notifier says which notices a change announces; internal/notify's Router
// is one. It runs inside the change's transaction and must not block.
type Notifier interface {
	Notices(ev Event) []Notice
}

// enqueueNotices writes the notices of a transaction's events through the
// same transaction, so they commit (or roll back) with the change.
// It returns them.
func (s *Service) enqueueNotices(tx Tx, events []Event) ([]Notice, error) {
	if s.notify == nil {
		return nil, nil
	}
	var ns []Notice
	for _, ev := range events {
		ns = append(ns, s.notify.Notices(ev)...)
	}
	if len(ns) == 0 {
		return nil, nil
	}
	return ns, tx.Enqueue(ns)
}
