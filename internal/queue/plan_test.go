package queue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/db"
	"github.com/countersign/countersign/internal/policy"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/testkit"
	"github.com/countersign/countersign/internal/testkit/sqlitekit"
	"github.com/countersign/countersign/internal/tools"
)

// planTools: a file copy that may be a plan item (two approvals for a
// large file, a rule that denies after 04:00 on the test clock's day), a
// notice that may too, and a tool without a plan block.
const planTools = `tools:
  files.copy:
    audience: host
    target: '^file:.+$'
    approvals: 1
    decide_within: 30m
    plan: {max_for: 2h}
    rules:
      - {id: big, when: 'args.size > 1000', then: ask, approvals: 2}
      - {id: late, when: 'args.size == 13 && now > timestamp("2030-01-02T04:00:00Z")', then: deny, reason: no copies of 13 after four}
    args:
      type: object
      additionalProperties: false
      required: [size]
      properties:
        size: {type: integer, minimum: 1, maximum: 100000}
  notes.post:
    audience: host
    target: '.+'
    decide_within: 1h
    plan: {max_for: 1h}
    args: {type: object, additionalProperties: false}
  files.delete:
    audience: host
    target: '.+'
    args: {type: object, additionalProperties: false}
`

type planEnv struct {
	clock *testkit.Clock
	db    *db.DB
	q     *queue.Service
}

var planner = queue.Principal{Actor: "agent:planner", Audience: "host", TokenID: "tok_planner", Owners: []string{"carol"}}

func newPlanEnv(t *testing.T) *planEnv {
	t.Helper()
	reg, err := tools.Parse([]byte(planTools))
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Compile(reg)
	if err != nil {
		t.Fatal(err)
	}
	k := sqlitekit.NewQueue(t, sqlitekit.WithTools(reg), sqlitekit.WithPolicy(pol))
	testkit.SeedUsers(t, k.DB.Accounts(), account.RoleOperator, "alice", "bob", "carol")
	testkit.SeedUsers(t, k.DB.Accounts(), account.RoleAdmin, "dana")
	return &planEnv{clock: k.Clock, db: k.DB, q: k.Service}
}

// copies is a plan body of n file copies of the given sizes.
func copies(ordered bool, sizes ...int) []byte {
	items := make([]string, len(sizes))
	for i, n := range sizes {
		items[i] = fmt.Sprintf(`{"tool":"files.copy","target":"file:f%d","args":{"size":%d}}`, i, n)
	}
	return []byte(fmt.Sprintf(`{"rationale":"copy the files","ordered":%t,"items":[%s]}`, ordered, strings.Join(items, ",")))
}

func (e *planEnv) submit(t *testing.T, body []byte) (*queue.Plan, []*queue.Call) {
	t.Helper()
	p, items, err := e.q.SubmitPlan(context.Background(), planner, body)
	if err != nil {
		t.Fatalf("SubmitPlan: %v", err)
	}
	return p, items
}

func (e *planEnv) approve(t *testing.T, p *queue.Plan, operator string) *queue.Plan {
	t.Helper()
	p, err := e.q.ApprovePlan(context.Background(), queue.ApprovePlanInput{Operator: operator, Channel: audit.ChannelCLI,
		PlanID: p.ID, Digest: p.Digest})
	if err != nil {
		t.Fatalf("ApprovePlan by %s: %v", operator, err)
	}
	return p
}

// run mints item n, redeems its grant and reports status.
func (e *planEnv) run(t *testing.T, p *queue.Plan, n int, status string) *queue.Call {
	t.Helper()
	ctx := context.Background()
	c, err := e.q.MintPlanItem(ctx, planner, p.ID, n)
	if err != nil {
		t.Fatalf("mint item %d: %v", n, err)
	}
	r, err := e.q.Redeem(ctx, planner, exactBody(c))
	if err != nil || !r.Accepted {
		t.Fatalf("redeem item %d: %v %+v", n, err, r)
	}
	if c, err = e.q.ReportOutcome(ctx, planner, c.ID, status, ""); err != nil {
		t.Fatalf("outcome of item %d: %v", n, err)
	}
	return c
}

