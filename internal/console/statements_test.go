package console

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/db"
)

// maxStatementsPerFlow is how many SQL statements one whole flow may run:
// an agent submits a call over HTTP, long-polls for it, an operator
// approves it in the web console (session cookie and CSRF token, as
// cmd/loadgen does), and the agent redeems the grant. A flow that runs
// more fails TestWholeFlowStatements: someone added a statement to the
// hot path. Lower it when a statement goes. (The submission reads its
// retry states, the newest call with its digest and its token's pending
// calls by one statement, db's SubmitChecks; the agent's token, the
// operator's session and the account the approval checks are read from
// memory while no account, session or token has been written, db's
// authcache.go; the approval takes the call its page showed as the hint it
// signs the grant by, shownCalls; a write's audit entries are one INSERT,
// the approval's two with them; each write transaction's state, the
// database's identity and the audit chain's head, rides on its first
// read, the call or the submission's checks, db's withTxState.)
const maxStatementsPerFlow = 18

// maxCommitsPerFlow and maxMarksPerFlow budget a whole flow's syncs: each
// commit pays the WAL's fsync (synchronous=FULL), each advance of the
// data directory's high-water mark one fdatasync. A flow commits its
// submission, its approval and its redemption; only the redemption must be
// covered by the mark before it is acknowledged (highwater.MayWait). A
// commit or a mark added to the hot path fails TestWholeFlowStatements.
const (
	maxCommitsPerFlow = 3
	maxMarksPerFlow   = 1
)

// maxSyncsPerConcurrentFlow budgets the syncs of whole flows run by eight
// agents at once, each with its own operator: commits plus advances of the
// high-water mark, per flow. One flow alone costs 4 (three commits, one
// mark); at once, group commit shares commits between the agents' writes
// and one advance of the mark covers the commits that run while a
// redemption's waits (internal/db/writer.go), so a flow costs well under
// that. A flow that stops sharing, or a sync added to it, fails
// TestConcurrentFlowsShareSyncs.
const maxSyncsPerConcurrentFlow = 2.5

// markSync is how long TestConcurrentFlowsShareSyncs's stand-in for the
// high-water mark's fdatasync takes.
const markSync = 2 * time.Millisecond

// maxStatementsPerPage budgets the call's page an approver reads before
// approving: the pending calls with their approvals, one statement, for
// the link to the next one, among which the page finds its call; the
// session, its account and the freezes in force come from memory.
const maxStatementsPerPage = 1

