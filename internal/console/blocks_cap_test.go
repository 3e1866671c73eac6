package console

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/queue"
)

// TestSocketFirstMessageBoundsBlocks: however many blocks the database
// holds, the queue page and a socket's first message carry at most
// maxQueueBlocks of them and say how many more there are.
func TestSocketFirstMessageBoundsBlocks(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	const n = maxQueueBlocks + 50
	if err := e.db.Store().Update(context.Background(), func(tx queue.Tx) error {
		for i := range n {
			if err := tx.SetRetry(fmt.Sprintf("agent:a%03d", i), "payments.refund", queue.RetryState{Count: 3, BlockedAt: e.clock.Now()}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	b := e.browser()
	b.login("olivia", rolePassword)
	p := b.get("/")
	if got := p.find("block").Length(); got != maxQueueBlocks {
		t.Errorf("queue page shows %d blocks, want %d", got, maxQueueBlocks)
	}
	if got := p.find("blocks-hidden").Text(); !strings.Contains(got, "50 more") {
		t.Errorf("hidden-blocks note = %q", got)
	}
	_, first := b.mustDial("/ws")
	if got := fragmentDoc(t, first).Find(`[data-testid="block"]`).Length(); got != maxQueueBlocks {
		t.Errorf("the socket's first message carries %d blocks, want %d", got, maxQueueBlocks)
	}
}

// TestUnknownToolBlockShown: the collapsed unknown-tool block and the
// actor-wide block are named for what they are, and can be cleared.
func TestUnknownToolBlockShown(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	for i := range queue.RetryLimit {
		e.q.Submit(context.Background(), queue.Principal{Actor: "agent:x", Audience: "payments-host"},
			[]byte(fmt.Sprintf(`{"tool":"no.such%d","target":"x","args":{}}`, i)))
	}
	b := e.browser()
	b.login("olivia", rolePassword)
	p := b.get("/")
	if got := p.find("block-tool").Text(); !strings.Contains(got, "tools not in the tools file") {
		t.Errorf("unknown-tool block names %q", got)
	}
	if v, _ := p.find("clear-form").Find(`input[name="tool"]`).Attr("value"); v != queue.UnknownTool {
		t.Errorf("clear form tool = %q, want %q", v, queue.UnknownTool)
	}
}
