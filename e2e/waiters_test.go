package e2e

import (
	"bufio"
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
	openWaiters := func() int {
		res, err := http.Get(s.url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "countersign_open_waiters "); ok {
				n, _ := strconv.ParseFloat(v, 64)
				return int(n)
			}
		}
		return -1
	}
	waitFor := func(n int) {
		deadline := time.Now().Add(60 * time.Second)
		for openWaiters() < n {
			if time.Now().After(deadline) {
				t.Fatalf("open waiters = %d, want %d", openWaiters(), n)
			}
			time.Sleep(50 * time.Millisecond)
		}
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
	deadline := time.Now().Add(30 * time.Second)
	for openWaiters() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("open waiters = %d after all clients left", openWaiters())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
