// Package notify tells people about calls where they are: webhooks in the
// Standard Webhooks format, Slack, email and Web Push. Nothing it sends is a
// decision: every message links to the call in the console, where the
// operator approves with the digest they were shown.
//
// Delivery runs through a transactional outbox. The transaction that changes
// a call also writes one row per channel that should hear of it (see
// Router); after commit, a Dispatcher claims due rows, sends them and
// records the result, retrying with exponential backoff and jitter for up to
// a day before marking a row dead. A crash at any point loses nothing and at
// most repeats a delivery, which receivers recognise by the event id.
// Reminders and escalations are rows written at submission with a later due
// time, delivered only if the call is still pending by then.
package notify

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/account"
)

// Event types. Receivers filter on these; they are part of the public
// contract.
const (
	CallSubmitted = "call.submitted"
	CallApproved  = "call.approved" // every required approval received; a grant was minted
	CallDenied    = "call.denied"
	CallExpired   = "call.expired"
	CallCancelled = "call.cancelled"
	// CallCountered: an operator answered the call with an edited one, its
	// counter-proposal (data.countered_by), which waits for the agent.
	CallCountered = "call.countered"
	CallRedeemed  = "call.redeemed"
	CallOutcome   = "call.outcome"
	// CallLeaseExpired: the executor neither reported an outcome nor sent a
	// heartbeat within the tool's outcome_within; a person must find out
	// whether the call ran.
	CallLeaseExpired = "call.lease_expired"
	// CallResolved: a person recorded whether a call of unknown outcome ran.
	CallResolved     = "call.resolved"
	CallEscalated    = "call.escalated" // still pending after the tool's escalate_after
	CallReminder     = "call.reminder"  // still pending shortly before decide_by
	ToolReviewNeeded = "tool.review_needed"
	// AllowanceGiven: an operator gave an allowance (docs/allowances.md);
	// AllowanceEnded: one ended (used up, expired, revoked, its tool
	// changed, a confirmer may no longer approve), data.reason says which.
	AllowanceGiven = "allowance.given"
	AllowanceEnded = "allowance.ended"
	// PlanSubmitted: an agent proposed a plan, a list of calls approved
	// once (docs/plans.md); PlanDecided: a person approved it (its items
	// may now be minted until data.plan.valid_until) or denied it
	// (data.decision).
	PlanSubmitted = "plan.submitted"
	PlanDecided   = "plan.decided"
)

// Kinds lists every event type, in the order of a call's life.
var Kinds = []string{CallSubmitted, CallEscalated, CallReminder, CallApproved, CallDenied, CallExpired,
	CallCancelled, CallCountered, CallRedeemed, CallOutcome, CallLeaseExpired, CallResolved, ToolReviewNeeded, AllowanceGiven, AllowanceEnded,
	PlanSubmitted, PlanDecided}

func knownKind(k string) bool {
	for _, x := range Kinds {
		if x == k {
			return true
		}
	}
	return false
}

// Decided reports whether an event of this type ends a call's wait for a
// decision, so a message announcing the call can be updated.
func Decided(kind string) bool {
	switch kind {
	case CallApproved, CallDenied, CallExpired, CallCancelled, CallCountered, CallRedeemed, CallOutcome, CallLeaseExpired, CallResolved:
		return true
	}
	return false
}

// Event is what every channel delivers: the JSON body of a webhook, and the
// source of Slack, email and push messages. Its shape follows the Standard
// Webhooks payload (type, timestamp, data) with the event id beside them.
type Event struct {
	ID        string `json:"id"`
	Type      string `json:"type"`
	Timestamp string `json:"timestamp"` // RFC 3339, when the event happened
	Data      Data   `json:"data"`
}

