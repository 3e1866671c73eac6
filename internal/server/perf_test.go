package server

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

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
