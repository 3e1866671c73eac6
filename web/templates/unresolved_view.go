package templates

import "time"

// UnresolvedView is the Unresolved page: redeemed calls whose outcome
// nobody knows (the executor reported unknown, or its lease expired),
// waiting for a person to find out whether they ran.
type UnresolvedView struct {
	Page
	Cards []UnresolvedCard
	// More is set when there are more than the page shows.
	More    bool
	Message string
	Error   string
}

// UnresolvedCard is one call waiting for a person.
type UnresolvedCard struct {
	ID     string
	Tool   Text
	Target Text
	Actor  Text
	// Outcome is unknown or lease_expired; OutcomeDetail the executor's
	// words, if any.
	Outcome       string
	OutcomeDetail *Text
	OutcomeAt     time.Time
	RedeemedAt    time.Time
	LeaseUntil    time.Time
	// RedeemedBy is the id of the API token that redeemed the call.
	RedeemedBy string
	Deceptive  bool
	// Resolve is the form, set when the viewer may resolve the call.
	Resolve *ResolveForm
	// OwnCall is set when the viewer may decide but proposed the call.
	OwnCall bool
	// OwnedByViewer is the owner that names the viewer when the viewer
	// runs the agent (and so may not resolve its call), else "".
	OwnedByViewer string
	Now           time.Time
}

// DOMID is the element id of the card.
func (c UnresolvedCard) DOMID() string { return "unresolved-" + c.ID }

// ResolveForm records what a person found out about a call.
type ResolveForm struct {
	CallID string
	CSRF   string
	// From is the page the form is on (unresolved or call), where the
	// console goes back after it.
	From string
	// Verdict, Note and Evidence are what the viewer typed when a
	// resolution was refused; Error says why.
	Verdict  string
	Note     string
	Evidence string
	Error    string
}

// ResolutionShown is a recorded resolution.
type ResolutionShown struct {
	Verdict string // executed, not_executed
	By      Text
	Note    Text
	// Evidence is the link as recorded, shown as text; EvidenceURL is set
	// only when it is an http(s) URL that may be a link.
	Evidence    *Text
	EvidenceURL string
	At          time.Time
}

// LifeStep is one fact of a call's life on its timeline: proposed,
// decided, grant minted, redeemed, outcome or lease expired, resolved, or
// that no redemption was accepted.
type LifeStep struct {
	// Kind names the step for tests and styles: proposed, decided,
	// granted, redeemed, refused, outcome, lease_extended, lease_expired,
	// resolved, not_redeemed, pending.
	Kind  string
	Title string
	// Seq is the audit entry the step comes from (0 for a conclusion drawn
	// from all of them).
	Seq   int64
	Time  time.Time
	Facts []Fact
	// Warn marks a step a person should look at.
	Warn bool
}

func verdictWords(v string) string {
	switch v {
	case "executed":
		return "it was executed"
	case "not_executed":
		return "it was not executed"
	}
	return v
}

func outcomeWords(o string) string {
	switch o {
	case "lease_expired":
		return "lease expired: nobody reported an outcome in time"
	case "unknown":
		return "unknown: the executor could not tell whether it ran"
	}
	return o
}
