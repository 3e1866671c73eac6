package storetest

import (
	"context"
	"errors"
	"testing"

	"github.com/countersign/countersign/internal/queue"
)

var _ = add("freezes/pages find the freeze the transaction finds", func(t *testing.T, s Stores) {
	ctx := context.Background()
	for _, f := range []queue.Freeze{
		{Tool: "payments.refund", Reason: "refunds", By: "admin", At: t0},
		{Actor: "agent:rogue", Reason: "that agent", By: "admin", At: t0},
		{Tool: "payments.refund", Actor: "agent:billing", Reason: "later, narrower", By: "admin", At: t0},
		{Tool: "gh/*", Reason: "the GitHub server", By: "admin", At: t0},
	} {
		update(t, s, func(tx queueTx) error { return tx.InsertFreeze(&f) })
	}
	fz, err := s.Queue.Freezes(ctx)
	if err != nil || len(fz) != 4 {
		t.Fatalf("Freezes = %d, %v", len(fz), err)
	}
	for _, q := range []struct{ tool, actor string }{
		{"payments.refund", "agent:billing"}, {"payments.refund", "agent:other"}, {"files.delete", "agent:rogue"},
		{"files.delete", "agent:other"}, {"gh/create_issue", "agent:other"}, {"gh/create_issue", "agent:rogue"}, {"gl/x", "agent:other"},
	} {
		var want *queue.Freeze
		update(t, s, func(tx queueTx) error {
			f, err := tx.Frozen(q.tool, q.actor)
			if errors.Is(err, queue.ErrNotFound) {
				if server, ok := serverOf(q.tool); ok {
					f, err = tx.Frozen(server+queue.ServerWildcard, q.actor)
				}
			}
			if errors.Is(err, queue.ErrNotFound) {
				return nil
			}
			want = f
			return err
		})
		got := queue.FreezeOf(fz, q.tool, q.actor)
		if (got == nil) != (want == nil) || got != nil && got.ID != want.ID {
			t.Errorf("%s by %s: page finds %+v, the transaction %+v", q.tool, q.actor, got, want)
		}
	}
})

// serverOf is the MCP server of a mirrored tool's name.
func serverOf(tool string) (string, bool) {
	for i := 0; i < len(tool); i++ {
		if tool[i] == '/' {
			return tool[:i], true
		}
	}
	return "", false
}
