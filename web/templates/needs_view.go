package templates

// Needs is what waits for people, counted for the navigation of every
// page: the pending calls, those of them whose deadline is near, the
// blocked agents and the outcomes nobody has resolved.
type Needs struct {
	Pending    int
	Due        int // pending calls whose deadline is within DueWithin
	Blocked    int
	Unresolved int
	// DueWithin says how near "due soon" is, for people ("10 min").
	DueWithin string
	// CanDecide is the viewer's: a decider reads "to decide", anyone
	// else "pending".
	CanDecide bool
	// Unknown is set when the counts could not be read.
	Unknown bool
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return itoa(n) + " " + many
}
