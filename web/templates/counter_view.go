package templates

// CounterOffer is what a pending call's page offers under "Approve with an
// edit": the members its tool lets an operator change, each with the
// call's value.
type CounterOffer struct {
	CallID  string
	Members []CounterMember
}

// CounterMember is one member a counter-proposal may change: "target" or
// a JSON Pointer into args. Value is the call's value as the form shows
// it: a string member as its text, any other as JSON; Absent is set when
// the call leaves an optional member out.
type CounterMember struct {
	Pointer string
	Value   string
	String  bool
	Absent  bool
}

// Field is the form field name of the member's new value.
func (m CounterMember) Field() string { return "set:" + m.Pointer }

// Label names the member in the form.
func (m CounterMember) Label() string {
	if m.Pointer == "target" {
		return "Target"
	}
	return m.Pointer
}

// CounterChange is one member an edit changes, old and new value as the
// review shows them (absent shows as "absent").
type CounterChange struct {
	Pointer  string
	Old, New string
}

// CounterProblem is one problem of an edit: the member it names (a
// pointer from the proposal's root, /args/amount_minor or /target) and
// what to do.
type CounterProblem struct {
	Path, Message string
}

// CounterView is the page of a counter-proposal of a pending call: the
// edit form with what was typed and every problem of it, and, when the
// edit is a valid call, the review: each change old → new, the new digest
// and the form that approves the edited call.
type CounterView struct {
	Page
	Call  CallView
	Offer CounterOffer
	// Typed is what the operator typed, by form field.
	Typed    map[string]string
	Problems []CounterProblem
	Error    string
	// Changes, NewDigest and Presented are set when the edit is a valid
	// call: the review.
	Changes   []CounterChange
	NewDigest string
	// NewDigestGroups is NewDigest in groups of four, as pages show a
	// digest.
	NewDigestGroups []string
	Digest          string
	CSRF            string
	Presented       string
	// Forwarded is set when the edit needs a second person's approval
	// because the MCP gateway would run it unseen and it does not only
	// narrow the call.
	Forwarded bool
	// Confirm and ConfirmExpected are what the tool asks to be typed to
	// approve the edited call, and Warned its deception warning, as on a
	// call's approve form.
	Confirm, ConfirmExpected string
	Warned                   bool
}

// TypedValue is what the form shows for m: what was typed, else the
// call's value.
func (v CounterView) TypedValue(m CounterMember) string {
	if s, ok := v.Typed[m.Field()]; ok {
		return s
	}
	return m.Value
}

// ProblemOf is the problems of member m, by their path.
func (v CounterView) ProblemOf(m CounterMember) []string {
	path := "/args" + m.Pointer
	if m.Pointer == "target" {
		path = "/target"
	}
	var out []string
	for _, p := range v.Problems {
		if p.Path == path || len(p.Path) > len(path) && p.Path[:len(path)+1] == path+"/" {
			out = append(out, p.Message)
		}
	}
	return out
}
