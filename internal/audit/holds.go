package audit

// Audit kinds of legal holds on the trail's pruning, added and removed by
// an admin (console hold).
const (
	KindHoldAdded   = "hold_added"
	KindHoldRemoved = "hold_removed"
)
