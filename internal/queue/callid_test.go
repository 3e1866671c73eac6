package queue

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// Call ids keep their shape ("call_" and 24 of [2-7a-z]), never repeat,
// and sort by the time they were made, so that a new call lands at the end
// of every index keyed by call id.
func TestCallIDsSortByTime(t *testing.T) {
	shape := regexp.MustCompile(`^call_[2-7a-z]{24}$`)
	t0 := time.Date(2026, 12, 1, 14, 0, 0, 0, time.UTC)
	var ids []string
	seen := map[string]bool{}
	for i := range 2000 {
		// Several ids per millisecond, and steps across byte boundaries
		// of the time.
		id := newCallID(t0.Add(time.Duration(i/4) * 255 * time.Millisecond))
		if !shape.MatchString(id) {
			t.Fatalf("id %q has not the shape call_[2-7a-z]{24}", id)
		}
		if seen[id] {
			t.Fatalf("id %q made twice", id)
		}
		seen[id] = true
		ids = append(ids, id)
	}
	for i := 4; i < len(ids); i += 4 {
		if strings.Compare(ids[i-1], ids[i]) >= 0 {
			t.Fatalf("an id made later sorts first: %s (%d) before %s (%d)", ids[i], i, ids[i-1], i-1)
		}
	}
	// Ids of the same millisecond share the 9 characters that encode
	// their time's high 45 bits.
	if a, b := newCallID(t0), newCallID(t0); a[:5+9] != b[:5+9] {
		t.Errorf("ids of one millisecond differ in their time: %s %s", a, b)
	}
	if id := NewCallID(); !shape.MatchString(id) {
		t.Errorf("NewCallID() = %q", id)
	}
}
