package console

import (
	"fmt"
	"testing"
)

// maxAllocsPerPendingCall bounds what each pending call adds to a call
// page: the page reads the queue to link the next call the viewer may
// decide, and may read each call, but must not build a whole card for
// each (its envelope hashed and parsed, its summary and warnings: about
// 300 allocations), since the queue holds up to maxQueueCards calls.
const maxAllocsPerPendingCall = 120

// TestCallPageCostPerPendingCall: the call page's allocations grow with
// the queue by at most maxAllocsPerPendingCall per pending call.
func TestCallPageCostPerPendingCall(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	b := e.browser()
	b.login("olivia", rolePassword)
	body := func(i int) string {
		return fmt.Sprintf(`{"tool":"search.query","target":"index:tickets","args":{"query":"checkout timeout %d","limit":20}}`, i)
	}
	shown := e.submit("agent:support-bot", "search-host", body(0))
	allocs := func() float64 {
		b.get("/calls/" + shown.ID) // connections and caches warm
		return testing.AllocsPerRun(5, func() { b.get("/calls/" + shown.ID) })
	}
	for i := 1; i <= 10; i++ {
		e.submit("agent:support-bot", "search-host", body(i))
	}
	few := allocs()
	const more = 200
	for i := 11; i < 11+more; i++ {
		e.submit("agent:support-bot", "search-host", body(i))
	}
	many := allocs()
	per := (many - few) / more
	t.Logf("call page: %.0f allocations with 11 pending, %.0f with %d: %.1f per pending call", few, many, 11+more, per)
	if per > maxAllocsPerPendingCall {
		t.Errorf("each pending call adds %.1f allocations to a call page, more than %d: the page builds a card for every call in the queue",
			per, maxAllocsPerPendingCall)
	}
}
