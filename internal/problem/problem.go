// Package problem is Countersign's one error vocabulary: every refusal the
// domain can make, as the status, code and message that the agent API, the
// console's pages, the MCP gateway, the control socket and the metrics
// labels all use, so that one refusal reads the same everywhere.
package problem

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/grant"
	"github.com/countersign/countersign/internal/mcp/catalog"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/reveal"
	"github.com/countersign/countersign/internal/scope"
	"github.com/countersign/countersign/internal/store"
	"github.com/countersign/countersign/internal/tools"
)

// Error is the one error shape of the agent API, of the control socket
// and of the messages console pages show.
type Error struct {
	Status   int                `json:"-"`
	Code     string             `json:"code"`
	Message  string             `json:"message"`
	Problems canonical.Problems `json:"problems,omitempty"`
	// Extra members for particular codes (reason, call_id, retry hint).
	Reason string `json:"reason,omitempty"`
	CallID string `json:"call_id,omitempty"`
	Hint   string `json:"hint,omitempty"`
	// CounteredBy is, for previously_countered, the id of the
	// counter-proposal to accept or decline instead.
	CounteredBy string `json:"countered_by,omitempty"`
}

func (e *Error) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message) }

// refusalCodes are the answers that apply the console's rules rather than
// report a fault: a freeze (503), a rule's or an operator's denial, the
// retry cap, a tool for another audience. They are logged at INFO, like
// any other answer the console meant to give, even when their status is
// 5xx.
var refusalCodes = map[string]bool{
	"frozen": true, "denied_by_policy": true, "previously_denied": true, "retry_limit": true,
	"previously_countered": true, "counter_denied_by_policy": true,
	"audience_not_allowed": true,
}

// Refusal reports whether e is a rule applied rather than a fault.
func (e *Error) Refusal() bool { return refusalCodes[e.Code] }

