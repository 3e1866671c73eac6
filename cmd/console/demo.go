package main

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/countersign/countersign/client"
	"github.com/countersign/countersign/examples"
	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
)

// cmdDemo runs the real server on a fresh data directory with the example
// tools, demo logins and an in-process agent that proposes a varied stream
// of calls through the public client, so a newcomer sees the whole loop.
func cmdDemo(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	withUsage(fs, e, `usage: console demo [--addr HOST:PORT] [--data DIR] [--every 8s] [flags]

Runs the real server on a fresh temporary data directory with the example
tools, prints four logins (shown once, and kept in DATA/demo-logins, mode 0600), an agent token to export, and the MCP client settings, and runs
a demo agent that proposes calls. Without --notify it posts every event to a
webhook sink in its own process, which writes each delivery to
DATA/demo-webhooks.log. Ctrl-C stops it. It takes every flag of
serve besides its own.`)
	var f serveFlags
	f.register(fs)
	fs.Lookup("data").Usage = "keep the demo's data in this directory (default: a fresh temporary one, removed at the end; $COUNTERSIGN_DATA is not read)"
	f.mcp.trustFirst = true // the example server's tools are callable at once; pass --trust-first-definitions=false to review them
	f.mcp.reviewFirst = demoReviewFirst
	every := fs.Duration("every", 8*time.Second, "how often the demo agent proposes a call")
	noAgent := fs.Bool("no-agent", false, "do not run the demo agent")
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if err := f.check(); err != nil {
		fmt.Fprintf(e.stderr, "console demo: %v\n", err)
		return 2
	}
	if f.logLevel == "info" {
		f.logLevel = "warn"
	}
	data := f.data
	if data == "" {
		dir, err := os.MkdirTemp("", "countersign-demo-")
		if err != nil {
			fmt.Fprintf(e.stderr, "console demo: %v\n", err)
			return 1
		}
		data = dir
		// A directory the demo made for itself goes when it stops, after
		// the database is closed (this runs after every other deferred
		// call); one named with --data is kept.
		defer func() {
			if err := os.RemoveAll(dir); err != nil {
				fmt.Fprintf(e.stderr, "console demo: remove %s: %v\n", dir, err)
				return
			}
			fmt.Fprintf(e.stdout, "removed the demo's data directory %s (keep one with --data DIR)\n", dir)
		}()
	}
	if f.tools == "" {
		f.tools = filepath.Join(data, "tools.yaml")
		if _, err := os.Stat(f.tools); errors.Is(err, os.ErrNotExist) {
			if err := os.MkdirAll(data, 0o700); err != nil {
				fmt.Fprintf(e.stderr, "console demo: %v\n", err)
				return 1
			}
			if err := os.WriteFile(f.tools, append(append([]byte(nil), examples.ToolsYAML...), examples.MCPDemoSection...), 0o600); err != nil {
				fmt.Fprintf(e.stderr, "console demo: %v\n", err)
				return 1
			}
		}
	}
	sinkLog := ""
	if f.notify == "" {
		if err := os.MkdirAll(data, 0o700); err != nil {
			fmt.Fprintf(e.stderr, "console demo: %v\n", err)
			return 1
		}
		var stopSink func()
		var err error
		if sinkLog, stopSink, err = startDemoSink(ctx, data); err != nil {
			fmt.Fprintf(e.stderr, "console demo: webhook sink: %v\n", err)
			return 1
		}
		defer stopSink()
	}
	log := newLogger(e.stderr, f.logLevel)
	ln, err := listen(f.addr)
	if err != nil {
		fmt.Fprintf(e.stderr, "console demo: %v\n", err)
		return 1
	}
	defer ln.Close()
	a, err := openApp(data, f.db, f.tools, f.notifySource(e, ln), log)
	if err != nil {
		fmt.Fprintf(e.stderr, "console demo: %v\n", err)
		return 1
	}
	defer a.Close()
	logins, err := demoUsers(ctx, a.accounts)
	if err != nil {
		if ctx.Err() != nil {
			return 0 // Ctrl-C while starting: a clean stop
		}
		fmt.Fprintf(e.stderr, "console demo: %v\n", err)
		return 1
	}
	tokens, err := demoTokens(ctx, a.accounts)
	if err != nil {
		if ctx.Err() != nil {
			return 0 // Ctrl-C while starting: a clean stop
		}
		fmt.Fprintf(e.stderr, "console demo: %v\n", err)
		return 1
	}
	// A token for the reader's own agent, as docs/agents.md's step 1 makes
	// one: same actor and audience, so its answers read as the guide shows.
	_, readerToken, err := a.accounts.CreateToken(ctx, demoReaderActor, demoReaderAudience, "your agent (demo)", "demo", audit.ChannelCLI)
	if err != nil {
		if ctx.Err() != nil {
			return 0 // Ctrl-C while starting: a clean stop
		}
		fmt.Fprintf(e.stderr, "console demo: %v\n", err)
		return 1
	}
	// A fresh demo shows an allowance from its start; a reused --data has
	// its own already.
	var allowance *queue.Allowance
	var plan *queue.Plan
	if made := len(logins) > 0 && !strings.HasPrefix(logins[0].password, "("); made {
		if allowance, err = giveDemoAllowance(ctx, a, time.Now()); err == nil {
			plan, err = proposeDemoPlan(ctx, a)
		}
		if err != nil {
			if ctx.Err() != nil {
				return 0
			}
			fmt.Fprintf(e.stderr, "console demo: %v\n", err)
			return 1
		}
	}
	loginsFile, err := writeDemoLogins(data, logins)
	if err != nil {
		fmt.Fprintf(e.stderr, "console demo: %v\n", err)
		return 1
	}
	url := "http://" + ln.Addr().String()
	f.mcp.dial = demoUpstreams()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	// The banner and the agent wait until every setting is checked and
	// the server is about to answer.
	f.ready = func() error {
		fmt.Fprintf(e.stdout, "Countersign demo running at %s\n", url)
		fmt.Fprintf(e.stdout, "Data directory: %s\n\nLogins (shown once):\n", data)
		for _, l := range logins {
			fmt.Fprintf(e.stdout, "  %-7s %-8s %s\n", l.name, l.role, l.password)
		}
		if loginsFile != "" {
			fmt.Fprintf(e.stdout, "The logins are also in %s (readable only by you).\n", loginsFile)
		}
		fmt.Fprintf(e.stdout, "\nAn agent token for you (%s on %s, shown once); paste this, then follow docs/agents.md from step 1:\n", demoReaderActor, demoReaderAudience)
		fmt.Fprintf(e.stdout, "  export COUNTERSIGN_URL=%s COUNTERSIGN_TOKEN=%s\n", url, readerToken)
		if allowance != nil {
			fmt.Fprintf(e.stdout, "\nAn allowance: alice approved refund %s and up to %d more like it (USD, invoices INV-10…, at most 1,000.00) for an hour: %s/allowances/%s; the demo agent's refunds inside it arrive approved.\n",
				allowance.BaseCall, allowance.Uses, url, allowance.ID)
		}
		if plan != nil {
			fmt.Fprintf(e.stdout, "\nA plan waiting for review: %s proposed %d report reads as one plan, one card at the top of the queue (Plans), decided as a whole on its page: %s/plans/%s\n",
				plan.Actor, plan.Items, url, plan.ID)
		}
		if sinkLog != "" {
			fmt.Fprintf(e.stdout, "\nNotifications: every event is posted to a webhook sink in this process; each delivery is a line in %s (watch it with tail -f), and Admin › Deliveries lists them.\n", sinkLog)
		}
		if err := printMCPDemo(ctx, e.stdout, a, data, url); err != nil {
			return err
		}
		if *noAgent {
			fmt.Fprintln(e.stdout, "\nNo demo agent (--no-agent): calls come only from agents you run. Press Ctrl-C to stop.")
		} else {
			fmt.Fprintf(e.stdout, "\nA demo agent proposes a call every %s. Press Ctrl-C to stop.\n", *every)
		}
		if !*noAgent {
			wg.Add(1)
			go func() {
				defer wg.Done()
				runDemoAgent(ctx, url, tokens, *every, e.stdout)
			}()
		}
		return nil
	}
	err = a.serve(ctx, ln, f)
	cancel()
	wg.Wait()
	if err != nil {
		fmt.Fprintf(e.stderr, "console demo: %v\n", err)
		return 1
	}
	fmt.Fprintln(e.stdout, "demo stopped")
	return 0
}

