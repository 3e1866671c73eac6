package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestServerChildProcess is not a test: it is the server half of
// TestIdleWaiterMemory, run in a child process so that the parent's client
// connections do not count against the server's memory.
func TestServerChildProcess(t *testing.T) {
	if os.Getenv("COUNTERSIGN_CHILD_SERVER") != "1" {
		t.Skip("runs only as the child of TestIdleWaiterMemory")
	}
	st := startAPIStack(t)
	agent := st.token("agent:weather", "weather-host")
	r := st.submit(agent, `{"tool":"weather.search","target":"weather:forecast","args":{"city":"Bergen"}}`, 201)
	json.NewEncoder(os.Stdout).Encode(map[string]any{"url": st.url, "token": agent, "id": r.str("id"), "pid": os.Getpid()})
	// Serve until the parent closes stdin.
	buf := make([]byte, 1)
	os.Stdin.Read(buf)
}

func rssKiB(tb testing.TB, pid int) int64 {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, err := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			if err != nil {
				tb.Fatal(err)
			}
			return n
		}
	}
	tb.Fatal("no VmRSS")
	return 0
}

// TestIdleWaiterMemory opens 10,000 long-polls against a server in another
// process and measures what they cost it: the growth of its resident set
// divided by the number of waiters must stay under 64 KiB.
func TestIdleWaiterMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 10,000 connections")
	}
	const waiters = 10000
	cmd := exec.Command(os.Args[0], "-test.run=^TestServerChildProcess$", "-test.v")
	cmd.Env = append(os.Environ(), "COUNTERSIGN_CHILD_SERVER=1", "GOMAXPROCS=2")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	var info struct {
		URL, Token, ID string
		PID            int
	}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if err := json.Unmarshal(sc.Bytes(), &info); err == nil && info.URL != "" {
			break
		}
	}
	if info.URL == "" {
		t.Fatal("child server did not report its address")
	}
	go func() {
		for sc.Scan() {
		}
	}()
	addr := strings.TrimPrefix(info.URL, "http://")
	request := fmt.Sprintf("GET /api/v1/calls/%s?wait=60s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", info.ID, addr, info.Token)

	// Warm the server up with a few hundred waiters first, so the baseline
	// includes the runtime's fixed costs.
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
		res, err := http.Get(info.URL + "/metrics")
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
	warm := open(200)
	waitFor(200)
	before := rssKiB(t, info.PID)
	conns := open(waiters)
	waitFor(200 + waiters)
	time.Sleep(500 * time.Millisecond)
	after := rssKiB(t, info.PID)
	perWaiter := float64(after-before) / waiters
	t.Logf("server RSS %d KiB -> %d KiB with %d more idle waiters: %.1f KiB per waiter", before, after, waiters, perWaiter)
	if perWaiter >= 64 {
		t.Errorf("%.1f KiB per idle waiter, want under 64 KiB", perWaiter)
	}
	for _, c := range append(warm, conns...) {
		c.Close()
	}
}

// BenchmarkWakeLatency measures the time from an approval's commit to the
// long-polling agent's receipt of the decision.
func BenchmarkWakeLatency(b *testing.B) {
	st := startAPIStack(b)
	agent := st.token("agent:weather", "weather-host")
	client := &http.Client{}
	var lat []time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		r := st.submit(agent, fmt.Sprintf(`{"tool":"weather.search","target":"weather:forecast","args":{"city":"W%d"}}`, i), 201)
		got := make(chan time.Time, 1)
		go func() {
			req, _ := http.NewRequest(http.MethodGet, st.url+"/api/v1/calls/"+r.str("id")+"?wait=30s", nil)
			req.Header.Set("Authorization", "Bearer "+agent)
			res, err := client.Do(req)
			if err == nil {
				var buf [4096]byte
				for {
					if _, err := res.Body.Read(buf[:]); err != nil {
						break
					}
				}
				res.Body.Close()
			}
			got <- time.Now()
		}()
		for st.queue.Waiting() < 1 {
			time.Sleep(100 * time.Microsecond)
		}
		b.StartTimer()
		if _, err := st.approve("alice", r.str("id"), r.str("digest")); err != nil {
			b.Fatal(err)
		}
		committed := time.Now()
		woke := <-got
		lat = append(lat, woke.Sub(committed))
	}
	reportPercentiles(b, "wake", lat)
}

func reportPercentiles(b *testing.B, name string, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	p := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) }
	b.ReportMetric(p(0.50), name+"-p50-µs")
	b.ReportMetric(p(0.99), name+"-p99-µs")
}

// BenchmarkSubmitHTTP measures proposals over HTTP, one connection at a time
// and from parallel agents.
func BenchmarkSubmitHTTP(b *testing.B) {
	for _, par := range []int{1, 8} {
		b.Run(fmt.Sprintf("agents=%d", par), func(b *testing.B) {
			st := startAPIStack(b)
			tokens := make([]string, par)
			for i := range tokens {
				tokens[i] = st.token(fmt.Sprintf("agent:b%d", i), "weather-host")
			}
			var n atomic.Int64
			var wg sync.WaitGroup
			lat := make([][]time.Duration, par)
			b.ResetTimer()
			start := time.Now()
			for w := 0; w < par; w++ {
				wg.Add(1)
				go func(w int) {
					defer wg.Done()
					for {
						i := n.Add(1)
						if i > int64(b.N) {
							return
						}
						t0 := time.Now()
						req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, st.url+"/api/v1/calls",
							strings.NewReader(fmt.Sprintf(`{"tool":"weather.search","target":"weather:forecast","args":{"city":"S%d"}}`, i)))
						req.Header.Set("Authorization", "Bearer "+tokens[w])
						req.Header.Set("Content-Type", "application/json")
						res, err := http.DefaultClient.Do(req)
						if err != nil {
							b.Error(err)
							return
						}
						res.Body.Close()
						if res.StatusCode != 201 {
							b.Errorf("status %d", res.StatusCode)
							return
						}
						lat[w] = append(lat[w], time.Since(t0))
					}
				}(w)
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "submits/s")
			var all []time.Duration
			for _, l := range lat {
				all = append(all, l...)
			}
			reportPercentiles(b, "submit", all)
		})
	}
}
