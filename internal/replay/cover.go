package replay

import (
	"context"
	"time"

	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/scope"
	"github.com/countersign/countersign/internal/tools"
)

// Coverage is what a scope would have covered in history: of the calls of
// its tool since Since, those whose shape it covers (scope.Covers, the
// tool as defined now), and how many distinct calls those are. It judges
// shape only: whether a rule, a freeze, the people who run the agent or
// the confirmers' standing would have let each use happen is not replayed.
type Coverage struct {
	ScopeDigest string
	Tool        string
	Since       time.Time
	// Calls are the calls of the tool read; Covered the ones the scope
	// covers, Distinct the distinct digests among them.
	Calls, Covered, Distinct int64
	// Uses is how many calls the scope allows; Covered beyond it would
	// have waited for people.
	Uses int
	// Listed are the covered calls, oldest first, at most MaxListed.
	Listed []CoveredCall
}

// CoveredCall is one past call a scope covers, and what happened to it.
type CoveredCall struct {
	CallID    string
	CreatedAt time.Time
	Actor     string
	Target    string
	Status    queue.Status
	Before    Outcome
}

// MaxListed bounds the covered calls a Coverage lists.
const MaxListed = 200

// Cover streams the calls since since from src and reports which of them
// sc would have covered, judged against t (the scope's tool as defined
// now). It only reads.
func Cover(ctx context.Context, src Source, sc *scope.Scope, t *tools.Tool, since time.Time) (*Coverage, error) {
	cov := &Coverage{ScopeDigest: sc.Digest(), Tool: sc.Tool, Since: since, Uses: sc.Uses}
	seen := map[string]bool{}
	err := src.ReplayCalls(ctx, since, func(c *queue.Call) error {
		if c.Tool != sc.Tool {
			return nil
		}
		cov.Calls++
		ok, _ := scope.Covers(sc, t, scope.Call{Actor: c.Actor, Audience: c.Audience, Tool: c.Tool, Target: c.Target,
			ToolDigest: c.ToolDigest, Args: c.Args})
		if !ok {
			return nil
		}
		cov.Covered++
		if !seen[c.Digest] {
			seen[c.Digest] = true
			cov.Distinct++
		}
		if len(cov.Listed) < MaxListed {
			cov.Listed = append(cov.Listed, CoveredCall{CallID: c.ID, CreatedAt: c.CreatedAt, Actor: c.Actor, Target: c.Target,
				Status: c.Status, Before: Before(c)})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return cov, nil
}