// Data describes the call (or the tool) the event is about.
type Data struct {
	// ID is the call's id; empty for tool events.
	ID       string `json:"id,omitempty"`
	Tool     string `json:"tool"`
	Target   string `json:"target,omitempty"`
	Actor    string `json:"actor,omitempty"`
	Audience string `json:"audience,omitempty"`
	Digest   string `json:"digest,omitempty"`
	// Risk and Effects are what the tools file declares for the call's
	// tool (risk low, medium or high); absent when it declares none.
	Risk    string   `json:"risk,omitempty"`
	Effects []string `json:"effects,omitempty"`
	Status  string   `json:"status,omitempty"`
	// CreatedAt and DecideBy are RFC 3339 times.
	CreatedAt string `json:"created_at,omitempty"`
	DecideBy  string `json:"decide_by,omitempty"`
	// URL opens the call (or the tool's review) in the console. It carries
	// no secret: the console asks the reader to log in.
	URL       string     `json:"url"`
	Approvals *Approvals `json:"approvals,omitempty"`
	Decision  *Decision  `json:"decision,omitempty"`
	Outcome   *Outcome   `json:"outcome,omitempty"`
	// Resolution is set on call.resolved: what the person found.
	Resolution *Resolution `json:"resolution,omitempty"`
	// CounteredBy is set on call.countered: the id of the counter-proposal.
	CounteredBy string `json:"countered_by,omitempty"`
	// LeaseUntil is set on call.lease_expired: when the executor's lease
	// ended (RFC 3339).
	LeaseUntil string `json:"lease_until,omitempty"`
	// EscalatedAfter is set on call.escalated: how long the call had waited,
	// in seconds.
	EscalatedAfter int64 `json:"escalated_after,omitempty"`
	// Reason says why a tool needs review, or why an allowance ended
	// (used_up, expired, revoked, tool_changed, confirmer_disabled).
	Reason string `json:"reason,omitempty"`
	// Allowance is set on allowance events: which, what it covers, who
	// gave and confirmed it, and how much of it is used.
	Allowance *Allowance `json:"allowance,omitempty"`
	// Plan is set on plan events: the plan's id (data.id is it too), how
	// many items it holds, whether they run in order, and until when an
	// approved plan's items may be minted.
	Plan *PlanData `json:"plan,omitempty"`
	// Args are the call's arguments as canonical JSON, present only on
	// channels configured with include_args.
	Args json.RawMessage `json:"args,omitempty"`
}

// PlanData is a plan on a plan event.
type PlanData struct {
	ID         string   `json:"id"`
	Items      int      `json:"items"`
	Tools      []string `json:"tools"`
	Ordered    bool     `json:"ordered"`
	ValidUntil string   `json:"valid_until,omitempty"`
}

// RiskLine is the risk and effects for people ("high risk · destructive"),
// empty when the tool declares none.
func (d Data) RiskLine() string {
	var parts []string
	if d.Risk != "" {
		parts = append(parts, visible(d.Risk)+" risk")
	}
	for _, e := range d.Effects {
		parts = append(parts, visible(e))
	}
	return strings.Join(parts, " · ")
}

// Allowance is an allowance as events describe it. Giver and Confirmers
// identify people as Approvals.By does; GiverName is how people see the
// giver (see Named).
type Allowance struct {
	ID          string   `json:"id"`
	ScopeDigest string   `json:"scope_digest"`
	Giver       string   `json:"giver"`
	GiverName   string   `json:"giver_name,omitempty"`
	Confirmers  []string `json:"confirmers"`
	Uses        int      `json:"uses"`
	Used        int      `json:"used"`
	// Until is when it ends, whatever is left (RFC 3339).
	Until string `json:"until"`
	// EndedBy is who ended it: a person, or console when it ended by
	// itself; empty on allowance.given.
	EndedBy string `json:"ended_by,omitempty"`
}

// Approvals counts a call's approvals.
type Approvals struct {
	Required int `json:"required"`
	Received int `json:"received"`
	// By identifies each approver as the audit trail records them: a local
	// account's name, a single-sign-on operator's principal
	// (oidc:HOST/SUB), or policy:RULE.
	By []string `json:"by,omitempty"`
	// ByName is By as people see them, in the same order (see Named).
	ByName []string `json:"by_name,omitempty"`
}

