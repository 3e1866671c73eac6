package audit

import "time"

// OnHandled makes w call fn after each request its loop handled, with
// whether it verified; the Watcher's tests, in package audit_test, wait on
// it instead of on time passing.
func OnHandled(w *Watcher, fn func(verified bool)) { w.handled = fn }

// SetLastTook makes w believe its last verification took d.
func SetLastTook(w *Watcher, d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last.Took = d
}
