package server

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/answer"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/wire"
)

// TestCallViewApprovalsAndOwners: the call object lists each approval with
// who gave it, through which channel and how, and the agent's owners; a
// call with neither has neither member.
func TestCallViewApprovalsAndOwners(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 600_000_000, time.UTC)
	c := &queue.Call{ID: "call_x", Status: queue.StatusPending, ApprovalsRequired: 4,
		Owners: []string{"olga", "team:payments"},
		Approvals: []queue.Approval{
			{Operator: "alice", Channel: audit.ChannelWeb, At: at, Method: queue.MethodClick, Digest: "d"},
			{Operator: "bob", Channel: audit.ChannelWeb, At: at.Add(time.Second), Passkey: &queue.ApprovalPasskey{Name: "laptop", Evidence: []byte(`{}`)},
				Method: queue.MethodPasskey, Digest: "d"},
			{Operator: "carol", Channel: audit.ChannelCLI, At: at.Add(2 * time.Second), Comment: "ok", Method: queue.MethodCommand, Digest: "d"},
			{Operator: "policy:small-refunds", Channel: queue.ChannelPolicy, At: at.Add(3 * time.Second), Method: queue.MethodPolicy, Digest: "d"},
		}}
	var got struct {
		Approvals struct {
			Required, Received int
			Given              []map[string]string
		}
		Owners []string
	}
	b, _ := json.Marshal(mustStored(t, c))
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := []map[string]string{
		{"by": "alice", "channel": "web", "method": "click", "human": "unattested", "digest": "d", "at": "2030-01-02T03:04:05.6Z"},
		{"by": "bob", "channel": "web", "method": "passkey", "human": "unattested", "digest": "d", "at": "2030-01-02T03:04:06.6Z"},
		{"by": "carol", "channel": "cli", "method": "command", "human": "unattested", "digest": "d", "at": "2030-01-02T03:04:07.6Z"},
		{"by": "policy:small-refunds", "channel": "policy", "method": "policy", "human": "false", "digest": "d", "at": "2030-01-02T03:04:08.6Z"},
	}
	if got.Approvals.Required != 4 || got.Approvals.Received != 4 || len(got.Approvals.Given) != len(want) {
		t.Fatalf("approvals = %+v, want 4 of 4 with %d given", got.Approvals, len(want))
	}
	for i := range want {
		for k, v := range want[i] {
			if got.Approvals.Given[i][k] != v || len(got.Approvals.Given[i]) != len(want[i]) {
				t.Errorf("given[%d] = %v, want %v", i, got.Approvals.Given[i], want[i])
				break
			}
		}
	}
	if len(got.Owners) != 2 || got.Owners[0] != "olga" || got.Owners[1] != "team:payments" {
		t.Errorf("owners = %q, want [olga team:payments]", got.Owners)
	}

	var bare map[string]any
	b, _ = json.Marshal(mustStored(t, &queue.Call{ID: "call_y", Status: queue.StatusPending, ApprovalsRequired: 1}))
	if err := json.Unmarshal(b, &bare); err != nil {
		t.Fatal(err)
	}
	ap, _ := bare["approvals"].(map[string]any)
	if _, ok := bare["owners"]; ok || len(ap) != 2 {
		t.Errorf("a call nobody owns or approved: owners %v, approvals %v; want no owners, required and received only", bare["owners"], ap)
	}
}

// mustStored is the call object as operators' tools see it.
func mustStored(t testing.TB, c *queue.Call) wire.Call {
	t.Helper()
	v, err := answer.CallAsStored(c, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return v
}
