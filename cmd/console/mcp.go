package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/examples/mcpdemo"
	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/console"
	"github.com/countersign/countersign/internal/mcp"
	"github.com/countersign/countersign/internal/mcp/catalog"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/tools"
)

// mcpFlags are serve's flags for the MCP gateway.
type mcpFlags struct {
	hold        time.Duration
	trustFirst  bool
	maxSessions int
	// reviewFirst, per server, are tools whose first definition awaits
	// review even with trustFirst (the demo's); not a flag.
	reviewFirst map[string][]string
	// dial reaches upstreams in this process instead of as the tools file
	// says (the demo's example server); not a flag.
	dial map[string]func(ctx context.Context) (sdk.Transport, error)
}

func (f *mcpFlags) register(fs *flag.FlagSet) {
	fs.DurationVar(&f.hold, "hold", mcp.DefaultHold, "how long an MCP tools/call waits for a decision before it is answered as approval_pending (at most 55s: clients give up at 60s)")
	fs.IntVar(&f.maxSessions, "max-mcp-sessions-per-token", mcp.DefaultMaxSessionsPerToken, "how many MCP sessions (initialize, protocols up to 2025-11-25) one agent token may have open at once; each is kept until its client closes it or it is idle for 30 minutes, and one more initialize is refused with the JSON-RPC error too_many_sessions")
	fs.BoolVar(&f.trustFirst, "trust-first-definitions", false, "approve the tool definitions MCP upstreams list at their first connection after this start, for tools never seen before; changed definitions are always held for review")
}

// gateway builds the MCP gateway over the tools file's upstreams; nil when
// the file has none.
func (a *app) gateway(f serveFlags, publicURL string, waits mcp.Waits, links *console.StatusLinks) (*mcp.Gateway, *catalog.Catalog, error) {
	ups := a.tools.Upstreams()
	if len(ups) == 0 {
		return nil, nil, nil
	}
	cc := catalog.Config{Store: a.db.catalog, Registry: a.tools, TrustFirst: f.mcp.trustFirst, ReviewFirst: f.mcp.reviewFirst, Rules: a.policy, Logger: a.log}
	if a.notify != nil {
		cc.Notifier = a.notify.router
	}
	cat := catalog.New(cc)
	dial := map[string]func(ctx context.Context) (sdk.Transport, error){}
	for _, u := range ups {
		if d, ok := f.mcp.dial[u.Name]; ok {
			dial[u.Name] = d
			continue
		}
		dial[u.Name] = mcp.FromConfig(u, os.Getenv, a.log)
	}
	gw, err := mcp.NewGateway(mcp.GatewayConfig{
		Queue: a.queue, Catalog: cat, Dial: dial, PublicURL: publicURL, HostChecked: true,
		Hold: f.mcp.hold, Logger: a.log, Waits: waits, StatusURL: links.URL, MaxSessionsPerToken: f.mcp.maxSessions,
		PublicNames:  a.accounts.PublicNames,
		Authenticate: mcpAgent(a.accounts),
	})
	if err != nil {
		return nil, nil, err
	}
	return gw, cat, nil
}

// cmdMCPBridge relays an MCP client that launches stdio servers to a
// console's /mcp/{name} endpoint.
func cmdMCPBridge(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("mcp-bridge", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	withUsage(fs, e, `usage: console mcp-bridge --url URL [--token-file FILE]

A stdio MCP server for clients that launch one: it relays every message to
the console's Streamable HTTP endpoint /mcp/{name} with the agent token.`)
	url := fs.String("url", "", "the console's MCP endpoint, e.g. https://approvals.example.com/mcp/github")
	tokenFile := fs.String("token-file", "", "file holding the agent token (audience: the endpoint's name); default $COUNTERSIGN_TOKEN")
	logLevel := fs.String("log-level", "warn", "debug, info, warn or error (written to stderr)")
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if *url == "" || fs.NArg() > 0 {
		fmt.Fprintln(e.stderr, "usage: console mcp-bridge --url URL [--token-file FILE]")
		return 2
	}
	if err := checkLogLevel(*logLevel); err != nil {
		fmt.Fprintf(e.stderr, "console mcp-bridge: %v\n", err)
		return 2
	}
	token := e.getenv("COUNTERSIGN_TOKEN")
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			fmt.Fprintf(e.stderr, "console mcp-bridge: %v\n", err)
			return 1
		}
		token = strings.TrimSpace(string(b))
	}
	if token == "" {
		fmt.Fprintln(e.stderr, "console mcp-bridge: no token: pass --token-file FILE or set COUNTERSIGN_TOKEN")
		return 2
	}
	err := mcp.Bridge(ctx, mcp.BridgeConfig{URL: *url, Token: token, Logger: newLogger(e.stderr, *logLevel)}, e.stdin, e.stdout)
	if err != nil {
		fmt.Fprintf(e.stderr, "console mcp-bridge: %v\n", err)
		return 1
	}
	return 0
}

