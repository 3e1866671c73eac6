// Package queue holds Countersign's calls and the rules for moving them:
// submission, decisions and quorum, grants, redemption, expiry, outcomes and
// the retry cap. It declares the store it needs; internal/db implements it.
package queue

import (
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/tools"
)

// Status is where a call is in its life.
type Status string

// Call statuses. Every status but Pending and Approved is terminal; Approved
// moves only to Redeemed.
const (
	StatusPending   Status = "pending"
	StatusApproved  Status = "approved"
	StatusDenied    Status = "denied"
	StatusExpired   Status = "expired"
	StatusCancelled Status = "cancelled"
	StatusRedeemed  Status = "redeemed"
	// StatusCountered ends a call an operator answered with an edited
	// call, its counter (Call.CounteredBy); it can never be approved or
	// redeemed.
	StatusCountered Status = "countered"
)

// Terminal reports whether no decision can change the status any more.
func (s Status) Terminal() bool {
	return s != StatusPending && s != StatusApproved
}

// Call is one stored proposal with its envelope, digest and state.
type Call struct {
	ID        string
	Seq       int64 // insertion order, for paging
	Actor     string
	Audience  string
	Tool      string
	Target    string
	Args      canonical.Object // every argument as proposed, informational ones included
	Rationale string
	// Envelope is the canonical envelope that Digest hashes (informational
	// members removed).
	Envelope []byte
	Digest   string
	Status   Status
	// ToolDigest is the definition digest of the tool the call was
	// submitted under; approval and redemption refuse the call with
	// tool_changed once the tool's current definition digest differs.
	ToolDigest string
	// Notify names the notification channels the rule that matched the
	// call asked for (its notify list); nil when none did.
	Notify []string

	ApprovalsRequired int
	Approvals         []Approval
	GrantTTL          time.Duration

	// Owners are the owners of the agent's token when the call was made
	// (account names, or team:GROUP): none of them may approve it.
	Owners []string
	// Approvers is the tool's reviewer condition when the call was made:
	// only operators it allows may approve. Empty allows every operator.
	Approvers tools.Approvers
	// RequirePasskey is true when every approval must be signed by the
	// operator's passkey (the tool's approve_with, or the ask rule's).
	RequirePasskey bool
	// Escalate are the tool's escalation tiers when the call was made,
	// and Reached how many of them the call has reached: Approvers then
	// includes what they added, Notify whom they notify.
	Escalate []tools.Tier
	Reached  int

	CreatedAt time.Time
	DecideBy  time.Time
	DecidedAt time.Time // zero until approved, denied, expired or cancelled

	Denial *Denial

	Grant          string // the signed token, set when approved
	GrantJTI       string
	GrantKID       string
	GrantExpiresAt time.Time

	// OutcomeWithin is the tool's outcome_within when the call was
	// submitted: the executor's lease after redemption, and the most one
	// heartbeat extends it by.
	OutcomeWithin time.Duration

	RedeemedAt time.Time
	// SubmittedBy is the id of the API token that submitted the call: only
	// that token sees it, its grant, or cancels it (OwnedBy). Empty for
	// calls stored before tokens were recorded, which every token of the
	// actor sees.
	SubmittedBy string
	// RedeemedBy is the id of the API token that redeemed the grant; only
	// that token reports the outcome or extends the lease.
	RedeemedBy string
	// LeaseUntil is when the executor's lease ends: set at redemption,
	// moved by heartbeats. A redeemed call with no outcome by then gets the
	// outcome lease_expired.
	LeaseUntil time.Time
	Outcome    *Outcome
	// Resolution is what a person found out about a call whose outcome is
	// unknown or lease_expired.
	Resolution *Resolution

	// Revoked is set when an operator revoked the grant before it was
	// redeemed: the stored status stays approved, the grant is refused at
	// redemption, and the call is shown as revoked.
	Revoked *Revocation

	// CounteredBy is, on a countered call, the id of its counter.
	CounteredBy string
	// CounteredFrom is, on a counter, the id of the call it answers, and
	// EditedBy the operator who edited it.
	CounteredFrom, EditedBy string
	// AcceptedAt is when the submitting agent accepted a counter; its
	// grant is minted only after that.
	AcceptedAt time.Time

	// PlanID is, on a plan item, its plan's id, and PlanIndex its place in
	// the plan (from 0). An item is not in the queue on its own and is
	// decided only through its plan.
	PlanID    string
	PlanIndex int
}