// Decision is who ended the call and why: an operator's denial, or the
// console for an expiry.
type Decision struct {
	// By identifies who decided, as Approvals.By does (or console, or the
	// agent's actor when it withdrew the call); ByName is how people see
	// them.
	By     string `json:"by"`
	ByName string `json:"by_name,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// Outcome is what the executor reported.
type Outcome struct {
	Status string `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// Resolution is a person's finding about a call of unknown outcome:
// verdict executed or not_executed.
type Resolution struct {
	Verdict string `json:"verdict"`
	// By identifies the person as Approvals.By does; ByName is how people
	// see them.
	By       string `json:"by"`
	ByName   string `json:"by_name,omitempty"`
	Note     string `json:"note"`
	Evidence string `json:"evidence,omitempty"`
}

// Named sets the by_name fields beside every by of the event's data: the
// people it names as name says people see them (account.PublicNames: a
// single-sign-on operator by their provider user name, else display name
// and " (single sign-on)", else "(single sign-on user)"; never by their
// principal). It reports whether it set any.
func (ev *Event) Named(name func(string) string) bool {
	d, set := &ev.Data, false
	if a := d.Approvals; a != nil && len(a.By) > 0 {
		a.ByName = make([]string, len(a.By))
		for i, by := range a.By {
			a.ByName[i] = name(by)
		}
		set = true
	}
	if d.Decision != nil {
		d.Decision.ByName, set = name(d.Decision.By), true
	}
	if d.Resolution != nil {
		d.Resolution.ByName, set = name(d.Resolution.By), true
	}
	if d.Allowance != nil {
		d.Allowance.GiverName, set = name(d.Allowance.Giver), true
	}
	return set
}

// HidePrincipals names a single-sign-on principal account.UnnamedSSO and
// leaves every other name as it is: how people are named where no account
// can be read.
func HidePrincipals(name string) string {
	if strings.HasPrefix(strings.ToLower(name), account.OIDCPrefix) {
		return account.UnnamedSSO
	}
	return name
}

// shown is how a message names a person: by_name, else the identifier with
// any principal hidden. A name that holds what separates the names of a
// list from each other (", ", ";") or from a reason (": "), or a double
// quote, is quoted: a display name is whatever the identity provider sends,
// and "olivia, mallory" must not read as a local operator olivia among the
// approvers.
func shown(by, byName string) string {
	name := byName
	if name == "" {
		name = HidePrincipals(by)
	}
	if strings.ContainsAny(name, `,;"`) || strings.Contains(name, ": ") {
		return `"` + nameQuoter.Replace(name) + `"`
	}
	return name
}

var nameQuoter = strings.NewReplacer(`\`, `\\`, `"`, `\"`)

// ParseEvent reads an event body written by a Router.
func ParseEvent(body []byte) (Event, error) {
	var ev Event
	if err := json.Unmarshal(body, &ev); err != nil {
		return ev, fmt.Errorf("notify: event body does not parse: %w", err)
	}
	if ev.ID == "" || !knownKind(ev.Type) {
		return ev, fmt.Errorf("notify: event body has no id or an unknown type %q", ev.Type)
	}
	return ev, nil
}

// Time returns the event's timestamp.
func (ev Event) Time() time.Time {
	t, _ := time.Parse(time.RFC3339Nano, ev.Timestamp)
	return t
}

// DigestGroup is the first group of four hex digits of the digest, as the
// console shows it, for messages too short for the whole digest.
func (d Data) DigestGroup() string {
	if len(d.Digest) < 4 {
		return d.Digest
	}
	return d.Digest[:4]
}

var idEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// NewEventID returns a random event id such as "evt_k2j4…".
func NewEventID() string {
	var b [15]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return "evt_" + strings.ToLower(idEncoding.EncodeToString(b[:]))
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}