// wholeFlows starts a console on a real SQLite file with an operator
// logged in and an agent's token, and returns flow, which runs one whole
// flow as cmd/loadgen does: the agent submits a call over HTTP and
// long-polls for it, the operator reads the call's page and approves it
// there (session cookie, CSRF token and the page's presentation token),
// and the agent redeems the grant. The statements the call's page ran
// are added to *page.
func wholeFlows(tb testing.TB) (e *consoleEnv, flow func(n int), page *int64) {
	e = newConsoleEnvWith(tb, func(c *envConfig) { c.Writes = c.Audit.(*db.DB) })
	page = new(int64)
	e.addUser("olga", account.RoleOperator, "pw-olga-123")
	b := e.browser()
	b.login("olga", "pw-olga-123")
	csrf := b.csrf()
	_, agent, err := accountsOf(e.db).CreateToken(context.Background(), "agent:flow", "weather-host", "", "test", audit.ChannelCLI)
	if err != nil {
		tb.Fatal(err)
	}

	api := func(method, path string, body []byte, want int) map[string]any {
		tb.Helper()
		req, _ := http.NewRequest(method, e.url+path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+agent)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			tb.Fatalf("%s %s: %v", method, path, err)
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		if res.StatusCode != want {
			tb.Fatalf("%s %s: status %d, want %d: %s", method, path, res.StatusCode, want, raw)
		}
		var out map[string]any
		if err := json.Unmarshal(raw, &out); err != nil {
			tb.Fatalf("%s %s: %v: %s", method, path, err, raw)
		}
		return out
	}
	flow = func(n int) {
		tb.Helper()
		call := api(http.MethodPost, "/api/v1/calls", fmt.Appendf(nil,
			`{"tool":"weather.search","target":"weather:forecast","args":{"city":"flow %d"}}`, n), http.StatusCreated)
		id, digest := call["id"].(string), call["digest"].(string)
		// The operator reads the call's page (counted apart, before the
		// agent's long-poll starts, so that none of its reads lands here),
		// and approves on it as cmd/loadgen does: the form with no Accept
		// header.
		read := e.db.Statements()
		shown := b.presented(id)
		atomic.AddInt64(page, int64(e.db.Statements()-read))
		waited := make(chan map[string]any, 1)
		go func() { waited <- api(http.MethodGet, "/api/v1/calls/"+id+"?wait=30s", nil, http.StatusOK) }()
		for e.q.Waiting() < 1 {
			time.Sleep(100 * time.Microsecond)
		}
		if p := b.post("/calls/"+id+"/approve", url.Values{"csrf": {csrf}, "digest": {digest}, "presented": {shown}}, "Accept", ""); p.status != http.StatusSeeOther {
			tb.Fatalf("approve: status %d", p.status)
		}
		done := <-waited
		if done["status"] != "approved" {
			tb.Fatalf("waited: status %v", done["status"])
		}
		redeem, _ := json.Marshal(map[string]any{"grant": done["grant"],
			"call": map[string]any{"tool": "weather.search", "target": "weather:forecast", "args": map[string]any{"city": fmt.Sprintf("flow %d", n)}}})
		if r := api(http.MethodPost, "/api/v1/redeem", redeem, http.StatusOK); r["decision"] != "accepted" {
			tb.Fatalf("redeem: %v", r)
		}
	}
	return e, flow, page
}