// demoUpstreams serves the example MCP server in this process.
func demoUpstreams() map[string]func(ctx context.Context) (sdk.Transport, error) {
	return map[string]func(ctx context.Context) (sdk.Transport, error){"demo": mcp.InMemory(mcpdemo.NewServer(mcpdemo.Options{}))}
}

// printMCPDemo makes an agent token for /mcp/demo and prints what an MCP
// client needs: the endpoint, the token, and the configuration of a client
// that speaks Streamable HTTP and of one that only launches stdio servers.
func printMCPDemo(ctx context.Context, w io.Writer, a *app, data, url string) error {
	if len(a.tools.Upstreams()) == 0 {
		return nil
	}
	_, secret, err := a.accounts.CreateToken(ctx, "agent:desk", "demo", "demo MCP client", "demo", audit.ChannelCLI)
	if err != nil {
		return err
	}
	tokenFile := filepath.Join(data, "mcp-demo.token")
	if err := os.WriteFile(tokenFile, []byte(secret+"\n"), 0o600); err != nil {
		return err
	}
	endpoint := url + "/mcp/demo"
	httpConfig, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"countersign-demo": map[string]any{
		"type": "http", "url": endpoint, "headers": map[string]string{"Authorization": "Bearer " + secret}}}})
	stdioConfig, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"countersign-demo": map[string]any{
		"command": "console", "args": []string{"mcp-bridge", "--url", endpoint, "--token-file", tokenFile}}}})
	fmt.Fprintf(w, "\nMCP gateway: the example MCP server's tools at %s (actor agent:desk; every call waits for an operator)\n", endpoint)
	for server, names := range demoReviewFirst {
		for _, name := range names {
			fmt.Fprintf(w, "  %s's definition awaits an admin's review: log in as admin and open %s/admin/mcp; until it is approved there, the gateway lists it as awaiting review and refuses its calls\n",
				tools.MirroredName(server, name), url)
		}
	}
	fmt.Fprintf(w, "  token (also in %s): %s\n", tokenFile, secret)
	fmt.Fprintf(w, "  a client that speaks Streamable HTTP:\n    %s\n", httpConfig)
	fmt.Fprintf(w, "  a client that launches stdio servers (build console with 'go build -o console ./cmd/console' and put it on PATH):\n    %s\n", stdioConfig)
	fmt.Fprintf(w, "  or from a shell: console mcp-bridge --url %s --token-file %s\n", endpoint, tokenFile)
	return nil
}

// mcpAgent authenticates the gateway's bearer tokens: agent tokens only. A
// person's operator token, like an unknown or revoked token, is
// unauthorized: it never submits or redeems calls.
func mcpAgent(accounts *account.Service) func(context.Context, string) (mcp.Agent, error) {
	return func(ctx context.Context, secret string) (mcp.Agent, error) {
		t, err := accounts.TokenBySecret(ctx, secret)
		if errors.Is(err, account.ErrTokenNotFound) {
			return mcp.Agent{}, mcp.ErrUnauthorized
		}
		if err != nil {
			return mcp.Agent{}, err
		}
		return mcp.Agent{TokenID: t.ID, Principal: queue.Principal{Actor: t.Actor, Audience: t.Audience, Owners: t.Owners}}, nil
	}
}

// demoReviewFirst is the example server's tool whose definition the demo
// leaves to an admin's review, so that the review is seen: the others are
// trusted at the first start.
var demoReviewFirst = map[string][]string{"demo": {"create_order"}}
