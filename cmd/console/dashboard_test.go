package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"

	"github.com/countersign/countersign/examples"
	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/pgtest"
	"github.com/countersign/countersign/internal/testkit"
)

// grafanaVars replaces the dashboard's Grafana variables with what
// Grafana would put there, so the Prometheus parser reads the queries.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$instance", ".*")

// TestDashboardAndAlertsNameExportedMetrics: every query of
// docs/grafana/countersign.json and every rule of docs/alerts.yaml parses
// with the Prometheus parser and names only metrics that real servers
// export: one on SQLite with traffic of every kind the dashboard shows,
// one on PostgreSQL (its replicas' listener).
func TestDashboardAndAlertsNameExportedMetrics(t *testing.T) {
	exported := map[string]bool{}
	for name := range scrapeSQLiteServer(t) {
		exported[name] = true
	}
	for name := range scrapeServer(t, pgtest.Database(t), nil) {
		exported[name] = true
	}

	b, err := os.ReadFile("../../docs/grafana/countersign.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Type, Title string
			Targets     []struct{ Expr string }
		}
		Templating struct {
			List []struct{ Definition string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("countersign.json: %v", err)
	}
	used := map[string]bool{}
	queries := 0
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			queries++
			checkQuery(t, "panel "+p.Title, grafanaVars.Replace(tg.Expr), exported, used)
		}
	}
	for _, v := range dash.Templating.List {
		m := regexp.MustCompile(`^label_values\((\w+), *\w+\)$`).FindStringSubmatch(v.Definition)
		if m == nil || !exported[m[1]] {
			t.Errorf("template variable %q names no exported metric", v.Definition)
		}
	}
	// What the dashboard is for: each subject has its series.
	for _, want := range []string{"countersign_pending_calls", "countersign_decision_seconds_bucket", "countersign_approvals_total",
		"countersign_proposal_problems_total", "countersign_redemptions_total", "countersign_open_waiters", "countersign_sockets_open",
		"countersign_notification_delay_seconds_bucket", "countersign_notifications_total", "countersign_store_commit_seconds_total",
		"countersign_store_commits_total", "countersign_live_listener_connected"} {
		if !used[want] {
			t.Errorf("no dashboard panel shows %s", want)
		}
	}

	b, err = os.ReadFile("../../docs/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct{ Alert, Expr string }
		}
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	alerted := map[string]bool{}
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			n++
			checkQuery(t, "alert "+r.Alert, r.Expr, exported, alerted)
		}
	}
	for _, want := range []string{"countersign_decision_seconds_count", "countersign_unresolved_calls", "countersign_live_listener_connected",
		"countersign_notifications_total", "countersign_highwater_refusals_total", "countersign_audit_verified"} {
		if !alerted[want] {
			t.Errorf("no alert watches %s", want)
		}
	}
	t.Logf("%d dashboard queries and %d alert rules checked against %d exported series names", queries, n, len(exported))
}

// checkQuery parses expr and checks that each metric it selects is
// exported, recording them in used.
func checkQuery(t *testing.T, where, expr string, exported, used map[string]bool) {
	t.Helper()
	e, err := parser.ParseExpr(expr)
	if err != nil {
		t.Errorf("%s: %q does not parse: %v", where, expr, err)
		return
	}
	names := 0
	parser.Inspect(e, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == "__name__" {
				name = m.Value
			}
		}
		names++
		used[name] = true
		if !exported[name] {
			t.Errorf("%s: %s is not a metric the server exports", where, name)
		}
		return nil
	})
	if names == 0 {
		t.Errorf("%s: %q selects no metric", where, expr)
	}
}

