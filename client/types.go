package client

import (
	"encoding/json"

	"github.com/countersign/countersign/internal/wire"
)

// Status is where a call is in its life.
type Status = wire.Status

// Call statuses. Every status but StatusPending and StatusApproved is
// terminal; an approved call moves only to redeemed or revoked. An approved
// call whose grant ran out unredeemed stays approved, with Call.GrantState
// GrantExpired.
const (
	StatusPending   = wire.StatusPending
	StatusApproved  = wire.StatusApproved
	StatusDenied    = wire.StatusDenied
	StatusExpired   = wire.StatusExpired
	StatusCancelled = wire.StatusCancelled
	StatusRedeemed  = wire.StatusRedeemed
	// StatusRevoked is an approved call whose grant an operator revoked
	// before it was redeemed (see Call.Revocation): redeeming it is refused
	// (revoked).
	StatusRevoked = wire.StatusRevoked
	// StatusCountered is a call an operator answered with an edited call,
	// its counter-proposal (Call.CounteredBy): accept the counter
	// (Client.Accept) or cancel it to decline.
	StatusCountered = wire.StatusCountered
)

// GrantState is what became of an approved call's grant (Call.GrantState).
type GrantState = wire.GrantState

// Grant states: live (it can still be redeemed), expired (it ran out
// unredeemed: the call runs only if proposed again), revoked, redeemed.
const (
	GrantLive     = wire.GrantLive
	GrantExpired  = wire.GrantExpired
	GrantRevoked  = wire.GrantRevoked
	GrantRedeemed = wire.GrantRedeemed
)

// Proposal is what an agent asks to run.
//
// Args is sent as given: a map, a struct, or a json.RawMessage holding the
// exact JSON text. Numbers must be integers that fit in ±(2^53−1): the
// console refuses fractions and exponents (1.0, 1e2) with float_not_allowed,
// so money is an integer in minor units. Use int, int64 or json.Number, not
// float64. A nil Args is sent as an empty object.
type Proposal struct {
	Tool      string `json:"tool"`
	Target    string `json:"target"`
	Args      any    `json:"args"`
	Rationale string `json:"rationale,omitempty"`
}

// CallSpec is the call presented with a grant at redemption: exactly the
// approved tool, target and args. Args follows the rules of Proposal.Args;
// Call.Spec returns the approved call's own spec.
type CallSpec struct {
	Tool   string `json:"tool"`
	Target string `json:"target"`
	Args   any    `json:"args"`
}

// Call is the API's call object (the members of wire.Call: ID, Status,
// Actor, Audience, Tool, Target, Args, Digest, Approvals, Grant, Decision,
// Outcome and the rest), with what the client knows of the answer it came
// in. The server writes the same wire.Call.
type Call struct {
	wire.Call

	// Created is set by Submit: true when the console stored a new call
	// (201), false when it returned the same actor's identical call that is
	// still pending or approved (200).
	Created bool `json:"-"`
	// Raw is the response body the call was read from.
	Raw json.RawMessage `json:"-"`
}

// Spec returns the call as it must be presented at redemption: its tool,
// target and args exactly as the console returned them.
func (c *Call) Spec() CallSpec {
	return CallSpec{Tool: c.Tool, Target: c.Target, Args: c.Args}
}

// The parts of a call, as the server writes them.
type (
	// Approvals counts the approvals a call needs and has, and lists them.
	Approvals = wire.Approvals
	// Approval is one approval of a call: who gave it, through which
	// channel, how (Method*), whether a person saw the call (Human*), the
	// digest approved and when.
	Approval = wire.Approval
	// Presented is the page that presented a call to its approver.
	Presented = wire.Presented
	// Lineage is a call from proposal to outcome, each step with its
	// digest, who and when.
	Lineage = wire.Lineage
	// Step is one step of a Lineage.
	Step = wire.Step
	// Decision is a denial: who (an operator as people see them, or
	// policy:RULE), why, and when.
	Decision = wire.Decision
	// Revocation is an operator's revocation of an approved call's grant
	// before it was redeemed: who, why, and when. The grant is refused at
	// redemption (reason revoked) from then on.
	Revocation = wire.Revocation
	// Comment is an operator's note with an approval.
	Comment = wire.Comment
	// Outcome is what the executor reported after running the call, or
	// lease_expired when nobody reported in time.
	Outcome = wire.Outcome
	// Resolution is a person's finding about a call whose outcome nobody
	// knew: Verdict is executed or not_executed.
	Resolution = wire.Resolution
	// Lease is the answer to a heartbeat.
	Lease = wire.Lease
	// Check is one step of a redemption. OK is nil when the check was not
	// reached because an earlier one failed.
	Check = wire.Check
)

