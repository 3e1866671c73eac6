package wire

import (
	"encoding/json"
	"time"
)

// The operator API's shapes: what a person's operator token reads and
// sends under /api/v1/operator.

// OperatorCall is a call as the operator API shows it to a person: the
// call (without its grant, which is the agent's), and while it is pending
// the listing token an approval must carry.
type OperatorCall struct {
	// ApproveFrom are the channels an approval of the call may arrive
	// through (web, cli, api), from the tool's approve_from.
	ApproveFrom []string `json:"approve_from"`
	Call        Call     `json:"call"`
	// Deceptive is true when the call holds characters that could deceive
	// (docs/console.md); approving it needs accept_warnings.
	Deceptive bool `json:"deceptive"`
	// Listing is, on a pending call, the token that names this listing of
	// the call and its digest for this person; ListingExpiresAt is when it
	// can no longer approve.
	Listing          string    `json:"listing,omitempty"`
	ListingExpiresAt time.Time `json:"listing_expires_at,omitzero"`
	// RequirePasskey is true when the call is approved only with a passkey,
	// in the browser: never through the operator API.
	RequirePasskey bool `json:"require_passkey"`
}

// OperatorQueue is the pending queue, newest first.
type OperatorQueue struct {
	Calls []OperatorCall `json:"calls"`
	// Truncated is true when more calls are pending than one listing
	// holds.
	Truncated bool `json:"truncated"`
}

// OperatorApproval is an approval through the operator API: the digest
// and the listing token a listing gave the call.
type OperatorApproval struct {
	AcceptWarnings bool   `json:"accept_warnings,omitempty"`
	Comment        string `json:"comment,omitempty"`
	Confirm        string `json:"confirm,omitempty"`
	Digest         string `json:"digest"`
	Listing        string `json:"listing"`
}

// OperatorPlan is a plan as the operator API shows it: every item in full
// (no grant), and, while it is pending, the token that names this listing
// of the plan, its items and its digest for this person.
type OperatorPlan struct {
	Listing          string    `json:"listing,omitempty"`
	ListingExpiresAt time.Time `json:"listing_expires_at,omitzero"`
	Plan             Plan      `json:"plan"`
}

// OperatorPlans is the listing of pending plans, by deadline.
type OperatorPlans struct {
	Plans []OperatorPlan `json:"plans"`
}

// OperatorPlanApproval is an approval of a whole plan through the operator
// API: its digest, the listing token a listing gave it, and per item index
// what the item's tool asks to be typed.
type OperatorPlanApproval struct {
	AcceptWarnings bool              `json:"accept_warnings,omitempty"`
	Comment        string            `json:"comment,omitempty"`
	Confirm        map[string]string `json:"confirm,omitempty"`
	Digest         string            `json:"digest"`
	Listing        string            `json:"listing"`
}

// OperatorCounter is a counter-proposal through the operator API: the
// original's digest, the listing token a listing gave it, the edit
// ("target" or a JSON Pointer the tool's counter block lists, to its new
// value as JSON) and what the edited call's tool asks to be typed.
type OperatorCounter struct {
	AcceptWarnings bool                       `json:"accept_warnings,omitempty"`
	Confirm        string                     `json:"confirm,omitempty"`
	Digest         string                     `json:"digest"`
	Edits          map[string]json.RawMessage `json:"edits"`
	Listing        string                     `json:"listing"`
}

// OperatorReason is a denial's or a revocation's reason.
type OperatorReason struct {
	Reason string `json:"reason"`
}

// Allowance is an allowance as the operator API and the command line
// show it.
type Allowance struct {
	Actor            string    `json:"actor"`
	Audience         string    `json:"audience"`
	BaseCall         string    `json:"base_call"`
	Confirmers       []string  `json:"confirmers"`
	ConfirmersNeeded int       `json:"confirmers_needed"`
	EndReason        string    `json:"end_reason,omitempty"`
	EndedAt          time.Time `json:"ended_at,omitzero"`
	EndedBy          string    `json:"ended_by,omitempty"`
	GivenAt          time.Time `json:"given_at"`
	Giver            string    `json:"giver"`
	ID               string    `json:"id"`
	OncePerCall      bool      `json:"once_per_call"`
	ScopeDigest      string    `json:"scope_digest"`
	// State is waiting (for confirmers), live, or why it ended.
	State string    `json:"state"`
	Tool  string    `json:"tool"`
	Until time.Time `json:"until"`
	Used  int       `json:"used"`
	Uses  int       `json:"uses"`
}

// Allowances is a listing of allowances, newest first.
type Allowances struct {
	Allowances []Allowance `json:"allowances"`
}

// Delegation is one person's approver standing lent to another for a
// window (docs/team.md), as the operator API lists it.
type Delegation struct {
	Delegate  string    `json:"delegate"`
	Delegator string    `json:"delegator"`
	EndReason string    `json:"end_reason,omitempty"`
	EndedAt   time.Time `json:"ended_at,omitzero"`
	EndedBy   string    `json:"ended_by,omitempty"`
	GivenAt   time.Time `json:"given_at"`
	GivenBy   string    `json:"given_by"`
	ID        string    `json:"id"`
	// Live is true while it has not ended and its until has not passed
	// (a decision also checks that both accounts are enabled).
	Live  bool      `json:"live"`
	Until time.Time `json:"until"`
}

// Delegations is a listing of delegations, newest first.
type Delegations struct {
	Delegations []Delegation `json:"delegations"`
}

// MCPDefinition is a pinned definition of an MCP server's tool as the
// operator API shows it: the listing leaves out the definition itself.
type MCPDefinition struct {
	// Changed is true when an earlier definition of the tool was approved:
	// PreviousDigest names it.
	Changed   bool      `json:"changed"`
	DecidedAt time.Time `json:"decided_at,omitzero"`
	DecidedBy string    `json:"decided_by,omitempty"`
	// Definition is the canonical JSON the digest covers (for a
	// quarantined tool, the listing as read); only on one definition.
	Definition     json.RawMessage `json:"definition,omitempty"`
	Digest         string          `json:"digest"`
	FirstSeen      time.Time       `json:"first_seen"`
	PreviousDigest string          `json:"previous_digest,omitempty"`
	// Reasons say why the definition awaits review or was quarantined.
	Reasons []string `json:"reasons,omitempty"`
	Server  string   `json:"server"`
	// Status is pending, approved, rejected or quarantined.
	Status string `json:"status"`
	Tool   string `json:"tool"`
}

// MCPDefinitions lists the current definitions of every MCP server's
// tools, those awaiting review first.
type MCPDefinitions struct {
	Definitions []MCPDefinition `json:"definitions"`
}

// MCPReview approves or rejects one pending definition.
type MCPReview struct {
	// Decision is approve or reject.
	Decision string `json:"decision"`
	Digest   string `json:"digest"`
	Server   string `json:"server"`
	Tool     string `json:"tool"`
}