// scrapeSQLiteServer serves a SQLite console with a webhook channel and
// drives one of each thing the dashboard counts through it (a submission
// notified and delivered, one whose notification is given up, a rejected
// proposal, an approval, a denial, a cancellation, a refused and an
// accepted redemption), then scrapes it.
func scrapeSQLiteServer(t *testing.T) map[string]bool {
	var mu sync.Mutex
	posts := 0
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		posts++
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer hook.Close()
	gone := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusGone) // a permanent failure: given up at once
	}))
	defer gone.Close()
	section := `
notifications:
  channels:
    hook: {type: webhook, url: "` + hook.URL + `", secret: {env: HOOK_SECRET}, events: [call.submitted]}
    gone: {type: webhook, url: "` + gone.URL + `", secret: {env: HOOK_SECRET}, events: [call.submitted]}
  routes:
    - {tools: ["*"], notify: [hook, gone]}
`
	return scrapeServer(t, "", func(t *testing.T, a *app, base string) {
		ctx := context.Background()
		testkit.SeedUsers(t, a.db.accounts, account.RoleOperator, "olivia")
		_, secret, err := a.accounts.CreateToken(ctx, "agent:billing-bot", "payments-host", "", "cli:tester", audit.ChannelCLI)
		if err != nil {
			t.Fatal(err)
		}
		post := func(path, body string) (int, []byte) {
			req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+secret)
			req.Header.Set("Content-Type", "application/json")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			return res.StatusCode, b
		}
		var ids []string
		for _, inv := range []string{"INV-1", "INV-2", "INV-3"} {
			code, body := post("/api/v1/calls", `{"tool":"payments.refund","target":"invoice:`+inv+`","args":{"amount_minor":1299,"currency":"USD","reason_code":"duplicate"}}`)
			var c struct{ ID string }
			if json.Unmarshal(body, &c); code/100 != 2 || c.ID == "" {
				t.Fatalf("submit = %d %s", code, body)
			}
			ids = append(ids, c.ID)
		}
		if code, body := post("/api/v1/calls", `{"tool":"payments.refund","target":"nope","args":{}}`); code/100 != 4 {
			t.Fatalf("a bad proposal = %d %s", code, body)
		}
		c, err := a.queue.Call(ctx, ids[0])
		if err != nil {
			t.Fatal(err)
		}
		if c, err = a.queue.Approve(ctx, "olivia", audit.ChannelCLI, c.ID, c.Digest); err != nil {
			t.Fatal(err)
		}
		if _, err := a.queue.Deny(ctx, "olivia", audit.ChannelCLI, ids[1], "no"); err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodDelete, base+"/api/v1/calls/"+ids[2], nil)
		req.Header.Set("Authorization", "Bearer "+secret)
		if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode/100 != 2 {
			t.Fatalf("cancel: %v %v", res, err)
		} else {
			res.Body.Close()
		}
		call := `{"tool":"payments.refund","target":"invoice:INV-1","args":{"amount_minor":1299,"currency":"USD","reason_code":"duplicate"}}`
		if code, body := post("/api/v1/redeem", `{"grant":"`+c.Grant+`x","call":`+call+`}`); code/100 == 2 && strings.Contains(string(body), `"accepted":true`) {
			t.Fatalf("a forged grant redeemed: %s", body)
		}
		if code, body := post("/api/v1/redeem", `{"grant":"`+c.Grant+`","call":`+call+`}`); code/100 != 2 {
			t.Fatalf("redeem = %d %s", code, body)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			mu.Lock()
			n := posts
			mu.Unlock()
			if n >= 3 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of 3 notifications delivered in 10 s", n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}, section)
}

// scrapeServer serves a console (PostgreSQL at dbURL, or SQLite) on
// 127.0.0.1, runs drive against it, and returns the names of the series
// its /metrics exports.
func scrapeServer(t *testing.T, dbURL string, drive func(t *testing.T, a *app, base string), notifications ...string) map[string]bool {
	t.Helper()
	data := t.TempDir()
	toolsFile := filepath.Join(data, "tools.yaml")
	if err := os.WriteFile(toolsFile, append(append([]byte(nil), examples.ToolsYAML...), strings.Join(notifications, "")...), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	env := func(k string) string {
		if k == "HOOK_SECRET" {
			return "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		}
		return ""
	}
	a, err := openApp(data, dbURL, toolsFile, &notifySource{publicURL: base, getenv: env}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var f serveFlags
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	f.register(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.serve(ctx, ln, f) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := http.Get(base + "/healthz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server did not answer /healthz in 10 s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if drive != nil {
		drive(t, a, base)
	}
	res, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	names := map[string]bool{}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		names[name] = true
	}
	if !names["countersign_store_commits_total"] {
		t.Fatalf("the scrape of %s holds no countersign_store_commits_total", base)
	}
	return names
}

// TestAlertRulesWithPromtool: promtool (Debian's prometheus package)
// checks docs/alerts.yaml and runs its unit tests, docs/alerts_test.yaml.
func TestAlertRulesWithPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is not installed: apt-get install --no-install-recommends prometheus (Debian; .ci/run does), then run this test again")
	}
	for _, args := range [][]string{{"check", "rules", "alerts.yaml"}, {"test", "rules", "alerts_test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "../../docs"
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
	}
}