// Revocation is an operator's revocation of an approved call's grant.
type Revocation struct {
	CallID  string
	JTI     string
	By      string
	Channel string
	Reason  string
	At      time.Time
}

// StatusRevoked is how a call whose grant was revoked is shown; it is not
// stored (the call stays approved in the store).
const StatusRevoked Status = "revoked"

// Shown is the status as agents and people see it: revoked for an approved
// call whose grant was revoked, else the stored status.
func (c *Call) Shown() Status {
	if c.Revoked != nil && c.Status == StatusApproved {
		return StatusRevoked
	}
	return c.Status
}

// Grant states: what became of the grant of a call that was approved.
const (
	// GrantLive is a grant that can still be redeemed.
	GrantLive = "live"
	// GrantExpired is a grant that ran out unredeemed: the call stays
	// approved in the store, but it can no longer run; only a new proposal
	// of the call can.
	GrantExpired = "expired"
	// GrantRevoked is a grant an operator revoked before it was redeemed.
	GrantRevoked = "revoked"
	// GrantRedeemed is a grant that was redeemed: the call ran (or runs).
	GrantRedeemed = "redeemed"
)

// GrantState is what became of the call's grant at now: live, expired,
// revoked or redeemed; "" for a call that was never approved (pending,
// denied, expired undecided, or cancelled). A grant is expired from the
// second its expiry names, as redemption judges it (grant.CheckTime).
func (c *Call) GrantState(now time.Time) string {
	switch c.Shown() {
	case StatusRedeemed:
		return GrantRedeemed
	case StatusRevoked:
		return GrantRevoked
	case StatusApproved:
		if now.Unix() >= c.GrantExpiresAt.Unix() {
			return GrantExpired
		}
		return GrantLive
	}
	return ""
}

// Outcome statuses. The executor reports succeeded, failed or unknown;
// lease_expired is set by the console when nobody reported in time, and a
// report that arrives later replaces it.
const (
	OutcomeSucceeded    = "succeeded"
	OutcomeFailed       = "failed"
	OutcomeUnknown      = "unknown"
	OutcomeLeaseExpired = "lease_expired"
)

// Verdicts a person records when resolving a call.
const (
	VerdictExecuted    = "executed"
	VerdictNotExecuted = "not_executed"
)

// Resolution is a person's finding about a call nobody knows the outcome
// of: whether it was executed, why they think so, and where the evidence is.
type Resolution struct {
	Verdict  string // executed or not_executed
	By       string
	Channel  string
	Note     string
	Evidence string // an http or https URL, or ""
	At       time.Time
}

// OutcomeOpen reports whether the call waits for its executor: redeemed,
// and no outcome reported or set.
func (c *Call) OutcomeOpen() bool {
	return c.Status == StatusRedeemed && c.Outcome == nil
}

// Unresolved reports whether the call waits for a person: redeemed, its
// outcome unknown or lease_expired, and nobody has resolved it.
func (c *Call) Unresolved() bool {
	return c.Status == StatusRedeemed && c.Outcome != nil && c.Resolution == nil &&
		(c.Outcome.Status == OutcomeUnknown || c.Outcome.Status == OutcomeLeaseExpired)
}

// Approval is one approval of a call: the decision record. Who approved
// and through which channel, how (Method), what made it when it was not a
// single decision (Via), what page presented the call, and the digest
// approved. Human follows from these.
type Approval struct {
	Operator string
	Channel  string
	At       time.Time
	// Method is how the approval was given: MethodClick, MethodPasskey,
	// MethodBatch, MethodCommand, MethodPolicy or MethodAllowance.
	Method string
	// Digest is the digest the approver posted: the call's, or the
	// approval would have been refused.
	Digest string
	// Via names what made the approval besides its approver: the batch of
	// a batch approval, the allowance of an allowance's; "" for a single
	// decision.
	Via string
	// Presented is what the page the approval was given on showed, checked
	// from the page's presentation token in the decision's transaction;
	// nil when no page was presented (a command, a rule).
	Presented *Presented
	// Comment is the operator's optional note, "" for none; the agent
	// receives it with the call.
	Comment string
	// Passkey is set for an approval signed by the operator's passkey.
	Passkey *ApprovalPasskey
	// For names the person on whose behalf Operator approved, through a
	// delegation (docs/team.md); "" for an approval with the operator's
	// own standing.
	For string
}