// New is an Error with a message made with fmt.Sprintf.
func New(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// sentinels is the one table from the domain's sentinel errors to the API's
// status, code and message: a message a model can act on, or that tells a
// person what to do next. It is read in order; errors that carry values
// (a proposal's problems, a denial's reason) are mapped in ErrorOf first.
var sentinels = []struct {
	err     error
	status  int
	code    string
	message string
	hint    string
}{
	{queue.ErrToolChanged, http.StatusConflict, "tool_changed",
		"this console's tools file defines the tool differently from the definition the call was made under (the file changed since, or the console replicas run different tools files), so it can no longer be approved or run; the agent must propose it again (it can still be denied or cancelled)", ""},
	{queue.ErrRetryLimit, http.StatusTooManyRequests, "retry_limit",
		"three proposals in a row for this tool were rejected; stop retrying and ask a person",
		// For a person to do, not the model: the model is handed no command
		// line that acts in an operator's name.
		"an operator can clear the block in the console (Clear, beside the blocked agent on the queue)"},
	{queue.ErrNotFound, http.StatusNotFound, "not_found", "no such call", ""},
	{queue.ErrNotRedeemed, http.StatusConflict, "not_redeemed",
		"the call's grant has not been redeemed; report an outcome or send heartbeats only after redeeming it", ""},
	{queue.ErrOutcomeReported, http.StatusConflict, "outcome_already_reported", "an outcome was already reported for this call", ""},
	{queue.ErrNotLeaseHolder, http.StatusConflict, "not_lease_holder",
		"this call was redeemed with another API token; only the token that redeemed it reports its outcome or extends its lease", ""},
	{queue.ErrLeaseExpired, http.StatusConflict, "lease_expired",
		"the lease ran out before this heartbeat and the call now waits for a person; report its outcome now (it is still accepted)", ""},
	{queue.ErrInvalidOutcome, http.StatusUnprocessableEntity, "invalid_outcome", "status must be succeeded, failed or unknown", ""},
	{queue.ErrWarningNotAcknowledged, http.StatusConflict, "warning_not_acknowledged",
		"this call contains hidden or look-alike characters; read the warning, acknowledge it (the box on the call page, or --accept-warnings for console approve) and approve again", ""},
	{queue.ErrDigestMismatch, http.StatusConflict, "digest_mismatch",
		"the digest you approved is not this call's digest; reload the call, check what it does, and approve the digest shown", ""},
	{queue.ErrOwnCall, http.StatusForbidden, "own_call", "you cannot approve a call proposed under your own name; ask another operator", ""},
	{queue.ErrAlreadyApproved, http.StatusConflict, "already_approved", "you have already approved this call; it needs another operator's approval", ""},
	{queue.ErrPasskeyRequired, http.StatusForbidden, "passkey_required",
		"this call must be approved with a passkey: open it in the console and use Approve with a passkey (a click, the control socket, the command line and the operator API cannot approve it)", ""},
	{catalog.ErrNotFound, http.StatusNotFound, "definition_not_found",
		"no pinned definition has that server, tool and digest; list them (console mcp list, or GET /api/v1/operator/mcp/definitions)", ""},
	{catalog.ErrNotPending, http.StatusConflict, "already_reviewed", "this definition was already reviewed", ""},
	{queue.ErrNotApprovableFrom, http.StatusForbidden, "not_approvable_from",
		"this tool's calls are not approved through this channel (approve_from in the tools file); open the call in the console", ""},
	{queue.ErrListing, http.StatusConflict, "listing_required",
		"an approval through the operator API names the listing token its call had in a queue listing made for you in the last 10 minutes; list the queue again and send the call's listing token with its digest", ""},
	{queue.ErrBatchEmpty, http.StatusBadRequest, "batch_empty", "select at least one pending call on the queue, then review them", ""},
	{queue.ErrBatchTooLarge, http.StatusBadRequest, "batch_too_large",
		fmt.Sprintf("a batch decides at most %d calls; select fewer and review them in several batches", queue.MaxBatch), ""},
	{queue.ErrBatchDuplicate, http.StatusBadRequest, "batch_duplicate", "the batch names one call twice; select the calls again on the queue", ""},
	{queue.ErrBatchWarning, http.StatusConflict, "batch_warning",
		"this call contains hidden or look-alike characters, so it is not approved in a batch; open it, read the warning and decide it on its own", ""},
	{queue.ErrBatchConfirm, http.StatusConflict, "batch_confirm",
		"this call's tool asks for its target or a word to be typed, so it is not approved in a batch; open it and decide it on its own", ""},
	{queue.ErrBatchPasskey, http.StatusConflict, "batch_passkey",
		"this call must be approved with a passkey, so it is not approved in a batch; open it and use Approve with a passkey", ""},
	{queue.ErrPresentation, http.StatusConflict, "presentation_invalid",
		"this decision does not come from a page that showed the call as it is now, or the page is older than the call's decision window; nothing was decided: reload the page, read it and decide again", ""},
	{queue.ErrPasskeyChanged, http.StatusConflict, "passkey_changed",
		"your passkey was removed, or used for another approval at the same moment; nothing was approved: try again", ""},
	{queue.ErrFreezeReason, http.StatusBadRequest, "reason_required",
		fmt.Sprintf("a freeze needs a reason (at most %d bytes): agents and operators see it", queue.MaxReasonBytes), ""},
	{queue.ErrReasonRequired, http.StatusBadRequest, "reason_required", "a denial needs a reason (the agent receives it)", ""},
	{queue.ErrReasonTooLong, http.StatusBadRequest, "reason_too_long", fmt.Sprintf("the reason is longer than %d bytes; shorten it", queue.MaxReasonBytes), ""},
	{queue.ErrCommentTooLong, http.StatusBadRequest, "comment_too_long", fmt.Sprintf("the comment is longer than %d bytes; shorten it", queue.MaxReasonBytes), ""},
	{queue.ErrOperatorRequired, http.StatusBadRequest, "operator_required", "say who is deciding", ""},
	{queue.ErrFreezeScope, http.StatusNotFound, "no_freeze",
		"no freeze in force has that scope (it may have been lifted already); console freeze --list and the admin page show what is in force", ""},
	{queue.ErrNotBlocked, http.StatusNotFound, "not_blocked", "that actor and tool are not blocked", ""},
	{queue.ErrNotApproved, http.StatusConflict, "not_approved",
		"only an approved call whose grant has not been redeemed can have its grant revoked", ""},
	{queue.ErrIntegrity, http.StatusInternalServerError, "integrity",
		"STOP: the stored record of this call does not match its digest; nothing was approved. The database was edited: an administrator should run console audit verify.", ""},
	{queue.ErrResolveOwnCall, http.StatusForbidden, "own_call", "you cannot resolve a call proposed under your own name; ask another operator", ""},
	{queue.ErrAlreadyResolved, http.StatusConflict, "already_resolved",
		"another operator resolved this call meanwhile; their resolution is shown on the call", ""},
	{queue.ErrNotUnresolved, http.StatusConflict, "not_unresolved",
		"this call does not wait for a person: its executor reported what happened, or its lease still runs; reload it", ""},
	{queue.ErrInvalidVerdict, http.StatusBadRequest, "verdict_required", "choose whether the call was executed or not", ""},
	{queue.ErrNoteRequired, http.StatusBadRequest, "note_required", "say how you know: the note is required, and the agent sees it", ""},
	{queue.ErrNoteTooLong, http.StatusBadRequest, "note_too_long", fmt.Sprintf("the note is longer than %d bytes; shorten it", queue.MaxReasonBytes), ""},
	{queue.ErrInvalidEvidence, http.StatusBadRequest, "invalid_evidence",
		"the evidence link must be an http or https address with a host, without a user name, password or spaces; or leave it empty", ""},
	{account.ErrTooManyPasskeys, http.StatusConflict, "too_many_passkeys",
		fmt.Sprintf("an account holds at most %d passkeys; remove one first", account.MaxPasskeys), ""},
	{account.ErrLoginDisabled, http.StatusForbidden, "account_disabled", "this account is disabled; ask an administrator", ""},
	{account.ErrBadPrincipal, http.StatusForbidden, "bad_principal",
		"the identity provider's subject cannot name an account here (it must be printable ASCII, at most 320 bytes with the issuer host); ask an administrator", ""},
	{queue.ErrTooManyPending, http.StatusTooManyRequests, "too_many_pending",
		fmt.Sprintf("this token keeps %d calls waiting for a decision, as many as it may; nothing was stored. Wait for some to be decided, or cancel those no longer needed, before proposing more", queue.DefaultMaxPendingPerToken), ""},
	{queue.ErrNotPending, http.StatusConflict, "not_pending", "the call is no longer pending; reload it to see its state", ""},
	{queue.ErrPreviouslyDenied, http.StatusConflict, "previously_denied",
		"an operator denied this exact call recently; change the call or ask a person before trying again", ""},
	{queue.ErrPreviouslyCountered, http.StatusConflict, "previously_countered",
		"an operator answered this exact call with an edited one; accept or decline that counter-proposal instead of proposing it again", ""},
	{queue.ErrNotCounterable, http.StatusConflict, "not_counterable",
		"this tool's calls cannot be countered, or not in that member: its tools file entry lists what an operator may edit (counter: edit); approve or deny the call instead", ""},
	{queue.ErrCounterUnchanged, http.StatusBadRequest, "counter_unchanged",
		"the edit changes nothing the digest covers; change a value, or approve or deny the call as it is", ""},
	{queue.ErrNotCounter, http.StatusConflict, "not_a_counter",
		"only a counter-proposal (a call with countered_from) is accepted; this call is an ordinary one: redeem its grant once approved", ""},
	{queue.ErrPlanNotFound, http.StatusNotFound, "plan_not_found", "no such plan (only the token that submitted a plan sees it)", ""},
	{queue.ErrPlanItem, http.StatusConflict, "plan_item",
		"this call is an item of a plan: it is decided, minted and cancelled only through its plan (POST /api/v1/plans/{id}/items/{n}/grant, POST /api/v1/plans/{id}/cancel); the console shows it on the plan's page", ""},
	{queue.ErrTooManyPendingPlans, http.StatusTooManyRequests, "too_many_pending_plans",
		fmt.Sprintf("this token keeps %d plans waiting for a decision, as many as it may; nothing was stored. Wait for one to be decided, or cancel one, before submitting another", queue.MaxPendingPlansPerToken), ""},
	{queue.ErrPlanTooLarge, http.StatusRequestEntityTooLarge, "too_large",
		fmt.Sprintf("a plan's body is at most %d bytes; split it into smaller plans", queue.MaxPlanBytes), ""},
	{queue.ErrPlanNotApproved, http.StatusConflict, "plan_not_approved",
		"the plan is not approved yet; wait for its decision (GET /api/v1/plans/{id}) before minting its items", ""},
	{queue.ErrPlanOrder, http.StatusConflict, "plan_order",
		"the plan is ordered: mint this item only after the item before it was redeemed and reported succeeded", ""},
	{queue.ErrPlanHalted, http.StatusConflict, "plan_halted",
		"the plan is halted: one of its items reported failed or unknown, or its lease expired; no further item runs. Stop and ask a person", ""},
	{queue.ErrPlanRequirement, http.StatusConflict, "plan_requirement_changed",
		"the rules now require more approvals (or a passkey) for this item than the plan was approved with; nothing was minted. Propose the call again, on its own or in a new plan", ""},
	{queue.ErrPlanApprover, http.StatusConflict, "plan_approver_changed",
		"a person who approved the plan may no longer approve this item (disabled, or their role or groups changed); nothing was minted. Propose the call again, on its own or in a new plan", ""},
	{queue.ErrPlanNotPending, http.StatusConflict, "plan_not_pending", "the plan was decided, cancelled or expired already; read it to see its state", ""},
	{queue.ErrAudienceNotAllow, http.StatusForbidden, "audience_not_allowed",
		"the tool's audience is not this token's audience; use a token made for the tool's audience", ""},
	{queue.ErrNotAnApprover, http.StatusForbidden, "not_an_approver", "the tool names who may approve its calls, and you are not one of them; ask one of them", ""},
	{queue.ErrOwner, http.StatusForbidden, "owner", "you own the agent that proposed this call, so you cannot approve it; ask an operator who does not run it", ""},
	{queue.ErrNotADecider, http.StatusForbidden, "not_a_decider", "only an enabled operator or admin decides; use an enabled operator's account", ""},
	{queue.ErrNotAnAdmin, http.StatusForbidden, "not_an_admin", "only an enabled admin may do this; ask an admin", ""},
	{queue.ErrNotAdmin, http.StatusForbidden, "not_an_admin", "only an enabled admin account may accept a rollback; name an admin with --as", ""},
	{queue.ErrFilter, http.StatusBadRequest, "bad_filter", "invalid history filter; check the dates and names in the filter", ""},
	{account.ErrMismatch, http.StatusUnauthorized, "bad_credentials", "wrong name or password", ""},
	{account.ErrSessionNotFound, http.StatusUnauthorized, "session_ended", "your session ended; log in again", ""},
	{account.ErrThrottleFull, http.StatusTooManyRequests, "throttled",
		"too many failed logins are being tracked right now; wait a few minutes and try again", ""},
	{account.ErrNoRole, http.StatusForbidden, "no_role",
		"none of your groups at the identity provider gives you a role in this console; ask an administrator to add you to a group that does", ""},
	{account.ErrUserNotFound, http.StatusNotFound, "user_not_found", "no account has that name; console user list shows them", ""},
	{account.ErrUserExists, http.StatusConflict, "name_taken", "an account with that name exists already; choose another name", ""},
	{account.ErrUserDisabled, http.StatusConflict, "already_disabled", "the account is disabled already", ""},
	{account.ErrTokenNotFound, http.StatusNotFound, "token_not_found", "no live token has that id: it is unknown or revoked already", ""},
	{account.ErrTokenContext, http.StatusBadRequest, "invalid_token", "a token needs an actor and an audience (--actor agent:NAME --audience HOST)", ""},
	{account.ErrTokenName, http.StatusBadRequest, "invalid_token", "a token's actor and audience follow the account name rule: printable ASCII without spaces, at most 64 bytes", ""},
	{account.ErrPasskeyNotFound, http.StatusNotFound, "passkey_not_found", "no such passkey on this account; reload the account page", ""},
	{account.ErrPasskeyTaken, http.StatusConflict, "passkey_taken", "that passkey is registered already", ""},
	{account.ErrOperatorTokenScope, http.StatusBadRequest, "invalid_operator_token", "an operator token's scope is read or decide", ""},
	{account.ErrOperatorTokenLife, http.StatusBadRequest, "invalid_operator_token", "an operator token lives from one hour to 30 days", ""},
	{account.ErrOperatorTokenNote, http.StatusBadRequest, "invalid_operator_token", "a token's note is plain text of at most 200 bytes", ""},
	{account.ErrOperatorTokenRole, http.StatusForbidden, "not_a_decider", "operator tokens are for operators and admins, and your account is neither; ask an admin", ""},
	{account.ErrTooManyOperatorTokens, http.StatusConflict, "too_many_operator_tokens",
		fmt.Sprintf("you hold %d live operator tokens, as many as an account may; revoke one first", account.MaxOperatorTokensPerAccount), ""},
	{account.ErrOperatorTokenNotFound, http.StatusNotFound, "operator_token_not_found", "no live operator token of yours has that id: reload the account page", ""},
	{account.ErrOperatorTokenInvalid, http.StatusUnauthorized, "unauthorized",
		"the operator token is unknown, revoked or expired, or its account is disabled; make a new one on your account page", ""},
	{account.ErrSSOPassword, http.StatusConflict, "sso_account", "a single-sign-on account has no password here: its identity provider sets and resets it", ""},
	{account.ErrReservedName, http.StatusBadRequest, "reserved_name", "that name is reserved; choose another", ""},
	{account.ErrUnknownRole, http.StatusBadRequest, "unknown_role", "the role must be operator, auditor or admin", ""},
	{account.ErrBadName, http.StatusBadRequest, "invalid_name", "", ""},
	{account.ErrBadOwner, http.StatusBadRequest, "invalid_owner", "", ""},
	{account.ErrWeakPassword, http.StatusBadRequest, "invalid_password", fmt.Sprintf("the password is too short: use at least %d characters", account.MinPasswordChars), ""},
	{account.ErrLongPassword, http.StatusBadRequest, "invalid_password", fmt.Sprintf("the password is too long: at most %d bytes", account.MaxPasswordBytes), ""},
	{account.ErrMalformedHash, http.StatusInternalServerError, "malformed_hash",
		"the stored password hash of this account does not parse; an administrator should set a new password", ""},
	{account.ErrSecretNotFound, http.StatusInternalServerError, "secret_missing",
		"a secret of this console is missing from its database; an administrator should check the database", ""},
	{grant.ErrNoNextKey, http.StatusConflict, "no_next_key", "no next key is prepared; prepare one first (console keys rotate --prepare)", ""},
	{grant.ErrNextKeyPrepared, http.StatusConflict, "next_key_prepared", "a next key is prepared; activate it (console keys rotate --activate)", ""},
	{grant.ErrNoKeyring, http.StatusServiceUnavailable, "no_keyring", "the data directory has no signing keys; run console keys init or serve once", ""},
	{grant.ErrKeyringExists, http.StatusConflict, "keyring_exists", "the data directory holds signing keys already; nothing was changed", ""},
	{store.ErrReplaced, http.StatusServiceUnavailable, "unavailable",
		"the console's database was removed or replaced while running; nothing was changed. An administrator must restart the console.", ""},
	{store.ErrRolledBack, http.StatusServiceUnavailable, "unavailable",
		"the console's database went back to an older state while running; nothing is acknowledged. An administrator must restore the newer database or accept the rollback.", ""},
	{store.ErrUnavailable, http.StatusServiceUnavailable, "unavailable",
		"the console cannot write to its database right now (disk full or read-only); nothing was changed. Retry later.", ""},
	{queue.ErrAllowanceNotFound, http.StatusNotFound, "allowance_not_found", "no allowance has that id; console allowance list shows them", ""},
	{queue.ErrScopeMismatch, http.StatusConflict, "scope_mismatch",
		"the allowance you were shown is not the one the call and the tool make now (the call, the tool or your choices changed); nothing was given. Reload the call, read the allowance's words again and give it again", ""},
	{queue.ErrAllowancesPerTool, http.StatusTooManyRequests, "allowances_per_tool",
		fmt.Sprintf("this tool has as many live allowances as it may (%d by default); nothing was given. Revoke one that is no longer needed (console allowance list), or approve the call on its own", queue.DefaultMaxAllowancesPerTool), ""},
	{queue.ErrAllowancesPerGiver, http.StatusTooManyRequests, "allowances_per_giver",
		fmt.Sprintf("you have given as many live allowances as you may (%d by default); nothing was given. Revoke one of yours that is no longer needed (console allowance list), or approve the call on its own", queue.DefaultMaxAllowancesPerGiver), ""},
	{queue.ErrAllowanceConfirmed, http.StatusConflict, "allowance_confirmed", "the allowance has every confirmer it needs already; nothing was changed", ""},
	{queue.ErrBaseDenied, http.StatusConflict, "allowance_base_denied",
		"the call this allowance was given from was denied, so the allowance cannot be confirmed; revoke it, and give a new one from a call you would approve", ""},
	{queue.ErrAlreadyConfirmer, http.StatusConflict, "already_confirmed", "you are a confirmer of this allowance already; it needs another person", ""},
	{queue.ErrMayNotRevoke, http.StatusForbidden, "may_not_revoke",
		"only the allowance's giver, an operator allowed to approve its tool, or an admin may revoke it; ask one of them", ""},
	{queue.ErrAllowanceEnded, http.StatusConflict, "allowance_ended", "the allowance has ended; it approves nothing more", ""},
	{scope.ErrNoAllowance, http.StatusForbidden, "allowance_not_allowed",
		"this tool does not allow allowances (its tools file entry has no allowance block); approve each call on its own", ""},
	{scope.ErrPasskeyTool, http.StatusForbidden, "allowance_not_allowed",
		"this tool's approvals can require a passkey, and such a tool is never covered by an allowance; approve each call on its own", ""},
	{scope.ErrToolMismatch, http.StatusConflict, "tool_changed",
		"the call was made under another definition of the tool; nothing was given. Reload the call: it can no longer be the base of an allowance", ""},
	{scope.ErrUses, http.StatusBadRequest, "allowance_uses",
		fmt.Sprintf("choose how many calls the allowance covers: at least 1 and at most the tool's max_uses (never above %d)", tools.MaxAllowanceUses), ""},
	{scope.ErrUntil, http.StatusBadRequest, "allowance_until",
		"choose when the allowance ends: after now and within the tool's max_for", ""},
	{scope.ErrNotVariable, http.StatusBadRequest, "allowance_not_variable",
		"only the members the tool lists under allowance: vary may differ, an integer by a maximum and an enum by a subset, and only when the base call has them; keep the others equal", ""},
	{scope.ErrAboveMaximum, http.StatusBadRequest, "allowance_above_maximum",
		"the maximum you typed is above what the tool's schema allows; type a smaller one", ""},
	{scope.ErrNotInEnum, http.StatusBadRequest, "allowance_not_in_enum",
		"choose values only from the member's enum in the tool's schema", ""},
	{scope.ErrBaseOutside, http.StatusBadRequest, "allowance_excludes_base",
		"the allowance would not cover the call it is given from: the maximum must be at least its value, the subset must hold its value, the prefix must start its target", ""},
	{scope.ErrMalformed, http.StatusBadRequest, "invalid_scope",
		"the scope is not a canonical scope as described in docs/allowances.md; send the scope exactly as the console wrote it", ""},
	{queue.ErrDelegationNotFound, http.StatusNotFound, "delegation_not_found", "no delegation has that id; your account page lists the delegations you gave and received", ""},
	{queue.ErrSelfDelegation, http.StatusBadRequest, "self_delegation", "a delegation goes to another person; choose someone else, or approve as yourself", ""},
	{queue.ErrMutualDelegation, http.StatusConflict, "mutual_delegation",
		"that person delegates to you now; a delegation cannot go both ways. End theirs first, or choose someone else", ""},
	{queue.ErrDelegationExists, http.StatusConflict, "delegation_exists",
		"that delegation is live already; to change when it ends, end it on the account page and give it again", ""},
	{queue.ErrDelegationWindow, http.StatusBadRequest, "delegation_window",
		"choose when the delegation ends: after now and at most 14 days from now", ""},
	{queue.ErrTooManyDelegations, http.StatusTooManyRequests, "too_many_delegations",
		fmt.Sprintf("a person has at most %d live delegations, given and received together; end one that is no longer needed on your account page", queue.MaxDelegationsPerPerson), ""},
	{queue.ErrMayNotDelegate, http.StatusForbidden, "may_not_delegate",
		"only the delegator (or an admin on their behalf) gives a delegation, and only its two people or an admin end it", ""},
	{queue.ErrNotDelegated, http.StatusConflict, "delegation_ended",
		"no live delegation lets you approve for that person (it ended, ran out, or an account was disabled); nothing was approved. Reload the page and approve as yourself, or ask for a new delegation", ""},
	{queue.ErrDelegationOutlived, http.StatusBadRequest, "delegation_outlived",
		"what a delegate gives for someone ends no later than the delegation; choose an earlier end", ""},
}

// Of maps any error to the API's status, code and message; an error
// it does not know is a 500 that says nothing was changed. The HTTP error
// handler, the console's pages and the control socket all answer with it.
func Of(err error) *Error {
	var (
		ae *Error
		pd *queue.PolicyDeniedError
		fz *queue.FrozenError
		pe *queue.ProposalError
		de *queue.DeniedError
		cd *queue.CounteredError
		cp *queue.CounterDeniedError
		ad *queue.AudienceError
		np *queue.NotPendingError
		ps *queue.PlanStateError
		nd *queue.DeciderError
		na *queue.AdminError
		oe *queue.OwnerError
		sp *queue.SamePersonError
		ar *queue.ApproversError
		fe *queue.FilterError
		ie *queue.IntegrityError
		ce *queue.ConfirmationError
		af *queue.NotApprovableFromError
		ea *queue.AllowanceEndedError
		in *account.InputError
		sh *account.ShadowError
		fn *queue.NameError
		le *tools.LintError
		qe *tools.QuarantineError
	)
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &pd):
		return &Error{Status: http.StatusForbidden, Code: "denied_by_policy", CallID: pd.CallID, Reason: pd.Reason,
			Message: fmt.Sprintf("rule %s of this console denied the call: %s. Do not retry it as it is; change the call or ask a person.", pd.Rule, pd.Reason)}
	case errors.As(err, &fz):
		return &Error{Status: http.StatusServiceUnavailable, Code: "frozen", Reason: fz.Freeze.Reason,
			Message: fmt.Sprintf("%s is frozen by an operator since %s: %s. Nothing is approved or run until it is lifted; wait, or ask a person.",
				fz.Freeze.Scope(), fz.Freeze.At.UTC().Format(time.RFC3339), fz.Freeze.Reason)}
	case errors.As(err, &pe):
		return proposalError(pe)
	case errors.As(err, &de):
		return &Error{Status: http.StatusConflict, Code: "previously_denied", CallID: de.CallID, Reason: de.Reason,
			Message: fmt.Sprintf("an operator denied this exact call at %s: %s. Change the call or ask a person before trying again.",
				de.At.UTC().Format(time.RFC3339), de.Reason)}
	case errors.As(err, &cd):
		return &Error{Status: http.StatusConflict, Code: "previously_countered", CallID: cd.CallID, CounteredBy: cd.CounterID,
			Message: fmt.Sprintf("an operator answered this exact call at %s with an edited one, %s. Accept it (POST /api/v1/calls/%s/accept) or decline it (cancel) instead of proposing this call again.",
				cd.At.UTC().Format(time.RFC3339), cd.CounterID, cd.CounterID)}
	case errors.As(err, &cp):
		return &Error{Status: http.StatusForbidden, Code: "counter_denied_by_policy", Reason: cp.Reason,
			Message: fmt.Sprintf("rule %s denies the edited call: %s. Nothing was changed; the call stays pending. Edit it otherwise, or approve or deny it as it is.", cp.Rule, cp.Reason)}
	case errors.As(err, &ad):
		return New(http.StatusForbidden, "audience_not_allowed", "%s", ad.Message())
	case errors.As(err, &ps):
		return New(http.StatusConflict, "plan_not_pending", "the plan is %s; nothing was changed. Read it (GET /api/v1/plans/{id}) to see its items' state", ps.Status)
	case errors.As(err, &np):
		return New(http.StatusConflict, "not_pending", "%s", np.Message())
	case errors.As(err, &nd) && nd.Found && nd.Disabled:
		return New(http.StatusForbidden, "not_a_decider",
			"not an enabled operator or admin: %q is disabled; use an enabled operator's name", nd.Operator)
	case errors.As(err, &nd) && nd.Found:
		role := "has no role"
		if nd.Role != "" {
			role = "is an " + string(nd.Role)
		}
		return New(http.StatusForbidden, "not_a_decider",
			"not an enabled operator or admin: %q %s, and only operators and admins decide; use an enabled operator's name", nd.Operator, role)
	case errors.As(err, &nd):
		return New(http.StatusForbidden, "not_a_decider",
			"not an enabled operator or admin: %q; add the account with 'console user add NAME --role operator' or use an enabled operator's name", nd.Operator)
	case errors.As(err, &oe) && oe.Resolving:
		return New(http.StatusForbidden, "owner",
			"you own the agent that proposed this call (owner %s), so you cannot resolve it; ask an operator who does not run it", reveal.String(oe.Owner))
	case errors.As(err, &na):
		return New(http.StatusForbidden, "not_an_admin", "only an enabled admin lifts a freeze, and %q is not one; ask an admin", na.Operator)
	case errors.As(err, &oe):
		return New(http.StatusForbidden, "owner",
			"you own the agent that proposed this call (owner %s), so you cannot approve it; ask an operator who does not run it", reveal.String(oe.Owner))
	case errors.As(err, &sp):
		return New(http.StatusConflict, "already_approved",
			"you approved this call already as %s: one person's approval counts once toward its quorum, under any of their accounts; ask another operator", reveal.String(sp.Other))
	case errors.As(err, &ar):
		return New(http.StatusForbidden, "not_an_approver", "only %s may approve this tool's calls; ask one of them", reveal.String(ar.Who))
	case errors.As(err, &ie):
		return New(http.StatusInternalServerError, "integrity",
			"STOP: the stored record of call %s does not match its digest (%s). Do not approve it: the database was edited. An administrator should run console audit verify.", ie.ID, ie.What)
	case errors.As(err, &ce):
		return New(http.StatusConflict, "confirmation_mismatch",
			"to approve, type %s exactly as shown (%q) in the call page's field, or pass it with --confirm to console approve; nothing was approved", ce.Describe, ce.Want)
	case errors.As(err, &af):
		return New(http.StatusForbidden, "not_approvable_from",
			"%s's calls are approved only through %s (approve_from in the tools file), not through %s; open the call in the console", af.Tool, strings.Join(af.Allowed, ", "), af.Channel)
	case errors.As(err, &ea):
		return New(http.StatusConflict, "allowance_ended", "allowance %s has ended (%s); it approves nothing more", ea.ID, endedWhy(ea.Reason))
	case errors.As(err, &fe):
		return New(http.StatusBadRequest, "bad_filter", "invalid history filter: %s", fe.Reason)
	case errors.As(err, &in):
		return New(http.StatusBadRequest, "invalid_"+in.Field, "%s", in.Message)
	case errors.As(err, &fn) && fn.Invalid:
		return New(http.StatusBadRequest, "invalid_"+fn.Field, "%s", fn.Message())
	case errors.As(err, &fn):
		return New(http.StatusUnprocessableEntity, "unknown_"+fn.Field, "%s", fn.Message())
	case errors.As(err, &le):
		return New(http.StatusUnprocessableEntity, "invalid_tools_file", "%s", le.Error())
	case errors.As(err, &qe):
		return New(http.StatusConflict, "quarantined", "%s cannot be mirrored: %s", qe.Tool, strings.Join(qe.Reasons, "; "))
	case errors.As(err, &sh):
		return New(http.StatusConflict, "name_taken", "%s", sh.Message())
	}
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			msg := s.message
			if msg == "" {
				// The error's own text says it for people already.
				_, msg, _ = strings.Cut(s.err.Error(), ": ")
			}
			return &Error{Status: s.status, Code: s.code, Message: msg, Hint: s.hint}
		}
	}
	return New(http.StatusInternalServerError, "internal", "internal error; nothing was changed")
}

