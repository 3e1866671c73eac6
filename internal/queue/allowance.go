package queue

import (
	"errors"
	"strings"
	"time"
)

// ErrAllowanceNotFound is an allowance id nothing is stored under.
var ErrAllowanceNotFound = errors.New("queue: allowance not found")

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
