package queue

import (
	"context"

	"github.com/countersign/countersign/internal/audit"
)

// Retry-cap keys that are not tool names (a tool name never holds a
// parenthesis or a star).
const (
	// UnknownTool is the one (actor, tool) pair that every rejection naming
	// no tool of the registry counts against: unknown, malformed or missing
	// names, so that an agent inventing names makes one block, not one per
	// name.
	UnknownTool = "(unknown)"
	// AnyTool is the actor-wide pair: once an actor holds Config.MaxBlocksPerActor
	// blocks it is blocked for every tool, shown as one block.
	AnyTool = "*"
)

// DefaultMaxPendingPerToken is how many calls one API token may keep
// waiting for a decision unless configured otherwise.
const DefaultMaxPendingPerToken = 1000

// DefaultMaxBlocksPerActor is how many (actor, tool) blocks an actor may
// hold before the actor is blocked for every tool instead.
const DefaultMaxBlocksPerActor = 10

// retryTool is the retry-cap key of a tool name: the name when the
// registry knows it, else UnknownTool.
func (s *Service) retryTool(name string) string {
	if _, ok := s.tools.Tool(name); ok {
		return name
	}
	return UnknownTool
}

// retryBlocked reports whether actor is refused for tool, by the pair's
// own block or by the actor-wide one.
func (s *Service) retryBlocked(tx Tx, actor, tool string) (bool, error) {
	for _, k := range []string{tool, AnyTool} {
		rs, err := tx.Retry(actor, k)
		if err != nil {
			return false, err
		}
		if rs.Blocked() {
			return true, nil
		}
	}
	return false, nil
}

// countRefusal counts one refusal against (actor, tool) and blocks the
// pair at RetryLimit; the block is audited and pushed. An actor's blocks
// are counted under AnyTool, and the maxBlocks-th blocks the actor
// for every tool.
func (s *Service) countRefusal(tx Tx, actor, tool string, emit func(Event)) error {
	rs, err := tx.Retry(actor, tool)
	if err != nil {
		return err
	}
	rs.Count++
	if rs.Count >= RetryLimit && !rs.Blocked() {
		rs.BlockedAt = s.now()
		if err := s.block(tx, actor, tool, rs, emit); err != nil {
			return err
		}
		all, err := tx.Retry(actor, AnyTool)
		if err != nil {
			return err
		}
		all.Count++
		if all.Count >= s.maxBlocks && !all.Blocked() {
			all.BlockedAt = s.now()
			if err := s.block(tx, actor, AnyTool, all, emit); err != nil {
				return err
			}
		}
		if err := tx.SetRetry(actor, AnyTool, all); err != nil {
			return err
		}
	}
	return tx.SetRetry(actor, tool, rs)
}

func (s *Service) block(tx Tx, actor, tool string, rs RetryState, emit func(Event)) error {
	if err := tx.Append(s.entry(audit.KindRetryBlocked, nil, actor, audit.ChannelAPI, map[string]any{
		"actor": actor, "tool": tool, "count": int64(rs.Count)})); err != nil {
		return err
	}
	emit(Event{Kind: audit.KindRetryBlocked, Block: &Block{Actor: actor, Tool: tool, Count: rs.Count, BlockedAt: rs.BlockedAt}})
	return nil
}

// ClearRetry lifts the retry cap for (actor, tool).
func (s *Service) ClearRetry(ctx context.Context, operator, channel, actor, tool string) error {
	return s.update(ctx, func(tx Tx, emit func(Event)) error {
		if err := mayDecide(tx, operator); err != nil {
			return err
		}
		rs, err := tx.Retry(actor, tool)
		if err != nil {
			return err
		}
		if !rs.Blocked() {
			return ErrNotBlocked
		}
		if err := tx.SetRetry(actor, tool, RetryState{}); err != nil {
			return err
		}
		if tool != AnyTool {
			// One block fewer for the actor-wide count.
			all, err := tx.Retry(actor, AnyTool)
			if err != nil {
				return err
			}
			if all.Count > 0 {
				all.Count--
				if err := tx.SetRetry(actor, AnyTool, all); err != nil {
					return err
				}
			}
		}
		if err := tx.Append(s.entry(audit.KindRetryCleared, nil, operator, channel, map[string]any{
			"actor": actor, "tool": tool})); err != nil {
			return err
		}
		emit(Event{Kind: audit.KindRetryCleared, Block: &Block{Actor: actor, Tool: tool}})
		return nil
	})
}
