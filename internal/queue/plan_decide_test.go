package queue_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/present"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/testkit"
	"github.com/countersign/countersign/internal/testkit/sqlitekit"
	"github.com/countersign/countersign/internal/tools"
)

// decideTools: a deletion that asks for its target to be typed and that
// only admins approve, and a plain note; both may be plan items.
const decideTools = `tools:
  files.remove:
    audience: host
    target: '^file:.+$'
    confirm: target
    approvers: {roles: [admin]}
    plan: {max_for: 1h}
    args: {type: object, additionalProperties: false}
  notes.post:
    audience: host
    target: '.+'
    plan: {max_for: 1h}
    args: {type: object, additionalProperties: false}
`

func newDecideEnv(t *testing.T) (*planEnv, *present.Key) {
	t.Helper()
	reg, err := tools.Parse([]byte(decideTools))
	if err != nil {
		t.Fatal(err)
	}
	key, err := present.NewKey([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	k := sqlitekit.NewQueue(t, sqlitekit.WithTools(reg), sqlitekit.WithConfig(func(cfg *queue.Config) { cfg.Presentations = key }))
	testkit.SeedUsers(t, k.DB.Accounts(), account.RoleOperator, "alice", "bob")
	testkit.SeedUsers(t, k.DB.Accounts(), account.RoleAdmin, "dana", "erin")
	return &planEnv{clock: k.Clock, db: k.DB, q: k.Service}, key
}

// The plan's requirement is every item's: an approver every item's
// condition allows, each item's typed confirmation, the deception warning
// acknowledged, never one's own calls; through the browser, the plan
// page's own presentation token, which shows every item and the plan
// digest to this viewer.
func TestPlanApprovalChecksEveryItem(t *testing.T) {
	e, key := newDecideEnv(t)
	ctx := context.Background()
	body := `{"rationale":"clean up","items":[{"tool":"notes.post","target":"note:a","args":{}},
		{"tool":"files.remove","target":"file:/tmp/old","args":{}},{"tool":"notes.post","target":"note:p\u0430ypal","args":{}}]}`
	p, items, err := e.q.SubmitPlan(ctx, planner, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	in := func(op string, confirm map[int]string, ack bool, presented string) queue.ApprovePlanInput {
		return queue.ApprovePlanInput{Operator: op, Channel: audit.ChannelWeb, PlanID: p.ID, Digest: p.Digest,
			Confirm: confirm, AcceptWarnings: ack, Presented: presented}
	}
	var ap *queue.ApproversError
	if _, err := e.q.ApprovePlan(ctx, in("alice", map[int]string{1: "file:/tmp/old"}, true, e.q.PresentPlan("alice", p, items))); !errors.As(err, &ap) {
		t.Fatalf("an operator the deletion's condition does not allow: %v", err)
	}
	good := e.q.PresentPlan("dana", p, items)
	var ce *queue.ConfirmationError
	if _, err := e.q.ApprovePlan(ctx, in("dana", nil, true, good)); !errors.As(err, &ce) {
		t.Fatalf("without the typed target of item 1: %v", err)
	}
	if _, err := e.q.ApprovePlan(ctx, in("dana", map[int]string{1: "file:/tmp/old"}, false, good)); !errors.Is(err, queue.ErrWarningNotAcknowledged) {
		t.Fatalf("without acknowledging item 2's warning: %v", err)
	}
	token := func(viewer string, its ...present.Item) string {
		return key.Token(present.Shown{Page: present.PagePlan, Viewer: viewer, At: e.clock.Now(), Items: its})
	}
	all := []present.Item{{CallID: items[0].ID, Digest: items[0].Digest}, {CallID: items[1].ID, Digest: items[1].Digest},
		{CallID: items[2].ID, Digest: items[2].Digest}}
	for name, tok := range map[string]string{
		"no token":              "",
		"another viewer":        e.q.PresentPlan("erin", p, items),
		"without the digest":    token("dana", all...),
		"an item left out":      token("dana", all[0], all[1], present.PlanItem(p.Digest)),
		"a call page's token":   e.q.Present(present.PageCall, "dana", items[0]),
		"another plan's digest": token("dana", append(all, present.PlanItem(strings.Repeat("0", 64)))...),
	} {
		if _, err := e.q.ApprovePlan(ctx, in("dana", map[int]string{1: "file:/tmp/old"}, true, tok)); !errors.Is(err, queue.ErrPresentation) {
			t.Errorf("%s: %v, want ErrPresentation", name, err)
		}
	}
	if _, items, _ = e.q.ReadPlan(ctx, p.ID); len(items[0].Approvals) != 0 {
		t.Fatalf("refused approvals recorded %d approvals", len(items[0].Approvals))
	}
	got, err := e.q.ApprovePlan(ctx, in("dana", map[int]string{1: "file:/tmp/old"}, true, good))
	if err != nil || got.Status != queue.PlanApproved {
		t.Fatalf("dana's approval: %v", err)
	}
	_, items, _ = e.q.ReadPlan(ctx, p.ID)
	for _, c := range items {
		a := c.Approvals[0]
		if a.Method != queue.MethodPlan || a.Presented == nil || a.Presented.Page != present.PagePlan || a.Human() != queue.HumanTrue {
			t.Fatalf("item %d's approval: %+v", c.PlanIndex, a)
		}
	}

	// Never one's own calls.
	own := queue.Principal{Actor: "bob", Audience: "host", TokenID: "tok_bob"}
	q, _, err := e.q.SubmitPlan(ctx, own, []byte(`{"rationale":"r","items":[{"tool":"notes.post","target":"note:c","args":{}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.q.ApprovePlan(ctx, queue.ApprovePlanInput{Operator: "bob", Channel: audit.ChannelCLI, PlanID: q.ID, Digest: q.Digest}); !errors.Is(err, queue.ErrOwnCall) {
		t.Fatalf("approving one's own plan: %v", err)
	}
}
