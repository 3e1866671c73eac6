package console

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
)

// decidedCalls is how many decided calls BenchmarkCallPage's database
// holds besides the pending call whose page it reads.
const decidedCalls = 10_000

// BenchmarkCallPage reads a pending call's page as an operator, with one
// call pending among decidedCalls decided ones: the page reads the pending
// calls for the link to the next one, and finds its call among them.
// "quiet" reads the page again and again; "after a write" commits a write
// (untimed) before each read, as a flow does, so that the readers' page
// caches are dropped (SQLite empties a connection's cache when another
// has written since its last read). It reports the process's CPU time per
// page (the server's and the test's client's: on a loaded machine the time
// per page is mostly waiting), the statements and what SQLite compiled per
// page (db.Compiles).
func BenchmarkCallPage(b *testing.B) {
	e := newConsoleEnv(b)
	ctx := context.Background()
	principal := queue.Principal{Actor: "agent:bench", Audience: "weather-host"}
	body := func(n int) string {
		return `{"tool":"weather.search","target":"weather:forecast","args":{"city":"bench ` + strings.Repeat("x", n%7) + `"}}`
	}
	// One decided call, copied decidedCalls times in one statement.
	decided := e.submit(principal.Actor, principal.Audience, body(1))
	e.deny("olga", audit.ChannelWeb, decided, "bench")
	var cols []string
	rows, err := e.db.SQL().QueryContext(ctx, `SELECT name FROM pragma_table_info('calls') WHERE name NOT IN ('seq', 'id')`)
	if err != nil {
		b.Fatal(err)
	}
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			b.Fatal(err)
		}
		cols = append(cols, c)
	}
	rows.Close()
	list := strings.Join(cols, ", ")
	e.exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
		INSERT INTO calls (id, `+list+`) SELECT 'decided-' || i, `+list+` FROM calls, n WHERE calls.id = ?`, decidedCalls-1, decided.ID)
	var n int
	if err := e.db.SQL().QueryRowContext(ctx, `SELECT count(*) FROM calls WHERE status = 'denied'`).Scan(&n); err != nil || n != decidedCalls {
		b.Fatalf("%d decided calls (%v), want %d", n, err, decidedCalls)
	}
	pending := e.submit(principal.Actor, principal.Audience, body(2))

	e.addUser("pat", account.RoleOperator, "pw-pat-1234")
	br := e.browser()
	br.login("pat", "pw-pat-1234")
	read := func() {
		req, _ := http.NewRequest(http.MethodGet, e.url+"/calls/"+pending.ID, nil)
		req.Header.Set("Accept", "text/html")
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		res, err := br.client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, res.Body); err != nil {
			b.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			b.Fatalf("GET the call's page: status %d", res.StatusCode)
		}
	}
	write := func() {
		e.exec(`UPDATE meta SET value = value WHERE key = 'identity'`)
	}
	e.db.CountCompiles()
	for range 5 {
		write()
		read()
	}
	for _, bc := range []struct {
		name  string
		write bool
	}{{"quiet", false}, {"after a write", true}} {
		b.Run(bc.name, func(b *testing.B) {
			var stmts, compiles int64
			var cpu time.Duration
			for b.Loop() {
				if bc.write {
					b.StopTimer()
					write()
					b.StartTimer()
				}
				s, c, t := e.db.Statements(), e.db.Compiles(), processCPU()
				read()
				cpu += processCPU() - t
				stmts += e.db.Statements() - s
				compiles += e.db.Compiles() - c
			}
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/page")
			b.ReportMetric(float64(stmts)/float64(b.N), "statements/page")
			b.ReportMetric(float64(compiles)/float64(b.N), "compiled/page")
		})
	}
}
