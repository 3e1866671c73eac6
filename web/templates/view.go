// Package templates renders the console's pages and the HTML fragments its
// WebSocket pushes. Components take the view models below; everything that
// came from an agent is a Text, whose segments are always rendered as text.
package templates

import (
	"strconv"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/reveal"
)

// SegKind says how a segment of agent text is shown (reveal.SegKind).
type SegKind = reveal.SegKind

// Segment kinds.
const (
	SegText   = reveal.SegText
	SegEscape = reveal.SegEscape
	SegBreak  = reveal.SegBreak
	SegMixed  = reveal.SegMixed
)

// Seg is one piece of a Text.
type Seg = reveal.Seg

// Text is a string from an agent, split by internal/reveal so that nothing
// in it can hide.
type Text = reveal.Text

// Plain returns a Text of trusted text with no escapes.
func Plain(s string) Text { return Text{Segs: []Seg{{Kind: SegText, S: s}}} }

// Warning is one field of a call that holds deceptive characters.
type Warning struct {
	Where string   // e.g. "target", "args /to/0/name (key)"
	Kinds []string // what was found there
	// Preview, for text with a bidirectional control, is how it reads on
	// screen (reveal.Rendered: in display order, to be shown with a
	// left-to-right override); Escaped is the text with its escapes.
	Preview string
	Escaped Text
}

// Viewer is the person looking at a page.
type Viewer struct {
	// Name is how the viewer is shown; Principal, for single sign-on, is
	// the identity decisions record (oidc:{issuer host}/{sub}).
	Name      string
	Principal string
	Role      string
	CanDecide bool
	IsAdmin   bool
	CSRF      string
}

// Page is what every page's layout needs.
type Page struct {
	Title  string
	Viewer *Viewer // nil when nobody is logged in
	Nav    string  // the active nav item: queue, admin
	// WS is the WebSocket path the page connects to, or "".
	WS string
	// Now is when the page was rendered; countdowns start from it.
	Now time.Time
	// Freezes are the freezes in force, shown as a banner on every page.
	Freezes []FreezeBanner
	// FreezesUnknown is set when they could not be read.
	FreezesUnknown bool
	// Refresh, when positive, has the page read itself again every that
	// many seconds and put its [data-follow] part in place when it changed
	// (a page without a socket that follows something that changes; never
	// a timed reload).
	Refresh int
	// Needs counts what waits for people, for a logged-in viewer.
	Needs *Needs
}

// FreezeBanner is one freeze in force.
type FreezeBanner struct {
	Tool, Actor string // "" matches all
	Scope       string
	Reason      string
	By          string
	Since       time.Time
}

// ReplayView is the result of a replay on the admin page.
type ReplayView struct {
	Since        time.Time
	ToolsDigest  string
	Calls        int64
	Elapsed      string
	Rows         []ReplayRow
	Flagged      []ReplayFlagged
	FlaggedTotal int64
}

// ReplayRow is one tool's counts.
type ReplayRow struct {
	Tool                           string
	Calls, ToApprove, ToDeny, Same int64
	EvalErrors                     int64
	Other                          string
}

// ReplayFlagged is a call a person denied, or that failed, which the new
// rules would approve.
type ReplayFlagged struct {
	CallID, Tool, Actor, Why, Rule string
	CreatedAt                      time.Time
}

// LoginView is the login page.
type LoginView struct {
	Page
	CSRF   string
	Name   string
	Error  string
	Notice string
	// Next is where a login goes afterwards (a path on this console).
	Next string
	// SSOName and SSOURL offer single sign-on ("Sign in with SSOName");
	// empty when it is not configured.
	SSOName string
	SSOURL  string
	// Local is who may log in with a password: all, admins-only or off.
	Local string
}

// NoRoleView tells a person who signed on that no group gives them a role.
type NoRoleView struct {
	Page
	Principal string
	Shown     string
	Groups    []string
	// LogoutURL ends the provider's session, so another account can be
	// used; "" when the provider offers none.
	LogoutURL string
}

// ContinueView moves a browser on after single sign-on.
type ContinueView struct {
	Page
	Next string
}

// PasskeyRow is one of the viewer's passkeys on the account page.
type PasskeyRow struct {
	ID         string // credential id, base64url
	Name       string
	CreatedAt  time.Time
	LastUsedAt time.Time
}