// Presented is what a decision page showed its viewer: its kind
// (present.PageCall, present.PageBatch) and when it was rendered. The
// viewer is the approver and the digest shown the approval's.
type Presented struct {
	Page string
	At   time.Time
}

// How an approval was given (Approval.Method). The agent API's call object
// and the call's page say the same.
const (
	MethodPasskey = "passkey" // signed with the operator's passkey over the call's id and digest
	MethodClick   = "click"   // a click on the call's page
	MethodBatch   = "batch"   // one click approving each call of a batch review page on its own
	MethodCommand = "command" // console approve, directly or through the control socket
	MethodPolicy  = "policy"  // a rule of the tools file (the approver is policy:RULE)
	// MethodAllowance: a standing approval a person gave (Approval.Via
	// names it; the approver is the person whose approval it carries).
	MethodAllowance = "allowance"
	// MethodCounter: the approval of the operator who edited a call into
	// its counter-proposal, given on the counter's review page.
	MethodCounter = "counter"
	// MethodPlan: an approval of a whole plan on its page, recorded on
	// each of its items (Approval.Via names the plan).
	MethodPlan = "plan"
)

// Whether a person saw the call before it was approved (Approval.Human).
const (
	// HumanTrue: a logged-in person approved on a rendered page, and the
	// page's presentation token proved what it showed.
	HumanTrue = "true"
	// HumanFalse: a rule or an allowance approved, naming itself (and the
	// allowance its giver); no person saw this call.
	HumanFalse = "false"
	// HumanUnattested: a person's name is on it, but nothing proves what
	// they were shown (a command).
	HumanUnattested = "unattested"
)

// Human says whether a person saw the call before approving it: true only
// with a checked presentation, false for a rule's approval, unattested
// otherwise.
func (a Approval) Human() string {
	switch {
	case a.Presented != nil:
		return HumanTrue
	case a.Method == MethodPolicy, a.Method == MethodAllowance:
		return HumanFalse
	}
	return HumanUnattested
}

// ApprovalPasskey is how an approval was signed: the passkey, by the name
// it had then, and the evidence anyone can re-check (docs/passkeys.md).
type ApprovalPasskey struct {
	CredentialID []byte
	Name         string
	// Evidence is the JSON of passkey.Evidence. Reads of a single call
	// carry it; history lists leave it out (it is in the audit entry).
	Evidence []byte
}

// Denial records who denied a call and why.
type Denial struct {
	By      string
	Channel string
	Reason  string
	At      time.Time
}

// Outcome is what the executor reported after running the call.
type Outcome struct {
	Status string // succeeded, failed, unknown
	Detail string
	At     time.Time
}

// ApprovedBy reports whether operator has taken part in an approval of
// the call: given it, or had it given on their behalf (Approval.For).
func (c *Call) ApprovedBy(operator string) bool {
	for _, a := range c.Approvals {
		if a.Operator == operator || a.For != "" && a.For == operator {
			return true
		}
	}
	return false
}

// Clone returns a deep enough copy for publishing: slices and pointers that
// the service may change later are copied.
func (c *Call) Clone() *Call {
	cp := *c
	cp.Approvals = append([]Approval(nil), c.Approvals...)
	cp.Notify = append([]string(nil), c.Notify...)
	if c.Notify == nil {
		cp.Notify = nil
	}
	cp.Owners = append([]string(nil), c.Owners...)
	if c.Denial != nil {
		d := *c.Denial
		cp.Denial = &d
	}
	if c.Outcome != nil {
		o := *c.Outcome
		cp.Outcome = &o
	}
	if c.Resolution != nil {
		r := *c.Resolution
		cp.Resolution = &r
	}
	if c.Revoked != nil {
		r := *c.Revoked
		cp.Revoked = &r
	}
	return &cp
}

