package queue

import (
	"context"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
)

// Store is the persistence the queue needs. Update runs fn inside one write
// transaction (SQLite BEGIN IMMEDIATE): either everything fn did, audit
// entries included, is committed, or nothing is. Update checks inside the
// transaction that the database is still the one the store opened, before
// it commits and whatever fn returned, and fails with store.ErrReplaced
// when it is not: no write of any kind lands in a database that replaced
// it, and no write answers with what it read there (not found, a
// conflict). What fn did meanwhile stays inside the transaction, which is
// rolled back.
type Store interface {
	Update(ctx context.Context, fn func(Tx) error) error
	// Call reads one call outside any write transaction.
	Call(ctx context.Context, id string) (*Call, error)
	// DueCalls lists pending calls whose decide_by is at or before now.
	DueCalls(ctx context.Context, now time.Time, limit int) ([]string, error)
	// NextDeadline returns the earliest decide_by of a pending call, or
	// false when none is pending.
	NextDeadline(ctx context.Context) (time.Time, bool, error)
	// DueLeases lists redeemed calls with no outcome whose lease_until is
	// at or before now.
	DueLeases(ctx context.Context, now time.Time, limit int) ([]string, error)
	// NextLeaseEnd returns the earliest lease_until of a redeemed call with
	// no outcome, or false when there is none.
	NextLeaseEnd(ctx context.Context) (time.Time, bool, error)
	// UnresolvedCalls lists redeemed calls whose outcome is unknown or
	// lease_expired and that nobody has resolved, oldest outcome first.
	UnresolvedCalls(ctx context.Context, limit int) ([]*Call, error)
	// CountUnresolved counts the calls UnresolvedCalls lists.
	CountUnresolved(ctx context.Context) (int, error)
	// PendingCalls lists pending calls, newest first.
	PendingCalls(ctx context.Context, limit int) ([]*Call, error)
	// PendingPage lists at most limit pending calls after the key, by
	// deadline then id, with their approvals: one page of a queue that
	// reads only the rows it shows, however many are pending.
	PendingPage(ctx context.Context, after PageKey, limit int) ([]*Call, error)
	// CountPending counts the pending calls, and those of them whose
	// decision deadline is before due.
	CountPending(ctx context.Context, due time.Time) (all, before int, err error)
	// Blocks lists the (actor, tool) pairs blocked by the retry cap.
	Blocks(ctx context.Context) ([]Block, error)
	// Freezes lists the freezes in force, oldest first.
	Freezes(ctx context.Context) ([]Freeze, error)
	// Allowances lists allowances, newest first (AllowanceFilter).
	Allowances(ctx context.Context, f AllowanceFilter) ([]*Allowance, error)
	// Allowance reads one allowance; ErrAllowanceNotFound when there is
	// none.
	Allowance(ctx context.Context, id string) (*Allowance, error)
	// DueEscalations lists the pending calls whose next escalation tier
	// is due at or before now, earliest first.
	DueEscalations(ctx context.Context, now time.Time, limit int) ([]string, error)
	// NextEscalation is when the earliest escalation tier is due, or
	// false when none is.
	NextEscalation(ctx context.Context) (time.Time, bool, error)
	// Delegations lists delegations, newest first (DelegationFilter).
	Delegations(ctx context.Context, f DelegationFilter) ([]*Delegation, error)
	// Plan reads one plan; ErrPlanNotFound when there is none.
	Plan(ctx context.Context, id string) (*Plan, error)
	// PlanItems lists a plan's items in order, with their approvals.
	PlanItems(ctx context.Context, id string) ([]*Call, error)
	// PendingPlans lists at most limit plans pending at now, by deadline
	// then id.
	PendingPlans(ctx context.Context, now time.Time, limit int) ([]*Plan, error)
	// DuePlans lists at most limit plans whose time ran out at now:
	// pending past their deadline, or approved past valid_until.
	DuePlans(ctx context.Context, now time.Time, limit int) ([]string, error)
	// NextPlanDeadline is when the earliest plan runs out of time (a
	// pending plan's decide_by, an approved plan's valid_until), or false
	// when no plan is pending or approved.
	NextPlanDeadline(ctx context.Context) (time.Time, bool, error)
	// PendingCallsOf lists at most limit pending calls of one tool, newest
	// first, with their approvals: the filter is in the read, so a tool's
	// older calls are found however many newer calls of other tools wait.
	PendingCallsOf(ctx context.Context, tool string, limit int) ([]*Call, error)
	// PendingGroups reads the pending calls (not plan items) grouped by
	// what Standing reads of them (PendingGroup), with how many of each
	// group have a decision deadline before due.
	PendingGroups(ctx context.Context, due time.Time) ([]PendingGroup, error)
}

