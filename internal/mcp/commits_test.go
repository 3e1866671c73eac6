package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/mcp"
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

// maxStatementsPerApprovedCall is the SQL statements of a tools/call a
// rule approves, BEGIN and COMMIT included: the submission's transaction
// (which checks the redemption on the call as it wrote it, without reading
// it back) and the outcome's.
const maxStatementsPerApprovedCall = 14

// maxStatementsPerCallInARow is the SQL statements of each of several
// tools/calls a rule approves, made one after the other: the submission's
// transaction, which also writes the outcome of the call before it (its
// read of that call and the update; the outcome's audit entry joins the
// transaction's one INSERT).
const maxStatementsPerCallInARow = 11

// countCommits runs call and returns the store's commits and the commits
// that advanced the high-water mark (the commit hook) while it ran.
func countCommits(t *testing.T, e *env, call func()) (commits, marks int64) {
	t.Helper()
	var marked atomic.Int64
	e.db.OnCommit(func(int64, string) error { marked.Add(1); return nil })
	defer e.db.OnCommit(nil)
	e.gw.Drain()
	before, _ := e.db.WriteCounts()
	call()
	// The outcome of a call that succeeded is written after its answer;
	// it counts all the same.
	e.gw.Drain()
	after, _ := e.db.WriteCounts()
	return after - before, marked.Load()
}

// wantWholeTrail checks that call c ran, and that its audit trail is
// exactly a submission approved, granted, redeemed and reported.
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
	// The trail a call approved at submission has had since each step was
	// a commit of its own: nothing merged away, nothing added.
	want := []string{audit.KindSubmitted, audit.KindApproved, audit.KindGranted, audit.KindRedeemed, audit.KindOutcome}
	if !slices.Equal(kinds, want) {
		t.Errorf("the call's trail is %v, want %v", kinds, want)
	}
}

// TestRuleApprovedCallCommitsTwice: a tools/call a rule approves is
// submitted, approved, granted and redeemed in one commit, which advances
// the high-water mark, and its outcome is a second, which need not; the
// two run at most maxStatementsPerApprovedCall statements.
func TestRuleApprovedCallCommitsTwice(t *testing.T) {
	e := newEnv(t, envOptions{trust: true, hold: 200 * time.Millisecond, tools: rulesTools})
	cs := e.client(nil, "")
	if res := callRaw(t, cs, "add", `{"a":1,"b":1}`); res.IsError || text(res) != "2" {
		t.Fatalf("the first call: %s", text(res))
	}
	var statements int64
	commits, marks := countCommits(t, e, func() {
		before := e.db.Statements()
		if res := callRaw(t, cs, "add", `{"a":2,"b":3}`); res.IsError || text(res) != "5" {
			t.Fatalf("a small sum: %s %v", text(res), res.StructuredContent)
		}
		e.gw.Drain()
		statements = e.db.Statements() - before
	})
	if statements > maxStatementsPerApprovedCall {
		t.Errorf("a rule-approved tools/call ran %d statements, want at most %d", statements, maxStatementsPerApprovedCall)
	}
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
	giveAllowance(t, e, cs, 3)
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

// giveAllowance makes a call of add that waits for people and gives an
// allowance from it as operator alice: uses calls of add with a up to 50
// and the call's b.
func giveAllowance(t *testing.T, e *env, cs *sdk.ClientSession, uses int) {
	t.Helper()
	if st := status(t, callRaw(t, cs, "add", `{"a":2,"b":3}`)); st["status"] != mcp.StatusApprovalPending {
		t.Fatalf("the first call: %v", st)
	}
	base := e.lastCall()
	tool, _ := e.q.Tools().Tool(base.Tool)
	max := int64(50)
	ch := scope.Choices{Uses: uses, Until: e.clock.Now().Add(30 * time.Minute), Members: map[string]scope.Member{"/a": {Max: &max}}}
	sc, err := scope.Materialise(scope.Call{Actor: base.Actor, Audience: base.Audience, Tool: base.Tool, Target: base.Target,
		ToolDigest: base.ToolDigest, Args: base.Args}, tool, ch, e.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.q.GiveAllowance(context.Background(), queue.GiveInput{Operator: "alice", Channel: "cli", CallID: base.ID,
		Digest: base.Digest, ScopeDigest: sc.Digest(), Choices: ch}); err != nil {
		t.Fatal(err)
	}
}

// TestAllowanceBoundHoldsUnderConcurrentCalls: calls an allowance covers,
// made at once through the gateway from several sessions, run no more
// often than the allowance's uses; the others wait for people, and no
// call runs without a use counted for it.
func TestAllowanceBoundHoldsUnderConcurrentCalls(t *testing.T) {
	const uses, callers = 3, 8
	e := newEnv(t, envOptions{trust: true, hold: 200 * time.Millisecond, tools: allowanceTools})
	giveAllowance(t, e, e.client(nil, ""), uses)
	sessions := make([]*sdk.ClientSession, callers)
	for i := range sessions {
		sessions[i] = e.client(nil, "")
	}
	before := e.calls.Load()
	start := make(chan struct{})
	results := make([]*sdk.CallToolResult, callers)
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i, cs := range sessions {
		wg.Go(func() {
			<-start
			results[i], errs[i] = cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "add",
				Arguments: json.RawMessage(fmt.Sprintf(`{"a":%d,"b":3}`, 10+i))})
		})
	}
	close(start)
	wg.Wait()
	e.gw.Drain()
	ran, waiting := 0, 0
	for i, res := range results {
		switch {
		case errs[i] != nil:
			t.Fatalf("caller %d: %v", i, errs[i])
		case !res.IsError && text(res) == strconv.Itoa(10+i+3):
			ran++
		case status(t, res)["status"] == mcp.StatusApprovalPending:
			waiting++
		default:
			t.Errorf("caller %d: %s %v", i, text(res), res.StructuredContent)
		}
	}
	if ran != uses || waiting != callers-uses {
		t.Errorf("%d calls ran and %d wait for people, want %d and %d", ran, waiting, uses, callers-uses)
	}
	if n := e.calls.Load() - before; n != uses {
		t.Errorf("the upstream ran %d calls, want %d", n, uses)
	}
	page, _, err := e.db.History(context.Background(), queue.HistoryFilter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	byAllowance := 0
	for _, c := range page {
		if len(c.Approvals) == 1 && c.Approvals[0].Method == queue.MethodAllowance {
			byAllowance++
			if c.Status != queue.StatusRedeemed || c.Outcome == nil || c.Outcome.Status != queue.OutcomeSucceeded {
				t.Errorf("call %s approved by the allowance: %s, outcome %+v", c.ID, c.Status, c.Outcome)
			}
		}
	}
	if byAllowance != uses {
		t.Errorf("%d calls were approved by the allowance, want %d", byAllowance, uses)
	}
}

// TestApprovedCallIsAnsweredBeforeItsOutcomeCommits: the answer of a
// tools/call a rule approves waits for one commit, the submission's with
// its redemption, and not for the outcome's: with the store's write lock
// held from just after that commit until the answer arrives, the answer
// still arrives, and the outcome is written once the lock is let go.
func TestApprovedCallIsAnsweredBeforeItsOutcomeCommits(t *testing.T) {
	e := newEnv(t, envOptions{trust: true, hold: 200 * time.Millisecond, tools: rulesTools})
	cs := e.client(nil, "")
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	e.q.Subscribe(func(ev queue.Event) {
		if ev.Kind != audit.KindRedeemed {
			return
		}
		once.Do(func() {
			// Runs after the redemption's commit, before the gateway
			// forwards: the next write to take the lock is this one.
			go e.db.Store().Update(context.Background(), func(queue.Tx) error {
				close(held)
				<-release
				return nil
			})
		})
	})
	answered := make(chan *sdk.CallToolResult, 1)
	go func() {
		res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "add", Arguments: json.RawMessage(`{"a":2,"b":3}`)})
		if err != nil {
			t.Errorf("tools/call: %v", err)
		}
		answered <- res
	}()
	<-held
	select {
	case res := <-answered:
		if res == nil || res.IsError || text(res) != "5" {
			t.Fatalf("the answer: %+v", res)
		}
	case <-time.After(10 * time.Second):
		close(release)
		<-answered
		t.Fatal("the answer waited for the outcome's commit")
	}
	page, _, err := e.db.History(context.Background(), queue.HistoryFilter{Limit: 1})
	if err != nil || len(page) != 1 || page[0].Status != queue.StatusRedeemed || page[0].Outcome != nil {
		t.Fatalf("while the lock is held the call is %+v (%v), want redeemed without an outcome", page, err)
	}
	close(release)
	wantWholeTrail(t, e, e.lastCall())
}

