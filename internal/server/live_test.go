package server

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// fakeLive is a replica's listener whose state the test sets.
type fakeLive struct {
	up         atomic.Bool
	reconnects atomic.Int64
}

func (f *fakeLive) Connected() bool   { return f.up.Load() }
func (f *fakeLive) Reconnects() int64 { return f.reconnects.Load() }

// While the listener for other replicas' changes is disconnected,
// /healthz answers 503 degraded and the metrics say so.
func TestHealthzLiveListener(t *testing.T) {
	live := &fakeLive{}
	live.up.Store(true)
	st := startAPIStackIn(t, t.TempDir(), func(c *Config) { c.Live = live })
	if r := st.do(http.MethodGet, "/healthz", "", nil); r.Status != 200 || r.str("status") != "ok" {
		t.Fatalf("/healthz connected = %d %s", r.Status, r.Raw)
	}
	m := st.do(http.MethodGet, "/metrics", "", nil)
	if !strings.Contains(string(m.Raw), "countersign_live_listener_connected 1") {
		t.Fatalf("metrics while connected lack the gauge at 1:\n%.2000s", m.Raw)
	}
	live.up.Store(false)
	live.reconnects.Store(3)
	r := st.do(http.MethodGet, "/healthz", "", nil)
	if r.Status != http.StatusServiceUnavailable || r.str("status") != "degraded" || !strings.Contains(r.str("live"), "disconnected") {
		t.Fatalf("/healthz disconnected = %d %s, want 503 degraded", r.Status, r.Raw)
	}
	m = st.do(http.MethodGet, "/metrics", "", nil)
	for _, want := range []string{"countersign_live_listener_connected 0", "countersign_live_listener_reconnects_total 3"} {
		if !strings.Contains(string(m.Raw), want) {
			t.Errorf("metrics while disconnected lack %q", want)
		}
	}
}
