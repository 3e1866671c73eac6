package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestSocketsWithoutSession opens 10,000 WebSocket handshakes without a
// session and keeps the connections open: every one is refused before the
// upgrade, an agent is served throughout, and the server's memory stays
// bounded.
func TestSocketsWithoutSession(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: 10,000 sockets")
	}
	const sockets = 10000
	s := startServer(t, "")
	agent := newRawAgent(s.url, s.token("agent:weather", "weather-host"))
	addr := strings.TrimPrefix(s.url, "http://")
	request := "GET /ws HTTP/1.1\r\nHost: " + addr + "\r\nOrigin: " + s.url + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
	before := rssKiB(t, s.pid())

	var mu sync.Mutex
	statuses := map[string]int{}
	conns := make([]net.Conn, 0, sockets)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 200)
	for i := 0; i < sockets; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		conns = append(conns, c)
		wg.Add(1)
		sem <- struct{}{}
		go func(c net.Conn) {
			defer wg.Done()
			defer func() { <-sem }()
			c.SetDeadline(time.Now().Add(30 * time.Second))
			if _, err := c.Write([]byte(request)); err != nil {
				mu.Lock()
				statuses["write error"]++
				mu.Unlock()
				return
			}
			line, err := bufio.NewReader(c).ReadString('\n')
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				statuses["read error"]++
				return
			}
			statuses[strings.TrimSpace(line)]++
		}(c)
		if i%1000 == 999 {
			// An agent is served while the sockets pile up.
			r, err := agent.submit(context.Background(), fmt.Sprintf(`{"tool":"weather.search","target":"weather:forecast","args":{"city":"S%d"}}`, i))
			if err != nil || r.status != http.StatusCreated {
				t.Fatalf("agent refused with %d sockets open: %v %s", i+1, err, r.raw)
			}
		}
	}
	wg.Wait()
	after := rssKiB(t, s.pid())
	t.Logf("%d session-less WebSocket handshakes: %v; server RSS %d -> %d KiB (%.1f KiB per held connection)",
		sockets, statuses, before, after, float64(after-before)/sockets)
	for status, n := range statuses {
		if !strings.Contains(status, " 401 ") && !strings.Contains(status, " 403 ") {
			t.Errorf("%d handshakes answered %q, want 401 or 403 before any upgrade", n, status)
		}
	}
	if per := float64(after-before) / sockets; per > 64 {
		t.Errorf("%.1f KiB per held connection, want under 64 KiB", per)
	}
	for _, c := range conns {
		c.Close()
	}
	r, err := agent.submit(context.Background(), `{"tool":"weather.search","target":"weather:forecast","args":{"city":"after"}}`)
	if err != nil || r.status != http.StatusCreated {
		t.Fatalf("agent refused after the sockets closed: %v %s", err, r.raw)
	}
}
