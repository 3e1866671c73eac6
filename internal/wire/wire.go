// Package wire holds the shapes of the agent API's answers: the call
// object, a redemption, a lease, an audit checkpoint, the health answer and
// the error body, as the server, the control socket and the command line
// send them and the Go client reads them. Package answer builds them from
// the domain's values.
//
// The package imports only the standard library, so the public Go client
// can use these types without carrying the console's domain with it.
//
// Members are declared in the alphabetical order of their JSON names: the
// order the answers have always had, so the bytes on the wire stay as they
// were. Times are UTC. Those the API gives to the second (a grant's expiry,
// a freeze's start) are whole seconds; the others keep their nanoseconds
// and are written in RFC 3339 with the trailing zeros of the fraction left
// out (time.RFC3339Nano), as encoding/json writes a time.Time.
package wire

import (
	"encoding/json"
	"time"
)

// Status is where a call is in its life.
type Status string

// Call statuses. Every status but StatusPending and StatusApproved is
// terminal; an approved call moves only to redeemed or revoked. An approved
// call whose grant ran out unredeemed stays approved, with grant_state
// expired.
const (
	StatusPending   Status = "pending"
	StatusApproved  Status = "approved"
	StatusDenied    Status = "denied"
	StatusExpired   Status = "expired"
	StatusCancelled Status = "cancelled"
	StatusRedeemed  Status = "redeemed"
	// StatusRevoked is an approved call whose grant an operator revoked
	// before it was redeemed (see Call.Revocation): redeeming it is refused
	// (revoked).
	StatusRevoked Status = "revoked"
	// StatusCountered is a call an operator answered with an edited call
	// (see Call.CounteredBy): it can never be redeemed. Accept the counter
	// to run the edited call, or cancel it to decline.
	StatusCountered Status = "countered"
)

// GrantState is what became of an approved call's grant.
type GrantState string

// Grant states.
const (
	GrantLive     GrantState = "live"
	GrantExpired  GrantState = "expired"
	GrantRevoked  GrantState = "revoked"
	GrantRedeemed GrantState = "redeemed"
)

// Decided reports whether an operator (or the clock) has settled the call:
// any status but pending.
func (s Status) Decided() bool { return s != StatusPending }

// Call is the API's call object.
type Call struct {
	// AcceptedAt is, on a counter-proposal, when its agent accepted it.
	AcceptedAt time.Time `json:"accepted_at,omitzero"`
	// Actor is the agent, from its token.
	Actor     string    `json:"actor"`
	Approvals Approvals `json:"approvals"`
	// Args are the arguments as the console stored them, informational
	// members included, as JSON text. Integers keep every digit; decode
	// with json.Decoder.UseNumber (or into integer fields) to keep it that
	// way.
	Args json.RawMessage `json:"args"`
	// Audience is the host that executes the call, from the token.
	Audience string `json:"audience"`
	// Comments are the notes operators left with their approvals, in the
	// order of the approvals.
	Comments []Comment `json:"comments,omitempty"`
	// CounteredBy is set on a countered call: the counter-proposal an
	// operator made of it, to accept or decline.
	CounteredBy *Counter `json:"countered_by,omitempty"`
	// CounteredFrom is, on a counter-proposal, the id of the call it
	// answers.
	CounteredFrom string    `json:"countered_from,omitempty"`
	CreatedAt     time.Time `json:"created_at"`
	// DecideBy is when a pending call expires.
	DecideBy time.Time `json:"decide_by"`
	// DecidedByRule is the id of the rule of the tools file that approved
	// or denied the call, when one did.
	DecidedByRule string `json:"decided_by_rule,omitempty"`
	// Decision is set when an operator, or a rule (By is policy:RULE),
	// denied the call.
	Decision *Decision `json:"decision,omitempty"`
	// Digest is the lowercase hex SHA-256 of the call's canonical envelope.
	Digest string `json:"digest"`
	// Grant is the signed single-use token, present while the call is
	// approved and not yet redeemed; GrantExpiresAt, to the second, is when
	// it expires.
	Grant          string    `json:"grant,omitempty"`
	GrantExpiresAt time.Time `json:"grant_expires_at,omitzero"`
	// GrantState is, for a call that was approved, what became of its
	// grant when the answer was made: live (it can still be redeemed),
	// expired (it ran out unredeemed: the status stays approved, but the
	// call can run only if proposed again), revoked or redeemed. Absent for
	// a call that was never approved.
	GrantState GrantState `json:"grant_state,omitempty"`
	ID         string     `json:"id"`
	// LeaseUntil is, once the grant was redeemed, when the executor's
	// lease ends (or ended): with no outcome reported by then, the outcome
	// becomes lease_expired.
	LeaseUntil time.Time `json:"lease_until,omitzero"`
	// Lineage is the call's history from proposal to outcome.
	Lineage Lineage `json:"lineage"`
	// Outcome is set once the executor reported what happened, or once its
	// lease ran out (status lease_expired).
	Outcome *Outcome `json:"outcome,omitempty"`
	// Owners are the people who run the agent (from its token when the call
	// was made), each once, named as people see them: account names (a
	// single-sign-on account by its provider user name, never an
	// oidc:HOST/SUB principal) and team:GROUP; none of them may approve the
	// call. Empty when the token names none.
	Owners []string `json:"owners,omitempty"`
	// Plan is set on an item of a plan: the plan, the item's place in it
	// and the plan's state. An item is decided only with its plan, and
	// minted with POST /api/v1/plans/{id}/items/{n}/grant.
	Plan      *PlanRef `json:"plan,omitempty"`
	Rationale string   `json:"rationale,omitempty"`
	// RedeemedAt is when the grant was redeemed.
	RedeemedAt time.Time `json:"redeemed_at,omitzero"`
	// Resolution is set when a person resolved an unknown or expired
	// outcome.
	Resolution *Resolution `json:"resolution,omitempty"`
	// Revocation is set when an operator revoked the call's grant before it
	// was redeemed (status revoked): who, why and when. Hand the reason to
	// the model as a denial's.
	Revocation *Revocation `json:"revocation,omitempty"`
	Status     Status      `json:"status"`
	Target     string      `json:"target"`
	Tool       string      `json:"tool"`
}