// Tx is what one transaction may do. Methods that find nothing return
// ErrNotFound.
type Tx interface {
	Call(id string) (*Call, error)
	// User reads a console account, for the rule of who may decide;
	// account.ErrUserNotFound when there is none.
	User(name string) (account.User, error)
	// LatestByDigest returns the newest call of actor with that digest
	// that token submitted, or that was denied (whoever submitted it): the
	// identical-envelope lookup at submission is per token, the memory of
	// a denial per actor.
	LatestByDigest(actor, digest, token string) (*Call, error)
	InsertCall(c *Call) error
	// UpdateCall writes the call's status, decision, grant, redemption,
	// lease, outcome and resolution fields.
	UpdateCall(c *Call) error
	// AddApproval stores an approval, with its passkey and evidence when
	// it has them.
	AddApproval(callID string, a Approval) error
	// UsePasskey advances one of user's passkeys from signature counter
	// from to to (with its record so advanced, last used at), in the
	// approval's transaction: ErrPasskeyChanged when user has no such
	// passkey or its counter is no longer from.
	UsePasskey(user string, id []byte, from, to uint32, record []byte, at time.Time) error
	// ConsumeNonce records a grant's jti as used. It returns false, and
	// changes nothing, when the jti was already consumed.
	ConsumeNonce(jti, callID string, at time.Time) (bool, error)
	// PendingBy counts the pending calls that token submitted, stopping at
	// limit: the bound of calls one token keeps waiting.
	PendingBy(token string, limit int) (int, error)
	Retry(actor, tool string) (RetryState, error)
	SetRetry(actor, tool string, st RetryState) error
	// Append seals the entry onto the audit chain.
	Append(e *audit.Entry) error
	// Frozen returns the oldest freeze in force that matches a call of
	// tool by actor (a freeze's empty tool or actor matches any), or
	// ErrNotFound.
	Frozen(tool, actor string) (*Freeze, error)
	// KnownNames lists, for checking a freeze's names, the actors that
	// have an API token or have submitted calls and the tools calls were
	// made of: at most limit of each.
	KnownNames(limit int) (actors, tools []string, err error)
	// InsertFreeze records a freeze in force and sets its ID.
	InsertFreeze(f *Freeze) error
	// LiftFreezes ends every freeze in force with exactly this tool and
	// actor and returns them.
	LiftFreezes(tool, actor, by string, at time.Time) ([]Freeze, error)
	// Enqueue writes notices to the outbox, which internal/notify delivers
	// after commit. A notice whose event id and channel are already there
	// is ignored.
	Enqueue(ns []Notice) error
	// InsertRevocation records an operator's revocation of a call's grant;
	// Call and every read of a call return it as Call.Revoked.
	InsertRevocation(r Revocation) error
	// InsertRollback records a rollback accepted on purpose.
	InsertRollback(r Rollback) error
	// LastRollback returns when the latest rollback was accepted (zero when
	// none was): grants issued at or before then are refused.
	LastRollback() (time.Time, error)
	// InsertAllowance stores a new allowance (nothing used, not ended).
	InsertAllowance(a *Allowance) error
	// Allowance reads one allowance; ErrAllowanceNotFound when there is
	// none.
	Allowance(id string) (*Allowance, error)
	// AllowancesFor lists the allowances of actor, audience and tool that
	// have not ended, oldest first, at most limit.
	AllowancesFor(actor, audience, tool string, limit int) ([]*Allowance, error)
	// LiveAllowances counts the allowances live at now (not ended, until
	// after now, uses left) of tool and of giver, stopping at limit each.
	LiveAllowances(tool, giver string, now time.Time, limit int) (ofTool, ofGiver int, err error)
	// SetConfirmers replaces the confirmers of an allowance that has not
	// ended; ErrAllowanceNotFound when there is no such allowance, or it
	// has ended.
	SetConfirmers(id string, confirmers []string) error
	// UseAllowance counts one use of the allowance for the call, and
	// records it, only if the allowance has not ended, is still before
	// its until at u.At, has a use left and (u.Once) has not approved
	// u.Digest before. It reports whether it did; false changes nothing.
	// The count is checked by the statement that makes it, so no number
	// of concurrent transactions, processes or replicas counts more than
	// the allowance's uses.
	UseAllowance(u AllowanceUse) (bool, error)
	// EndAllowance ends an allowance that has not ended yet, with the
	// reason, by whom and when; it reports false, and changes nothing,
	// when it had ended already.
	EndAllowance(id, reason, by string, at time.Time) (bool, error)
	// AllowanceCalls lists the ids of the calls the allowance approved, by
	// the time of their use, then by id.
	AllowanceCalls(id string) ([]string, error)
	// SetEscalation writes c's reviewer condition, escalation tiers and
	// tiers reached, and its notify channels, and keeps c due for its next
	// tier at due (zero: no tier is left).
	SetEscalation(c *Call, due time.Time) error
	// InsertDelegation stores a new delegation (not ended).
	InsertDelegation(d *Delegation) error
	// Delegation reads one delegation; ErrDelegationNotFound when there
	// is none.
	Delegation(id string) (*Delegation, error)
	// LiveDelegation returns the oldest delegation from delegator to
	// delegate live at now (not ended, until after now), or
	// ErrDelegationNotFound.
	LiveDelegation(delegator, delegate string, now time.Time) (*Delegation, error)
	// LiveDelegations counts the delegations live at now that person gave
	// or received, and all live ones, stopping at limit each.
	LiveDelegations(person string, now time.Time, limit int) (ofPerson, all int, err error)
	// EndDelegation ends a delegation that has not ended, with the
	// reason, by whom and when; false, changing nothing, when it had.
	EndDelegation(id, reason, by string, at time.Time) (bool, error)
	// AfterCommit registers fn to run once the transaction has committed,
	// before Update returns, and not at all if it does not commit. The
	// functions of successive commits run in the order of the commits,
	// even when several writes share one commit; fn must not block.
	AfterCommit(fn func())
	// InsertPlan stores a new pending plan; its items are inserted with
	// InsertCall.
	InsertPlan(p *Plan) error
	// Plan reads one plan; ErrPlanNotFound when there is none.
	Plan(id string) (*Plan, error)
	// PlanItems lists a plan's items in order, read as Call reads them.
	PlanItems(id string) ([]*Call, error)
	// UpdatePlan writes a plan's status, decision and valid_until.
	UpdatePlan(p *Plan) error
	// PendingPlansBy counts the plans token submitted that are pending
	// at now, stopping at limit: the bound of plans one token keeps
	// waiting.
	PendingPlansBy(token string, now time.Time, limit int) (int, error)
}

