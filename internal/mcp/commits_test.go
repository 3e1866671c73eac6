package mcp_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/scope"
)

// maxCommitsPerApprovedCall is what a tools/call approved at submission (by
// a rule or an allowance) may cost the store: the submission, its approval,
// the grant and the redemption in one transaction, the outcome in a second.
const maxCommitsPerApprovedCall = 2

// maxMarksPerApprovedCall is how many of those commits advance the
// high-water mark (an fdatasync each): the redemption's; the outcome's may
// wait for the next (highwater.MayWait).
const maxMarksPerApprovedCall = 1

// countCommits runs call and returns the store's commits and the commits
// that advanced the high-water mark (the commit hook) while it ran.
func countCommits(t *testing.T, e *env, call func()) (commits, marks int64) {
	t.Helper()
	var marked atomic.Int64
	e.db.OnCommit(func(int64, string) error { marked.Add(1); return nil })
	defer e.db.OnCommit(nil)
	before, _ := e.db.WriteCounts()
	call()
	after, _ := e.db.WriteCounts()
	return after - before, marked.Load()
}

// wantWholeTrail checks that call c ran, and that its audit trail holds
// every entry of a submission approved, granted, redeemed and reported.
func wantWholeTrail(t *testing.T, e *env, c *queue.Call) {
	t.Helper()
	if c.Status != queue.StatusRedeemed || c.Outcome == nil || c.Outcome.Status != "succeeded" {
		t.Fatalf("the call: status %s, outcome %+v", c.Status, c.Outcome)
	}
	entries, err := e.db.Timeline(context.Background(), c.ID)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, en := range entries {
		kinds = append(kinds, en.Kind)
	}
	for _, k := range []string{audit.KindSubmitted, audit.KindApproved, audit.KindGranted, audit.KindRedeemed, audit.KindOutcome} {
		if !slices.Contains(kinds, k) {
			t.Errorf("the call's trail %v has no %s entry", kinds, k)
		}
	}
}

// TestRuleApprovedCallCommitsTwice: a tools/call a rule approves is
// submitted, approved, granted and redeemed in one commit, which advances
// the high-water mark, and its outcome is a second, which need not.
func TestRuleApprovedCallCommitsTwice(t *testing.T) {
	e := newEnv(t, envOptions{trust: true, hold: 200 * time.Millisecond, tools: rulesTools})
	cs := e.client(nil, "")
	if res := callRaw(t, cs, "add", `{"a":1,"b":1}`); res.IsError || text(res) != "2" {
		t.Fatalf("the first call: %s", text(res))
	}
	commits, marks := countCommits(t, e, func() {
		if res := callRaw(t, cs, "add", `{"a":2,"b":3}`); res.IsError || text(res) != "5" {
			t.Fatalf("a small sum: %s %v", text(res), res.StructuredContent)
		}
	})
	wantWholeTrail(t, e, e.lastCall())
	if commits > maxCommitsPerApprovedCall || marks > maxMarksPerApprovedCall {
		t.Errorf("a rule-approved tools/call made %d commits (%d advancing the mark), want at most %d (%d)", commits, marks, maxCommitsPerApprovedCall, maxMarksPerApprovedCall)
	}
}

// TestAllowanceApprovedCallCommitsTwice: the same for a call an allowance
// covers, whose use is counted in the submission's commit.
func TestAllowanceApprovedCallCommitsTwice(t *testing.T) {
	e := newEnv(t, envOptions{trust: true, hold: 200 * time.Millisecond, tools: allowanceTools})
	cs := e.client(nil, "")
	callRaw(t, cs, "add", `{"a":2,"b":3}`)
	base := e.lastCall()
	tool, _ := e.q.Tools().Tool(base.Tool)
	max := int64(50)
	ch := scope.Choices{Uses: 3, Until: e.clock.Now().Add(30 * time.Minute), Members: map[string]scope.Member{"/a": {Max: &max}}}
	sc, err := scope.Materialise(scope.Call{Actor: base.Actor, Audience: base.Audience, Tool: base.Tool, Target: base.Target,
		ToolDigest: base.ToolDigest, Args: base.Args}, tool, ch, e.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.q.GiveAllowance(context.Background(), queue.GiveInput{Operator: "alice", Channel: "cli", CallID: base.ID,
		Digest: base.Digest, ScopeDigest: sc.Digest(), Choices: ch}); err != nil {
		t.Fatal(err)
	}
	commits, marks := countCommits(t, e, func() {
		if res := callRaw(t, cs, "add", `{"a":40,"b":3}`); res.IsError || text(res) != "43" {
			t.Fatalf("a covered call: %s %v", text(res), res.StructuredContent)
		}
	})
	c := e.lastCall()
	wantWholeTrail(t, e, c)
	if len(c.Approvals) != 1 || c.Approvals[0].Method != queue.MethodAllowance {
		t.Fatalf("the covered call's approvals: %+v", c.Approvals)
	}
	if commits > maxCommitsPerApprovedCall || marks > maxMarksPerApprovedCall {
		t.Errorf("an allowance-approved tools/call made %d commits (%d advancing the mark), want at most %d (%d)", commits, marks, maxCommitsPerApprovedCall, maxMarksPerApprovedCall)
	}
}