// TestWholeFlowStatements counts the statements of whole flows through the
// real HTTP stack and a real SQLite file, one flow at a time, and fails
// when a flow takes more than maxStatementsPerFlow. With
// COUNTERSIGN_STATEMENTS=1 it prints every statement and how often a flow
// ran it.
func TestWholeFlowStatements(t *testing.T) {
	e, flow, page := wholeFlows(t)
	// The first flows open connections and record the session's activity.
	for i := range 3 {
		flow(i)
	}
	var mu sync.Mutex
	byText := map[string]int{}
	e.db.TraceStatements(func(q string) {
		mu.Lock()
		byText[strings.Join(strings.Fields(q), " ")]++
		mu.Unlock()
	})
	// The console under test keeps no high-water mark of its own: the hook
	// counts the commits that would advance one.
	var marks atomic.Int64
	e.db.OnCommit(func(int64, string) error { marks.Add(1); return nil })
	const flows = 20
	before, pageBefore := e.db.Statements(), *page
	commitsBefore, _ := e.db.WriteCounts()
	for i := range flows {
		flow(100 + i)
	}
	total := e.db.Statements() - before
	commitsAfter, _ := e.db.WriteCounts()
	e.db.TraceStatements(nil)
	e.db.OnCommit(nil)
	commits, marked := float64(commitsAfter-commitsBefore)/flows, float64(marks.Load())/flows
	t.Logf("per flow: %.2f commits, %.2f advances of the high-water mark", commits, marked)
	if commits > maxCommitsPerFlow {
		t.Errorf("a whole flow made %.2f commits, more than %d: a write transaction (and its fsync) was added to the hot path", commits, maxCommitsPerFlow)
	}
	if marked > maxMarksPerFlow {
		t.Errorf("a whole flow advanced the high-water mark %.2f times, more than %d: a commit on the hot path now holds a change the mark must cover", marked, maxMarksPerFlow)
	}

	// The call's page is read apart from the decision: it is budgeted on
	// its own, and the rest of the flow keeps its budget.
	perPage := float64(*page-pageBefore) / flows
	perFlow := float64(int64(total)-(*page-pageBefore)) / flows
	t.Logf("%d statements in %d flows: %.2f per flow besides the call's page, %.2f for the page", total, flows, perFlow, perPage)
	if os.Getenv("COUNTERSIGN_STATEMENTS") != "" {
		mu.Lock()
		texts := make([]string, 0, len(byText))
		for q := range byText {
			texts = append(texts, q)
		}
		sort.Slice(texts, func(i, j int) bool { return byText[texts[i]] > byText[texts[j]] })
		for _, q := range texts {
			shown := q
			if len(shown) > 150 {
				shown = shown[:150] + "…"
			}
			t.Logf("%5.2f  %s", float64(byText[q])/flows, shown)
		}
		mu.Unlock()
	}
	// The server exports the counts (cmd/loadgen reads them per flow): the
	// statements, and the frames its commits appended to the WAL.
	low, lowFrames := e.db.Statements(), e.db.WALFrames()
	res, err := http.Get(e.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	high, highFrames := e.db.Statements(), e.db.WALFrames()
	exported := map[string]float64{}
	for line := range strings.Lines(string(raw)) {
		if name, v, ok := strings.Cut(strings.TrimSpace(line), " "); ok && strings.HasPrefix(name, "countersign_store_") {
			exported[name], _ = strconv.ParseFloat(v, 64)
		}
	}
	if n := exported["countersign_store_statements_total"]; n < float64(low) || n > float64(high) {
		t.Errorf("countersign_store_statements_total = %v, want between %d and %d", n, low, high)
	}
	if n := exported["countersign_store_wal_frames_total"]; n < float64(lowFrames) || n > float64(highFrames) || n == 0 {
		t.Errorf("countersign_store_wal_frames_total = %v, want between %d and %d, and some", n, lowFrames, highFrames)
	}
	if perPage > maxStatementsPerPage {
		t.Errorf("the call's page ran %.2f SQL statements, more than %d", perPage, maxStatementsPerPage)
	}
	if perFlow > maxStatementsPerFlow {
		t.Errorf("a whole flow ran %.2f SQL statements, more than %d: a statement was added to the hot path", perFlow, maxStatementsPerFlow)
	}
}

// maxCompilesPerFlow budgets what SQLite compiles in a whole flow once the
// connections have compiled each of its statements (db.Compiles: SELECTs,
// subqueries included, INSERTs and updated columns). A statement stays
// compiled on its connection; one that SQLite compiles again at every
// execution (a bound LIMIT, a column compared with a bare ? where the plan
// reads the value: db's limitClause and SubmitChecks) costs a parse and a
// plan each time, several times its own execution for the call page's
// read and the submission's checks, and adds at least one per flow. The
// few a connection opened during the flows compiles once stay under it.
const maxCompilesPerFlow = 0.5

// TestWholeFlowCompilesNothing counts what SQLite compiles in whole flows
// (wholeFlows), its call page included, after each connection has
// compiled the flow's statements once.
func TestWholeFlowCompilesNothing(t *testing.T) {
	e, flow, _ := wholeFlows(t)
	e.db.CountCompiles()
	for i := range 10 {
		flow(i)
	}
	const flows = 20
	before := e.db.Compiles()
	for i := range flows {
		flow(100 + i)
	}
	per := float64(e.db.Compiles()-before) / flows
	t.Logf("%.2f compiled per flow (%d before the counted flows)", per, before)
	if per > maxCompilesPerFlow {
		t.Errorf("SQLite compiled %.2f SELECTs, INSERTs or updated columns per flow, more than %.1f: a statement of the flow is compiled at every execution", per, maxCompilesPerFlow)
	}
}

// BenchmarkWholeFlow runs whole flows one at a time (wholeFlows) and
// reports the process's CPU time and the statements per flow: the server's
// and the test's HTTP clients' CPU together, without the load generator's
// floor measurements and process start-ups around them.
func BenchmarkWholeFlow(b *testing.B) {
	e, flow, _ := wholeFlows(b)
	for i := range 3 {
		flow(-1 - i)
	}
	stmts := e.db.Statements()
	cpu := processCPU()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		flow(i)
	}
	b.StopTimer()
	b.ReportMetric(float64((processCPU()-cpu).Microseconds())/float64(b.N), "cpu-µs/flow")
	b.ReportMetric(float64(e.db.Statements()-stmts)/float64(b.N), "statements/flow")
}

