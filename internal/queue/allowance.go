package queue

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Bounds of allowances (invariant 19): live allowances per tool and per
// giver.
const (
	DefaultMaxAllowancesPerTool  = 20
	DefaultMaxAllowancesPerGiver = 5
)

// ChannelAllowance is the channel of an approval an allowance gave in its
// confirmers' names; Approval.Method reports it as "allowance".
const ChannelAllowance = "allowance"

// Audit kinds of allowances.
const (
	KindAllowanceGiven     = "allowance_given"
	KindAllowanceConfirmed = "allowance_confirmed"
	KindAllowanceRevoked   = "allowance_revoked"
	KindAllowanceEnded     = "allowance_ended"
)

// Refusals of giving, confirming and revoking allowances.
var (
	// ErrAllowanceNotFound is an allowance id nothing is stored under.
	ErrAllowanceNotFound = errors.New("queue: allowance not found")
	// ErrScopeMismatch is a scope digest that is not the digest of the
	// scope as made now from the stored call and the tool (or of the
	// allowance being confirmed): the person was shown something else.
	ErrScopeMismatch = errors.New("queue: the scope differs from the one you were shown; nothing was given")
	// ErrAllowancesPerTool and ErrAllowancesPerGiver refuse an allowance
	// beyond the live ones a tool, or a giver, may have.
	ErrAllowancesPerTool  = errors.New("queue: the tool has as many live allowances as it may")
	ErrAllowancesPerGiver = errors.New("queue: the operator has given as many live allowances as they may")
	// ErrAllowanceConfirmed is a confirmation of an allowance that has
	// every confirmer it needs.
	ErrAllowanceConfirmed = errors.New("queue: the allowance has every confirmer it needs")
	// ErrAlreadyConfirmer is a confirmation by one of the allowance's
	// confirmers.
	ErrAlreadyConfirmer = errors.New("queue: the operator is a confirmer of this allowance already")
	// ErrMayNotRevoke is a revocation by someone who is neither the
	// allowance's giver, nor allowed to approve its tool, nor an admin.
	ErrMayNotRevoke = errors.New("queue: only the allowance's giver, an operator allowed to approve its tool, or an admin revokes it")
	// ErrBaseDenied refuses to confirm an allowance whose base call a
	// person denied: what they refused is not approved more widely.
	ErrBaseDenied = errors.New("queue: the allowance's base call was denied; it cannot be confirmed")
	// ErrAllowanceEnded is the refusal of an allowance that has ended.
	ErrAllowanceEnded = errors.New("queue: the allowance has ended")
)

// AllowanceEndedError is ErrAllowanceEnded with why it ended.
type AllowanceEndedError struct {
	ID     string
	Reason string // EndRevoked, ...
}

func (e *AllowanceEndedError) Error() string {
	return fmt.Sprintf("queue: allowance %s has ended (%s)", e.ID, e.Reason)
}

// Unwrap makes an *AllowanceEndedError an ErrAllowanceEnded.
func (e *AllowanceEndedError) Unwrap() error { return ErrAllowanceEnded }

// Allowance is an operator's bounded, standing approval of calls like one
// pending call (its base call): up to Uses calls that its scope covers,
// until Until, each approved in the name of its confirmers as they stand
// when the call arrives. Every call it approves still has its own digest,
// its own single-use grant and its own audit entry (docs/allowances.md).
type Allowance struct {
	// ID is "alw_" and a sortable random id (NewAllowanceID).
	ID string
	// Actor, Audience and Tool are the scope's, fixed; ToolDigest is the
	// tool definition digest the base call was made under.
	Actor, Audience, Tool, ToolDigest string
	// BaseCall and BaseDigest are the pending call the allowance was given
	// from and its digest.
	BaseCall, BaseDigest string
	// Scope is the materialised scope's canonical JSON (RFC 8785), and
	// ScopeDigest its digest: what the giver and every confirmer approved.
	Scope       []byte
	ScopeDigest string
	// Uses is how many calls it may approve, Used how many it has.
	Uses, Used int
	// OncePerCall: each distinct call digest is approved at most once.
	OncePerCall bool
	// Until is when it ends, whatever is left.
	Until time.Time
	// Giver is the operator who gave it; Confirmers are the people in
	// whose name it approves, the giver first, each a distinct person.
	Giver      string
	Confirmers []string
	// ConfirmersNeeded is how many confirmers it needs before it covers
	// anything: the approvals its base call required.
	ConfirmersNeeded int
	GivenAt          time.Time
	// EndedAt is zero while it has not ended; then EndReason says why
	// (EndRevoked, ...) and EndedBy who ended it ("console" when it ended
	// by itself).
	EndedAt   time.Time
	EndReason string
	EndedBy   string
}

