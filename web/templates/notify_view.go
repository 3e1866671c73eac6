package templates

import (
	"strconv"
	"time"
)

// DeliveriesView is the admin's page of notification deliveries.
type DeliveriesView struct {
	Page
	// Configured is false when no notification channel is configured.
	Configured bool
	Channels   []ChannelRow
	// Channel and State are the filters in force ("" for all).
	Channel, State string
	States         []string
	Rows           []DeliveryRow
	// Older is the query string of the next page, "" on the last one.
	Older          string
	Message, Error string
}

// ChannelRow is one configured channel.
type ChannelRow struct {
	Name, Type, Detail string
}

// DeliveryRow is one outbox row.
type DeliveryRow struct {
	Seq               int64
	Kind, Channel     string
	CallID            string
	State             string
	InFlight          bool
	Attempts          int
	LastError         string
	At, DueAt         time.Time
	LastAttempt, Done time.Time
	CanRetry          bool
}

func seqString(n int64) string { return strconv.FormatInt(n, 10) }

// stateLabel says what a row's state means for the person reading it.
func (r DeliveryRow) stateLabel() string {
	switch {
	case r.InFlight:
		return "sending"
	case r.State == "pending" && r.Attempts > 0:
		return "retrying"
	case r.State == "pending":
		return "waiting"
	}
	return r.State
}