// SubmittedByToken reports whether who's token submitted c: a call
// belongs to the token that submitted it, and another token of the same
// actor (even for another audience) is told it does not exist, as another
// actor's token is. A call stored before tokens were recorded belongs to
// every token of its actor.
func (c *Call) SubmittedByToken(who Principal) bool {
	return c.Actor == who.Actor && (c.SubmittedBy == "" || c.SubmittedBy == who.TokenID)
}

// reachableBy reports whether who may act on c at all: its submitting
// token, or the token that redeemed it (which reports the outcome and
// extends the lease, and sees nothing else of it).
func (c *Call) reachableBy(who Principal) bool {
	return c.SubmittedByToken(who) || c.Actor == who.Actor && c.RedeemedBy != "" && c.RedeemedBy == who.TokenID
}

// Principal is the trusted context of an agent's API token.
type Principal struct {
	Actor    string
	Audience string
	// TokenID is the id of the API token (not its secret); a redemption
	// records it, and only that token extends the call's lease.
	TokenID string
	// Owners are the token's owners: people who may not approve its calls.
	Owners []string
}

// OwnerMatches reports whether owner names the account: its name or its
// single-sign-on short name, ignoring case (as the console does when it
// keeps one person from passing for another), or team:GROUP for a group it
// belongs to. Ignoring case only ever refuses more people.
func OwnerMatches(owner string, u account.User) bool {
	if g, ok := strings.CutPrefix(owner, OwnerTeamPrefix); ok {
		return g != "" && slices.Contains(u.Groups, g)
	}
	return goesBy(u, owner)
}

// goesBy reports whether name is the account's name or its single-sign-on
// short name, ignoring case.
func goesBy(u account.User, name string) bool {
	return strings.EqualFold(name, u.Name) || (u.ShortName != "" && strings.EqualFold(name, u.ShortName))
}

// ProposedBy reports whether the call was proposed under a name u goes by:
// its account name or its single-sign-on short name, ignoring case. A
// single-sign-on principal can never be an actor (actors follow the
// account name rule, without '/'), so without the short name the ban on
// approving one's own call would never apply to such an account.
func (c *Call) ProposedBy(u account.User) bool {
	return goesBy(u, c.Actor)
}

// OwnerTeamPrefix starts an owner that is a provider group: team:payments
// is everyone in the group payments.
const OwnerTeamPrefix = "team:"

// OwnedBy returns the first of the call's owners that names u, or "".
func (c *Call) OwnedBy(u account.User) string {
	for _, o := range c.Owners {
		if OwnerMatches(o, u) {
			return o
		}
	}
	return ""
}

