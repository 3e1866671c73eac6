package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestIdleWaiterMemory opens 10,000 long-polls against the real binary and
// measures what they cost it: the growth of its resident set divided by the
// number of waiters must stay under 64 KiB.
func TestIdleWaiterMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: 10,000 idle long-polls")
	}
	const waiters = 10000
	// One token holds every waiter here, so the per-token cap is raised
	// above what the test opens.
	s := startServer(t, "", "--max-waits-per-token", strconv.Itoa(waiters+1000))
	agent := s.token("agent:weather", "weather-host")
	req, _ := http.NewRequest(http.MethodPost, s.url+"/api/v1/calls",
		strings.NewReader(`{"tool":"weather.search","target":"weather:forecast","args":{"city":"Bergen"}}`))
	req.Header.Set("Authorization", "Bearer "+agent)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var call struct{ ID string }
	json.NewDecoder(res.Body).Decode(&call)
	res.Body.Close()
	if res.StatusCode != 201 {
		t.Fatalf("submit: %d", res.StatusCode)
	}
	addr := strings.TrimPrefix(s.url, "http://")
	request := fmt.Sprintf("GET /api/v1/calls/%s?wait=60s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", call.ID, addr, agent)
	open := func(n int) []net.Conn {
		conns := make([]net.Conn, 0, n)
		for i := 0; i < n; i++ {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatalf("dial %d: %v", i, err)
			}
			if _, err := c.Write([]byte(request)); err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
		}
		return conns
	}
	waitFor := func(n int) {
		eventually(t, 60*time.Second, fmt.Sprintf("%d open waiters", n), func() bool { return openWaiters(s.url) >= n })
	}
	// A few hundred waiters first, so the baseline holds the runtime's
	// fixed costs.
	warm := open(200)
	waitFor(200)
	before := rssKiB(t, s.pid())
	conns := open(waiters)
	waitFor(200 + waiters)
	time.Sleep(500 * time.Millisecond)
	after := rssKiB(t, s.pid())
	perWaiter := float64(after-before) / waiters
	t.Logf("server RSS %d KiB -> %d KiB with %d more idle waiters: %.1f KiB per waiter", before, after, waiters, perWaiter)
	if perWaiter >= 64 {
		t.Errorf("%.1f KiB per idle waiter, want under 64 KiB", perWaiter)
	}
	for _, c := range append(warm, conns...) {
		c.Close()
	}
	// Every waiter is freed when its client goes away.
	eventually(t, 30*time.Second, "no open waiters once every client left", func() bool { return openWaiters(s.url) == 0 })
}
