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