type demoLogin struct {
	name     string
	role     account.Role
	password string
}

var pwEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

func randomPassword() string {
	var b [10]byte
	rand.Read(b[:])
	return strings.ToLower(pwEncoding.EncodeToString(b[:]))
}

// demoUsers creates two operators, an auditor and an admin with random
// passwords. Accounts that already exist (a reused --data) keep theirs.
func demoUsers(ctx context.Context, d *account.Service) ([]demoLogin, error) {
	want := []demoLogin{{"alice", account.RoleOperator, ""}, {"bob", account.RoleOperator, ""},
		{"audrey", account.RoleAuditor, ""}, {"admin", account.RoleAdmin, ""}}
	var out []demoLogin
	for _, l := range want {
		if _, err := d.UserByName(ctx, l.name); err == nil {
			l.password = "(unchanged: the account already existed)"
			out = append(out, l)
			continue
		}
		l.password = randomPassword()
		h, err := account.Hash(l.password)
		if err != nil {
			return nil, err
		}
		if _, err := d.AddUser(ctx, l.name, l.role, h, "demo", audit.ChannelCLI); err != nil {
			return nil, fmt.Errorf("add demo user %s: %w", l.name, err)
		}
		out = append(out, l)
	}
	return out, nil
}

// The reader's agent token is the one docs/agents.md's step 1 creates.
const (
	demoReaderActor    = "agent:billing-bot"
	demoReaderAudience = "payments-host"
)