func TestPlanSubmitListsEveryProblemOfEveryItem(t *testing.T) {
	e := newPlanEnv(t)
	body := `{"rationale":"r","items":[
		{"tool":"files.copy","target":"file:a","args":{"size":1}},
		{"tool":"files.nope","target":"x","args":{}},
		{"tool":"files.copy","target":"file:b","args":{"size":"big","extra":1}},
		{"tool":"files.delete","target":"x","args":{}},
		{"tool":"files.copy","target":"file:a","args":{"size":1}},
		{"tool":"files.copy","target":"file:c","args":{"size":13}, "rationale": "no"}]}`
	_, _, err := e.q.SubmitPlan(context.Background(), planner, []byte(body))
	var perr *queue.ProposalError
	if !errors.As(err, &perr) {
		t.Fatalf("SubmitPlan: %v; want a ProposalError", err)
	}
	var got []string
	for _, p := range perr.Problems {
		got = append(got, p.Code+"@"+p.Path)
	}
	for _, want := range []string{"unknown_tool@/items/1/tool", "@/items/2/args/size", "@/items/2/args/extra",
		"not_plan_tool@/items/3/tool", "duplicate_item@/items/4", "unknown_field@/items/5/rationale"} {
		found := false
		for _, g := range got {
			if strings.HasSuffix(g, want) || strings.Contains(g, want) {
				found = true
			}
		}
		if !found {
			t.Errorf("problems %v lack %s", got, want)
		}
	}
	if n := countOf(t, e.db, `SELECT COUNT(*) FROM plans`) + countOf(t, e.db, `SELECT COUNT(*) FROM calls`); n != 0 {
		t.Fatalf("a refused plan stored %d rows", n)
	}
	// A rule that denies an item refuses the whole plan.
	e.clock.Set(sqlitekit.T0.Add(2 * time.Hour))
	_, _, err = e.q.SubmitPlan(context.Background(), planner, copies(false, 5, 13))
	if !errors.As(err, &perr) || len(perr.Problems) != 1 || perr.Problems[0].Path != "/items/1" || perr.Problems[0].Code != "denied_by_rule" {
		t.Fatalf("SubmitPlan with an item a rule denies: %v", err)
	}
	if _, _, err := e.q.SubmitPlan(context.Background(), planner, make([]byte, queue.MaxPlanBytes+1)); !errors.Is(err, queue.ErrPlanTooLarge) {
		t.Fatalf("a body over the bound: %v", err)
	}
}

func TestPlanItemsAreNotInTheQueueAndNotDecidedAlone(t *testing.T) {
	e := newPlanEnv(t)
	ctx := context.Background()
	p, items := e.submit(t, copies(false, 1, 2, 3))
	if p.Items != 3 || len(items) != 3 || items[2].PlanIndex != 2 || items[0].PlanID != p.ID {
		t.Fatalf("plan %+v items %d", p, len(items))
	}
	pending, err := e.q.PendingCalls(ctx, 100)
	if err != nil || len(pending) != 0 {
		t.Fatalf("PendingCalls = %d calls, %v; plan items are not in the queue", len(pending), err)
	}
	if _, err := e.q.Approve(ctx, "alice", audit.ChannelCLI, items[0].ID, items[0].Digest); !errors.Is(err, queue.ErrPlanItem) {
		t.Fatalf("approving an item alone: %v", err)
	}
	if _, err := e.q.Deny(ctx, "alice", audit.ChannelCLI, items[0].ID, "no"); !errors.Is(err, queue.ErrPlanItem) {
		t.Fatalf("denying an item alone: %v", err)
	}
	if _, err := e.q.Cancel(ctx, planner, items[0].ID); !errors.Is(err, queue.ErrPlanItem) {
		t.Fatalf("cancelling an item alone: %v", err)
	}
	if _, err := e.q.MintPlanItem(ctx, planner, p.ID, 0); !errors.Is(err, queue.ErrPlanNotApproved) {
		t.Fatalf("minting before approval: %v", err)
	}
	plans, err := e.q.PendingPlans(ctx, 10)
	if err != nil || len(plans) != 1 || plans[0].ID != p.ID {
		t.Fatalf("PendingPlans = %v, %v", plans, err)
	}
}

