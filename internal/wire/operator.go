package wire

import "time"

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