// submitChecker is a Tx that can read a submission's checks in one
// statement: the retry states of (actor, tool) and (actor, AnyTool), the
// newest call with that digest and the token's pending calls up to limit.
// The Retry, LatestByDigest and PendingBy that follow return what it read
// (as they would have read it) without reading again.
type submitChecker interface {
	SubmitChecks(actor, tool, digest, token string, limit int) error
}

// Rollback is an older database accepted on purpose: the data directory's
// high-water mark (MarkSeq, MarkHead) was ahead of the database's chain
// (DBSeq, DBHead). Every grant issued at or before AcceptedAt is refused at
// redemption, since the database no longer knows which were redeemed.
type Rollback struct {
	AcceptedAt time.Time
	AcceptedBy string
	MarkSeq    int64
	MarkHead   string
	DBSeq      int64
	DBHead     string
}

// RetryState counts an (actor, tool) pair's content rejections in a row.
type RetryState struct {
	Count     int
	BlockedAt time.Time // zero when not blocked
}

// Blocked reports whether the pair is refused with retry_limit.
func (r RetryState) Blocked() bool { return !r.BlockedAt.IsZero() }

// Block is an (actor, tool) pair refused by the retry cap until an operator
// clears it.
type Block struct {
	Actor     string
	Tool      string
	Count     int
	BlockedAt time.Time
}