// Why an allowance ended (Allowance.EndReason).
const (
	EndRevoked           = "revoked"            // its giver, an operator of the tool or an admin revoked it
	EndToolChanged       = "tool_changed"       // the tool's definition is no longer the one it was given under
	EndConfirmerDisabled = "confirmer_disabled" // a confirmer was disabled, or lost their role or group
	EndExpired           = "expired"            // its until passed
	EndUsedUp            = "used_up"            // it approved its last use
)

// Ended reports whether the allowance has ended (revoked, or ended by
// itself).
func (a *Allowance) Ended() bool { return !a.EndedAt.IsZero() }

// Confirmed reports whether the allowance has every confirmer it needs.
func (a *Allowance) Confirmed() bool { return len(a.Confirmers) >= a.ConfirmersNeeded }

// Live reports whether the allowance may still approve a call at now: not
// ended, before its until, with uses left. One that waits for confirmers
// is live (it counts against the bounds) but covers nothing yet.
func (a *Allowance) Live(now time.Time) bool {
	return !a.Ended() && now.Before(a.Until) && a.Used < a.Uses
}

// State says where the allowance is at now, for lists: "waiting" for
// confirmers, "live", or why it ended (EndRevoked, ...; an allowance past
// its until, or with no use left, that has not been seen since is
// "expired" or "used_up").
func (a *Allowance) State(now time.Time) string {
	switch {
	case a.Ended():
		return a.EndReason
	case a.Used >= a.Uses:
		return EndUsedUp
	case !now.Before(a.Until):
		return EndExpired
	case !a.Confirmed():
		return "waiting"
	}
	return "live"
}

// Left is how many uses the allowance has left.
func (a *Allowance) Left() int { return max(a.Uses-a.Used, 0) }

// Clone returns a copy whose slices the caller may keep.
func (a *Allowance) Clone() *Allowance {
	cp := *a
	cp.Scope = append([]byte(nil), a.Scope...)
	cp.Confirmers = append([]string(nil), a.Confirmers...)
	return &cp
}

// AllowanceUse is one call an allowance approved: the uses table holds
// one per call, and with once per call at most one per digest.
type AllowanceUse struct {
	AllowanceID string
	CallID      string
	Digest      string
	// Once is the allowance's once_per_call: the store refuses the use
	// when the allowance approved the same digest before.
	Once bool
	At   time.Time
}

// AllowanceFilter selects allowances to list. Zero values select all.
type AllowanceFilter struct {
	// Live keeps only allowances that have not ended (some may have
	// passed their until or used their uses, and end when next seen).
	Live  bool
	Tool  string
	Giver string
	// Limit bounds the list (default and at most MaxAllowancesListed).
	Limit int
}

// MaxAllowancesListed bounds one listing of allowances.
const MaxAllowancesListed = 500

// NewAllowanceID returns an allowance id such as "alw_2k4j…": "alw_" and
// 24 characters that sort by the time they were made, as call ids do
// (NewCallID).
func NewAllowanceID() string { return newAllowanceID(time.Now()) }

func newAllowanceID(now time.Time) string {
	return "alw_" + strings.TrimPrefix(newCallID(now), "call_")
}
