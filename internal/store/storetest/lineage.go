package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/answer"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/policy"
	"github.com/countersign/countersign/internal/present"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/scope"
)

// The decision record, every way a call is approved: what ran is what was
// approved (DESIGN invariant 18).

// lineageToolsYAML has a refund that allowances may cover and a rule
// approves when small, and a transfer that needs a passkey.
const lineageToolsYAML = `tools:
  payments.refund:
    description: Refund an invoice
    audience: payments-host
    target: '^invoice:INV-[0-9]+$'
    approvals: 1
    grant_ttl: 60s
    decide_within: 15m
    informational: [/notes]
    args:
      type: object
      additionalProperties: false
      required: [amount_minor, currency]
      properties:
        amount_minor: {type: integer, minimum: 1, maximum: 5000000}
        currency: {type: string, enum: [USD, EUR]}
        notes: {type: string, maxLength: 500}
    allowance: {max_uses: 10, max_for: 1h, vary: [target, /amount_minor]}
    auto_approve: allowed
    rules:
      - id: small-refunds
        when: args.amount_minor < 100
        then: approve
  funds.transfer:
    description: Move money between accounts
    audience: payments-host
    target: '^account:[0-9]+$'
    approvals: 1
    approve_with: passkey
    args:
      type: object
      additionalProperties: false
      required: [amount_minor]
      properties:
        amount_minor: {type: integer, minimum: 1, maximum: 100000000}
`