// TestRuleApprovedCallsInARowCommitOnceEach: tools/calls a rule approves,
// made one after the other, cost one commit each, which advances the
// high-water mark: each call's transaction also writes the outcome of the
// call answered before it; the last outcome is written by Drain. Every
// call keeps its whole trail.
func TestRuleApprovedCallsInARowCommitOnceEach(t *testing.T) {
	const calls = 8
	// The outcomes wait for the next call however slow the machine.
	e := newEnv(t, envOptions{trust: true, hold: 200 * time.Millisecond, tools: rulesTools, outcomeDelay: time.Hour})
	cs := e.client(nil, "")
	if res := callRaw(t, cs, "add", `{"a":1,"b":1}`); res.IsError || text(res) != "2" {
		t.Fatalf("the first call: %s", text(res))
	}
	var statements int64
	commits, marks := countCommits(t, e, func() {
		before := e.db.Statements()
		for i := range calls {
			if res := callRaw(t, cs, "add", fmt.Sprintf(`{"a":%d,"b":3}`, i)); res.IsError || text(res) != strconv.Itoa(i+3) {
				t.Fatalf("call %d: %s %v", i, text(res), res.StructuredContent)
			}
		}
		statements = e.db.Statements() - before
	})
	t.Logf("%d calls in a row: %d commits, %d advancing the mark, %d statements", calls, commits, marks, statements)
	if commits > calls+1 || marks > calls {
		t.Errorf("%d rule-approved tools/calls in a row made %d commits (%d advancing the mark), want at most %d (%d): one each, and the last outcome's",
			calls, commits, marks, calls+1, calls)
	}
	if statements > calls*maxStatementsPerCallInARow {
		t.Errorf("%d rule-approved tools/calls in a row ran %d statements (%.1f each), want at most %d each",
			calls, statements, float64(statements)/calls, maxStatementsPerCallInARow)
	}
	page, _, err := e.db.History(context.Background(), queue.HistoryFilter{Limit: calls + 1})
	if err != nil || len(page) != calls+1 {
		t.Fatalf("History: %d calls, %v", len(page), err)
	}
	for _, c := range page {
		wantWholeTrail(t, e, c)
	}
}
