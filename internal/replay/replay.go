// Package replay runs a candidate tools file's rules over the calls in
// history, before anyone switches them on: per tool, how many calls would
// change from asking people to being approved or denied by rule (and back),
// and every call that a person denied, or whose execution was reported
// failed, that the new rules would approve.
//
// A replay only reads: it streams the calls from one read snapshot in
// constant memory (apart from the calls it lists), with now set to each
// call's submission time.
package replay

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/policy"
	"github.com/countersign/countersign/internal/queue"
)

// Source streams the calls in history.
type Source interface {
	// ReplayCalls calls fn for every call created at or after since,
	// oldest first, from one read snapshot. Each call has its approvals
	// and denial filled in. An error from fn stops the stream and is
	// returned.
	ReplayCalls(ctx context.Context, since time.Time, fn func(*queue.Call) error) error
}

// Outcome is what happened to a call, before or in the replay.
type Outcome string

// Outcomes. Ask means the call went to people.
const (
	Ask     Outcome = "ask"
	Approve Outcome = "approve"
	Deny    Outcome = "deny"
	// Refused: the new tools file would refuse the proposal itself (the
	// tool is gone, the audience differs, or the arguments no longer fit
	// the schema), so no rule runs.
	Refused Outcome = "refused"
)

// Before is what happened to the call when it was made: approved or denied
// by a rule, or sent to people.
func Before(c *queue.Call) Outcome {
	if c.Denial != nil && strings.HasPrefix(c.Denial.By, policy.PrincipalPrefix) {
		return Deny
	}
	for _, a := range c.Approvals {
		if strings.HasPrefix(a.Operator, policy.PrincipalPrefix) {
			return Approve
		}
	}
	return Ask
}

// ToolReport counts one tool's calls.
type ToolReport struct {
	Tool  string
	Calls int64
	// Changes counts the calls whose outcome differs, by "before→after",
	// e.g. Changes[Change{Ask, Approve}].
	Changes map[Change]int64
	// Unchanged counts the calls the new rules treat as before.
	Unchanged int64
	// EvalErrors counts calls whose rules could not be evaluated (they go
	// to people).
	EvalErrors int64
}

// Change is an outcome before and in the replay.
type Change struct{ From, To Outcome }

func (c Change) String() string { return string(c.From) + "→" + string(c.To) }

// Flagged is a call a person denied, or that was reported failed, which
// the new rules would approve.
type Flagged struct {
	CallID    string
	Tool      string
	Actor     string
	Target    string
	CreatedAt time.Time
	// Why is "denied by NAME: REASON" or "reported failed: DETAIL".
	Why  string
	Rule string // the rule that would approve it
}

// Report is the result of a replay.
type Report struct {
	Since       time.Time
	ToolsDigest string
	Calls       int64
	Tools       []*ToolReport // sorted by tool name
	Flagged     []Flagged     // in history order, at most Options.MaxFlagged
	// FlaggedTotal counts every flagged call, listed or not.
	FlaggedTotal int64
	Elapsed      time.Duration
}

// Options tune a replay.
type Options struct {
	// MaxFlagged bounds the flagged calls kept in the report; 0 keeps
	// every one. OnFlagged sees all of them either way.
	MaxFlagged int
	// OnFlagged, when set, is called for each flagged call as it is found.
	OnFlagged func(Flagged)
}

// Run replays every call since the given time through pol.
func Run(ctx context.Context, src Source, pol *policy.Policy, since time.Time, opt Options) (*Report, error) {
	start := time.Now()
	rep := &Report{Since: since, ToolsDigest: pol.ToolsDigest()}
	byTool := map[string]*ToolReport{}
	err := src.ReplayCalls(ctx, since, func(c *queue.Call) error {
		rep.Calls++
		tr := byTool[c.Tool]
		if tr == nil {
			tr = &ToolReport{Tool: c.Tool, Changes: map[Change]int64{}}
			byTool[c.Tool] = tr
		}
		tr.Calls++
		before := Before(c)
		after, rule, evalErr := decide(pol, c)
		if evalErr {
			tr.EvalErrors++
		}
		if after == before {
			tr.Unchanged++
		} else {
			tr.Changes[Change{before, after}]++
		}
		if after == Approve {
			if why := personDenied(c); why != "" {
				rep.FlaggedTotal++
				f := Flagged{CallID: c.ID, Tool: c.Tool, Actor: c.Actor, Target: c.Target, CreatedAt: c.CreatedAt, Why: why, Rule: rule}
				if opt.OnFlagged != nil {
					opt.OnFlagged(f)
				}
				if opt.MaxFlagged == 0 || len(rep.Flagged) < opt.MaxFlagged {
					rep.Flagged = append(rep.Flagged, f)
				}
			}
		}
		if rep.Calls%4096 == 0 {
			return ctx.Err()
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	for _, tr := range byTool {
		rep.Tools = append(rep.Tools, tr)
	}
	sort.Slice(rep.Tools, func(i, j int) bool { return rep.Tools[i].Tool < rep.Tools[j].Tool })
	rep.Elapsed = time.Since(start)
	return rep, nil
}

// decide is what the new tools file would do with the call, submitted as
// it was then.
func decide(pol *policy.Policy, c *queue.Call) (Outcome, string, bool) {
	t, ok := pol.Registry().Tool(c.Tool)
	if !ok || t.Audience != c.Audience {
		return Refused, "", false
	}
	if ps := t.Validate(canonical.Proposal{Tool: c.Tool, Target: c.Target, Args: c.Args}); len(ps) > 0 {
		return Refused, "", false
	}
	d := pol.Decide(t, policy.Input{Target: c.Target, Args: c.Args, Actor: c.Actor, Audience: c.Audience, Now: c.CreatedAt})
	rule := ""
	if d.Rule != nil {
		rule = d.Rule.ID
	}
	if !d.Automatic() {
		return Ask, rule, d.Err != nil
	}
	return Outcome(d.Action), rule, false
}

// personDenied says why a call matters if a rule would now approve it: a
// person denied it, or its execution was reported failed.
func personDenied(c *queue.Call) string {
	if c.Denial != nil && !strings.HasPrefix(c.Denial.By, policy.PrincipalPrefix) {
		return fmt.Sprintf("denied by %s: %s", c.Denial.By, c.Denial.Reason)
	}
	if c.Outcome != nil && c.Outcome.Status == "failed" {
		if c.Outcome.Detail == "" {
			return "reported failed"
		}
		return "reported failed: " + c.Outcome.Detail
	}
	return ""
}

// Changed sums a tool's calls that would change from ask to approve or
// deny, the figure a replay leads with.
func (t *ToolReport) Changed() (toApprove, toDeny int64) {
	return t.Changes[Change{Ask, Approve}], t.Changes[Change{Ask, Deny}]
}

// SortedChanges lists a tool's changes, largest first.
func (t *ToolReport) SortedChanges() []Change {
	out := make([]Change, 0, len(t.Changes))
	for c := range t.Changes {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool {
		if t.Changes[out[i]] != t.Changes[out[j]] {
			return t.Changes[out[i]] > t.Changes[out[j]]
		}
		return out[i].String() < out[j].String()
	})
	return out
}

// ParseSince reads how far back a replay goes: "7d", any Go duration
// (back from now), or an RFC 3339 time.
func ParseSince(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n >= 0 {
			return now.Add(-time.Duration(n) * 24 * time.Hour), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("since must be a duration such as 7d, 36h or 90m, or an RFC 3339 time, not %q", s)
}
