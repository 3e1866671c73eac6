package console

// Presence shares the viewers of call pages between replicas
// (pgstore.Presence).
type Presence interface {
	// Viewing says who has callID's page open on this replica now (nobody
	// when names is empty). It must not block.
	Viewing(callID string, names []string)
	// Others are the names viewing callID's page on other replicas.
	Others(callID string) []string
	// OnChange registers f, called with a call's id when Others of that
	// call may have changed; f does not block.
	OnChange(f func(callID string))
}