func proposalError(pe *queue.ProposalError) *Error {
	ae := &Error{Problems: pe.Problems}
	switch pe.Kind {
	case queue.KindParse:
		ae.Status, ae.Code = http.StatusBadRequest, pe.Problems[0].Code
		if ae.Code == canonical.CodeTooLarge {
			ae.Status = http.StatusRequestEntityTooLarge
		}
		ae.Message = pe.Problems[0].Message
	case queue.KindUnknownTool:
		ae.Status, ae.Code = http.StatusUnprocessableEntity, "unknown_tool"
		ae.Message = pe.Problems[0].Message
	default:
		ae.Status, ae.Code = http.StatusUnprocessableEntity, "invalid_arguments"
		if len(pe.Problems) == 1 {
			ae.Message = "1 problem in the proposal"
		} else {
			ae.Message = fmt.Sprintf("%d problems in the proposal", len(pe.Problems))
		}
	}
	return ae
}

// endedWhy says why an allowance ended, for people.
func endedWhy(reason string) string {
	switch reason {
	case queue.EndRevoked:
		return "revoked"
	case queue.EndToolChanged:
		return "the tool's definition changed"
	case queue.EndConfirmerDisabled:
		return "a confirmer was disabled or can no longer approve the tool"
	case queue.EndExpired:
		return "its time ran out"
	case queue.EndUsedUp:
		return "it approved every call it could"
	}
	return "ended"
}
