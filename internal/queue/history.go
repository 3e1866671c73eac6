package queue

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// History page sizes.
const (
	DefaultHistoryLimit = 50
	MaxHistoryLimit     = 500
)

// History is the read side of the decision history, as a store implements
// it: pages of calls matching a filter, and streamed exports of them.
type History interface {
	// History returns one page of calls matching f, newest first, and the
	// cursor of the next page (0 when this page is the last). A filter
	// that cannot be applied is a *FilterError.
	History(ctx context.Context, f HistoryFilter) ([]*Call, int64, error)
	// ExportCalls streams every call matching f (Limit is ignored; After,
	// when set, starts after that call) to w as "jsonl" or "csv", newest
	// first, from one consistent read. Grant tokens are not exported.
	ExportCalls(ctx context.Context, f HistoryFilter, w io.Writer, format string) error
	// ReplayCalls calls fn for every call created at or after since,
	// oldest first, with its approvals and denial, from one consistent
	// read and in constant memory. An error from fn stops it. A replay of
	// a candidate tools file reads history through it.
	ReplayCalls(ctx context.Context, since time.Time, fn func(*Call) error) error
}

// HistoryFilter selects calls for the history pages and their exports.
// Empty fields do not filter. Calls are listed newest first, by creation
// time and then seq.
type HistoryFilter struct {
	Actor  string // the call's actor, exactly
	Tool   string // the tool, exactly
	Status string // pending, approved, denied, expired, cancelled or redeemed
	// Operator keeps calls this operator approved or denied; Channel keeps
	// calls approved or denied through this channel (web, cli, api). Both
	// together keep calls that operator decided through that channel.
	Operator string
	Channel  string
	// Since and Until bound the creation time: Since <= created_at < Until.
	Since, Until time.Time
	// Outcome keeps calls by what became of them after redemption: one of
	// the Outcome values below.
	Outcome string
	// DigestPrefix keeps calls whose digest starts with these hex digits
	// (spaces are ignored, so a digest copied in groups of four works).
	DigestPrefix string
	// After is the cursor: the next value History returned, or 0 for the
	// first page.
	After int64
	// Limit is the page size: DefaultHistoryLimit when 0, at most
	// MaxHistoryLimit.
	Limit int
	// At is when an export states each approved call's grant state (a
	// grant runs out with time); the zero time is the time of the export.
	At time.Time
}

// ErrFilter is a history filter that cannot be applied (an unknown status,
// a digest prefix that is not hex, a cursor that names no call). The error
// is a *FilterError.
var ErrFilter = errors.New("queue: invalid history filter")

// FilterError says why a history filter cannot be applied, in words for
// the person who typed it.
type FilterError struct{ Reason string }

func (e *FilterError) Error() string { return ErrFilter.Error() + ": " + e.Reason }

// Unwrap makes a *FilterError an ErrFilter.
func (e *FilterError) Unwrap() error { return ErrFilter }

// Values of HistoryFilter.Outcome.
const (
	// The outcome as it stands: reported by the executor, or lease_expired.
	OutcomeFilterSucceeded    = OutcomeSucceeded
	OutcomeFilterFailed       = OutcomeFailed
	OutcomeFilterUnknown      = OutcomeUnknown
	OutcomeFilterLeaseExpired = OutcomeLeaseExpired
	// OutcomeFilterOpen keeps redeemed calls whose lease still runs.
	OutcomeFilterOpen = "open"
	// OutcomeFilterUnresolved keeps calls waiting for a person: outcome
	// unknown or lease_expired, not resolved.
	OutcomeFilterUnresolved = "unresolved"
	// OutcomeFilterResolved keeps calls a person resolved, and the two
	// verdicts keep those resolved with that verdict.
	OutcomeFilterResolved    = "resolved"
	OutcomeFilterExecuted    = VerdictExecuted
	OutcomeFilterNotExecuted = VerdictNotExecuted
)

// OutcomeFilters lists the values of HistoryFilter.Outcome.
var OutcomeFilters = []string{OutcomeFilterUnresolved, OutcomeFilterOpen, OutcomeFilterSucceeded, OutcomeFilterFailed,
	OutcomeFilterUnknown, OutcomeFilterLeaseExpired, OutcomeFilterResolved, OutcomeFilterExecuted, OutcomeFilterNotExecuted}

var statuses = map[Status]bool{StatusPending: true, StatusApproved: true, StatusDenied: true, StatusExpired: true,
	StatusCancelled: true, StatusRedeemed: true, StatusCountered: true}

// Check validates the filter's status and digest prefix; a store checks the
// cursor itself.
func (f HistoryFilter) Check() error {
	if f.Status != "" && !statuses[Status(f.Status)] {
		return &FilterError{fmt.Sprintf("unknown status %q", f.Status)}
	}
	if f.Outcome != "" && !slices.Contains(OutcomeFilters, f.Outcome) {
		return &FilterError{fmt.Sprintf("unknown outcome filter %q (one of %s)", f.Outcome, strings.Join(OutcomeFilters, ", "))}
	}
	if p := f.Digest(); len(p) > 64 || strings.Trim(p, "0123456789abcdef") != "" {
		return &FilterError{"the digest prefix must be hex digits"}
	}
	return nil
}

// Digest is the digest prefix in lowercase without spaces.
func (f HistoryFilter) Digest() string {
	return strings.ToLower(strings.Join(strings.Fields(f.DigestPrefix), ""))
}

// PageSize is the page size the filter asks for, within the bounds.
func (f HistoryFilter) PageSize() int {
	if f.Limit <= 0 {
		return DefaultHistoryLimit
	}
	return min(f.Limit, MaxHistoryLimit)
}