// AccountView is the viewer's own account page.
type AccountView struct {
	Page
	Name        string
	Principal   string // "" for local accounts
	Kind        string // local or oidc
	Role        string
	Email       string
	DisplayName string
	Groups      []string
	LoginAt     time.Time
	Method      string
	Passkeys    []PasskeyRow
	// PasskeysOn is false when the console runs without passkeys; RPID
	// is the host they are bound to.
	PasskeysOn bool
	RPID       string
	// WrongHost is set when the page was opened by another host name than
	// the one passkeys are bound to, where browsers refuse them.
	WrongHost bool
	// Fresh is true while the login is recent enough to register a
	// passkey; FreshFor says how recent.
	Fresh    bool
	FreshFor string
	Message  string
	Error    string
	// Delegations are those the viewer gave and received, newest first
	// (docs/team.md); CanDelegate offers the form to give one (a viewer
	// who decides), AsAdmin lets it name another delegator.
	Delegations []DelegationRow
	CanDelegate bool
	AsAdmin     bool
}

// DelegationRow is one delegation on the account page of either of its
// two people.
type DelegationRow struct {
	ID                  string
	Delegator, Delegate Text
	GivenBy             Text
	GivenAt, Until      time.Time
	// State is live, expired, ended or account_disabled; CanEnd offers
	// the End button on a live one.
	State  string
	CanEnd bool
	// Gave is set when the viewer is the delegator.
	Gave bool
}

// DelegationState says a delegation's state in words.
func DelegationState(state string) string {
	switch state {
	case "live":
		return "live"
	case "expired":
		return "ran out"
	case "ended":
		return "ended"
	case "account_disabled":
		return "ended: an account was disabled"
	}
	return state
}

// PasswordView is the page where a local account changes its password.
// Forced is set when an administrator set the password: the account may
// do nothing else until it has chosen its own.
type PasswordView struct {
	Page
	Forced bool
	Error  string
}

// ErrorView is an error page.
type ErrorView struct {
	Page
	Status  int
	Message string
}

// Card is a pending call on the queue page.
type Card struct {
	ID      string
	Tool    Text
	Target  Text
	Actor   Text
	RawTool string // the tool's name, for sorting by tool
	// Risk and Effects are what the call's tool declares (risk empty and
	// no effects when it declares none).
	Risk      string
	Effects   []string
	CreatedAt time.Time
	DecideBy  time.Time
	Received  int
	Required  int
	Deceptive bool
	CanDecide bool
	Now       time.Time
	// Summary is the one-line summary of the call's key arguments, read
	// from what the call's digest covers.
	Summary []SummaryItem
	// Integrity, when set, says that the stored record does not match its
	// digest: the card shows it in place of a summary.
	Integrity string
	// StoredDiffers is set when the stored copy of the arguments differs
	// from what was hashed (the summary shows what was hashed).
	StoredDiffers bool
	// Group names the calls with the same tool, target and actor, which
	// the queue shows under one heading.
	Group string
	// Owned is set when the viewer owns the agent that proposed the call:
	// the card is highlighted, and the viewer cannot approve it.
	Owned bool
}

// SummaryItem is one argument in a card's summary line.
type SummaryItem struct {
	Key   string // the member's pointer without its leading slash
	Value Text   // the value as shown, perhaps cut
	// Money is the formatted amount when the tool shows the integer as
	// money; Value keeps the raw integer.
	Money string
	// Cut is set when Value is the first characters of a longer value of
	// Length characters.
	Cut    bool
	Length int
}

// QueueFilter is the queue's filter and sort as typed.
type QueueFilter struct {
	Sort, Tool, Actor, Target string
	Warn                      bool
	// Risk and Effect keep only calls of tools declaring that risk or
	// that effect.
	Risk, Effect string
}

// Risks and Effects are what the filter offers.
var (
	Risks   = []string{"high", "medium", "low"}
	Effects = []string{"money", "destructive", "external", "production", "read-only"}
)

// RiskRank is the risk's place in the risk sort: high first.
func RiskRank(risk string) string {
	switch risk {
	case "high":
		return "3"
	case "medium":
		return "2"
	case "low":
		return "1"
	}
	return "0"
}

