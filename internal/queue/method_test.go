package queue_test

import (
	"testing"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
)

// TestApprovalMethod: how an approval was given follows from its channel,
// and a passkey's signature wins over the channel it came through.
func TestApprovalMethod(t *testing.T) {
	signed := &queue.ApprovalPasskey{Name: "laptop"}
	for _, tc := range []struct {
		a    queue.Approval
		want string
	}{
		{queue.Approval{Operator: "alice", Channel: audit.ChannelWeb}, queue.MethodClick},
		{queue.Approval{Operator: "alice", Channel: audit.ChannelWeb, Passkey: signed}, queue.MethodPasskey},
		{queue.Approval{Operator: "alice", Channel: audit.ChannelCLI}, queue.MethodCommand},
		{queue.Approval{Operator: "policy:small-refunds", Channel: queue.ChannelPolicy}, queue.MethodPolicy},
		{queue.Approval{Operator: "alice", Channel: "pager"}, "pager"},
	} {
		if got := tc.a.Method(); got != tc.want {
			t.Errorf("Method of %+v = %q, want %q", tc.a, got, tc.want)
		}
	}
}