// PlanStatus is where a plan is in its life: pending, approved, halted
// (approved, but an item reported failed or unknown, or its lease expired:
// no further item is minted), denied, cancelled or expired.
type PlanStatus string

// Plan statuses.
const (
	PlanPending   PlanStatus = "pending"
	PlanApproved  PlanStatus = "approved"
	PlanHalted    PlanStatus = "halted"
	PlanDenied    PlanStatus = "denied"
	PlanCancelled PlanStatus = "cancelled"
	PlanExpired   PlanStatus = "expired"
)

// PlanRef is an item's plan: its id, the item's index (from 0), the
// plan's state and, once it is approved, until when its items are minted.
type PlanRef struct {
	ID         string     `json:"id"`
	Index      int        `json:"index"`
	State      PlanStatus `json:"state"`
	ValidUntil time.Time  `json:"valid_until,omitzero"`
}

// Plan is the API's plan object: an agent's list of calls, approved once
// by its digest, each item a call of its own.
type Plan struct {
	// Approvals are how many approvals the plan needs (the most any item
	// needs) and has.
	Approvals Approvals `json:"approvals"`
	CreatedAt time.Time `json:"created_at"`
	// DecideBy is when a pending plan expires.
	DecideBy  time.Time `json:"decide_by"`
	DecidedAt time.Time `json:"decided_at,omitzero"`
	// Digest is the plan digest: hex SHA-256 of countersign/v1/plan:
	// followed by the JCS bytes of {"v":1,"ordered":...,"items":[item
	// digests]}.
	Digest string `json:"digest"`
	ID     string `json:"id"`
	// Items are the plan's calls in order, each with its own digest,
	// status and, once minted, grant.
	Items   []Call `json:"items"`
	Ordered bool   `json:"ordered"`
	// Rationale is the agent's account of the plan.
	Rationale string `json:"rationale"`
	// Reason is a denial's or an operator's revocation's reason.
	Reason string     `json:"reason,omitempty"`
	Status PlanStatus `json:"status"`
	// ValidUntil is, once approved, when its items stop being minted.
	ValidUntil time.Time `json:"valid_until,omitzero"`
}

// Counter is the counter-proposal of a countered call: its id, its
// canonical envelope (actor, audience, tool, target and the edited args)
// and the envelope's digest.
type Counter struct {
	Digest   string          `json:"digest"`
	Envelope json.RawMessage `json:"envelope"`
	ID       string          `json:"id"`
}

// Approvals counts the approvals a call needs and has, and lists them.
type Approvals struct {
	// Given is each approval, in the order given; empty until the first.
	Given    []Approval `json:"given,omitempty"`
	Received int        `json:"received"`
	Required int        `json:"required"`
}