// How an approval was given (Approval.Method): on the call's page, signed
// with the operator's passkey, on a batch review page, with `console
// approve`, by a rule of the tools file, or by an allowance an operator
// gave.
const (
	MethodClick     = "click"
	MethodPasskey   = "passkey"
	MethodBatch     = "batch"
	MethodCommand   = "command"
	MethodPolicy    = "policy"
	MethodAllowance = "allowance"
)

// Whether a person saw the call before approving it (Approval.Human): on a
// page whose presentation the console checked; no person (a rule, an
// allowance); or a person's name without proof of what they saw (a
// command).
const (
	HumanTrue       = "true"
	HumanFalse      = "false"
	HumanUnattested = "unattested"
)

// Outcome statuses accepted by ReportOutcome.
const (
	OutcomeSucceeded = "succeeded"
	OutcomeFailed    = "failed"
	OutcomeUnknown   = "unknown"
)

// OutcomeLeaseExpired is the outcome the console sets when the executor's
// lease ran out with nothing reported. A later ReportOutcome replaces it.
const OutcomeLeaseExpired = "lease_expired"

// Redemption is the console's answer to a grant presented with a call (the
// members of wire.Redemption: Decision, CallID, Reason, Message, Checks,
// Envelope, Digest, LeaseUntil, OutcomeWithin, Freeze). A rejection is an
// answer, not an error: Accepted is false and Reason says which check
// failed; Refusal says whether it is the model's to act on. When accepted,
// Envelope is the exact canonical bytes that were hashed into Digest: the
// call to run; pass CallID downstream as the operation's idempotency key,
// and report the outcome before LeaseUntil (or extend it with Heartbeat).
type Redemption struct {
	wire.Redemption

	// Accepted is true when the grant was consumed and the call may run now.
	Accepted bool `json:"-"`
	// StatusCode is the HTTP status: 200 accepted, 403 rejected, 409 replayed.
	StatusCode int `json:"-"`
	// Raw is the response body the redemption was read from.
	Raw json.RawMessage `json:"-"`
}

// refusedGrantReasons are the rejection reasons that are the model's to act
// on, as in the Python and TypeScript clients.
var refusedGrantReasons = map[string]bool{
	"tool_mismatch": true, "target_mismatch": true, "digest_mismatch": true, "expired": true,
	"revoked": true, "replayed": true, "tool_changed": true,
}

// Refusal reports whether the grant was rejected for something the model
// can act on: the call presented differs from the one approved (tool,
// target or args), the grant expired, was revoked, was already used
// (replayed), or the tool changed since; hand Reason and Message to the
// model. It is false for an accepted redemption, and for a rejection that
// points at the deployment, not the call: another agent's token
// (actor_mismatch, audience_mismatch), a key or signature this console does
// not accept (unknown_key, bad_signature, bad_claims, malformed), a clock
// ahead of the console's (not_yet_valid), or a reason this client does not
// know: the application must see those. Either way a rejected call must
// not run. A redemption refused by a freeze is not a Redemption but an
// *Error with code frozen, not a refusal either.
func (r *Redemption) Refusal() bool {
	return !r.Accepted && refusedGrantReasons[r.Reason]
}

// Failed returns the first check that failed, or nil.
func (r *Redemption) Failed() *Check {
	for i := range r.Checks {
		if ok := r.Checks[i].OK; ok != nil && !*ok {
			return &r.Checks[i]
		}
	}
	return nil
}
