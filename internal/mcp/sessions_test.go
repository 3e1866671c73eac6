package mcp_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/internal/mcp"
)

// TestHTTPSessionsPerTokenAreCapped: one agent token opens at most
// MaxSessionsPerToken sessions over HTTP. One more initialize is refused
// with a JSON-RPC error that says to reuse or close a session, and leaves
// no session behind; the token's open sessions go on working, another
// token opens its own, and a session its client closes gives its place
// back.
func TestHTTPSessionsPerTokenAreCapped(t *testing.T) {
	e, url := httpEnv(t, envOptions{trust: true, maxSessions: 3})
	var open []*sdk.ClientSession
	for range 3 {
		open = append(open, httpClient(t, url, deskToken, "2025-11-25", nil))
	}
	if n := e.gw.SessionsOf(desk.TokenID); n != 3 {
		t.Fatalf("%d sessions counted, want 3", n)
	}

	// Through the SDK's client: the refusal is the error of Connect.
	tr := &sdk.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearer{deskToken, http.DefaultTransport}}}
	_, err := sdk.NewClient(&sdk.Implementation{Name: "fourth", Version: "1"}, nil).Connect(context.Background(), tr,
		&sdk.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err == nil || !strings.Contains(err.Error(), mcp.StatusTooManySessions) || !strings.Contains(err.Error(), "Reuse an open session") ||
		!strings.Contains(err.Error(), "3 sessions open") {
		t.Fatalf("a fourth session: %v, want refused with %s", err, mcp.StatusTooManySessions)
	}
	// On the wire: a JSON-RPC error with the code and what to do in its data.
	resp, body := post(t, url, deskToken, nil, initialize)
	var rpc struct {
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
			Data    struct {
				Code           string `json:"code"`
				MaxSessions    int    `json:"max_sessions"`
				TimeoutSeconds int    `json:"session_timeout_seconds"`
			} `json:"data"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(sseData(body)), &rpc); err != nil {
		t.Fatalf("initialize over the cap: %d %s: %v", resp.StatusCode, body, err)
	}
	if rpc.Error.Code != mcp.CodeTooManySessions || rpc.Error.Data.Code != mcp.StatusTooManySessions || rpc.Error.Data.MaxSessions != 3 ||
		rpc.Error.Data.TimeoutSeconds != int(mcp.DefaultSessionTimeout.Seconds()) || !strings.Contains(rpc.Error.Message, "HTTP DELETE") {
		t.Fatalf("initialize over the cap: %d %s", resp.StatusCode, body)
	}
	// The refused session is gone: its id finds nothing.
	if sid := resp.Header.Get("Mcp-Session-Id"); sid != "" {
		list := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
		if resp, body := post(t, url, deskToken, map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-11-25"}, list); resp.StatusCode != http.StatusNotFound {
			t.Fatalf("the refused session: %d %s, want 404", resp.StatusCode, body)
		}
	}
	if n := e.gw.SessionsOf(desk.TokenID); n != 3 {
		t.Fatalf("%d sessions counted after the refusals, want 3", n)
	}

	// The open sessions work; another token of the same actor is not
	// counted against this one.
	if tools, err := open[0].ListTools(context.Background(), nil); err != nil || len(tools.Tools) == 0 {
		t.Fatalf("an open session: %v", err)
	}
	httpClient(t, url, deskTwo, "2025-11-25", nil)
	if n := e.gw.SessionsOf("tok_two"); n != 1 {
		t.Fatalf("the other token has %d sessions counted, want 1", n)
	}

	// Closing a session (DELETE) gives its place back.
	if err := open[0].Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the closed session's place given back", func() bool { return e.gw.SessionsOf(desk.TokenID) == 2 })
	cs := httpClient(t, url, deskToken, "2025-11-25", nil)
	if tools, err := cs.ListTools(context.Background(), nil); err != nil || len(tools.Tools) == 0 {
		t.Fatalf("the session opened in the freed place: %v", err)
	}
	// Sessions of the stateless protocol are not kept, and not counted.
	httpClient(t, url, deskToken, "2026-07-28", nil)
	if n := e.gw.SessionsOf(desk.TokenID); n != 3 {
		t.Fatalf("%d sessions counted with a stateless client, want 3", n)
	}
	// Nor is an initialize sent at the stateless protocol by hand, which
	// keeps no session: a token at its bound is not refused there (the
	// SDK answers that the protocol has no initialize).
	resp, body = post(t, url, deskToken, map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "initialize"},
		strings.Replace(initialize, `"protocolVersion":"2025-11-25",`,
			`"protocolVersion":"2026-07-28","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}},`, 1))
	if strings.Contains(body, mcp.StatusTooManySessions) || resp.StatusCode == http.StatusOK && strings.Contains(body, `"error"`) {
		t.Fatalf("a stateless initialize at the bound: %d %s", resp.StatusCode, body)
	}
	if n := e.gw.SessionsOf(desk.TokenID); n != 3 {
		t.Fatalf("%d sessions counted after a stateless initialize, want 3", n)
	}
}

// TestHTTPExpiredSessionsGiveTheirPlaceBack: a session idle for
// SessionTimeout is closed, and its place is given back: the token opens
// as many again.
func TestHTTPExpiredSessionsGiveTheirPlaceBack(t *testing.T) {
	e, url := httpEnv(t, envOptions{trust: true, maxSessions: 2, sessionTimeout: 200 * time.Millisecond})
	for round := range 2 {
		for i := range 2 {
			resp, body := post(t, url, deskToken, nil, initialize)
			if resp.StatusCode != 200 || resp.Header.Get("Mcp-Session-Id") == "" || strings.Contains(body, `"error"`) {
				t.Fatalf("round %d, session %d: %d %s", round, i, resp.StatusCode, body)
			}
		}
		waitFor(t, "the idle sessions' places given back", func() bool { return e.gw.SessionsOf(desk.TokenID) == 0 })
	}
}

// sseData is the JSON of a response sent as one server-sent event, or the
// body itself when it is plain JSON.
func sseData(body string) string {
	for _, line := range strings.Split(body, "\n") {
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			return d
		}
	}
	return body
}