// Approval is one approval of a call: the decision record.
type Approval struct {
	At time.Time `json:"at"`
	// By is the operator, named as in Decision.By, or policy:RULE; for an
	// allowance's approval, the person whose approval it carries.
	By string `json:"by"`
	// Channel is where it came from: web, cli, policy or allowance.
	Channel string `json:"channel"`
	// Digest is the digest the approval was given for: always the call's.
	Digest string `json:"digest"`
	// For names the person on whose behalf By approved, through a
	// delegation (named as By is); absent for an approval with By's own
	// standing.
	For string `json:"for,omitempty"`
	// Human says whether a person saw the call before approving it:
	// "true" (a logged-in person on a page whose presentation was
	// checked), "false" (a rule or an allowance) or "unattested" (a
	// command: a person's name, but nothing proves what they saw).
	Human string `json:"human"`
	// Method is how it was given: click, passkey, batch, command, policy
	// or allowance.
	Method string `json:"method"`
	// Presented is the page that showed the call to the approver, when one
	// did.
	Presented *Presented `json:"presented,omitempty"`
	// Via names what made the approval besides its approver: the batch
	// (method batch) or the allowance (method allowance).
	Via string `json:"via,omitempty"`
}

// Presented is a page that showed a call to its approver: its kind (call;
// batch for a batch review; allowance for the page that gave or confirmed
// an allowance, which showed its scope too) and when it was rendered.
type Presented struct {
	At   time.Time `json:"at"`
	Page string    `json:"page"`
}

// Lineage is a call's history from proposal to outcome, each step with
// the digest it concerned, who and when: the digest proposed, the pages
// that presented it, each decision, the redemption, the outcome and its
// resolution. Every approval's digest and the redeemed digest equal the
// proposed one; a redemption of anything else is refused.
type Lineage struct {
	// Decided is each approval in the order given, or the denial.
	Decided []Step   `json:"decided,omitempty"`
	Outcome *Outcome `json:"outcome,omitempty"`
	// Presented is each page that presented the call to an approver.
	Presented []Step `json:"presented,omitempty"`
	Proposed  Step   `json:"proposed"`
	// Redeemed is the accepted redemption, with its token: the call's
	// digest, which the digest recomputed from the call the executor
	// presented had to equal for the redemption to be accepted (the
	// `redeemed` audit entry records the recomputed one).
	Redeemed   *Step       `json:"redeemed,omitempty"`
	Resolution *Resolution `json:"resolution,omitempty"`
}

// Step is one step of a call's lineage. Proposed and Redeemed name the
// API token (Token) of the agent (By); a decision names its method and
// whether a person saw the call (Human), or Verdict "denied"; a
// presentation names its page.
type Step struct {
	At     time.Time `json:"at"`
	By     string    `json:"by"`
	Digest string    `json:"digest,omitempty"`
	// EditedBy is, on a counter-proposal's proposed step, the operator
	// who edited the call it answers.
	EditedBy string `json:"edited_by,omitempty"`
	// For is, on a decision given through a delegation, the delegator on
	// whose behalf By approved.
	For     string `json:"for,omitempty"`
	Human   string `json:"human,omitempty"`
	Method  string `json:"method,omitempty"`
	Page    string `json:"page,omitempty"`
	Token   string `json:"token,omitempty"`
	Verdict string `json:"verdict,omitempty"`
	Via     string `json:"via,omitempty"`
}

// Decision is a denial: who, why, and when.
type Decision struct {
	At time.Time `json:"at"`
	// By is the operator as people see them (a local account's name; a
	// single-sign-on operator's provider user name, else display name, else
	// "(single sign-on user)"; never an oidc:HOST/SUB principal), or
	// policy:RULE.
	By     string `json:"by"`
	Reason string `json:"reason"`
}

// Revocation is an operator's revocation of an approved call's grant
// before it was redeemed: who, why, and when. The grant is refused at
// redemption (reason revoked) from then on.
type Revocation struct {
	At     time.Time `json:"at"`
	By     string    `json:"by"` // the operator, named as in Decision.By
	Reason string    `json:"reason"`
}

// Comment is an operator's note with an approval.
type Comment struct {
	At      time.Time `json:"at"`
	By      string    `json:"by"` // the operator, named as in Decision.By
	Comment string    `json:"comment"`
}

// Outcome is what the executor reported after running the call, or
// lease_expired when nobody reported in time.
type Outcome struct {
	At     time.Time `json:"at"`
	Detail string    `json:"detail"`
	Status string    `json:"status"`
}

