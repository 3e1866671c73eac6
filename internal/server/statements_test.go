package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
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
// hot path. Lower it when a statement goes.
const maxStatementsPerFlow = 30

// TestWholeFlowStatements counts the statements of whole flows through the
// real HTTP stack and a real SQLite file, one flow at a time, and fails
// when a flow takes more than maxStatementsPerFlow. With
// COUNTERSIGN_STATEMENTS=1 it prints every statement and how often a flow
// ran it.
func TestWholeFlowStatements(t *testing.T) {
	e := newConsoleEnvWith(t, func(c *Config) { c.Writes = c.Audit.(*db.DB) })
	e.addUser("olga", account.RoleOperator, "pw-olga-123")
	b := e.browser()
	b.login("olga", "pw-olga-123")
	csrf := b.csrf()
	_, agent, err := accountsOf(e.db).CreateToken(context.Background(), "agent:flow", "weather-host", "", "test", audit.ChannelCLI)
	if err != nil {
		t.Fatal(err)
	}

	api := func(method, path string, body []byte, want int) map[string]any {
		t.Helper()
		req, _ := http.NewRequest(method, e.url+path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+agent)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		if res.StatusCode != want {
			t.Fatalf("%s %s: status %d, want %d: %s", method, path, res.StatusCode, want, raw)
		}
		var out map[string]any
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, raw)
		}
		return out
	}
	flow := func(n int) {
		t.Helper()
		call := api(http.MethodPost, "/api/v1/calls", fmt.Appendf(nil,
			`{"tool":"weather.search","target":"weather:forecast","args":{"city":"flow %d"}}`, n), http.StatusCreated)
		id, digest := call["id"].(string), call["digest"].(string)
		waited := make(chan map[string]any, 1)
		go func() { waited <- api(http.MethodGet, "/api/v1/calls/"+id+"?wait=30s", nil, http.StatusOK) }()
		for e.q.Waiting() < 1 {
			time.Sleep(100 * time.Microsecond)
		}
		// As cmd/loadgen approves: the form alone, no Accept header.
		if p := b.post("/calls/"+id+"/approve", url.Values{"csrf": {csrf}, "digest": {digest}}, "Accept", ""); p.status != http.StatusSeeOther {
			t.Fatalf("approve: status %d", p.status)
		}
		done := <-waited
		if done["status"] != "approved" {
			t.Fatalf("waited: status %v", done["status"])
		}
		redeem, _ := json.Marshal(map[string]any{"grant": done["grant"],
			"call": map[string]any{"tool": "weather.search", "target": "weather:forecast", "args": map[string]any{"city": fmt.Sprintf("flow %d", n)}}})
		if r := api(http.MethodPost, "/api/v1/redeem", redeem, http.StatusOK); r["decision"] != "accepted" {
			t.Fatalf("redeem: %v", r)
		}
	}

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
	const flows = 20
	before := e.db.Statements()
	for i := range flows {
		flow(100 + i)
	}
	total := e.db.Statements() - before
	e.db.TraceStatements(nil)

	perFlow := float64(total) / flows
	t.Logf("%d statements in %d flows: %.2f per flow", total, flows, perFlow)
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
	// The server exports the count (cmd/loadgen reads it per flow).
	low := e.db.Statements()
	res, err := http.Get(e.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	high := e.db.Statements()
	var exported float64
	for line := range strings.Lines(string(raw)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "countersign_store_statements_total "); ok {
			exported, _ = strconv.ParseFloat(v, 64)
		}
	}
	if exported < float64(low) || exported > float64(high) {
		t.Errorf("countersign_store_statements_total = %v, want between %d and %d", exported, low, high)
	}
	if perFlow > maxStatementsPerFlow {
		t.Errorf("a whole flow ran %.2f SQL statements, more than %d: a statement was added to the hot path", perFlow, maxStatementsPerFlow)
	}
}