// TestHTTPSessionsOpenOnlyByInitialize: the cap counts initialize, so no
// other request may leave a session behind: a request without a session
// id that is not an initialize (before initialization, or carrying the
// sessionless protocol's _meta on the session endpoint) leaves the SDK
// with no session, counted or not, once it is answered.
func TestHTTPSessionsOpenOnlyByInitialize(t *testing.T) {
	e, url := httpEnv(t, envOptions{trust: true, maxSessions: 1})
	base := e.gw.ServedSessions("demo")
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`
	for _, tt := range []struct {
		name   string
		header map[string]string
		body   string
	}{
		{"tools/list before initialize", nil, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`},
		{"ping before initialize", nil, `{"jsonrpc":"2.0","id":1,"method":"ping"}`},
		{"initialized without initialize", nil, `{"jsonrpc":"2.0","method":"notifications/initialized"}`},
		{"sessionless _meta, no header", nil, `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{` + meta + `}}`},
		{"sessionless _meta, an older header", map[string]string{"Mcp-Protocol-Version": "2025-11-25"},
			`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{` + meta + `}}`},
	} {
		for range 3 { // more than the cap of one
			post(t, url, deskToken, tt.header, tt.body)
		}
		waitFor(t, tt.name+": no session left behind", func() bool { return e.gw.ServedSessions("demo") == base })
	}
	if n := e.gw.SessionsOf(desk.TokenID); n != 0 {
		t.Fatalf("%d sessions counted, want 0", n)
	}
	// What is kept is seen: an initialized session is one more.
	httpClient(t, url, deskToken, "2025-11-25", nil)
	if n := e.gw.ServedSessions("demo"); n != base+1 {
		t.Fatalf("%d sessions served after an initialize, want %d", n, base+1)
	}
}

// TestHTTPSessionsOpenGauge: countersign_mcp_sessions_open counts the MCP
// sessions open over HTTP, every token's together. It rises with each
// session's initialize, not with a refused one nor with a request of the
// protocol without sessions, and falls when a client closes its session
// and when an idle session times out.
func TestHTTPSessionsOpenGauge(t *testing.T) {
	t.Run("initialize and close", func(t *testing.T) {
		e, url := httpEnv(t, envOptions{trust: true, maxSessions: 2})
		reg := prometheus.NewRegistry()
		reg.MustRegister(e.gw.Collectors()...)
		if got := sessionsOpen(t, reg); got != 0 {
			t.Fatalf("before any client: %v sessions open, want 0", got)
		}
		a := httpClient(t, url, deskToken, "2025-11-25", nil)
		if got := sessionsOpen(t, reg); got != 1 {
			t.Fatalf("after one initialize: %v sessions open, want 1", got)
		}
		httpClient(t, url, deskToken, "2025-11-25", nil)
		httpClient(t, url, deskTwo, "2025-11-25", nil)
		if got := sessionsOpen(t, reg); got != 3 {
			t.Fatalf("after two tokens' three initializes: %v sessions open, want 3", got)
		}
		// Refused over the token's bound: not counted.
		if resp, body := post(t, url, deskToken, nil, initialize); !strings.Contains(body, mcp.StatusTooManySessions) {
			t.Fatalf("a third session of one token: %d %s, want %s", resp.StatusCode, body, mcp.StatusTooManySessions)
		}
		// The protocol without sessions keeps none.
		httpClient(t, url, deskToken, "2026-07-28", nil)
		if got := sessionsOpen(t, reg); got != 3 {
			t.Fatalf("after a refused initialize and a stateless client: %v sessions open, want 3", got)
		}
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the closed session no longer counted", func() bool { return sessionsOpen(t, reg) == 2 })
	})
	t.Run("idle timeout", func(t *testing.T) {
		e, url := httpEnv(t, envOptions{trust: true, maxSessions: 2, sessionTimeout: 200 * time.Millisecond})
		reg := prometheus.NewRegistry()
		reg.MustRegister(e.gw.Collectors()...)
		for i := range 2 {
			if resp, body := post(t, url, deskToken, nil, initialize); resp.StatusCode != http.StatusOK || resp.Header.Get("Mcp-Session-Id") == "" {
				t.Fatalf("session %d: %d %s", i, resp.StatusCode, body)
			}
		}
		// Each session counted is given back when it times out; one that
		// had not been counted would leave the token refused below.
		waitFor(t, "the idle sessions no longer counted", func() bool { return sessionsOpen(t, reg) == 0 })
		if n := e.gw.SessionsOf(desk.TokenID); n != 0 {
			t.Fatalf("the token has %d sessions counted after they timed out, want 0", n)
		}
	})
}

// sessionsOpen reads countersign_mcp_sessions_open from reg.
func sessionsOpen(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "countersign_mcp_sessions_open" && len(mf.Metric) == 1 {
			return mf.Metric[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no countersign_mcp_sessions_open series")
	return 0
}
