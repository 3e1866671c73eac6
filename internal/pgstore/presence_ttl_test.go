package pgstore

import (
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"slices"
	"testing"
	"time"
)

// TestPresenceLifetimeIsBounded: the lifetime a message states is kept
// as stated up to presenceMaxTTL refreshes and cut to that beyond, a huge
// one (285 years) and one whose conversion to a duration would overflow
// included; a message stating none gets the default, and one stating a
// negative lifetime is not read.
func TestPresenceLifetimeIsBounded(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	bound := presenceMaxTTL * DefaultPresenceRefresh // 150 s
	tests := []struct {
		name string
		ttl  int64
		want time.Duration // 0: the message is not read
	}{
		{"as a replica states it", (presenceTTL * DefaultPresenceRefresh).Milliseconds(), presenceTTL * DefaultPresenceRefresh},
		{"just under the bound", bound.Milliseconds() - 1, bound - time.Millisecond},
		{"285 years", 9e12, bound},
		{"overflowing a duration", math.MaxInt64, bound},
		{"wrapping to under a millisecond", 18446744073710, bound}, // × 1e6 ns wraps to 448384 ns
		{"none stated", 0, presenceTTL * DefaultPresenceRefresh},
		{"negative", -1, 0},
		{"most negative", math.MinInt64, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := start
			p := newPresence(nil, slog.New(slog.NewTextHandler(io.Discard, nil)), 0)
			p.now = func() time.Time { return now }
			msg, _ := json.Marshal(presenceMsg{Replica: "other", TTL: tt.ttl, Views: map[string][]string{"call_1": {"bob"}}})
			p.receive(string(msg))
			if tt.want == 0 {
				if got := p.Others("call_1"); len(got) != 0 {
					t.Fatalf("viewers %v from a message with TTL %d, want none", got, tt.ttl)
				}
				return
			}
			p.mu.Lock()
			expires := p.remote["call_1"]["other"].expires
			p.mu.Unlock()
			if got := expires.Sub(start); got != tt.want {
				t.Fatalf("TTL %d kept %s, want %s", tt.ttl, got, tt.want)
			}
			now = start.Add(tt.want - time.Millisecond)
			p.expire()
			if got := p.Others("call_1"); !slices.Equal(got, []string{"bob"}) {
				t.Fatalf("just before the lifetime: viewers %v, want [bob]", got)
			}
			now = start.Add(tt.want)
			p.expire()
			if got := p.Others("call_1"); len(got) != 0 {
				t.Fatalf("at the end of the lifetime: viewers %v, want none", got)
			}
		})
	}
}

// TestPresenceLifetimeBoundFollowsALongerRefresh: a replica refreshing
// less often than the default keeps what its peers (refreshing as it
// does) state, up to presenceMaxTTL of its own refreshes.
func TestPresenceLifetimeBoundFollowsALongerRefresh(t *testing.T) {
	p := newPresence(nil, slog.New(slog.NewTextHandler(io.Discard, nil)), time.Hour)
	if got, want := p.lifetime((presenceTTL * time.Hour).Milliseconds()), presenceTTL*time.Hour; got != want {
		t.Errorf("a peer's own lifetime at an hourly refresh: %s, want %s", got, want)
	}
	if got, want := p.lifetime(math.MaxInt64), presenceMaxTTL*time.Hour; got != want {
		t.Errorf("the bound at an hourly refresh: %s, want %s", got, want)
	}
}
