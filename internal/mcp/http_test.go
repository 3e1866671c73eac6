package mcp_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/mcp"
	"github.com/countersign/countersign/internal/queue"
)

// Tokens of the HTTP tests: desk's for /mcp/demo, and one for another
// audience.
const (
	deskToken  = "cst_desk"
	otherToken = "cst_other"
	deskTwo    = "cst_desk_two" // the same actor, another token
)

// httpEnv serves the gateway over HTTP on 127.0.0.1.
func httpEnv(t *testing.T, o envOptions) (*env, string) {
	t.Helper()
	e := newEnvWith(t, o, func(ctx context.Context, secret string) (mcp.Agent, error) {
		switch secret {
		case deskToken:
			return desk, nil
		case deskTwo:
			return mcp.Agent{TokenID: "tok_two", Principal: desk.Principal}, nil
		case otherToken:
			return mcp.Agent{TokenID: "tok_other", Principal: queue.Principal{Actor: "agent:desk", Audience: "payments-host"}}, nil
		}
		return mcp.Agent{}, mcp.ErrUnauthorized
	})
	srv := httptest.NewServer(e.gw)
	t.Cleanup(srv.Close)
	return e, srv.URL + "/mcp/demo"
}

// bearer adds a token to every request.
type bearer struct {
	token string
	base  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

func httpClient(t *testing.T, url, token, version string, opt *sdk.ClientOptions) *sdk.ClientSession {
	t.Helper()
	tr := &sdk.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearer{token, http.DefaultTransport}}}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "http-test", Version: "1"}, opt).Connect(context.Background(), tr,
		&sdk.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connect at %q: %v", version, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func post(t *testing.T, url, token string, header map[string]string, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

func TestHTTPRefusals(t *testing.T) {
	_, url := httpEnv(t, envOptions{trust: true})
	tests := []struct {
		name   string
		url    string
		token  string
		header map[string]string
		body   string
		status int
		code   string
	}{
		{"no token", url, "", nil, initialize, 401, "unauthorized"},
		{"unknown token", url, "cst_nobody", nil, initialize, 401, "unauthorized"},
		{"another audience", url, otherToken, nil, initialize, 403, "audience_not_allowed"},
		{"unknown server", strings.TrimSuffix(url, "demo") + "nope", deskToken, nil, initialize, 404, "not_found"},
		{"a browser page on another origin", url, deskToken, map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}, initialize, 403, "forbidden"},
		{"a body over 256 KiB", url, deskToken, nil, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"pad":"` + strings.Repeat("x", 256<<10) + `"}}`, 413, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := post(t, tt.url, tt.token, tt.header, tt.body)
			if resp.StatusCode != tt.status {
				t.Fatalf("%d %s, want %d", resp.StatusCode, body, tt.status)
			}
			if tt.code != "" && !strings.Contains(body, `"code":"`+tt.code+`"`) {
				t.Fatalf("body %s, want the error code %s", body, tt.code)
			}
			if tt.status == 401 && resp.Header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
	// The public URL's origin is a browser origin the gateway accepts.
	if resp, body := post(t, url, deskToken, map[string]string{"Origin": "https://approvals.example.com"}, initialize); resp.StatusCode != 200 {
		t.Fatalf("from the public URL's origin: %d %s", resp.StatusCode, body)
	}
}

func TestHTTPSessionIsBoundToItsToken(t *testing.T) {
	_, url := httpEnv(t, envOptions{trust: true})
	resp, body := post(t, url, deskToken, nil, initialize)
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != 200 || sid == "" {
		t.Fatalf("initialize: %d %s (session %q)", resp.StatusCode, body, sid)
	}
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	h := map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-11-25"}
	if resp, body := post(t, url, deskTwo, h, list); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("another token of the same actor on the session: %d %s, want 403", resp.StatusCode, body)
	}
	if resp, body := post(t, url, deskToken, h, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("initialized: %d %s", resp.StatusCode, body)
	}
	if resp, body := post(t, url, deskToken, h, list); resp.StatusCode != 200 || !strings.Contains(body, `"name":"add"`) {
		t.Fatalf("its own token: %d %s", resp.StatusCode, body)
	}
}

// TestHTTPAtEveryProtocolVersion runs the whole loop through the SDK's
// own client over Streamable HTTP at each version it speaks, the newest
// (2026-07-28, without sessions) included.
func TestHTTPAtEveryProtocolVersion(t *testing.T) {
	e, url := httpEnv(t, envOptions{trust: true})
	for i, version := range sdk.SupportedProtocolVersions() {
		t.Run(version, func(t *testing.T) {
			cs := httpClient(t, url, deskToken, version, nil)
			if got := cs.InitializeResult().ProtocolVersion; got != version {
				t.Fatalf("negotiated %s", got)
			}
			tools, err := cs.ListTools(context.Background(), nil)
			if err != nil || len(tools.Tools) != 6 {
				t.Fatalf("tools/list: %v, %d tools", err, len(tools.Tools))
			}
			go e.approveNext(nil)
			a := 1000 + i
			res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "add", Arguments: json.RawMessage(`{"a":` + strconv.Itoa(a) + `,"b":1}`)})
			if err != nil || res.IsError || text(res) != strconv.Itoa(a+1) {
				t.Fatalf("add: %v %+v", err, res)
			}
		})
	}
}

// TestBridge drives the gateway through the stdio bridge with the SDK's
// client speaking newline-delimited JSON on the bridge's stdin and stdout.
func TestBridge(t *testing.T) {
	e, url := httpEnv(t, envOptions{trust: true, hold: 200 * time.Millisecond})
	cin, bin := io.Pipe()   // client writes, bridge reads
	bout, cout := io.Pipe() // bridge writes, client reads
	done := make(chan error, 1)
	go func() {
		done <- mcp.Bridge(context.Background(), mcp.BridgeConfig{URL: url, Token: deskToken, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, cin, cout)
		cout.Close()
	}()
	changed := make(chan struct{}, 4)
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "stdio-client", Version: "1"}, &sdk.ClientOptions{
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) { changed <- struct{}{} },
	}).Connect(context.Background(), &sdk.IOTransport{Reader: bout, Writer: bin}, &sdk.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	res := callRaw(t, cs, "echo", `{"n":9007199254740991,"x":0.1}`)
	st := status(t, res)
	if st["status"] != mcp.StatusApprovalPending {
		t.Fatalf("through the bridge: %s %v", text(res), st)
	}
	c := e.callOf(st["call_id"].(string))
	if _, err := e.q.Approve(context.Background(), "alice", audit.ChannelWeb, c.ID, c.Digest); err != nil {
		t.Fatal(err)
	}
	if res = callRaw(t, cs, "echo", `{"x":0.1,"n":9007199254740991}`); res.IsError || text(res) != `{"n":9007199254740991,"x":0.1}` {
		t.Fatalf("the approved call through the bridge: %s", text(res))
	}
	// What the console sends unasked reaches the client: a tool new at the
	// upstream is listed (held for review), and the client is told.
	e.upstrm.AddTool(&sdk.Tool{Name: "late", Description: "Appeared later.", InputSchema: json.RawMessage(`{"type":"object","additionalProperties":false}`)},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{}, nil
		})
	select {
	case <-changed:
	case <-time.After(30 * time.Second):
		t.Fatal("no tools/list_changed through the bridge")
	}
	late := ""
	for _, en := range e.cat.Entries("demo") {
		if en.Pin.Tool == "late" {
			late = mcp.ListedName(en)
		}
	}
	if res := callRaw(t, cs, late, `{}`); status(t, res)["status"] != mcp.StatusUnderReview {
		t.Fatalf("the new tool before review: %s", text(res))
	}
	cs.Close()
	bin.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Bridge: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the bridge did not end when its input did")
	}
}

// TestHeldCallOfARevokedTokenDoesNotRun: a tools/call is held over HTTP;
// while it waits the agent's token is revoked and then the call is
// approved: the held request does not redeem or forward it (over the
// agent API the redemption is a request of its own, which the revoked
// token could not make), and says why.
func TestHeldCallOfARevokedTokenDoesNotRun(t *testing.T) {
	var revoked atomic.Bool
	e := newEnvWith(t, envOptions{trust: true}, func(ctx context.Context, secret string) (mcp.Agent, error) {
		if secret == deskToken && !revoked.Load() {
			return desk, nil
		}
		return mcp.Agent{}, mcp.ErrUnauthorized
	})
	srv := httptest.NewServer(e.gw)
	t.Cleanup(srv.Close)
	cs := httpClient(t, srv.URL+"/mcp/demo", deskToken, "2025-11-25", nil)
	go func() {
		ev := e.next(audit.KindSubmitted)
		revoked.Store(true)
		if _, err := e.q.Approve(context.Background(), "alice", audit.ChannelWeb, ev.Call.ID, ev.Call.Digest); err != nil {
			t.Errorf("Approve: %v", err)
		}
	}()
	res := callRaw(t, cs, "add", `{"a":2,"b":3}`)
	c := e.lastCall()
	if n := e.calls.Load(); n != 0 {
		t.Fatalf("the upstream ran %d calls of a token revoked while its call was held (result %s)", n, text(res))
	}
	if st := status(t, res); !res.IsError || st["status"] != mcp.StatusTokenRevoked || st["call_id"] != c.ID {
		t.Errorf("result %s %v, want %s", text(res), st, mcp.StatusTokenRevoked)
	}
	if c.Status != queue.StatusApproved {
		t.Errorf("call %s, want approved and not redeemed", c.Status)
	}
}
