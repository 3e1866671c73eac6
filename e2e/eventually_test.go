package e2e

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// eventually waits until cond holds, checking every 20 ms, and fails the
// test when it still does not after limit: tests wait for what they need to
// have happened, never for a guessed while.
func eventually(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: still waiting for %s", limit, what)
		}
	}
}

// openWaiters is the console's countersign_open_waiters at base (its
// /metrics), -1 when it cannot be read.
func openWaiters(base string) int {
	return int(metricValue(base, "countersign_open_waiters"))
}

// metricValue is the value of the series name (without labels) in the
// console's /metrics at base, -1 when it cannot be read.
func metricValue(base, name string) float64 {
	res, err := http.Get(base + "/metrics")
	if err != nil {
		return -1
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}
