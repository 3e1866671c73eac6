package queue_test

import (
	"context"
	"errors"
	"testing"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/tools"
)

// TestConfirmationIsCheckedInTheDecision: the text a tool asks to be typed
// and the acknowledgement of a deception warning are checked by the
// approving transaction against the call as stored, on every channel: a
// caller that skips its own check, or hands in a call it read (Seen) that
// says otherwise, approves nothing.
func TestConfirmationIsCheckedInTheDecision(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	files := queue.Principal{Actor: "agent:files", Audience: "files-host"}
	del, _, err := e.q.Submit(ctx, files, []byte(`{"tool":"files.delete","target":"file:/srv/shared/old/report.csv","args":{"reason":"superseded"}}`))
	if err != nil {
		t.Fatal(err)
	}
	// The refund's rationale hides a right-to-left override.
	tricky, _, err := e.q.Submit(ctx, agent, []byte(`{"tool":"payments.refund","target":"invoice:INV-7","args":`+refundArgs+
		`,"rationale":"refund \u202etsop rof"}`))
	if err != nil {
		t.Fatal(err)
	}
	innocent := *tricky
	innocent.Rationale = "refund for post"

	for _, ch := range []string{audit.ChannelWeb, audit.ChannelCLI} {
		in := queue.ApproveInput{Operator: "alice", Channel: ch, CallID: del.ID, Digest: del.Digest}
		var ce *queue.ConfirmationError
		if _, err := e.q.ApproveWith(ctx, in); !errors.As(err, &ce) || ce.Want != "file:/srv/shared/old/report.csv" {
			t.Errorf("%s: approve without typing the target: %v, want a ConfirmationError naming it", ch, err)
		}
		in.Confirm = "file:/srv/shared/old/other.csv"
		if _, err := e.q.ApproveWith(ctx, in); !errors.As(err, &ce) {
			t.Errorf("%s: approve with another target typed: %v, want a ConfirmationError", ch, err)
		}
		w := queue.ApproveInput{Operator: "alice", Channel: ch, CallID: tricky.ID, Digest: tricky.Digest, Seen: &innocent}
		if _, err := e.q.ApproveWith(ctx, w); !errors.Is(err, queue.ErrWarningNotAcknowledged) {
			t.Errorf("%s: approve a deceptive call without acknowledging its warning: %v, want ErrWarningNotAcknowledged", ch, err)
		}
	}
	c, err := e.q.Call(ctx, del.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Approvals) != 0 || c.Status != queue.StatusPending {
		t.Fatalf("after refused approvals: %s with %d approvals; want pending with none", c.Status, len(c.Approvals))
	}
	c, err = e.q.ApproveWith(ctx, queue.ApproveInput{Operator: "alice", Channel: audit.ChannelCLI, CallID: del.ID, Digest: del.Digest,
		Confirm: " file:/srv/shared/old/report.csv "})
	if err != nil || c.Status != queue.StatusApproved {
		t.Fatalf("approve with the target typed: %v; want approved", err)
	}
	c, err = e.q.ApproveWith(ctx, queue.ApproveInput{Operator: "alice", Channel: audit.ChannelWeb, CallID: tricky.ID, Digest: tricky.Digest,
		AcceptWarnings: true})
	if err != nil || c.Status != queue.StatusApproved {
		t.Fatalf("approve with the warning acknowledged: %v; want approved", err)
	}
}

// A high-risk tool that names no confirmation asks for the call's target;
// confirm: none lets a press be enough.
func TestHighRiskAsksForTheTarget(t *testing.T) {
	const file = "tools:\n  ops.purge:\n    description: Purge a cache\n    audience: ops-host\n    target: '^cache:[a-z]+$'\n    risk: high\n    effects: [destructive]\n    args: {type: object, additionalProperties: false, properties: {}}\n" +
		"  ops.peek:\n    description: Peek at a cache\n    audience: ops-host\n    target: '^cache:[a-z]+$'\n    risk: high\n    confirm: none\n    args: {type: object, additionalProperties: false, properties: {}}\n"
	reg, err := tools.Parse([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	purge := &queue.Call{Tool: "ops.purge", Target: "cache:edge"}
	var ce *queue.ConfirmationError
	if err := queue.Confirmation(reg, purge, "", false); !errors.As(err, &ce) || ce.Want != "cache:edge" {
		t.Errorf("a high-risk call approved without typing: %v, want a ConfirmationError asking for cache:edge", err)
	}
	if err := queue.Confirmation(reg, purge, "cache:edge", false); err != nil {
		t.Errorf("the typed target is refused: %v", err)
	}
	if err := queue.Confirmation(reg, &queue.Call{Tool: "ops.peek", Target: "cache:edge"}, "", false); err != nil {
		t.Errorf("confirm: none still asks: %v", err)
	}
}