func TestPlanRequirementIsTheStrictestOfItsItems(t *testing.T) {
	e := newPlanEnv(t)
	ctx := context.Background()
	p, _ := e.submit(t, copies(false, 1, 5000, 2))
	if p.ApprovalsRequired != 2 {
		t.Fatalf("approvals required %d; want 2 (item 1's rule)", p.ApprovalsRequired)
	}
	in := queue.ApprovePlanInput{Operator: "carol", Channel: audit.ChannelCLI, PlanID: p.ID, Digest: p.Digest}
	var owner *queue.OwnerError
	if _, err := e.q.ApprovePlan(ctx, in); !errors.As(err, &owner) {
		t.Fatalf("an owner approving: %v", err)
	}
	in.Operator, in.Digest = "alice", strings.Repeat("0", 64)
	if _, err := e.q.ApprovePlan(ctx, in); !errors.Is(err, queue.ErrDigestMismatch) {
		t.Fatalf("another digest: %v", err)
	}
	if p = e.approve(t, p, "alice"); p.Status != queue.PlanPending {
		t.Fatalf("after one approval the plan is %s; want pending", p.Status)
	}
	in.Digest = p.Digest
	if _, err := e.q.ApprovePlan(ctx, in); !errors.Is(err, queue.ErrAlreadyApproved) {
		t.Fatalf("alice twice: %v", err)
	}
	now := e.clock.Now()
	if p = e.approve(t, p, "bob"); p.Status != queue.PlanApproved || !p.ValidUntil.Equal(now.Add(2*time.Hour)) {
		t.Fatalf("after two approvals: %s until %s", p.Status, p.ValidUntil)
	}
	_, items, err := e.q.ReadPlan(ctx, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range items {
		if c.Status != queue.StatusPending || len(c.Approvals) != 2 || c.Approvals[0].Method != queue.MethodPlan || c.Approvals[0].Via != p.ID {
			t.Fatalf("item %d: %s with %+v", c.PlanIndex, c.Status, c.Approvals)
		}
	}
}

func TestPlanMintsEachItemOnceInOrderAndHaltsOnFailure(t *testing.T) {
	e := newPlanEnv(t)
	ctx := context.Background()
	p, _ := e.submit(t, copies(true, 1, 2, 3, 4))
	p = e.approve(t, p, "alice")
	if _, err := e.q.MintPlanItem(ctx, planner, p.ID, 1); !errors.Is(err, queue.ErrPlanOrder) {
		t.Fatalf("item 1 before item 0 succeeded: %v", err)
	}
	other := planner
	other.TokenID = "tok_other"
	if _, err := e.q.MintPlanItem(ctx, other, p.ID, 0); !errors.Is(err, queue.ErrPlanNotFound) {
		t.Fatalf("another token minting: %v", err)
	}
	c0, err := e.q.MintPlanItem(ctx, planner, p.ID, 0)
	if err != nil || c0.Status != queue.StatusApproved || c0.Grant == "" {
		t.Fatalf("mint item 0: %v", err)
	}
	again, err := e.q.MintPlanItem(ctx, planner, p.ID, 0)
	if err != nil || again.GrantJTI != c0.GrantJTI {
		t.Fatalf("minting item 0 again: %v, jti %s; want the same grant %s", err, again.GrantJTI, c0.GrantJTI)
	}
	if _, err := e.q.Redeem(ctx, planner, exactBody(c0)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.q.ReportOutcome(ctx, planner, c0.ID, queue.OutcomeSucceeded, ""); err != nil {
		t.Fatal(err)
	}
	e.run(t, p, 1, queue.OutcomeFailed)
	if _, err := e.q.MintPlanItem(ctx, planner, p.ID, 2); !errors.Is(err, queue.ErrPlanHalted) {
		t.Fatalf("minting after a failure: %v", err)
	}
	pl, items, err := e.q.ReadPlan(ctx, p.ID)
	if err != nil || pl.Shown(items) != queue.PlanHalted {
		t.Fatalf("plan shown %s, %v; want halted", pl.Shown(items), err)
	}
	if n := countOf(t, e.db, `SELECT COUNT(*) FROM audit WHERE kind = 'granted'`); n != 2 {
		t.Fatalf("%d grants minted; want 2", n)
	}
}

func TestPlanMintingRerunsTheRulesFreezeAndApprovers(t *testing.T) {
	e := newPlanEnv(t)
	ctx := context.Background()
	p, items := e.submit(t, copies(false, 13, 2, 3))
	p = e.approve(t, p, "alice")
	// A rule that denies at minting time denies the item.
	e.clock.Set(sqlitekit.T0.Add(time.Hour))
	var denied *queue.PolicyDeniedError
	if _, err := e.q.MintPlanItem(ctx, planner, p.ID, 0); !errors.As(err, &denied) || denied.Rule != "late" {
		t.Fatalf("minting an item a rule now denies: %v", err)
	}
	if c, _ := e.q.Call(ctx, items[0].ID); c.Status != queue.StatusDenied {
		t.Fatalf("item 0 is %s; want denied", c.Status)
	}
	// A freeze between approval and minting refuses the mint.
	if _, err := e.q.Freeze(ctx, "dana", audit.ChannelCLI, "files.copy", "", "incident"); err != nil {
		t.Fatal(err)
	}
	var frozen *queue.FrozenError
	if _, err := e.q.MintPlanItem(ctx, planner, p.ID, 1); !errors.As(err, &frozen) {
		t.Fatalf("minting under a freeze: %v", err)
	}
	if _, err := e.q.Unfreeze(ctx, "dana", audit.ChannelCLI, "files.copy", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := e.q.MintPlanItem(ctx, planner, p.ID, 1); err != nil {
		t.Fatalf("minting item 1: %v", err)
	}
	// An approver disabled since refuses the mint.
	if err := e.db.Accounts().Update(ctx, func(tx account.Tx) error { return tx.DisableUser("alice", e.clock.Now()) }); err != nil {
		t.Fatal(err)
	}
	if _, err := e.q.MintPlanItem(ctx, planner, p.ID, 2); !errors.Is(err, queue.ErrPlanApprover) {
		t.Fatalf("minting after the approver was disabled: %v", err)
	}
	// Past valid_until the plan expires and its unminted items with it.
	e.clock.Advance(3 * time.Hour)
	var st *queue.PlanStateError
	if _, err := e.q.MintPlanItem(ctx, planner, p.ID, 2); !errors.As(err, &st) || st.Status != queue.PlanExpired {
		t.Fatalf("minting after valid_until: %v", err)
	}
	if c, _ := e.q.Call(ctx, items[2].ID); c.Status != queue.StatusExpired {
		t.Fatalf("item 2 is %s; want expired", c.Status)
	}
}

func TestPlanDenyAndCancel(t *testing.T) {
	e := newPlanEnv(t)
	ctx := context.Background()
	p, items := e.submit(t, copies(false, 1, 2))
	if _, err := e.q.DenyPlan(ctx, "alice", audit.ChannelCLI, p.ID, "not today"); err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		c, _ := e.q.Call(ctx, it.ID)
		if c.Status != queue.StatusDenied || c.Denial == nil || c.Denial.Reason != "not today" {
			t.Fatalf("item %d after the plan's denial: %s %+v", c.PlanIndex, c.Status, c.Denial)
		}
	}
	var st *queue.PlanStateError
	if _, err := e.q.ApprovePlan(ctx, queue.ApprovePlanInput{Operator: "bob", Channel: audit.ChannelCLI, PlanID: p.ID, Digest: p.Digest}); !errors.As(err, &st) {
		t.Fatalf("approving a denied plan: %v", err)
	}

	p, items = e.submit(t, copies(false, 1, 2, 3))
	p = e.approve(t, p, "alice")
	redeemed := e.run(t, p, 0, queue.OutcomeSucceeded)
	minted, err := e.q.MintPlanItem(ctx, planner, p.ID, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.q.CancelPlan(ctx, queue.Principal{Actor: planner.Actor, Audience: "host", TokenID: "tok_x"}, p.ID); !errors.Is(err, queue.ErrPlanNotFound) {
		t.Fatalf("another token cancelling: %v", err)
	}
	if _, err := e.q.CancelPlan(ctx, planner, p.ID); err != nil {
		t.Fatal(err)
	}
	if c, _ := e.q.Call(ctx, redeemed.ID); c.Shown() != queue.StatusRedeemed {
		t.Fatalf("redeemed item after cancel: %s", c.Shown())
	}
	if c, _ := e.q.Call(ctx, minted.ID); c.Shown() != queue.StatusRevoked {
		t.Fatalf("minted item after cancel: %s; want revoked", c.Shown())
	}
	if r, err := e.q.Redeem(ctx, planner, exactBody(minted)); err != nil || r.Accepted {
		t.Fatalf("redeeming a revoked item: %v %+v", err, r)
	}
	if c, _ := e.q.Call(ctx, items[2].ID); c.Status != queue.StatusCancelled {
		t.Fatalf("unminted item after cancel: %s", c.Status)
	}
}

func TestPlanPendingBoundPerToken(t *testing.T) {
	e := newPlanEnv(t)
	for i := 0; i < queue.MaxPendingPlansPerToken; i++ {
		e.submit(t, copies(false, 100+i))
	}
	if _, _, err := e.q.SubmitPlan(context.Background(), planner, copies(false, 7)); !errors.Is(err, queue.ErrTooManyPendingPlans) {
		t.Fatalf("plan %d: %v", queue.MaxPendingPlansPerToken+1, err)
	}
	other := planner
	other.TokenID = "tok_other"
	if _, _, err := e.q.SubmitPlan(context.Background(), other, copies(false, 7)); err != nil {
		t.Fatalf("another token's plan: %v", err)
	}
}

func TestPlanConcurrentMintsMakeOneGrant(t *testing.T) {
	e := newPlanEnv(t)
	p, _ := e.submit(t, copies(false, 1))
	p = e.approve(t, p, "alice")
	var wg sync.WaitGroup
	jtis := make([]string, 8)
	errs := make([]error, 8)
	for i := range jtis {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := e.q.MintPlanItem(context.Background(), planner, p.ID, 0)
			errs[i] = err
			if c != nil {
				jtis[i] = c.GrantJTI
			}
		}()
	}
	wg.Wait()
	for i := range jtis {
		if errs[i] != nil || jtis[i] != jtis[0] || jtis[i] == "" {
			t.Fatalf("mint %d: %v, jti %q; want every mint to return the one grant %q", i, errs[i], jtis[i], jtis[0])
		}
	}
	if n := countOf(t, e.db, `SELECT COUNT(*) FROM audit WHERE kind = 'granted'`); n != 1 {
		t.Fatalf("%d grants; want 1", n)
	}
}

func TestPlanExpirySweepEndsPlansAndTheirItems(t *testing.T) {
	e := newPlanEnv(t)
	ctx := context.Background()
	pending, items := e.submit(t, copies(false, 1, 2))
	approved, _ := e.submit(t, copies(false, 3, 4, 6))
	approved, err := e.q.ApprovePlan(ctx, queue.ApprovePlanInput{Operator: "alice", Channel: audit.ChannelCLI,
		PlanID: approved.ID, Digest: approved.Digest, ValidFor: 45 * time.Minute})
	if err != nil || !approved.ValidUntil.Equal(e.clock.Now().Add(45*time.Minute)) {
		t.Fatalf("approve with a shorter validity: %v, until %s", err, approved.ValidUntil)
	}
	minted, err := e.q.MintPlanItem(ctx, planner, approved.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(31 * time.Minute) // past the pending plan's deadline, within the approved one's validity
	if _, err := e.q.ExpireDue(ctx); err != nil {
		t.Fatal(err)
	}
	p, _, _ := e.q.ReadPlan(ctx, pending.ID)
	if c, _ := e.q.Call(ctx, items[1].ID); p.Status != queue.PlanExpired || c.Status != queue.StatusExpired {
		t.Fatalf("the pending plan after its deadline: %s, item %s", p.Status, c.Status)
	}
	if a, ai, _ := e.q.ReadPlan(ctx, approved.ID); a.Status != queue.PlanApproved || ai[1].Status != queue.StatusPending ||
		!e.clock.Now().After(ai[1].DecideBy) {
		t.Fatalf("the approved plan within its validity: %s, item 1 %s (decide_by %s)", a.Status, ai[1].Status, ai[1].DecideBy)
	}
	if c, err := e.q.MintPlanItem(ctx, planner, approved.ID, 1); err != nil || c.Status != queue.StatusApproved {
		t.Fatalf("an item past its own decide_by, in a valid plan: %v", err)
	}
	e.clock.Advance(15 * time.Minute)
	if _, err := e.q.ExpireDue(ctx); err != nil {
		t.Fatal(err)
	}
	a, ai, _ := e.q.ReadPlan(ctx, approved.ID)
	if a.Status != queue.PlanExpired || ai[2].Status != queue.StatusExpired || ai[0].Shown() != queue.StatusApproved {
		t.Fatalf("the approved plan after valid_until: %s, items %s %s", a.Status, ai[0].Shown(), ai[2].Status)
	}
	_ = minted
}

// A plan refused for its content counts against (actor, tool) of its
// first bad item: resent as it is, it is stopped by the retry cap, and a
// blocked pair refuses a valid plan holding that tool's calls too.
func TestPlanRefusalsCountTowardTheRetryCap(t *testing.T) {
	e := newPlanEnv(t)
	ctx := context.Background()
	bad := []byte(`{"rationale":"r","items":[{"tool":"files.copy","target":"file:a","args":{"size":0}}]}`)
	var perr *queue.ProposalError
	for i := range queue.RetryLimit {
		if _, _, err := e.q.SubmitPlan(ctx, planner, bad); !errors.As(err, &perr) {
			t.Fatalf("refusal %d: %v", i, err)
		}
	}
	if _, _, err := e.q.SubmitPlan(ctx, planner, bad); !errors.Is(err, queue.ErrRetryLimit) {
		t.Fatalf("after %d refusals: %v, want retry_limit", queue.RetryLimit, err)
	}
	if _, _, err := e.q.SubmitPlan(ctx, planner, copies(false, 5)); !errors.Is(err, queue.ErrRetryLimit) {
		t.Fatalf("a valid plan of the blocked pair: %v, want retry_limit", err)
	}
	if n := countOf(t, e.db, `SELECT COUNT(*) FROM plans`); n != 0 {
		t.Fatalf("%d plans stored", n)
	}
}

// TestAcceptedRollbackEndsPlansAndDelegations: accepting a database
// restored from an older copy cancels every approved plan (its unminted
// items stop, its minted and unredeemed grants are revoked, what ran
// stays) and ends every live delegation, each audited in the admin's
// name; a pending plan still waits for a person.
func TestAcceptedRollbackEndsPlansAndDelegations(t *testing.T) {
	e := newPlanEnv(t)
	ctx := context.Background()
	approved, _ := e.submit(t, copies(false, 1, 2, 3))
	e.approve(t, approved, "alice")
	e.run(t, approved, 0, "succeeded")
	minted, err := e.q.MintPlanItem(ctx, planner, approved.ID, 1)
	if err != nil {
		t.Fatal(err)
	}
	pending, _ := e.submit(t, copies(false, 4))
	d, err := e.q.GiveDelegation(ctx, queue.DelegationInput{By: "alice", Channel: audit.ChannelWeb, Delegator: "alice",
		Delegate: "bob", Until: e.clock.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}

	// What the console pushes from: the delegation's end as an event, with
	// the rollback as its reason and the admin who accepted it.
	events := make(chan queue.Delegation, 4)
	e.q.Subscribe(func(ev queue.Event) {
		if ev.Kind == queue.KindDelegationEnded && ev.Delegation != nil {
			events <- *ev.Delegation
		}
	})
	ended, err := e.q.AcceptRollback(ctx, "dana", audit.ChannelCLI, queue.Rollback{MarkSeq: 1, MarkHead: "h", DBSeq: 1, DBHead: "h"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-events:
		if ev.ID != d.ID || ev.EndReason != queue.DelegationEndedRollback || ev.EndedBy != "dana" || ev.EndedAt.IsZero() {
			t.Errorf("delegation_ended event = %+v; want %s ended by dana for the rollback", ev, d.ID)
		}
	case <-time.After(10 * time.Second):
		t.Error("no delegation_ended event for the delegation the rollback ended")
	}
	if len(ended.Plans) != 1 || ended.Plans[0] != approved.ID || len(ended.Delegations) != 1 || ended.Delegations[0] != d.ID {
		t.Fatalf("ended = %+v; want plan %s and delegation %s", ended, approved.ID, d.ID)
	}
	if _, err := e.q.MintPlanItem(ctx, planner, approved.ID, 2); err == nil {
		t.Error("an item of the cancelled plan was minted after the rollback")
	}
	if c, err := e.q.Call(ctx, minted.ID); err != nil || c.Revoked == nil {
		t.Errorf("the minted, unredeemed item's grant: %v %+v; want revoked", err, c)
	}
	if p, _, err := e.q.ReadPlan(ctx, pending.ID); err != nil || p.Status != queue.PlanPending {
		t.Errorf("the pending plan: %v %+v; want still pending", err, p)
	}
	ds, err := e.q.Delegations(ctx, queue.DelegationFilter{Person: "alice", Limit: 10})
	if err != nil || len(ds) != 1 || ds[0].LiveAt(e.clock.Now()) || ds[0].EndReason != queue.DelegationEndedRollback {
		t.Errorf("alice's delegation after the rollback: %v %+v", err, ds)
	}
}
