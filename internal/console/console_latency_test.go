package console

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/queue"
)

var dataCall = regexp.MustCompile(`data-call="([a-z0-9_]+)"`)

// fanoutLatencies opens n queue pages, submits changes calls one after
// another, and returns, sorted, for each how long it took until every page
// had the new card: from the start of the submission (its SQLite commit
// included), and from the moment the committed change was published.
func fanoutLatencies(tb testing.TB, n, changes int) (fromSubmit, fromCommit []time.Duration) {
	e := newConsoleEnv(tb)
	published := make(chan time.Time, 1)
	e.q.Subscribe(func(queue.Event) {
		select {
		case published <- time.Now():
		default:
		}
	})
	// An account keeps at most 64 sockets open: fifty pages per account.
	var browsers []*consoleBrowser
	for k := range (n + 49) / 50 {
		name := fmt.Sprintf("olivia%d", k)
		e.addUser(name, "operator", rolePassword)
		b := e.browser()
		b.login(name, rolePassword)
		browsers = append(browsers, b)
	}
	type arrival struct {
		id string
		at time.Time
	}
	arrivals := make(chan arrival, n*4)
	for i := range n {
		conn, _ := browsers[i/50].mustDial("/ws")
		go func() {
			for {
				conn.SetReadDeadline(time.Now().Add(30 * time.Second))
				_, msg, err := conn.ReadMessage()
				if err != nil {
					return
				}
				at := time.Now()
				if m := dataCall.FindSubmatch(msg); m != nil && strings.Contains(string(msg), "afterbegin") {
					arrivals <- arrival{string(m[1]), at}
				}
			}
		}()
	}
	waitFor(tb, "pages to connect", func() bool { return e.c.hub.clientCount() == n })
	for i := range changes {
		body := strings.Replace(conRefundBody, "129999", fmt.Sprint(1000+i), 1)
		start := time.Now()
		call, _, err := e.q.Submit(context.Background(), queue.Principal{Actor: "agent:billing-bot", Audience: "payments-host"}, []byte(body))
		if err != nil {
			tb.Fatal(err)
		}
		var last time.Time
		for seen := 0; seen < n; {
			select {
			case a := <-arrivals:
				if a.id == call.ID {
					seen++
					if a.at.After(last) {
						last = a.at
					}
				}
			case <-time.After(10 * time.Second):
				tb.Fatalf("change %d reached %d of %d pages", i, seen, n)
			}
		}
		fromSubmit = append(fromSubmit, last.Sub(start))
		fromCommit = append(fromCommit, last.Sub(<-published))
	}
	slices.Sort(fromSubmit)
	slices.Sort(fromCommit)
	return fromSubmit, fromCommit
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(float64(len(sorted))*p+0.5) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// Every committed change reaches every open queue page (fanoutLatencies
// fails when one does not arrive). How fast is measured by BenchmarkWSFanout,
// whose figures are in docs/performance.md: a bound on wall-clock time here
// would fail on a loaded machine without saying anything about the code.
func TestWSFanoutReachesEveryPage(t *testing.T) {
	lat, fromCommit := fanoutLatencies(t, 25, 40)
	t.Logf("25 pages, 40 changes, from submission: p50 %v, p99 %v; from commit: p50 %v, p99 %v",
		percentile(lat, 0.50), percentile(lat, 0.99), percentile(fromCommit, 0.5), percentile(fromCommit, 0.99))
	if len(lat) != 40 || len(fromCommit) != 40 {
		t.Fatalf("%d changes measured, want 40", len(lat))
	}
}

// BenchmarkWSFanout reports how long a change takes to reach every one of
// 100 open queue pages, from the start of its submission.
func BenchmarkWSFanout(b *testing.B) {
	for _, n := range []int{10, 100} {
		b.Run(fmt.Sprintf("pages=%d", n), func(b *testing.B) {
			lat, fromCommit := fanoutLatencies(b, n, b.N)
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
			b.ReportMetric(ms(percentile(lat, 0.50)), "p50-ms")
			b.ReportMetric(ms(percentile(lat, 0.99)), "p99-ms")
			b.ReportMetric(ms(percentile(fromCommit, 0.50)), "commit-p50-ms")
			b.ReportMetric(ms(percentile(fromCommit, 0.99)), "commit-p99-ms")
		})
	}
}
