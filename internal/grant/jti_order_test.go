package grant

import (
	"testing"
	"time"
)

// TestJTIsSortByTime: a grant id made later sorts after one made earlier
// (from one millisecond to the next), keeps the shape redemption checks
// (32 lowercase hex digits), and ids made within one millisecond differ.
func TestJTIsSortByTime(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	seen := map[string]bool{}
	prev := ""
	for i := range 2000 {
		now := at.Add(time.Duration(i/4) * time.Millisecond)
		id := newJTI(now)
		if !isJTI(id) {
			t.Fatalf("id %q is not 32 lowercase hex digits", id)
		}
		if seen[id] {
			t.Fatalf("id %q made twice", id)
		}
		seen[id] = true
		if i%4 == 0 && prev != "" && id <= prev {
			t.Fatalf("id %q made at %v sorts before %q, made a millisecond earlier", id, now, prev)
		}
		prev = id
	}
}
