package mcp_test

import (
	"context"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/mcp"
	"github.com/countersign/countersign/internal/queue"
)

// TestFoundAgainPerToken: re-issuing an identical tools/call finds the
// call that the same token made; another token of the same actor making
// the identical call gets a call of its own, held for its own approval,
// and never runs the first token's approved one.
func TestFoundAgainPerToken(t *testing.T) {
	e := newEnv(t, envOptions{trust: true, hold: 300 * time.Millisecond})
	cs := e.client(nil, "")
	res := callRaw(t, cs, "add", `{"a":40,"b":2}`)
	c := e.lastCall()
	if st := status(t, res); st["status"] != mcp.StatusApprovalPending || st["call_id"] != c.ID {
		t.Fatalf("first call: %s", text(res))
	}
	if c.SubmittedBy != desk.TokenID {
		t.Fatalf("the call's SubmittedBy = %q, want %q", c.SubmittedBy, desk.TokenID)
	}
	if _, err := e.q.Approve(context.Background(), "alice", audit.ChannelWeb, c.ID, c.Digest); err != nil {
		t.Fatal(err)
	}

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
	res = callRaw(t, cs2, "add", `{"a":40,"b":2}`)
	st := status(t, res)
	if st["status"] != mcp.StatusApprovalPending || st["call_id"] == c.ID {
		t.Fatalf("the identical call from another token: %s %v, want a new call held for approval", text(res), st)
	}
	if n := e.calls.Load(); n != 0 {
		t.Fatalf("the upstream ran %d calls, want none", n)
	}
	if got := e.callOf(c.ID); got.Status != queue.StatusApproved {
		t.Fatalf("the first token's call is %s, want still approved", got.Status)
	}
	if got := e.callOf(st["call_id"].(string)); got.SubmittedBy != other.TokenID || got.Grant != "" {
		t.Fatalf("the second token's call: submitted by %q, grant %t", got.SubmittedBy, got.Grant != "")
	}

	// The first token re-issues it: its own approved call is found and runs.
	if res := callRaw(t, cs, "add", `{"b":2,"a":40}`); res.IsError || text(res) != "42" {
		t.Fatalf("re-issued by the first token: %s", text(res))
	}
	if got := e.callOf(c.ID); got.Status != queue.StatusRedeemed || got.RedeemedBy != desk.TokenID || e.calls.Load() != 1 {
		t.Fatalf("call %s redeemed by %q, upstream calls %d", got.Status, got.RedeemedBy, e.calls.Load())
	}
}
