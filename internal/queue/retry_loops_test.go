package queue_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
)

func blocksOf(t *testing.T, e *env) []queue.Block {
	t.Helper()
	bs, err := e.q.Blocks(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return bs
}

// TestRetryCapUnknownToolsCollapse: proposals for tools the registry does
// not have, each under a new name, count against one (actor, unknown) pair
// and make one block, not one per name.
func TestRetryCapUnknownToolsCollapse(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for i := range 300 {
		body := fmt.Sprintf(`{"tool":"made.up%d","target":"x:y","args":{}}`, i)
		_, _, err := e.q.Submit(ctx, agent, []byte(body))
		want := errProposal
		if i >= queue.RetryLimit {
			want = queue.ErrRetryLimit
		}
		if !matches(err, want) {
			t.Fatalf("unknown tool %d: %v, want %v", i, err, want)
		}
	}
	// Malformed names and bodies without one count there too.
	for _, b := range []string{`{"tool":"NOT A TOOL","target":"x","args":{}}`, `{"target":"x","args":{}}`, `{"tool":`} {
		if _, _, err := e.q.Submit(ctx, agent, []byte(b)); !errors.Is(err, queue.ErrRetryLimit) {
			t.Errorf("%s: %v, want ErrRetryLimit (the same unknown-tool pair)", b, err)
		}
	}
	bs := blocksOf(t, e)
	if len(bs) != 1 || bs[0].Tool != queue.UnknownTool {
		t.Fatalf("blocks = %+v, want one (agent, %s) block", bs, queue.UnknownTool)
	}
	// A real tool is not blocked by it.
	if _, _, err := e.q.Submit(ctx, agent, fmt.Appendf(nil, `{"tool":"payments.refund","target":"invoice:INV-%d","args":%s}`, rand.Uint32(), refundArgs)); err != nil {
		t.Errorf("a valid proposal for a real tool: %v", err)
	}
	if n := countOf(t, e.db, `SELECT COUNT(*) FROM audit WHERE kind = 'retry_blocked'`); n != 1 {
		t.Errorf("%d retry_blocked entries, want 1", n)
	}
}

// TestRetryCapBlocksPerActor: an actor holds at most MaxBlocksPerActor
// blocks; the last of them blocks it for every tool, one more block, and
// clearing that lets it propose again.
func TestRetryCapBlocksPerActor(t *testing.T) {
	e := newEnvWith(t, func(c *queue.Config) { c.MaxBlocksPerActor = 3 })
	ctx := context.Background()
	bad := func(tool string) []byte {
		return []byte(`{"tool":"` + tool + `","target":"x:y","args":{"surely_not_a_parameter":1}}`)
	}
	for _, tool := range []string{"payments.refund", "files.delete", "releases.deploy"} {
		for range queue.RetryLimit {
			e.q.Submit(ctx, agent, bad(tool))
		}
	}
	bs := blocksOf(t, e)
	if len(bs) != 4 {
		t.Fatalf("blocks = %+v, want the three pairs and the actor-wide block", bs)
	}
	for _, tool := range []string{"reports.read", "weather.search", "email.send"} {
		if _, _, err := e.q.Submit(ctx, agent, bad(tool)); !errors.Is(err, queue.ErrRetryLimit) {
			t.Errorf("%s after the actor-wide block: %v, want ErrRetryLimit", tool, err)
		}
	}
	if got := len(blocksOf(t, e)); got != 4 {
		t.Errorf("blocks after more refusals = %d, want still 4", got)
	}
	other := queue.Principal{Actor: "agent:other", Audience: agent.Audience}
	if _, _, err := e.q.Submit(ctx, other, bad("reports.read")); !matches(err, errProposal) {
		t.Errorf("another actor: %v, want its own proposal error", err)
	}
	if err := e.q.ClearRetry(ctx, "alice", audit.ChannelWeb, agent.Actor, queue.AnyTool); err != nil {
		t.Fatalf("ClearRetry of the actor-wide block: %v", err)
	}
	if _, _, err := e.q.Submit(ctx, agent, bad("reports.read")); !matches(err, errProposal) {
		t.Errorf("after clearing the actor-wide block: %v, want a proposal error", err)
	}
}

// TestRetryCapCountsLoops: resubmitting a denied call (previously_denied)
// and proposing another host's tool (audience_not_allowed) count against
// (actor, tool) and reach retry_limit; a valid proposal still resets.
func TestRetryCapCountsLoops(t *testing.T) {
	ctx := context.Background()
	t.Run("previously_denied", func(t *testing.T) {
		e := newEnv(t)
		body := []byte(`{"tool":"payments.refund","target":"invoice:INV-7","args":` + refundArgs + `}`)
		c, _, err := e.q.Submit(ctx, agent, body)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.q.Deny(ctx, "alice", audit.ChannelWeb, c.ID, "no"); err != nil {
			t.Fatal(err)
		}
		for i := range 30 {
			_, _, err := e.q.Submit(ctx, agent, body)
			want := queue.ErrPreviouslyDenied
			if i >= queue.RetryLimit {
				want = queue.ErrRetryLimit
			}
			if !errors.Is(err, want) {
				t.Fatalf("resubmission %d: %v, want %v", i+1, err, want)
			}
		}
	})
	t.Run("audience_not_allowed", func(t *testing.T) {
		e := newEnv(t)
		mailer := queue.Principal{Actor: "agent:a", Audience: "mail-host"}
		for i := range 30 {
			_, _, err := e.q.Submit(ctx, mailer, fmt.Appendf(nil, `{"tool":"payments.refund","target":"invoice:INV-%d","args":%s}`, i, refundArgs))
			want := queue.ErrAudienceNotAllow
			if i >= queue.RetryLimit {
				want = queue.ErrRetryLimit
			}
			if !errors.Is(err, want) {
				t.Fatalf("proposal %d for another host's tool: %v, want %v", i+1, err, want)
			}
		}
	})
	t.Run("a valid proposal resets", func(t *testing.T) {
		e := newEnv(t)
		mailer := queue.Principal{Actor: "agent:a", Audience: "mail-host"}
		wrongHost := fmt.Appendf(nil, `{"tool":"payments.refund","target":"invoice:INV-1","args":%s}`, refundArgs)
		for round := range 3 {
			for range queue.RetryLimit - 1 {
				if _, _, err := e.q.Submit(ctx, mailer, wrongHost); !errors.Is(err, queue.ErrAudienceNotAllow) {
					t.Fatalf("round %d: %v", round, err)
				}
			}
			if _, _, err := e.q.Submit(ctx, agent, fmt.Appendf(nil, `{"tool":"payments.refund","target":"invoice:INV-%d","args":%s}`, rand.Uint32(), refundArgs)); err != nil {
				t.Fatalf("round %d valid: %v", round, err)
			}
		}
	})
}

// TestRetryCapToolHintTopLevel: a malformed body counts against the tool of
// its top-level "tool" member, never a decoy inside args.
func TestRetryCapToolHintTopLevel(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	// Broken after the real tool: a trailing comma. The decoy comes first.
	broken := []byte(`{"args":{"tool":"weather.search","x":[{"tool":"email.send"}]},"target":"invoice:INV-1","tool":"payments.refund",}`)
	for range queue.RetryLimit {
		if _, _, err := e.q.Submit(ctx, agent, broken); !matches(err, errProposal) {
			t.Fatalf("malformed: %v", err)
		}
	}
	bs := blocksOf(t, e)
	if len(bs) != 1 || bs[0].Tool != "payments.refund" {
		t.Fatalf("blocks = %+v, want (agent, payments.refund)", bs)
	}
	// Two top-level tools that disagree name none: the unknown pair.
	e2 := newEnv(t)
	for range queue.RetryLimit {
		e2.q.Submit(ctx, agent, []byte(`{"tool":"payments.refund","tool":"weather.search","target":"x","args":{}}`))
	}
	if bs := blocksOf(t, e2); len(bs) != 1 || bs[0].Tool != queue.UnknownTool {
		t.Errorf("blocks = %+v, want the unknown-tool pair", bs)
	}
}