// demoLoginsFile is where the demo keeps the logins it made, in its data
// directory, so they do not scroll away with the agent's output.
const demoLoginsFile = "demo-logins"

// writeDemoLogins writes the logins to DATA/demo-logins, readable only by
// the owner, and returns its path. When no account is new (a reused --data)
// nothing is written and the file of the run that made them stays.
func writeDemoLogins(data string, logins []demoLogin) (string, error) {
	var b strings.Builder
	made := false
	for _, l := range logins {
		if strings.HasPrefix(l.password, "(") {
			continue
		}
		made = true
		fmt.Fprintf(&b, "%s %s %s\n", l.name, l.role, l.password)
	}
	path := filepath.Join(data, demoLoginsFile)
	if !made {
		if _, err := os.Stat(path); err == nil {
			return path, nil
		}
		return "", nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return "", fmt.Errorf("save the demo logins: %w", err)
	}
	// A file left by an earlier run may be readable by others: close it to them first.
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return "", fmt.Errorf("save the demo logins: %w", err)
	}
	if _, err := f.WriteString(b.String()); err != nil {
		f.Close()
		return "", fmt.Errorf("save the demo logins: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("save the demo logins: %w", err)
	}
	return path, nil
}

// demoAgents are the actors of the demo, one per tool audience.
var demoAgents = map[string]string{
	"payments-host": "agent:billing-bot",
	"files-host":    "agent:janitor",
	"deploy-host":   "agent:release-bot",
	"reports-host":  "agent:analyst",
	"mail-host":     "agent:mailer",
	"search-host":   "agent:support-bot",
	"weather-host":  "agent:concierge",
}

func demoTokens(ctx context.Context, d *account.Service) (map[string]string, error) {
	tokens := map[string]string{}
	for audience, actor := range demoAgents {
		_, secret, err := d.CreateToken(ctx, actor, audience, "demo agent", "demo", audit.ChannelCLI)
		if err != nil {
			return nil, err
		}
		tokens[audience] = secret
	}
	return tokens, nil
}

// demoProposal is one call the demo agent may propose.
type demoProposal struct {
	audience string
	proposal func(n int) client.Proposal
}

var demoScript = []demoProposal{
	{"payments-host", func(n int) client.Proposal {
		return client.Proposal{Tool: "payments.refund", Target: fmt.Sprintf("invoice:INV-%d", 1040+n),
			Args: map[string]any{"amount_minor": demoRefundAmounts[n%len(demoRefundAmounts)], "currency": "USD",
				"reason_code": "duplicate", "notes": "Customer was charged twice; see ticket T-" + fmt.Sprint(7000+n)},
			Rationale: "The customer's card statement shows two identical charges on the same day."}
	}},
	{"mail-host", func(n int) client.Proposal {
		// An argument that hides a right-to-left override and a zero-width
		// space: the console shows both as visible escapes.
		return client.Proposal{Tool: "email.send", Target: "mailbox:billing@example.com",
			Args: map[string]any{"to": []any{map[string]any{"address": "ops@example.com", "name": "Ops\u200bTeam"}},
				"subject": fmt.Sprintf("Invoice %d attached: report\u202Efdp.exe", 7100+n), "body": "Please find the invoice attached."},
			Rationale: "Forwarding the invoice the customer asked for."}
	}},
	{"deploy-host", func(n int) client.Proposal {
		return client.Proposal{Tool: "releases.deploy", Target: "service:checkout",
			Args: map[string]any{"version": fmt.Sprintf("v1.%d.0", 4+n), "environment": "production",
				"change_ticket": fmt.Sprintf("CHG-%d", 4400+n), "canary_percent": 10},
			Rationale: "Release notes approved in the weekly change meeting. Needs two approvers."}
	}},
	{"reports-host", func(n int) client.Proposal {
		return client.Proposal{Tool: "reports.read", Target: "report:revenue-monthly",
			Args: map[string]any{"period": fmt.Sprintf("2026-%02d", 1+n%11), "format": "csv"}}
	}},
	{"search-host", func(n int) client.Proposal {
		return client.Proposal{Tool: "search.query", Target: "index:tickets",
			Args: map[string]any{"query": fmt.Sprintf("checkout timeout %d", n), "limit": 20,
				"filter": map[string]any{"status": "open", "created_after": "2026-11-01", "tags": []any{"checkout", "p1"}}}}
	}},
	{"files-host", func(n int) client.Proposal {
		return client.Proposal{Tool: "files.delete", Target: fmt.Sprintf("file:/srv/shared/exports/old-%d.csv", n),
			Args: map[string]any{"reason": "Export older than the 90-day retention", "backup": true}}
	}},
}

