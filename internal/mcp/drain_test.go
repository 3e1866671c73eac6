package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/examples/mcpdemo"
	"github.com/countersign/countersign/internal/mcp"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/tools"
)

// TestDrainWaitsForAForwardUnderWay: a call redeemed and forwarded to an
// upstream that has not answered when the console shuts down (its HTTP
// server gave up on the request, the client went away) is waited for by
// Drain, which the console calls before the database closes: once Drain
// returns, the call's outcome is written. Both ways a call is redeemed:
// in its submission's transaction (a rule approves it) and after a
// person's approval.
func TestDrainWaitsForAForwardUnderWay(t *testing.T) {
	for _, tc := range []struct {
		name, args string
		approve    bool
	}{
		{"approved by a rule", `{"a":2,"b":3}`, false},
		{"approved by a person", `{"a":200,"b":3}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			arrived, release := make(chan struct{}, 1), make(chan struct{})
			demo := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return mcpdemo.NewServer(mcpdemo.Options{}) }, nil)
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				r.Body = io.NopCloser(bytes.NewReader(body))
				if strings.Contains(string(body), `"tools/call"`) {
					arrived <- struct{}{}
					<-release
				}
				demo.ServeHTTP(w, r)
			}))
			t.Cleanup(up.Close)
			dial := mcp.FromConfig(tools.Upstream{Name: "demo", URL: up.URL + "/mcp"}, func(string) string { return "" },
				slog.New(slog.NewTextHandler(io.Discard, nil)))
			e := newEnv(t, envOptions{trust: true, hold: 10 * time.Second, tools: rulesTools, dial: dial})
			cs := e.client(nil, "2025-11-25")
			if tc.approve {
				go e.approveNext(nil)
			}
			// The client goes away once the call reached the upstream, as
			// the HTTP server's shutdown ends its request.
			ctx, cancel := context.WithCancel(context.Background())
			go cs.CallTool(ctx, &sdk.CallToolParams{Name: "add", Arguments: json.RawMessage(tc.args)})
			select {
			case <-arrived:
			case <-time.After(30 * time.Second):
				t.Fatal("the call never reached the upstream")
			}
			cancel()
			drained := make(chan struct{})
			go func() { e.gw.Drain(); close(drained) }()
			select {
			case <-drained:
				close(release)
				t.Fatal("Drain returned while a redeemed call was still being forwarded")
			case <-time.After(300 * time.Millisecond):
			}
			close(release)
			select {
			case <-drained:
			case <-time.After(30 * time.Second):
				t.Fatal("Drain did not return once the upstream answered")
			}
			page, _, err := e.db.History(context.Background(), queue.HistoryFilter{Limit: 1})
			if err != nil || len(page) != 1 {
				t.Fatalf("History: %v %d", err, len(page))
			}
			if c := page[0]; c.Status != queue.StatusRedeemed || c.Outcome == nil || c.Outcome.Status != queue.OutcomeSucceeded {
				t.Fatalf("the call once Drain returned: status %s, outcome %+v", c.Status, c.Outcome)
			}
		})
	}
}

// TestCloseRedeemsNothingMore: once the console closes the gateway (its
// HTTP server shut down), a request still running redeems nothing, so
// nothing runs with the database about to close under its outcome: the
// call is answered not_sent and stays approved, whether a rule approved
// it at submission or a person after a hold; the upstream never sees it.
func TestCloseRedeemsNothingMore(t *testing.T) {
	e := newEnv(t, envOptions{trust: true, hold: 10 * time.Second, tools: rulesTools})
	cs := e.client(nil, "")
	if res := callRaw(t, cs, "add", `{"a":1,"b":1}`); res.IsError || text(res) != "2" {
		t.Fatalf("a call before Close: %s", text(res))
	}
	ran := e.calls.Load()
	e.gw.Close()
	for _, args := range []string{`{"a":2,"b":3}`, `{"a":200,"b":3}`} {
		if args == `{"a":200,"b":3}` {
			// A person approves it while it is held.
			for len(e.events) > 0 {
				<-e.events
			}
			go e.approveNext(nil)
		}
		res := callRaw(t, cs, "add", args)
		st := status(t, res)
		if !res.IsError || st["status"] != mcp.StatusNotSent || !strings.Contains(text(res), "shutting down") {
			t.Fatalf("%s after Close: %s %v", args, text(res), st)
		}
		if c := e.callOf(st["call_id"].(string)); c.Status != queue.StatusApproved {
			t.Fatalf("%s after Close is %s, want approved", args, c.Status)
		}
	}
	if n := e.calls.Load(); n != ran {
		t.Fatalf("the upstream ran %d calls after Close", n-ran)
	}
}
