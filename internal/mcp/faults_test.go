package mcp_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/mcp"
	"github.com/countersign/countersign/internal/queue"
)

// TestAClientThatGoesAwayLeavesTheCallPending: a client that gives up on
// its request while the call is held (notifications/cancelled) ends the
// hold; the call stays pending, nothing runs, and once approved the
// identical call from a new session runs.
func TestAClientThatGoesAwayLeavesTheCallPending(t *testing.T) {
	e := newEnv(t, envOptions{trust: true})
	cs := e.client(nil, "")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "add", Arguments: json.RawMessage(`{"a":5,"b":6}`)})
		errc <- err
	}()
	ev := e.next(audit.KindSubmitted)
	waitFor(t, "the call held", func() bool { return e.q.Waiting() == 1 })
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("the cancelled request answered")
	}
	waitFor(t, "the hold to end", func() bool { return e.q.Waiting() == 0 })
	if c := e.callOf(ev.Call.ID); c.Status != queue.StatusPending || e.calls.Load() != 0 {
		t.Fatalf("after the client left: %s, upstream calls %d", c.Status, e.calls.Load())
	}
	if _, err := e.q.Approve(context.Background(), "alice", audit.ChannelWeb, ev.Call.ID, ev.Call.Digest); err != nil {
		t.Fatal(err)
	}
	if res := callRaw(t, e.client(nil, ""), "add", `{"b":6,"a":5}`); res.IsError || text(res) != "11" {
		t.Fatalf("the identical call from a new session: %s", text(res))
	}
	if c := e.callOf(ev.Call.ID); c.Status != queue.StatusRedeemed {
		t.Fatalf("the call is %s, want redeemed", c.Status)
	}
}

// TestUpstreamLostAfterForwardingIsAnUnknownOutcome: when the connection to
// the upstream breaks after the call was forwarded, whether it ran is
// unknown: the model is told not to re-issue it blindly, and the call's
// outcome is unknown, waiting for a person.
func TestUpstreamLostAfterForwardingIsAnUnknownOutcome(t *testing.T) {
	// Closing the upstream's side usually fails the forwarded request at
	// once; when the close is not seen, the forward timeout ends it, with
	// the same answer and outcome.
	e := newEnv(t, envOptions{trust: true, forward: 15 * time.Second})
	entered := make(chan struct{})
	release := make(chan struct{})
	defer close(release)
	e.upstrm.AddTool(&sdk.Tool{Name: "slow", Description: "Takes its time.", InputSchema: json.RawMessage(`{"type":"object","additionalProperties":false}`)},
		func(ctx context.Context, _ *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			close(entered)
			select {
			case <-release:
			case <-ctx.Done():
			}
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "done"}}}, nil
		})
	approveDefinition(t, e, "slow")
	cs := e.client(nil, "")
	go e.approveNext(nil)
	done := make(chan *sdk.CallToolResult, 1)
	go func() {
		res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "slow", Arguments: json.RawMessage(`{}`)})
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	<-entered
	for ss := range e.upstrm.Sessions() {
		ss.Close()
	}
	res := <-done
	if res == nil {
		t.FailNow()
	}
	if st := status(t, res); !res.IsError || st["status"] != mcp.StatusOutcomeUnknown || !strings.Contains(text(res), "Do not re-issue it blindly") {
		t.Fatalf("a call lost after forwarding: %s %v", text(res), st)
	}
	c := e.lastCall()
	if c.Status != queue.StatusRedeemed || c.Outcome == nil || c.Outcome.Status != queue.OutcomeUnknown || !c.Unresolved() {
		t.Fatalf("the call is %s with outcome %+v, want redeemed, unknown and unresolved", c.Status, c.Outcome)
	}
}

// TestUpstreamSilentPastTheForwardTimeoutIsAnUnknownOutcome: an upstream
// that never answers a forwarded call is given up on after ForwardTimeout;
// whether the call ran is unknown, and that outcome is recorded even though
// the forward's own time is over.
func TestUpstreamSilentPastTheForwardTimeoutIsAnUnknownOutcome(t *testing.T) {
	e := newEnv(t, envOptions{trust: true, forward: 300 * time.Millisecond})
	release := make(chan struct{})
	defer close(release)
	e.upstrm.AddTool(&sdk.Tool{Name: "silent", Description: "Never answers.", InputSchema: json.RawMessage(`{"type":"object","additionalProperties":false}`)},
		func(ctx context.Context, _ *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "late"}}}, nil
		})
	approveDefinition(t, e, "silent")
	go e.approveNext(nil)
	res, err := e.client(nil, "").CallTool(context.Background(), &sdk.CallToolParams{Name: "silent", Arguments: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if st := status(t, res); !res.IsError || st["status"] != mcp.StatusOutcomeUnknown {
		t.Fatalf("a call the upstream never answered: %s %v", text(res), st)
	}
	c := e.lastCall()
	if c.Status != queue.StatusRedeemed || c.Outcome == nil || c.Outcome.Status != queue.OutcomeUnknown || !c.Unresolved() {
		t.Fatalf("the call is %s with outcome %+v, want redeemed, unknown and unresolved", c.Status, c.Outcome)
	}
}

// TestUpstreamAwayWhenApprovedSendsNothing: an approved call whose upstream
// is not connected is not redeemed: the model is told it was not sent, the
// call stays approved with its grant unused, and the identical call runs
// once the upstream is back.
func TestUpstreamAwayWhenApprovedSendsNothing(t *testing.T) {
	offline := &atomic.Bool{}
	e := newEnv(t, envOptions{trust: true, offline: offline})
	cs := e.client(nil, "")
	u, _ := e.gw.Upstream("demo")
	offline.Store(true)
	for ss := range e.upstrm.Sessions() {
		ss.Close()
	}
	waitFor(t, "the upstream to be away", func() bool {
		select {
		case <-u.Connected():
			return false
		default:
			return true
		}
	})
	go e.approveNext(nil)
	res := callRaw(t, cs, "add", `{"a":30,"b":12}`)
	st := status(t, res)
	if !res.IsError || st["status"] != mcp.StatusNotSent || !strings.Contains(text(res), "re-issue the identical call") {
		t.Fatalf("approved while the upstream is away: %s %v", text(res), st)
	}
	c := e.callOf(st["call_id"].(string))
	if c.Status != queue.StatusApproved || !c.RedeemedAt.IsZero() || e.calls.Load() != 0 {
		t.Fatalf("the call is %s (redeemed at %s), upstream calls %d; want approved and unredeemed", c.Status, c.RedeemedAt, e.calls.Load())
	}
	offline.Store(false)
	<-u.Connected()
	if res := callRaw(t, cs, "add", `{"a":30,"b":12}`); res.IsError || text(res) != "42" {
		t.Fatalf("the identical call once the upstream is back: %s", text(res))
	}
	if c := e.callOf(c.ID); c.Status != queue.StatusRedeemed || e.calls.Load() != 1 {
		t.Fatalf("the call is %s, upstream calls %d", c.Status, e.calls.Load())
	}
}

// approveDefinition waits until the upstream's tool is pinned and approves
// its definition as an admin.
func approveDefinition(t *testing.T, e *env, tool string) {
	t.Helper()
	var digest string
	waitFor(t, tool+" pinned", func() bool {
		for _, en := range e.cat.Entries("demo") {
			if en.Pin.Tool == tool {
				digest = en.Digest
				return true
			}
		}
		return false
	})
	if err := e.cat.Review(context.Background(), "demo", tool, digest, "root", true); err != nil {
		t.Fatal(err)
	}
}