// processCPU is the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// maxAllocationsPerFlow budgets the heap allocations of one whole flow in
// this process: the server's and the test's HTTP clients' together (the
// test reads the call's page as HTML, as a browser would), so that an
// allocation added to each request of the hot path shows (a flow is five
// requests; the count repeats to the allocation from run to run). Lower
// it when allocations go.
const maxAllocationsPerFlow = 4103

// TestWholeFlowAllocations counts the heap allocations of whole flows
// (wholeFlows) and fails when a flow makes more than
// maxAllocationsPerFlow.
func TestWholeFlowAllocations(t *testing.T) {
	if raceDetector {
		t.Skip("allocations are counted without the race detector, which makes its own: make test runs this test again without -race")
	}
	_, flow, _ := wholeFlows(t)
	for i := range 5 {
		flow(i)
	}
	const flows = 40
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range flows {
		flow(100 + i)
	}
	runtime.ReadMemStats(&after)
	per := float64(after.Mallocs-before.Mallocs) / flows
	t.Logf("%.0f allocations per flow", per)
	if per > maxAllocationsPerFlow {
		t.Errorf("a whole flow made %.0f heap allocations, more than %d: an allocation was added to the hot path", per, maxAllocationsPerFlow)
	}
}

// TestConcurrentFlowsShareSyncs runs whole flows for eight agents at once
// through the real HTTP stack and a real SQLite file and counts, per flow,
// the commits (each the WAL's fsync) and the advances of the high-water
// mark (each one fdatasync): at most maxSyncsPerConcurrentFlow.
func TestConcurrentFlowsShareSyncs(t *testing.T) {
	e, flow, _ := wholeFlows(t)
	for i := range 3 {
		flow(i)
	}
	// The hook stands for the mark's fdatasync, and takes about as long as
	// one on a disk (a sync on a file system in memory takes nothing, and
	// then nothing has time to queue behind a commit).
	var marks atomic.Int64
	e.db.OnCommit(func(int64, string) error { marks.Add(1); time.Sleep(markSync); return nil })
	defer e.db.OnCommit(nil)
	const agents, each = 8, 12
	commitsBefore, writesBefore := e.db.WriteCounts()
	var wg sync.WaitGroup
	for a := range agents {
		wg.Go(func() {
			for i := range each {
				flow(1000 + a*each + i)
			}
		})
	}
	wg.Wait()
	commitsAfter, writesAfter := e.db.WriteCounts()
	const flows = agents * each
	commits, marked := float64(commitsAfter-commitsBefore)/flows, float64(marks.Load())/flows
	t.Logf("%d flows, %d at once: per flow %.2f commits (%.2f writes each), %.2f advances of the mark, %.2f syncs",
		flows, agents, commits, float64(writesAfter-writesBefore)/float64(commitsAfter-commitsBefore), marked, commits+marked)
	if commits+marked > maxSyncsPerConcurrentFlow {
		t.Errorf("%d agents at once: %.2f syncs per flow (%.2f commits, %.2f advances of the mark), more than %.1f: "+
			"the flows' writes no longer share their commits and marks, or a sync was added", agents, commits+marked, commits, marked, maxSyncsPerConcurrentFlow)
	}
}
