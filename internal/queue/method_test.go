package queue_test

import (
	"testing"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
)

// TestApprovalHuman: a person saw the call only when a page's
// presentation was checked; a rule or an allowance is no person; anything
// else carries a person's name but no proof of what they saw.
func TestApprovalHuman(t *testing.T) {
	shown := &queue.Presented{Page: "call", At: time.Unix(1, 0)}
	for _, tc := range []struct {
		a    queue.Approval
		want string
	}{
		{queue.Approval{Operator: "alice", Channel: audit.ChannelWeb, Method: queue.MethodClick, Presented: shown}, queue.HumanTrue},
		{queue.Approval{Operator: "alice", Channel: audit.ChannelWeb, Method: queue.MethodPasskey, Presented: shown}, queue.HumanTrue},
		{queue.Approval{Operator: "alice", Channel: audit.ChannelWeb, Method: queue.MethodBatch, Via: "batch_1", Presented: shown}, queue.HumanTrue},
		// A click stored before presentations were checked proves nothing.
		{queue.Approval{Operator: "alice", Channel: audit.ChannelWeb, Method: queue.MethodClick}, queue.HumanUnattested},
		{queue.Approval{Operator: "alice", Channel: audit.ChannelCLI, Method: queue.MethodCommand}, queue.HumanUnattested},
		{queue.Approval{Operator: "policy:small-refunds", Channel: queue.ChannelPolicy, Method: queue.MethodPolicy}, queue.HumanFalse},
		{queue.Approval{Operator: "alice", Channel: queue.ChannelAllowance, Method: queue.MethodAllowance, Via: "alw_1"}, queue.HumanFalse},
	} {
		if got := tc.a.Human(); got != tc.want {
			t.Errorf("Human of %+v = %q, want %q", tc.a, got, tc.want)
		}
	}
}