// demoRefundAmounts are the demo agent's refunds in turn. The first is
// above the demo allowance's 1,000.00, so the queue a newcomer opens always
// holds a refund to approve; the next two arrive approved by the allowance.
var demoRefundAmounts = []int{148000, 2750, 64900, 199000, 1299}

// demoPendingCap is how many undecided calls the demo agent lets wait at
// once: a queue a newcomer can read, not one that grows while they do.
const demoPendingCap = 20

// runDemoAgent proposes the script in a loop, and a burst of invalid
// proposals that trips the retry cap, until ctx ends.
func runDemoAgent(ctx context.Context, url string, tokens map[string]string, every time.Duration, out io.Writer) {
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, "agent  "+format+"\n", args...)
	}
	clients := map[string]*client.Client{}
	for aud, tok := range tokens {
		clients[aud] = client.New(url, tok)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	var waiting atomic.Int64 // proposed calls not yet decided
	paused := false
	propose := func(n int, p demoProposal) {
		c := clients[p.audience]
		prop := p.proposal(n)
		call, err := c.Submit(ctx, prop)
		if err != nil {
			if ctx.Err() == nil {
				say("%s refused: %v", prop.Tool, err)
			}
			return
		}
		say("proposed %-16s %-40s %s", call.Tool, call.Target, call.ID)
		waiting.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer waiting.Add(-1)
			finishDemoCall(ctx, c, call, say)
		}()
	}
	// The first round fills the queue at once.
	for i, p := range demoScript {
		propose(i, p)
	}
	invalidBurst(ctx, clients["weather-host"], say)
	t := time.NewTicker(every)
	defer t.Stop()
	for n := len(demoScript); ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if waiting.Load() >= demoPendingCap {
			if !paused {
				say("%d calls wait for a decision; proposing again once some are decided", demoPendingCap)
				paused = true
			}
			continue
		}
		paused = false
		propose(n, demoScript[n%len(demoScript)])
		if n%(3*len(demoScript)) == 0 {
			invalidBurst(ctx, clients["weather-host"], say)
		}
	}
}

// finishDemoCall waits for the decision, then redeems and reports, as an
// executor would.
func finishDemoCall(ctx context.Context, c *client.Client, call *client.Call, say func(string, ...any)) {
	done, err := c.Wait(ctx, call.ID)
	if err != nil {
		return
	}
	switch done.Status {
	case client.StatusApproved:
		res, err := c.Redeem(ctx, done.Grant, done.Spec())
		if err != nil {
			say("redeem %s: %v", call.ID, err)
			return
		}
		if !res.Accepted {
			say("redeem %s rejected: %s", call.ID, res.Reason)
			return
		}
		say("ran      %-16s %-40s %s", call.Tool, call.Target, call.ID)
		if _, err := c.ReportOutcome(ctx, call.ID, client.OutcomeSucceeded, "done by the demo executor"); err != nil {
			say("outcome %s: %v", call.ID, err)
		}
	case client.StatusDenied:
		reason := ""
		if done.Decision != nil {
			reason = done.Decision.Reason
		}
		say("denied   %-16s %-40s %s: %q", call.Tool, call.Target, call.ID, reason)
	default:
		say("%-8s %-16s %-40s %s", done.Status, call.Tool, call.Target, call.ID)
	}
}

// invalidBurst sends proposals with a smuggled parameter until the console
// blocks the pair (three in a row), as a confused model would.
func invalidBurst(ctx context.Context, c *client.Client, say func(string, ...any)) {
	for i := 0; i < 4; i++ {
		_, err := c.Submit(ctx, client.Proposal{Tool: "weather.search", Target: "weather:forecast",
			Args: map[string]any{"city": "Paris", "sql": "SELECT * FROM users"}})
		switch {
		case client.IsCode(err, "retry_limit"):
			say("weather.search blocked after repeated invalid proposals; clear it in the console")
			return
		case err != nil:
			say("weather.search refused: %v", err)
		}
	}
}