var _ = add("lineage/every way of approving records what ran", func(t *testing.T, s Stores) {
	ctx := context.Background()
	w := newWorld(t, s)
	pol, err := policy.Parse([]byte(lineageToolsYAML))
	if err != nil {
		t.Fatal(err)
	}
	w.policy, w.tools = pol, pol.Registry()
	if w.present, err = present.NewKey([]byte(strings.Repeat("p", 32))); err != nil {
		t.Fatal(err)
	}
	h := w.open(t)
	passkeyID := []byte{7, 7, 7}
	accountUpdate(t, s, func(tx account.Tx) error {
		return tx.InsertPasskey(account.Passkey{ID: passkeyID, User: "bob", Name: "laptop", PublicKey: []byte{1}, SignCount: 1,
			Record: []byte(`{}`), CreatedAt: w.clock.Now()})
	})
	n := uint32(500)
	refund := func(amount int64) *queue.Call {
		n++
		return mustSubmit(t, h, payer, refundOf(n, amount, "lineage"))
	}
	page := func(kind, viewer string, calls ...*queue.Call) string {
		items := make([]present.Item, len(calls))
		for i, c := range calls {
			items[i] = present.Item{CallID: c.ID, Digest: c.Digest}
		}
		return w.present.Token(present.Shown{Page: kind, Viewer: viewer, At: w.clock.Now(), Items: items})
	}
	approve := func(in queue.ApproveInput) *queue.Call {
		t.Helper()
		c, err := h.q.ApproveWith(ctx, in)
		if err != nil {
			t.Fatalf("approve %s by %s: %v", in.CallID, in.Operator, err)
		}
		return c
	}

	type path struct {
		method, human, page string
		call                *queue.Call
	}
	var paths []path

	c := refund(1200)
	approve(queue.ApproveInput{Operator: "alice", Channel: audit.ChannelWeb, CallID: c.ID, Digest: c.Digest,
		Presented: page(present.PageCall, "alice", c)})
	paths = append(paths, path{queue.MethodClick, queue.HumanTrue, present.PageCall, c})

	c = mustSubmit(t, h, payer, []byte(`{"tool":"funds.transfer","target":"account:42","args":{"amount_minor":5000}}`))
	ev, _ := json.Marshal(map[string]any{"call_id": c.ID, "digest": c.Digest, "operator": "bob", "sign_count": 2})
	approve(queue.ApproveInput{Operator: "bob", Channel: audit.ChannelWeb, CallID: c.ID, Digest: c.Digest,
		Presented: page(present.PageCall, "bob", c),
		Passkey: &queue.PasskeyProof{Operator: "bob", CredentialID: passkeyID, Name: "laptop", CountBefore: 1, CountAfter: 2,
			Record: []byte(`{"n":2}`), Evidence: ev}})
	paths = append(paths, path{queue.MethodPasskey, queue.HumanTrue, present.PageCall, c})

	c = refund(1300)
	approve(queue.ApproveInput{Operator: "alice", Channel: audit.ChannelCLI, CallID: c.ID, Digest: c.Digest})
	paths = append(paths, path{queue.MethodCommand, queue.HumanUnattested, "", c})

	c = refund(50) // small-refunds approves it at submission
	paths = append(paths, path{queue.MethodPolicy, queue.HumanFalse, "", c})

	b1, b2 := refund(1400), refund(1500)
	res, err := h.q.ApproveBatch(ctx, queue.BatchInput{Operator: "bob", Channel: audit.ChannelWeb,
		Items:     []queue.BatchItem{{CallID: b1.ID, Digest: b1.Digest}, {CallID: b2.ID, Digest: b2.Digest}},
		Presented: page(present.PageBatch, "bob", b1, b2)})
	if err != nil || len(res.Decided) != 2 {
		t.Fatalf("batch: %+v, %v", res, err)
	}
	paths = append(paths, path{queue.MethodBatch, queue.HumanTrue, present.PageBatch, b1}, path{queue.MethodBatch, queue.HumanTrue, present.PageBatch, b2})

	base := refund(1600)
	max := int64(2000)
	ch := scope.Choices{Uses: 2, Until: w.clock.Now().Add(30 * time.Minute), TargetPrefix: "invoice:INV-",
		Members: map[string]scope.Member{"/amount_minor": {Max: &max}}}
	in := giveIn(t, w, h, "alice", base, ch)
	// The base call's own page does not do: the page that gives must have
	// shown the scope too.
	in.Presented = page(present.PageCall, "alice", base)
	if _, _, err := h.q.GiveAllowance(ctx, in); !errors.Is(err, queue.ErrPresentation) {
		t.Fatalf("GiveAllowance from the call's page alone: %v, want ErrPresentation", err)
	}
	in.Presented = w.present.Token(present.Shown{Page: present.PageAllowance, Viewer: "alice", At: w.clock.Now(),
		Items: []present.Item{{CallID: base.ID, Digest: base.Digest}, present.ScopeItem(in.ScopeDigest)}})
	if _, _, err := h.q.GiveAllowance(ctx, in); err != nil {
		t.Fatalf("GiveAllowance: %v", err)
	}
	paths = append(paths, path{queue.MethodClick, queue.HumanTrue, present.PageAllowance, base})
	paths = append(paths, path{queue.MethodAllowance, queue.HumanFalse, "", refund(1700)})

	for _, p := range paths {
		c, err := h.q.Call(ctx, p.call.ID)
		if err != nil {
			t.Fatal(err)
		}
		if c.Status != queue.StatusApproved || len(c.Approvals) != 1 {
			t.Fatalf("%s: %s with %d approvals, want approved once", p.method, c.Status, len(c.Approvals))
		}
		a := c.Approvals[0]
		shown := ""
		if a.Presented != nil {
			shown = a.Presented.Page
		}
		if a.Method != p.method || a.Human() != p.human || shown != p.page || a.Digest != c.Digest {
			t.Errorf("%s: approval %+v, human %s; want method %s, human %s, page %q, the call's digest", c.ID, a, a.Human(), p.method, p.human, p.page)
		}
		// A redemption of anything else is refused and consumes nothing;
		// the call as approved is then redeemed.
		who := queue.Principal{Actor: c.Actor, Audience: c.Audience, TokenID: "tok-lineage"}
		exact := redemptionOf(t, c, c.Target, c.Args)
		amount, _ := c.Args.Get("amount_minor")
		for name, body := range map[string][]byte{
			"another amount": []byte(strings.Replace(string(exact), fmt.Sprintf(`"amount_minor":%v`, amount), fmt.Sprintf(`"amount_minor":%v1`, amount), 1)),
			"another target": []byte(strings.Replace(string(exact), c.Target, c.Target+"9", 1)),
		} {
			if string(body) == string(exact) {
				t.Fatalf("%s: the altered redemption is the exact one", name)
			}
			if r, err := h.q.Redeem(ctx, who, body); err == nil && r.Accepted {
				t.Fatalf("%s: a redemption with %s was accepted", c.ID, name)
			}
		}
		r, err := h.q.Redeem(ctx, who, exact)
		if err != nil || !r.Accepted {
			t.Fatalf("%s: the exact redemption: %+v, %v", c.ID, r, err)
		}
		c, _ = h.q.Call(ctx, c.ID)
		v, err := answer.CallAsStored(c, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		l := v.Lineage
		if l.Redeemed == nil || l.Redeemed.Digest != l.Proposed.Digest || l.Proposed.Digest != c.Digest || len(l.Decided) != 1 ||
			l.Decided[0].Digest != l.Proposed.Digest || l.Decided[0].Method != p.method || l.Decided[0].Human != p.human {
			t.Errorf("%s (%s): lineage %+v", c.ID, p.method, l)
		}
		if (p.page != "") != (len(l.Presented) == 1) {
			t.Errorf("%s (%s): presented %+v, want the %q page", c.ID, p.method, l.Presented, p.page)
		}
	}
	// The trail says the same, independently of the call's row: every
	// approval's digest and every redemption's recomputed digest are the
	// call's.
	digests := map[string]string{}
	for _, p := range paths {
		digests[p.call.ID] = p.call.Digest
	}
	seen := map[string]int{}
	for _, e := range auditEntries(t, h.Stores) {
		want, ok := digests[e.CallID]
		if !ok || (e.Kind != audit.KindApproved && e.Kind != audit.KindRedeemed) {
			continue
		}
		seen[e.Kind]++
		if got := detail(e, "digest"); got != want {
			t.Errorf("%s entry of %s: digest %v, want %s", e.Kind, e.CallID, got, want)
		}
		if e.Kind == audit.KindApproved && detail(e, "method") == nil {
			t.Errorf("approved entry of %s names no method", e.CallID)
		}
	}
	if seen[audit.KindApproved] != len(paths) || seen[audit.KindRedeemed] != len(paths) {
		t.Errorf("entries: %v, want %d approvals and %d redemptions", seen, len(paths), len(paths))
	}
})

// redemptionOf is the body of a redemption of c's grant presenting target
// and args.
func redemptionOf(t *testing.T, c *queue.Call, target string, args json.Marshaler) []byte {
	t.Helper()
	a, err := args.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(map[string]any{"grant": c.Grant, "call": map[string]any{"tool": c.Tool, "target": target, "args": json.RawMessage(a)}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var _ = add("lineage/an allowance is confirmed through the browser only from its own page", func(t *testing.T, s Stores) {
	ctx := context.Background()
	w := newAllowanceWorld(t, s)
	var err error
	if w.present, err = present.NewKey([]byte(strings.Repeat("p", 32))); err != nil {
		t.Fatal(err)
	}
	h := w.open(t)
	base := mustSubmit(t, h, deployer, deploy("web")) // two approvals: two confirmers
	ch := scope.Choices{Uses: 3, Until: w.clock.Now().Add(20 * time.Minute), TargetPrefix: "service:"}
	in := giveIn(t, w, h, "alice", base, ch)
	givePage := w.present.Token(present.Shown{Page: present.PageAllowance, Viewer: "alice", At: w.clock.Now(),
		Items: []present.Item{{CallID: base.ID, Digest: base.Digest}, present.ScopeItem(in.ScopeDigest)}})
	in.Presented = givePage
	a, _, err := h.q.GiveAllowance(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	confirm := queue.ConfirmInput{Operator: "bob", Channel: audit.ChannelWeb, AllowanceID: a.ID, ScopeDigest: a.ScopeDigest}
	bobsGivePage := w.present.Token(present.Shown{Page: present.PageAllowance, Viewer: "bob", At: w.clock.Now(),
		Items: []present.Item{{CallID: base.ID, Digest: base.Digest}, present.ScopeItem(in.ScopeDigest)}})
	for name, tok := range map[string]string{"no token": "", "the page that gives one": bobsGivePage, "alice's page": h.q.PresentConfirm("alice", a)} {
		c := confirm
		c.Presented = tok
		if _, err := h.q.ConfirmAllowance(ctx, c); !errors.Is(err, queue.ErrPresentation) {
			t.Errorf("confirm with %s: %v, want ErrPresentation", name, err)
		}
	}
	if got, _ := h.q.Allowance(ctx, a.ID); got.Confirmed() {
		t.Fatal("refused confirmations confirmed it")
	}
	confirm.Presented = h.q.PresentConfirm("bob", a)
	if got, err := h.q.ConfirmAllowance(ctx, confirm); err != nil || !got.Confirmed() {
		t.Fatalf("confirm from its page: %+v, %v", got, err)
	}
	var seen bool
	for _, e := range entriesOf(t, h, queue.KindAllowanceConfirmed) {
		if p, ok := detail(e, "presented").(map[string]any); ok && p["page"] == present.PageAllowance {
			seen = true
		}
	}
	if !seen {
		t.Error("the allowance_confirmed entry does not record the page")
	}
})

var _ = add("allowances/one from a call a person denied is never confirmed", func(t *testing.T, s Stores) {
	ctx := context.Background()
	w := newAllowanceWorld(t, s)
	h := w.open(t)
	base := mustSubmit(t, h, deployer, deploy("web")) // two approvals: two confirmers
	a := mustGive(t, w, h, "alice", base, scope.Choices{Uses: 3, Until: w.clock.Now().Add(20 * time.Minute), TargetPrefix: "service:"})
	if _, err := h.q.Deny(ctx, "bob", audit.ChannelCLI, base.ID, "this deploy must not happen"); err != nil {
		t.Fatal(err)
	}
	_, err := h.q.ConfirmAllowance(ctx, queue.ConfirmInput{Operator: "op1", Channel: audit.ChannelCLI, AllowanceID: a.ID, ScopeDigest: a.ScopeDigest})
	if !errors.Is(err, queue.ErrBaseDenied) {
		t.Fatalf("confirming an allowance of a denied call: %v, want ErrBaseDenied", err)
	}
	if c := mustSubmit(t, h, tokenOf(deployer, "tok-after"), deploy("api")); c.Status != queue.StatusPending {
		t.Errorf("a deploy like the denied one is %s", c.Status)
	}
})

var _ = add("allowances/one giver never fills a tool's bound", func(t *testing.T, s Stores) {
	ctx := context.Background()
	w := newAllowanceWorld(t, s)
	h := w.open(t)
	if queue.DefaultMaxAllowancesPerGiver >= queue.DefaultMaxAllowancesPerTool {
		t.Fatalf("a giver's bound %d does not leave room under a tool's %d", queue.DefaultMaxAllowancesPerGiver, queue.DefaultMaxAllowancesPerTool)
	}
	// Each base call asks more than every earlier allowance allows, so
	// none of them covers it.
	give := func(who string, i int) error {
		amount := int64(4000 + 1000*i)
		_, _, err := h.q.GiveAllowance(ctx, giveIn(t, w, h, who, mustSubmit(t, h, payer, refundOf(uint32(700+i), amount, "n")), refundChoices(w, 2, amount)))
		return err
	}
	for i := range queue.DefaultMaxAllowancesPerGiver {
		if err := give("alice", i); err != nil {
			t.Fatalf("alice's allowance %d: %v", i+1, err)
		}
	}
	if err := give("alice", queue.DefaultMaxAllowancesPerGiver); !errors.Is(err, queue.ErrAllowancesPerGiver) {
		t.Fatalf("alice's allowance beyond her bound: %v, want ErrAllowancesPerGiver", err)
	}
	if err := give("bob", queue.DefaultMaxAllowancesPerGiver+1); err != nil {
		t.Errorf("bob's allowance while alice is at her bound: %v", err)
	}
})