// Errors returned by the service. The HTTP layer maps them to status codes.
var (
	ErrNotFound = errors.New("queue: call not found")
	// ErrTooManyPending refuses a proposal from a token that keeps as many
	// calls waiting for a decision as it may (Config.MaxPendingPerToken).
	ErrTooManyPending   = errors.New("queue: this token keeps as many calls waiting for a decision as it may")
	ErrNotPending       = errors.New("queue: call is no longer pending")
	ErrDigestMismatch   = errors.New("queue: digest differs from the call's digest")
	ErrOwnCall          = errors.New("queue: an operator cannot approve a call proposed under their own name")
	ErrAlreadyApproved  = errors.New("queue: operator has already approved this call")
	ErrReasonRequired   = errors.New("queue: a denial needs a reason")
	ErrReasonTooLong    = fmt.Errorf("queue: a denial reason is at most %d bytes", MaxReasonBytes)
	ErrAudienceNotAllow = errors.New("queue: the tool's audience is not the token's audience")
	ErrNotRedeemed      = errors.New("queue: the call has not been redeemed")
	ErrOutcomeReported  = errors.New("queue: an outcome was already reported")
	ErrInvalidOutcome   = errors.New("queue: outcome status must be succeeded, failed or unknown")
	ErrRetryLimit       = errors.New("queue: too many rejected proposals in a row for this tool")
	ErrNotBlocked       = errors.New("queue: no retry block for that actor and tool")
	ErrPreviouslyDenied = errors.New("queue: the same call was denied recently")
	ErrOperatorRequired = errors.New("queue: an operator name is required")
	// ErrIntegrity is a stored call whose envelope does not hash to its
	// digest: the database was edited.
	ErrIntegrity = errors.New("queue: the call's stored envelope does not hash to its digest")
	// ErrNotApproved is a revocation of a call that is not approved with a
	// live, unredeemed grant.
	ErrNotApproved     = errors.New("queue: only an approved call's unredeemed grant can be revoked")
	ErrNotADecider     = errors.New("queue: not an enabled operator or admin")
	ErrNotAnAdmin      = errors.New("queue: not an enabled admin")
	ErrCommentTooLong  = errors.New("queue: the approval's comment is too long")
	ErrNotLeaseHolder  = errors.New("queue: the call was redeemed with another token; only that token extends its lease")
	ErrLeaseExpired    = errors.New("queue: the call's lease has expired; report its outcome")
	ErrNotUnresolved   = errors.New("queue: the call has no unknown or expired outcome to resolve")
	ErrAlreadyResolved = errors.New("queue: the call was already resolved")
	ErrResolveOwnCall  = errors.New("queue: an operator cannot resolve a call proposed under their own name")
	ErrInvalidVerdict  = errors.New("queue: the verdict must be executed or not_executed")
	ErrNoteRequired    = errors.New("queue: a resolution needs a note saying what was found")
	ErrNoteTooLong     = fmt.Errorf("queue: a resolution's note is at most %d bytes", MaxReasonBytes)
	ErrInvalidEvidence = errors.New("queue: the evidence link must be an http or https URL")
	ErrPasskeyRequired = errors.New("queue: this call must be approved with a passkey, in the browser")
	ErrPasskeyChanged  = errors.New("queue: the passkey was removed, or used for another approval at the same moment; approve again")
	ErrOwner           = errors.New("queue: an owner of the agent cannot approve its calls")
	ErrNotAnApprover   = errors.New("queue: the tool names who may approve its calls, and this operator is not one of them")
)

// SamePersonError refuses an approval by an operator who approved the
// call already under another account that goes by the same name (a local
// account and a single-sign-on one): a quorum counts people.
type SamePersonError struct {
	Operator, Other string
}

func (e *SamePersonError) Error() string {
	return fmt.Sprintf("queue: %q approved this call already as %q, the same person: an approval counts once", e.Operator, e.Other)
}

// OwnerError is ErrOwner for one call: the operator is named by Owner.
// Resolving is set when what was refused is a resolution of the call's
// outcome rather than an approval.
type OwnerError struct {
	Operator, Owner string
	Resolving       bool
}

func (e *OwnerError) Error() string {
	head := ErrOwner.Error()
	if e.Resolving {
		head = "queue: an owner of the agent cannot resolve its calls"
	}
	if e.Owner == e.Operator {
		return fmt.Sprintf("%s: %q owns the agent", head, e.Operator)
	}
	return fmt.Sprintf("%s: %q is an owner through %q", head, e.Operator, e.Owner)
}

// Unwrap makes an *OwnerError an ErrOwner.
func (e *OwnerError) Unwrap() error { return ErrOwner }

// ApproversError is ErrNotAnApprover with who may approve.
type ApproversError struct{ Operator, Who string }

func (e *ApproversError) Error() string {
	return fmt.Sprintf("%v (only %s may approve; %q may not)", ErrNotAnApprover, e.Who, e.Operator)
}

// Unwrap makes an *ApproversError an ErrNotAnApprover.
func (e *ApproversError) Unwrap() error { return ErrNotAnApprover }

// DeciderError is ErrNotADecider for one name: a decision in the name of
// someone who is not an enabled operator or admin.
type DeciderError struct {
	Operator string
	// Found says the account exists; it is then Disabled, or its Role
	// does not decide.
	Found    bool
	Disabled bool
	Role     account.Role
}

func (e *DeciderError) Error() string { return fmt.Sprintf("%v: %q", ErrNotADecider, e.Operator) }

// Unwrap makes a *DeciderError an ErrNotADecider.
func (e *DeciderError) Unwrap() error { return ErrNotADecider }

// AdminError is ErrNotAnAdmin for one name: an action only an enabled
// admin may take (lifting a freeze) in the name of someone else.
type AdminError struct{ Operator string }