// Resolution is a person's finding about a call whose outcome nobody knew:
// Verdict is executed or not_executed.
type Resolution struct {
	At       time.Time `json:"at"`
	By       string    `json:"by"` // the operator, named as in Decision.By
	Evidence string    `json:"evidence,omitempty"`
	Note     string    `json:"note"`
	Verdict  string    `json:"verdict"`
}

// Lease is the answer to a heartbeat.
type Lease struct {
	CallID string `json:"call_id"`
	// ExtendMax is the tool's outcome_within in seconds: the most one
	// heartbeat extends the lease by.
	ExtendMax  int64     `json:"extend_max"`
	LeaseUntil time.Time `json:"lease_until"`
}

// Redemption is the answer to a grant presented with a call: accepted, or
// rejected with the reason. A rejection is an answer, not an error.
type Redemption struct {
	// CallID is the call the grant was minted for, when its claims could be
	// read. Pass it downstream as the operation's idempotency key.
	CallID string `json:"call_id,omitempty"`
	// Checks lists every check in the order the console ran them.
	Checks []Check `json:"checks"`
	// Decision is "accepted" or "rejected".
	Decision string `json:"decision"`
	// Envelope is, when accepted, the exact canonical bytes that were
	// hashed into Digest: the call to run.
	Digest   string `json:"digest,omitempty"`
	Envelope string `json:"envelope,omitempty"`
	// Freeze is set when an operator's freeze refused the redemption
	// (reason frozen).
	Freeze *Freeze `json:"freeze,omitempty"`
	// LeaseUntil is, when accepted, when the executor's lease ends: report
	// the outcome before then, or extend it with a heartbeat.
	LeaseUntil time.Time `json:"lease_until,omitzero"`
	// Message says, when rejected, what to do about it.
	Message string `json:"message,omitempty"`
	// OutcomeWithin is, when accepted, the tool's lease length in seconds.
	OutcomeWithin int64 `json:"outcome_within,omitempty"`
	// Reason is the rejection reason: malformed, bad_signature, unknown_key,
	// bad_claims, actor_mismatch, audience_mismatch, tool_mismatch,
	// target_mismatch, digest_mismatch, not_yet_valid, expired, revoked,
	// replayed, tool_changed or frozen.
	Reason string `json:"reason,omitempty"`
}

// Check is one step of a redemption. OK is nil when the check was not
// reached because an earlier one failed.
type Check struct {
	Name string `json:"name"`
	OK   *bool  `json:"ok"`
}

// Freeze is the operator's freeze that refused a redemption: its reason,
// and since when (to the second).
type Freeze struct {
	Reason string    `json:"reason"`
	Since  time.Time `json:"since"`
}

// Checkpoint is a signed statement of the audit trail's head (docs/audit.md).
// Its members are in the order the audit package declares them.
type Checkpoint struct {
	Seq       int64  `json:"seq"`
	Head      string `json:"head"`
	Time      string `json:"time"`
	KID       string `json:"kid"`
	PublicKey string `json:"public_key"`
	Signature string `json:"signature"`
}

// Health is the answer of /healthz: ok, unavailable, or degraded with Live
// saying why.
type Health struct {
	Live   string `json:"live,omitempty"`
	Status string `json:"status"`
}

// Health statuses.
const (
	HealthOK          = "ok"
	HealthUnavailable = "unavailable"
	HealthDegraded    = "degraded"
)

// ErrorBody is every error answer: {"error": {...}}.
type ErrorBody struct {
	Error Error `json:"error"`
}

// Error is the API's one error shape. Its members are in the order the
// error vocabulary (internal/problem) declares them.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Problems lists every problem found in a refused proposal.
	Problems []Problem `json:"problems,omitempty"`
	// Reason is the operator's or the rule's reason (previously_denied,
	// denied_by_policy), or the freeze's (frozen).
	Reason string `json:"reason,omitempty"`
	// CallID names the call an error refers to (previously_denied,
	// denied_by_policy).
	CallID string `json:"call_id,omitempty"`
	// Hint says what a person can do about it (retry_limit).
	Hint string `json:"hint,omitempty"`
	// CounteredBy is the counter-proposal to accept or decline
	// (previously_countered).
	CounteredBy string `json:"countered_by,omitempty"`
}

// Problem is one thing wrong with a proposal: a problem code, the JSON
// Pointer of the offending value from the body's root, and a sentence.
type Problem struct {
	Code    string `json:"code"`
	Path    string `json:"path"`
	Message string `json:"message"`
}
