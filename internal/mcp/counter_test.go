package mcp_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/mcp"
	"github.com/countersign/countersign/internal/queue"
)

// counterTools lets an operator edit the mirrored add's a.
const counterTools = `mcp:
  demo:
    command: [mcp-demo]
    tools:
      add:
        counter: {edit: [/a]}
`

// TestCounteredMirroredCall: an operator counters a held call; the tool
// error says what changed and names the counter's arguments; calling the
// tool with them accepts the counter, which runs once approved, and the
// original arguments again are refused with the counter.
func TestCounteredMirroredCall(t *testing.T) {
	e := newEnv(t, envOptions{trust: true, tools: counterTools})
	cs := e.client(nil, "")
	go func() {
		ev := e.next(audit.KindSubmitted)
		if _, err := e.q.Counter(context.Background(), queue.CounterInput{Operator: "alice", Channel: audit.ChannelCLI,
			CallID: ev.Call.ID, Digest: ev.Call.Digest, Edits: map[string]json.RawMessage{"/a": json.RawMessage("10")}}); err != nil {
			t.Errorf("Counter: %v", err)
		}
	}()
	res := callRaw(t, cs, "add", `{"a":400,"b":2}`)
	st := status(t, res)
	if !res.IsError || st["status"] != mcp.StatusCountered || st["countered_by"] == nil ||
		!strings.Contains(text(res), "a changed from 400 to 10") || !strings.Contains(text(res), `{"a":10,"b":2}`) {
		t.Fatalf("countered call: %s %v", text(res), st)
	}
	counterID, _ := st["countered_by"].(string)
	if e.calls.Load() != 0 {
		t.Fatal("a countered call reached the upstream")
	}
	// The original again: refused with the counter's arguments.
	res = callRaw(t, cs, "add", `{"a":400,"b":2}`)
	if st := status(t, res); st["status"] != mcp.StatusCountered || st["countered_by"] != counterID {
		t.Fatalf("the original again: %s %v", text(res), st)
	}
	// The counter's arguments: accepted, and with the editor's approval
	// complete it runs at once.
	res = callRaw(t, cs, "add", `{"a":10,"b":2}`)
	if res.IsError || e.calls.Load() != 1 {
		t.Fatalf("the counter's arguments: %s", text(res))
	}
	c, err := e.q.Call(context.Background(), counterID)
	if err != nil || c.Status != queue.StatusRedeemed || c.AcceptedAt.IsZero() {
		t.Fatalf("the counter after the call: %+v %v", c, err)
	}
}

// forwardTools lets the gateway run a narrowing edit of add itself.
const forwardTools = `mcp:
  demo:
    command: [mcp-demo]
    tools:
      add:
        counter: {edit: [/a, /b], forward: true}
`

// TestForwardedCounter: with forward, a counter that lowers an integer
// bounded below runs at once, its result starting with what the operator
// changed; one that raises a value needs a person other than the editor,
// and the model is told of the counter instead.
func TestForwardedCounter(t *testing.T) {
	e := newEnv(t, envOptions{trust: true, tools: forwardTools})
	cs := e.client(nil, "")
	counterWith := func(edits string) {
		go func() {
			ev := e.next(audit.KindSubmitted)
			for ev.Call.CounteredFrom != "" { // the previous counter's own submission
				ev = e.next(audit.KindSubmitted)
			}
			var m map[string]json.RawMessage
			json.Unmarshal([]byte(edits), &m)
			if _, err := e.q.Counter(context.Background(), queue.CounterInput{Operator: "alice", Channel: audit.ChannelCLI,
				CallID: ev.Call.ID, Digest: ev.Call.Digest, Edits: m}); err != nil {
				t.Errorf("Counter: %v", err)
			}
		}()
	}
	counterWith(`{"/a": 3}`)
	res := callRaw(t, cs, "add", `{"a":40,"b":2}`)
	if res.IsError || e.calls.Load() != 1 || !strings.HasPrefix(text(res), "An operator changed this call before approving it: a changed from 40 to 3.") {
		t.Fatalf("a narrowing forwarded counter: %v %s", res.IsError, text(res))
	}
	counterWith(`{"/b": 9}`)
	res = callRaw(t, cs, "add", `{"a":41,"b":2}`)
	st := status(t, res)
	if !res.IsError || st["status"] != mcp.StatusCountered || e.calls.Load() != 1 {
		t.Fatalf("a raising forwarded counter: %s %v", text(res), st)
	}
	c, err := e.q.Call(context.Background(), st["countered_by"].(string))
	if err != nil || c.ApprovalsRequired != 2 || len(c.Approvals) != 1 || c.Status != queue.StatusPending {
		t.Fatalf("the raising counter: %+v %v", c, err)
	}
}