func (e *AdminError) Error() string { return fmt.Sprintf("%v: %q", ErrNotAnAdmin, e.Operator) }

// Unwrap makes an *AdminError an ErrNotAnAdmin.
func (e *AdminError) Unwrap() error { return ErrNotAnAdmin }

// ProposalKind says why a proposal was refused.
type ProposalKind string

// Proposal refusals.
const (
	// KindParse: the text is not acceptable JSON (400, or 413 for
	// too_large).
	KindParse ProposalKind = "parse"
	// KindUnknownTool: no tool of that name (422).
	KindUnknownTool ProposalKind = "unknown_tool"
	// KindInvalidArguments: the call does not fit its tool (422).
	KindInvalidArguments ProposalKind = "invalid_arguments"
)

// NotPendingError is ErrNotPending with the call's status: a decision or a
// cancellation of a call that is no longer pending.
type NotPendingError struct {
	Status Status
	// Expired is set when the call was found past its decision deadline
	// and expired on the spot.
	Expired bool
}

// Message says it for people, without the package prefix.
func (e *NotPendingError) Message() string {
	if e.Expired {
		return "call is no longer pending (its decision deadline passed; it is now expired)"
	}
	return fmt.Sprintf("call is no longer pending (it is %s)", e.Status)
}

func (e *NotPendingError) Error() string { return "queue: " + e.Message() }

// Unwrap makes a *NotPendingError an ErrNotPending.
func (e *NotPendingError) Unwrap() error { return ErrNotPending }

// AudienceError is ErrAudienceNotAllow for one tool and token.
type AudienceError struct {
	Tool, ToolAudience, TokenAudience string
}

// Message says it for the agent, without the package prefix.
func (e *AudienceError) Message() string {
	return fmt.Sprintf("the tool's audience is not the token's audience: %s runs on %q, this token is for %q",
		e.Tool, e.ToolAudience, e.TokenAudience)
}

func (e *AudienceError) Error() string { return "queue: " + e.Message() }

// Unwrap makes an *AudienceError an ErrAudienceNotAllow.
func (e *AudienceError) Unwrap() error { return ErrAudienceNotAllow }

// ProposalError is a proposal refused for its content: every problem found.
type ProposalError struct {
	Kind     ProposalKind
	Tool     string
	Problems canonical.Problems
}

func (e *ProposalError) Error() string {
	return fmt.Sprintf("queue: proposal refused: %v", e.Problems)
}

// DeniedError is ErrPreviouslyDenied with the operator's reason.
type DeniedError struct {
	CallID string // empty when another token submitted the denied call
	Reason string
	At     time.Time
}

func (e *DeniedError) Error() string {
	if e.CallID == "" {
		return fmt.Sprintf("queue: the same call was denied at %s: %s", e.At.Format(time.RFC3339), e.Reason)
	}
	return fmt.Sprintf("queue: the same call (%s) was denied at %s: %s", e.CallID, e.At.Format(time.RFC3339), e.Reason)
}

func (e *DeniedError) Unwrap() error { return ErrPreviouslyDenied }

// idEncoding is base32 with its digits first, so that an encoded id
// sorts as its bytes do.
var idEncoding = base32.NewEncoding("234567abcdefghijklmnopqrstuvwxyz").WithPadding(base32.NoPadding)

// NewCallID returns a call id such as "call_2k4j…": "call_" and 24
// characters of [2-7a-z] that encode 15 bytes, the first 6 the time in
// Unix milliseconds and the other 9 random. The ids of calls made around
// the same time sort next to each other, so that the indexes keyed by
// call id (the calls themselves, their audit entries, approvals) take a
// new call on the few pages at their end instead of on a page chosen at
// random, which every write would otherwise add to its commit. Seventy-two
// random bits keep ids from colliding; an id is a name, not a secret.
func NewCallID() string { return newCallID(time.Now()) }

func newCallID(now time.Time) string {
	var b [15]byte
	ms := uint64(now.UnixMilli())
	for i := 5; i >= 0; i-- {
		b[i] = byte(ms)
		ms >>= 8
	}
	if _, err := rand.Read(b[6:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return "call_" + idEncoding.EncodeToString(b[:])
}
