package mcp_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/mcp"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/server"
)

// TestHeldCallsCountAgainstTheTokensWaits: a held tools/call takes one of
// its token's places, shared with the API's long-polls
// (--max-waits-per-token). One more call of that token is recorded but not
// held: it is answered at once with too_many_waits, which says to wait or
// re-issue the identical call shortly; another token is unaffected, and
// the re-issued call is held and runs once a place is free.
func TestHeldCallsCountAgainstTheTokensWaits(t *testing.T) {
	waits := server.NewTokenWaits(3)
	e := newEnv(t, envOptions{trust: true, waits: waits})
	cs := e.client(nil, "")
	// A long-poll of the same token through the API holds one place.
	if !waits.Acquire(desk.TokenID) {
		t.Fatal("the API's long-poll got no place")
	}
	type answer struct {
		res *sdk.CallToolResult
		err error
	}
	held := make(chan answer, 2)
	for _, args := range []string{`{"a":1,"b":1}`, `{"a":2,"b":2}`} {
		go func() {
			res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "add", Arguments: json.RawMessage(args)})
			held <- answer{res, err}
		}()
	}
	waitFor(t, "two held calls", func() bool { return e.q.Waiting() == 2 })

	res := callRaw(t, cs, "add", `{"a":3,"b":3}`)
	st := status(t, res)
	id, _ := st["call_id"].(string)
	if !res.IsError || st["status"] != mcp.StatusTooManyWaits || st["retry_after_seconds"] != float64(5) || st["max_waits"] != float64(3) ||
		st["approval_url"] != statusURL(id) || !strings.Contains(text(res), "re-issue exactly the same call in 5 seconds") {
		t.Fatalf("the call over the cap: %s %v", text(res), st)
	}
	if c := e.callOf(id); c.Status != queue.StatusPending || st["digest"] != c.Digest {
		t.Fatalf("the call over the cap is %s (digest %v), want recorded and pending", c.Status, st["digest"])
	}
	if waits.Refused() != 1 || waits.Most() != 3 {
		t.Fatalf("refused %d, most %d; want 1 and 3", waits.Refused(), waits.Most())
	}

	// Another token of the same actor is held as usual.
	other := mcp.Agent{TokenID: "tok_desk_two", Principal: desk.Principal}
	ct, srvT := sdk.NewInMemoryTransports()
	if _, err := e.gw.Connect(context.Background(), "demo", other, srvT); err != nil {
		t.Fatal(err)
	}
	cs2, err := sdk.NewClient(&sdk.Implementation{Name: "second", Version: "1"}, nil).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs2.Close()
	go func() {
		waitFor(t, "the other token's call held", func() bool { return e.q.Waiting() == 3 })
		approvePending(t, e, func(c *queue.Call) bool { a, _ := c.Args.Get("a"); return a == int64(10) })
	}()
	if res := callRaw(t, cs2, "add", `{"a":10,"b":10}`); res.IsError || text(res) != "20" {
		t.Fatalf("another token's call: %s", text(res))
	}

	// The long-poll returns: the re-issued call is held, and runs once
	// approved.
	waits.Release(desk.TokenID)
	go func() {
		waitFor(t, "the re-issued call held", func() bool { return e.q.Waiting() == 3 })
		c := e.callOf(id)
		if _, err := e.q.Approve(context.Background(), "alice", audit.ChannelWeb, c.ID, c.Digest); err != nil {
			t.Error(err)
		}
	}()
	if res := callRaw(t, cs, "add", `{"b":3,"a":3}`); res.IsError || text(res) != "6" {
		t.Fatalf("the re-issued call: %s %v", text(res), res.StructuredContent)
	}
	approvePending(t, e, func(*queue.Call) bool { return true })
	got := map[string]bool{}
	for range 2 {
		a := <-held
		if a.err != nil || a.res.IsError {
			t.Fatalf("a held call: %v %+v", a.err, a.res)
		}
		got[text(a.res)] = true
	}
	if !got["2"] || !got["4"] {
		t.Fatalf("the held calls answered %v", got)
	}
	waitFor(t, "every place given back", func() bool { return waits.Most() == 0 })
}

// approvePending approves, as alice, every pending call that match says.
func approvePending(t *testing.T, e *env, match func(*queue.Call) bool) {
	pending, err := e.q.PendingCalls(context.Background(), 100)
	if err != nil {
		t.Error(err)
		return
	}
	for _, c := range pending {
		if !match(c) {
			continue
		}
		if _, err := e.q.Approve(context.Background(), "alice", audit.ChannelWeb, c.ID, c.Digest); err != nil {
			t.Error(err)
		}
	}
}

// waitFor polls cond until it holds (the state it waits for is reached
// by other goroutines, with no event to wait on).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Errorf("timed out waiting for %s", what)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}