// QueueSort is one way to order the queue.
type QueueSort struct{ Value, Label string }

// QueueSorts are the queue's orders, the default first.
var QueueSorts = []QueueSort{
	{"deadline", "deadline, soonest first"}, {"oldest", "waiting longest first"},
	{"newest", "newest first"}, {"tool", "tool, then deadline"},
	{"risk", "risk, highest first"},
}

// Millis is t in milliseconds since 1970, for the page's script.
func Millis(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

// DOMID is the element id of the card.
func (c Card) DOMID() string { return "call-" + c.ID }

// Block is an (actor, tool) pair stopped by the retry cap.
type Block struct {
	DOMID     string
	Actor     Text
	Tool      Text
	RawActor  string
	RawTool   string
	Count     int
	BlockedAt time.Time
	Deceptive bool
	// CanClear is set for viewers who may clear the block; CSRF is then
	// their form token.
	CanClear bool
	CSRF     string
	Now      time.Time
}

// QueueView is the queue page.
type QueueView struct {
	Page
	// MaxBatch is how many calls one batch review may hold.
	MaxBatch int
	Cards    []Card
	// Plans are the plans waiting for a decision, one card each.
	Plans  []PlanCard
	Blocks []Block
	// BlocksHidden counts the blocks beyond what the page shows.
	BlocksHidden int
	Message      string
	Error        string
	// Connect is set on a console that has no agent token yet: how to
	// connect the first agent.
	Connect *ConnectHelp
	// Filter is the page's filter and sort; Query the same as a URL query
	// ("" for the defaults), which the socket's URL and the cards' links
	// carry; Filtered is set when anything but the sort is set.
	Filter   QueueFilter
	Query    string
	Filtered bool
	// Tools are the tool names the filter offers.
	Tools []string
	// Covered are the calls allowances approved lately, newest first;
	// CoveredMax how many the page keeps, CoveredFor for how long.
	Covered    []CoveredCard
	CoveredMax int
	CoveredFor string
	// Either view shows one page of calls by deadline. List is set for
	// the list view (one line per call), else cards; NextPage is the
	// address of the page after it ("" on the last), Paged is set when
	// the queue has more than one page, ListURL and CardsURL switch
	// between the views, FirstURL is this view's first page.
	List                        bool
	NextPage                    string
	Paged                       bool
	PageSize                    int
	ListURL, CardsURL, FirstURL string
}

// CoveredCard is a call an allowance approved as it arrived, on the
// queue page: never a decision to make, a record to read.
type CoveredCard struct {
	ID                  string
	Tool, Target, Actor Text
	Summary             []SummaryItem
	// Integrity and Deceptive are the card's checks (Card).
	Integrity string
	Deceptive bool
	// Status is the call's status as shown (approved, redeemed, revoked
	// …); At when it was approved.
	Status string
	At     time.Time
	Now    time.Time
	// Allowance approved it in the names of By; Left says what the
	// allowance had left when the card was rendered ("3 of 10 left, until
	// 14:30 UTC", or how it ended), at LeftAt.
	Allowance string
	By        []Text
	Left      string
	LeftAt    time.Time
}

// DOMID is the element id of the covered card.
func (c CoveredCard) DOMID() string { return "covered-" + c.ID }

// ConnectHelp tells a fresh install how an agent connects.
type ConnectHelp struct {
	// BaseURL is the console's address as the browser reached it.
	BaseURL string
	// Audiences are the hosts the tools file names, one per tool, sorted:
	// a token is created for one of them.
	Audiences []string
	// MCP are the MCP endpoints agents may connect to instead, as URLs.
	MCP []string
	// IsAdmin is set when the viewer can create a token on the admin page.
	IsAdmin bool
}

// firstOr returns the first string, or def when there is none.
func firstOr(list []string, def string) string {
	if len(list) == 0 {
		return def
	}
	return list[0]
}

// ArgNode is one value in a call's argument tree.
type ArgNode struct {
	// Key is the member name; nil for the root and for array items.
	Key *Text
	// Index is the position of an array item, or -1.
	Index   int
	Pointer string // JSON Pointer relative to args, "" for the root
	Kind    string // object, array, string, integer, boolean, null
	Value   Text   // the scalar's value as shown
	// Children are an object's members or an array's items, in order.
	Children []ArgNode
	// NotBound marks informational members, which the digest leaves out.
	NotBound bool
	// Money is the formatted amount when the tool shows this integer as
	// money ("USD 12.99"); Value keeps the raw integer.
	Money string
	// Long marks a string long enough to be shown collapsed, with its
	// Length in characters and a "show all"; it is in the page whole.
	Long   bool
	Length int
	// Differs marks, on a batch's review page, a value that is not the
	// same in every call of the batch (or missing from some).
	Differs bool
}

// Viewing is one person with a call's page open.
type Viewing struct {
	Name  string // the account name, which a page compares with its own
	Shown Text
}

// Approval is one operator's approval.
type Approval struct {
	By Text
	// Method is how it was given (queue.Approval.Method): passkey, click,
	// batch, command, policy, allowance.
	Method string
	// Channel is where it arrived (queue.Approval.Channel): web, cli, api.
	Channel string
	// Human is whether a person saw the call (queue.Approval.Human): true,
	// false or unattested.
	Human string
	// Via is the allowance (alw_…) or batch that made the approval; Left
	// says, for an allowance, what it has left now ("3 of 10 left, until
	// 14:30").
	Via, Left string
	At        time.Time
	Comment   *Text // the operator's note, nil for none
	// Passkey is the name of the passkey that signed the approval, nil for
	// an approval by click, from the command line or by rule.
	Passkey *Text
	// For is the person on whose behalf By approved, through a
	// delegation; nil for an approval with By's own standing. The page
	// says "bob, for alice".
	For *Text
}

// TierShown is one escalation tier on a call's page.
type TierShown struct {
	At      time.Time
	Adds    string // "adds group leads; notifies oncall"
	Reached bool
}

func boolString(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// ForChoice is one person a delegate may approve for: the account name
// posted, and the name shown.
type ForChoice struct {
	Name  string
	Shown Text
}

// WhoCan says who may approve the call: "only role admin, except the
// agent's owners".
func (s StatusView) WhoCan() string {
	who := "any operator or admin"
	if s.Approvers != "" {
		who = "only " + s.Approvers
	}
	if len(s.Owners) > 0 {
		who += ", except the agent's owners"
	}
	return who
}

// How says how the approval was given: "with a passkey", "by click", "in
// a batch review", "from the command line", "through the operator API", "by
// rule", "covered by allowance".
func (a Approval) How() string {
	switch a.Method {
	case "passkey":
		return "with a passkey"
	case "click":
		return "by click"
	case "command":
		if a.Channel == "api" {
			return "through the operator API"
		}
		return "from the command line"
	case "policy":
		return "by rule"
	case "batch":
		return "in a batch review"
	case "allowance":
		return "covered by allowance"
	}
	return "through " + a.Method
}

// StatusView is the part of a call's page that changes: status, approvals,
// decision, grant, and the decide controls.
type StatusView struct {
	CallID string
	Status string
	// PlanID is set on an item of a plan, PlanIndex its place (from 0):
	// the item is decided only on its plan's page.
	PlanID    string
	PlanIndex int
	// GrantState is what became of an approved call's grant (live,
	// expired, revoked, redeemed; "" for a call never approved).
	GrantState string
	Digest     string
	Required   int
	Received   int

	// Tool and Target are shown beside the passkey button (browsers show
	// nothing of the call in their own prompt).
	Tool   Text
	Target Text
	// Owners are the owners of the agent's token when the call was made;
	// OwnedByViewer the one that names the viewer ("" when none).
	Owners        []Text
	OwnedByViewer string
	// Approvers says who may approve ("" for any operator who may
	// decide); ViewerMayApprove is false when the condition leaves the
	// viewer out.
	Approvers        string
	ViewerMayApprove bool
	// RequirePasskey is set when every approval must be signed by a
	// passkey; PasskeysOn when the console runs passkeys; ViewerPasskeys
	// counts the viewer's.
	RequirePasskey bool
	PasskeysOn     bool
	ViewerPasskeys int

	Approvals      []Approval
	DecideBy       time.Time
	DecidedAt      time.Time
	GrantExpiresAt time.Time
	DeniedBy       *Text
	DenyReason     *Text
	RedeemedAt     time.Time
	Outcome        string
	OutcomeDetail  *Text
	// RedeemedBy is the id of the token that redeemed the call; LeaseUntil
	// is when its executor's lease ends (or ended).
	RedeemedBy string
	LeaseUntil time.Time
	// Resolution is a person's finding about an unknown outcome; Resolve
	// is the form for one, set when the viewer may record it.
	Resolution *ResolutionShown
	Resolve    *ResolveForm
	// Unresolved is set while the call waits for a person.
	Unresolved bool
	// RevokedBy, RevokeReason and RevokedAt are set when an operator
	// revoked the grant; CanRevoke offers the revoke form (an approved call
	// whose grant is unredeemed and live, to a viewer who may decide).
	RevokedBy    *Text
	RevokeReason *Text
	RevokedAt    time.Time
	CanRevoke    bool

	// Rule is the rule that approved or denied the call, "" when people
	// decide.
	Rule string
	// ToolChanged is set when the tool's definition is no longer the one
	// the call was made under: it can be denied, not approved or run.
	// ToolMadeUnder and ToolHere are the definition digest the call was
	// made under and this console's ("" when this console's tools file has
	// no such tool).
	ToolChanged   bool
	ToolMadeUnder string
	ToolHere      string

	// Decide controls: shown when the viewer may decide and the call is
	// pending.
	CanDecide        bool
	ApprovedByViewer bool
	OwnCall          bool
	// Tiers are the call's escalation tiers, each with when it is (or
	// was) reached and what it adds.
	Tiers []TierShown
	// ApproveFor lists the people who delegated their approvals to the
	// viewer and on whose behalf the viewer may approve this call, when
	// the viewer's own standing is not enough (docs/team.md).
	ApproveFor []ForChoice
	CSRF       string
	// Presented is the page's presentation token, posted with an
	// approval: what the page showed, to whom, and when.
	Presented string
	// Offer, when set, offers "Approve this and more like it".
	Offer *AllowanceOffer
	// Counter, when set, offers "Approve with an edit".
	Counter *CounterOffer
	// Frozen, when set, is the freeze that stops this pending call: no
	// approval is offered while it lasts.
	Frozen *FrozenView
	// Refusal is why a decider is not offered Approve (queue.Standing's
	// Refusal: complete, frozen, tool_changed, own_call, owner,
	// not_approver, approved), "" when they are.
	Refusal string

	// Message explains a refused decision; Notice confirms a decision.
	Message string
	Notice  string
	// Refused is the problem code of a refused decision, and Next what the
	// operator can do about it.
	Refused string
	Next    string
	// Reason is the denial reason the viewer typed, kept when a denial is
	// refused.
	Reason string

	// Confirm, when set, says what must be typed to approve ("the
	// target"); ConfirmExpected is that text as the page shows it.
	Confirm         string
	ConfirmExpected string
	// Warned is set when the call carries a deception warning: approving
	// needs a ticked acknowledgement.
	Warned bool
	// DenyReasons are the tool's preset reasons.
	DenyReasons []string
	// Comment is the approval comment the viewer typed, kept when an
	// approval is refused.
	Comment string
	Now     time.Time
}

// CallView is a call's page.
type CallView struct {
	Page
	ID              string
	Actor           Text
	Audience        Text
	Tool            Text
	Target          Text
	Rationale       *Text
	ToolKnown       bool
	ToolDescription string
	Args            ArgNode
	DigestGroups    []string
	CreatedAt       time.Time
	Warnings        []Warning
	Status          StatusView
	// Canonical is the call {tool, target, args} as canonical JSON, every
	// member included; DigestCommand recomputes the digest from it.
	Canonical     string
	DigestCommand string
	// MCP is set for a call made through the MCP gateway.
	MCP *MCPCallInfo
	// NextURL is the next pending call the viewer may decide, in the
	// queue's order and filter ("" when there is none); QueueURL the queue
	// with that filter.
	NextURL  string
	QueueURL string
}

// CallStatusView is a call's status page: the call as its page shows it,
// read-only, for whoever holds the page's link.
type CallStatusView struct {
	CallView
	// ConsoleURL is the call's page in the console, where operators log
	// in to decide it.
	ConsoleURL string
}

// UserRow is an account on the admin page.
type UserRow struct {
	Name       string // the account's name, for its form's action
	Shown      Text   // the name as shown
	Role       string
	CreatedAt  time.Time
	DisabledAt time.Time
	Self       bool
	// Single sign-on accounts: the principal, and what the provider said
	// at the last login (nil when it said nothing).
	SSO         bool
	Principal   Text
	Email       *Text
	Groups      *Text
	LastLoginAt time.Time
}

// TokenRow is an API token on the admin page.
type TokenRow struct {
	ID        string
	Actor     Text
	Audience  Text
	Owners    *Text // nil when the token names none
	Note      Text
	CreatedAt time.Time
	RevokedAt time.Time
}

// NewToken is a token just created, whose secret is shown once.
type NewToken struct {
	ID, Secret      string
	Actor, Audience Text
}

// AdminView is the admin page.
type AdminView struct {
	Page
	Users    []UserRow
	Tokens   []TokenRow
	NewToken *NewToken
	Message  string
	Error    string
	// ReplayTools and ReplaySince are the replay form's fields as sent.
	ReplayTools string
	ReplaySince string
	Replay      *ReplayView
	// EvidencePack offers the evidence pack form; PackSince and PackUntil
	// are the days it proposes.
	EvidencePack         bool
	PackSince, PackUntil string
}

// joinOr joins items with commas, or says none.
func joinOr(items []string, none string) string {
	if len(items) == 0 {
		return none
	}
	return strings.Join(items, ", ")
}

// roleName names a role, or its absence.
func roleName(r string) string {
	if r == "" {
		return "no role"
	}
	return r
}

// rfc3339 formats a time for machines (datetime attributes, scripts).
func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// when formats a time for people, in UTC.
func when(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

// ago says how long before now t was.
func ago(now, t time.Time) string {
	d := now.Sub(t)
	if d < 0 {
		d = 0
	}
	return span(d) + " ago"
}

// left says how long from now until t.
func left(now, t time.Time) string {
	d := t.Sub(now)
	if d <= 0 {
		return "deadline passed"
	}
	return span(d) + " left"
}

func span(d time.Duration) string { return string(appendSpan(make([]byte, 0, 24), d)) }

// appendSpan appends how long d is, as people read it: "42 s", "3 min 5 s",
// "5 h 12 min", "3 days".
func appendSpan(b []byte, d time.Duration) []byte {
	switch {
	case d < time.Minute:
		return append(strconv.AppendInt(b, int64(d/time.Second), 10), " s"...)
	case d < time.Hour:
		b = append(strconv.AppendInt(b, int64(d/time.Minute), 10), " min "...)
		return append(strconv.AppendInt(b, int64(d%time.Minute/time.Second), 10), " s"...)
	case d < 48*time.Hour:
		b = append(strconv.AppendInt(b, int64(d/time.Hour), 10), " h "...)
		return append(strconv.AppendInt(b, int64(d%time.Hour/time.Minute), 10), " min"...)
	}
	return append(strconv.AppendInt(b, int64(d/(24*time.Hour)), 10), " days"...)
}

func itoa(n int) string { return strconv.Itoa(n) }

// quorum reads "1 of 2".
func quorum(received, required int) string {
	return strconv.Itoa(received) + " of " + strconv.Itoa(required)
}

func joinKinds(k []string) string { return strings.Join(k, ", ") }

// shortDigest is the first and last groups of a digest, for a reminder
// beside the approve button.
func shortDigest(d string) string {
	if len(d) < 16 {
		return d
	}
	return d[:8] + "…" + d[len(d)-8:]
}

func itoa64(n int64) string { return strconv.FormatInt(n, 10) }

func sinceOr(s string) string {
	if s == "" {
		return "7d"
	}
	return s
}

// endedLabel names the time a call left the pending state.
func endedLabel(status string) string {
	switch status {
	case "expired":
		return "Expired at"
	case "cancelled":
		return "Cancelled at"
	}
	return "Decided at"
}

// toolDigests names the definition a call was made under and this
// console's.
func toolDigests(s StatusView) string {
	made := shortDigest(s.ToolMadeUnder)
	if made == "" {
		made = "none recorded"
	}
	if s.ToolHere == "" {
		return "Made under definition " + made + "."
	}
	return "Made under definition " + made + "; this console's is " + shortDigest(s.ToolHere) + "."
}

// BatchView is the review page of several pending calls read together
// before one decision on all of them.
type BatchView struct {
	Page
	Calls []BatchCall
	// Differs names the facts that are not the same in every call of the
	// batch: tool, target, actor, audience.
	Differs map[string]bool
	// Gone are the selected calls that are not offered: no longer pending,
	// or unknown.
	Gone []BatchLine
	CSRF string
	// Presented is the page's presentation token, posted with the
	// decision.
	Presented string
	Error     string
	Reason    string
}

// LeftOut counts the calls a batch approval would leave out, as the page
// can tell.
func (v BatchView) LeftOut() int {
	n := 0
	for _, c := range v.Calls {
		if c.Drops != "" {
			n++
		}
	}
	return n
}

// BatchCall is one call on a batch's review page.
type BatchCall struct {
	CallView
	Digest string
	// Drops says why a batch approval will leave this call out ("" when
	// it will not): it is decided on its own page.
	Drops string
}

// BatchResultView says what a batch decision did.
type BatchResultView struct {
	Page
	Denied  bool
	Reason  string
	Decided []BatchLine
	Dropped []BatchLine
}

// BatchLine is one call in a batch's result: what it is and, for a call
// that dropped out, why and what to do next.
type BatchLine struct {
	ID           string
	Tool, Target Text
	Why          string
}

// AllowanceOffer is what a pending call's page offers under "Approve this
// and more like it": the tool's ceilings and what may vary.
type AllowanceOffer struct {
	CallID  string
	MaxUses int
	// MaxMinutes is the longest an allowance may live, in minutes.
	MaxMinutes int
	// Target is the base call's target; VaryTarget is set when the tool
	// lets the target vary (equal, or a literal prefix).
	Target     string
	VaryTarget bool
	Members    []OfferMember
}

// OfferMember is one args member an allowance may let vary: an integer up
// to a maximum the operator types (at most SchemaMax when HasMax), or an
// enum within a subset of Enum.
type OfferMember struct {
	Pointer   string
	Integer   bool
	SchemaMax int64
	HasMax    bool
	Enum      []string
	// Base is the base call's value as text.
	Base string
}

// AllowanceChoice is what an operator chose, as the forms carry it.
type AllowanceChoice struct {
	Uses         string
	Minutes      string
	Until        string // RFC 3339, fixed once the scope was shown
	TargetPrefix string
	Max          map[string]string   // pointer → typed maximum
	In           map[string][]string // pointer → chosen values
	Repeat       bool
}

// AllowanceReviewView is the review step of giving an allowance: the call
// whole, the scope in words and its digest, and the forms to change the
// choices or approve and give.
type AllowanceReviewView struct {
	Page
	Call   CallView
	Digest string
	Offer  AllowanceOffer
	Choice AllowanceChoice
	// Words and ScopeDigest are set when the choices make a scope.
	Words, ScopeDigest string
	CSRF, Presented    string
	Error              string
	// ErrorList is set when the error is a bound of live allowances: the
	// page links the list, where one may be revoked.
	ErrorList bool
	// Confirm, ConfirmExpected and Warned are the call's approve form's.
	Confirm, ConfirmExpected string
	Warned                   bool
	Comment                  string
}

// AllowanceLine is one allowance as pages list it.
type AllowanceLine struct {
	ID, Tool, Actor, Words, ScopeDigest, Giver string
	Confirmers                                 []string
	ConfirmersNeeded, Uses, Used, Left         int
	Until, GivenAt, EndedAt                    time.Time
	State, EndReason, EndedBy, BaseCall        string
	// CanRevoke is set when the viewer may revoke it (it has not ended).
	CanRevoke bool
}

// Ended reports whether the allowance has ended.
func (a AllowanceLine) Ended() bool { return !a.EndedAt.IsZero() }

// AllowancesView lists allowances, live first.
type AllowancesView struct {
	Page
	Live, Ended []AllowanceLine
	CSRF        string
	Notice      string
	Error       string
}

// AllowanceView is one allowance's page: what it covers, and the forms
// to confirm it (with its base call's approval) or revoke it.
type AllowanceView struct {
	Page
	A AllowanceLine
	// Base is the base call, shown whole when a confirmer also approves
	// it; nil when it is not pending or not shown.
	Base       *CallView
	BaseDigest string
	// CanConfirm is set when the viewer may add their confirmation;
	// NoConfirm says why not, while it waits for confirmers.
	CanConfirm bool
	NoConfirm  string
	// Confirm and ConfirmExpected are what the base call's approval asks
	// to be typed, when the confirmation also approves it.
	Confirm, ConfirmExpected string
	CSRF, Presented          string
	Notice, Error            string
	// Reason is the revocation's reason as typed before a refusal.
	Reason string
}

// targetPrefix is the target prefix field's value: what was typed, else
// the base call's whole target.
func targetPrefix(o AllowanceOffer, ch AllowanceChoice) string {
	if ch.TargetPrefix != "" {
		return ch.TargetPrefix
	}
	return o.Target
}

// stateWords says an allowance's state (queue.Allowance.State) or why it
// ended, in words.
func stateWords(state string) string {
	switch state {
	case "live":
		return "live"
	case "waiting":
		return "waiting for its confirmers"
	case "used_up":
		return "ended: used up"
	case "expired":
		return "ended: its time is up"
	case "revoked":
		return "ended: revoked"
	case "tool_changed":
		return "ended: its tool's definition changed"
	case "confirmer_disabled":
		return "ended: a confirmer may no longer approve"
	}
	return state
}

// joinNames lists names with commas.
func joinNames(names []string) string { return strings.Join(names, ", ") }

// integerHint says what an integer member's maximum may be: the base
// call's value, the schema's maximum, and that empty keeps it equal.
func integerHint(m OfferMember) string {
	h := "this call: " + m.Base
	if m.HasMax {
		h += "; the schema allows at most " + strconv.FormatInt(m.SchemaMax, 10)
	}
	return h + "; leave it empty to keep it equal"
}

// FrozenView is a freeze as a call's page names it: what it matches, why,
// who set it and since when.
type FrozenView struct {
	Scope, Reason, By string
	At                time.Time
}

// StatusLabel is how a call's status reads to people. An approved call
// whose grant ran out unredeemed reads "approved — grant expired
// unredeemed": it stays approved in the record, but it can no longer run.
func StatusLabel(status, grantState string) string {
	if status == "approved" && grantState == "expired" {
		return "approved — grant expired unredeemed"
	}
	return status
}

// PlanView is a plan's page: every item whole, the plan digest, and the
// one decision on all of them.
type PlanView struct {
	Page
	ID           string
	Status       string
	Ordered      bool
	Rationale    Text
	Actor        Text
	DigestGroups []string
	Digest       string
	Items        []PlanItemView
	Required     int
	Received     int
	DecideBy     time.Time
	ValidUntil   time.Time
	MaxFor       string
	Reason       string
	// CanApprove is set when the viewer may approve the plan now; NoApprove
	// says why not (to a person who may decide).
	CanApprove bool
	NoApprove  string
	// CanDecide is set for an operator or admin on a plan still pending;
	// CanRevoke on an approved one.
	CanDecide, CanRevoke bool
	Warned               bool
	// ValidFor are the validities the approver may choose, the longest
	// (the plan's max_for) last and chosen by default.
	ValidFor  []ValidChoice
	CSRF      string
	Presented string
	Error     string
	Message   string
}

// ValidChoice is one validity an approver may give a plan: its value in
// seconds and its words.
type ValidChoice struct {
	Seconds int64
	Words   string
}

// PlanItemView is one item of a plan on its page.
type PlanItemView struct {
	CallView
	Index  int
	Digest string
	// State is the item's status as shown (pending, approved, redeemed,
	// denied, ...).
	State string
	// Confirm and ConfirmExpected are what the item's tool asks to be
	// typed to approve it ("" when nothing).
	Confirm, ConfirmExpected string
}

// PlanCard is one pending plan on the queue.
type PlanCard struct {
	ID        string
	Actor     Text
	Rationale Text
	Items     int
	Tools     []Text
	Ordered   bool
	DecideBy  time.Time
	Warned    bool
}

// followState names where a call stands, for a page that follows it: a
// page replaces its status only when this changes.
func followState(s StatusView) string {
	out := s.Status + "/" + s.GrantState + "/" + s.Outcome + "/" + itoa(s.Received)
	if s.Resolution != nil {
		out += "/resolved"
	}
	return out
}
