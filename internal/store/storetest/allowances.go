package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/policy"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/scope"
	"github.com/countersign/countersign/internal/testkit"
	"github.com/countersign/countersign/internal/tools"
)

// Allowances through the queue, as the console gives, confirms, revokes and
// uses them (docs/allowances.md), on every engine.

// allowanceToolsYAML opts payments.refund (one approval; an ask rule
// raises large refunds to two, a rule denies 4343 and the evaluation of
// another fails on 4242), releases.deploy (two approvals) and
// ops.restart (admins only) into allowances; ops.note is not opted in.
const allowanceToolsYAML = `tools:
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
    allowance: {max_uses: 100, max_for: 1h, vary: [target, /amount_minor]}
    rules:
      - id: large-refunds-need-two
        when: args.amount_minor > 100000
        then: ask
        approvals: 2
      - id: no-4343
        when: args.amount_minor == 4343
        then: deny
        reason: not that amount
      - id: fails-on-4242
        when: args.amount_minor == 4242 && 1 / (args.amount_minor - 4242) > 0
        then: ask
  releases.deploy:
    description: Deploy a release
    audience: deploy-host
    target: '^service:[a-z-]+$'
    approvals: 2
    grant_ttl: 120s
    decide_within: 30m
    args:
      type: object
      additionalProperties: false
      required: [version]
      properties:
        version: {type: string, pattern: '^v[0-9]+\.[0-9]+\.[0-9]+$'}
    allowance: {max_uses: 10, max_for: 1h, vary: [target]}
  ops.restart:
    description: Restart a service
    audience: deploy-host
    target: '^service:[a-z-]+$'
    approvers: {roles: [admin]}
    args:
      type: object
      additionalProperties: false
      properties: {}
    allowance: {max_uses: 5, max_for: 1h}
  ops.note:
    description: Leave a note
    audience: deploy-host
    target: '^service:[a-z-]+$'
    args:
      type: object
      additionalProperties: false
      properties: {}
`

// newAllowanceWorld is newWorld on allowanceToolsYAML and its rules, with
// the auditor audrey and the admin admin2 besides.
func newAllowanceWorld(t *testing.T, s Stores) *world {
	t.Helper()
	w := newWorld(t, s)
	testkit.SeedUsers(t, s.Accounts, account.RoleAuditor, "audrey")
	testkit.SeedUsers(t, s.Accounts, account.RoleAdmin, "admin2")
	pol, err := policy.Parse([]byte(allowanceToolsYAML))
	if err != nil {
		t.Fatal(err)
	}
	w.policy, w.tools = pol, pol.Registry()
	return w
}

// refundOf is a refund of invoice INV-n of amount minor units of EUR.
func refundOf(n uint32, amount int64, notes string) []byte {
	return []byte(fmt.Sprintf(`{"tool":"payments.refund","target":"invoice:INV-%d","args":{"amount_minor":%d,"currency":"EUR","notes":%s}}`,
		n, amount, jsonString(notes)))
}

func restart(service string) []byte {
	return []byte(fmt.Sprintf(`{"tool":"ops.restart","target":"service:%s","args":{}}`, service))
}

// tokenOf is payer with a token id of its own (and owners): calls of two
// tokens are never one resubmission.
func tokenOf(p queue.Principal, id string, owners ...string) queue.Principal {
	p.TokenID, p.Owners = id, owners
	return p
}

// refundChoices let the amount go up to max and the target start with
// "invoice:INV-", for uses, for 30 minutes.
func refundChoices(w *world, uses int, maxAmount int64) scope.Choices {
	return scope.Choices{Uses: uses, Until: w.clock.Now().Add(30 * time.Minute), TargetPrefix: "invoice:INV-",
		Members: map[string]scope.Member{"/amount_minor": {Max: &maxAmount}}}
}

// shownScope is the scope the console shows for base and choices now.
func shownScope(t *testing.T, w *world, h *handle, base *queue.Call, ch scope.Choices) *scope.Scope {
	t.Helper()
	tool, ok := h.q.Tools().Tool(base.Tool)
	if !ok {
		t.Fatalf("no tool %s", base.Tool)
	}
	sc, err := scope.Materialise(scope.Call{Actor: base.Actor, Audience: base.Audience, Tool: base.Tool, Target: base.Target,
		ToolDigest: base.ToolDigest, Args: base.Args}, tool, ch, w.clock.Now())
	if err != nil {
		t.Fatalf("Materialise: %v", err)
	}
	return sc
}

// giveIn is operator's GiveInput for base with choices, and the digest of
// the scope shown.
func giveIn(t *testing.T, w *world, h *handle, operator string, base *queue.Call, ch scope.Choices) queue.GiveInput {
	t.Helper()
	return queue.GiveInput{Operator: operator, Channel: audit.ChannelWeb, CallID: base.ID, Digest: base.Digest,
		ScopeDigest: shownScope(t, w, h, base, ch).Digest(), Choices: ch}
}

func mustGive(t *testing.T, w *world, h *handle, operator string, base *queue.Call, ch scope.Choices) *queue.Allowance {
	t.Helper()
	a, _, err := h.q.GiveAllowance(context.Background(), giveIn(t, w, h, operator, base, ch))
	if err != nil {
		t.Fatalf("GiveAllowance by %s: %v", operator, err)
	}
	return a
}

// entriesOf returns the entries of kind in the whole trail.
func entriesOf(t *testing.T, h *handle, kind string) []audit.Entry {
	t.Helper()
	var out []audit.Entry
	for _, e := range auditEntries(t, h.Stores) {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// detail is one member of an entry's details, read back (a timeline) or
// exported (JSON).
func detail(e audit.Entry, name string) any {
	switch d := e.Details.(type) {
	case map[string]any:
		return d[name]
	case canonical.Object:
		v, _ := d.Get(name)
		return v
	}
	return nil
}

var _ = add("allowances/giving one approves its base call and stores exactly the scope shown", func(t *testing.T, s Stores) {
	ctx := context.Background()
	w := newAllowanceWorld(t, s)
	h := w.open(t)
	base := mustSubmit(t, h, payer, refundOf(100, 1299, "n"))
	ch := refundChoices(w, 5, 5000)
	in := giveIn(t, w, h, "alice", base, ch)
	sc := shownScope(t, w, h, base, ch)

	// Refusals first: nothing is stored or approved by any of them.
	refusals := []struct {
		what string
		edit func(*queue.GiveInput)
		want error
	}{
		{"a scope digest other than the one the scope makes", func(g *queue.GiveInput) { g.ScopeDigest = base.Digest }, queue.ErrScopeMismatch},
		{"choices other than those shown", func(g *queue.GiveInput) { g.Choices.Uses = 6 }, queue.ErrScopeMismatch},
		{"the call's digest not the call's", func(g *queue.GiveInput) { g.Digest = sc.Digest() }, queue.ErrDigestMismatch},
		{"more uses than the tool allows", func(g *queue.GiveInput) { g.Choices.Uses = 101 }, scope.ErrUses},
		{"an auditor", func(g *queue.GiveInput) { g.Operator = "audrey" }, queue.ErrNotADecider},
		{"nobody", func(g *queue.GiveInput) { g.Operator = "nobody" }, queue.ErrNotADecider},
	}
	for _, r := range refusals {
		g := in
		r.edit(&g)
		if a, _, err := h.q.GiveAllowance(ctx, g); !errors.Is(err, r.want) || a != nil {
			t.Errorf("%s: GiveAllowance = %v, %v; want %v", r.what, a, err, r.want)
		}
	}
	if list, err := h.q.Allowances(ctx, queue.AllowanceFilter{}); err != nil || len(list) != 0 {
		t.Fatalf("after the refusals: %d allowances, %v; want none", len(list), err)
	}
	if got, _ := h.Queue.Call(ctx, base.ID); got.Status != queue.StatusPending || len(got.Approvals) != 0 {
		t.Fatalf("after the refusals the base call is %s with %d approvals; want pending, none", got.Status, len(got.Approvals))
	}

	var events []queue.Event
	var mu sync.Mutex
	h.q.Subscribe(func(ev queue.Event) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, ev)
	})
	a, c, err := h.q.GiveAllowance(ctx, in)
	if err != nil {
		t.Fatalf("GiveAllowance: %v", err)
	}
	mu.Lock()
	if len(events) != 2 || events[0].Kind != queue.KindAllowanceGiven || events[0].Allowance == nil || events[0].Allowance.ID != a.ID ||
		events[1].Kind != audit.KindGranted || events[1].Call == nil || events[1].Call.ID != base.ID {
		t.Errorf("events published by giving: %+v, want allowance_given with the allowance, then granted with the call", events)
	}
	mu.Unlock()
	if c.Status != queue.StatusApproved || c.Grant == "" || len(c.Approvals) != 1 || c.Approvals[0].Operator != "alice" {
		t.Fatalf("base call after giving: %s, %d approvals; want approved by alice", c.Status, len(c.Approvals))
	}
	got, err := h.q.Allowance(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Scope) != string(sc.JSON()) || got.ScopeDigest != sc.Digest() || got.Uses != 5 || got.Used != 0 ||
		!got.OncePerCall || !got.Until.Equal(sc.Until) || got.Giver != "alice" || !slices.Equal(got.Confirmers, []string{"alice"}) ||
		got.ConfirmersNeeded != 1 || got.BaseCall != base.ID || got.BaseDigest != base.Digest || got.ToolDigest != base.ToolDigest ||
		got.State(w.clock.Now()) != "live" || len(got.ID) != len("alw_")+24 {
		t.Fatalf("stored allowance %+v\nwant the scope %s by alice", got, sc.JSON())
	}
	tl, err := h.Audit.Timeline(ctx, base.ID)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range tl {
		kinds = append(kinds, e.Kind)
		if e.Kind == queue.KindAllowanceGiven && (detail(e, "allowance") != a.ID || detail(e, "scope_digest") != sc.Digest() ||
			detail(e, "words") != scope.Words(sc, mustTool(t, h, base.Tool), nil) || detail(e, "scope") == nil) {
			t.Errorf("allowance_given details %v", e.Details)
		}
	}
	if want := []string{"submitted", queue.KindAllowanceGiven, "approved", "granted"}; !slices.Equal(kinds, want) {
		t.Errorf("base call's timeline %v, want %v", kinds, want)
	}
	// A second allowance from the same call: it is no longer pending.
	if _, _, err := h.q.GiveAllowance(ctx, giveIn(t, w, h, "bob", base, refundChoices(w, 5, 5000))); !errors.Is(err, queue.ErrNotPending) {
		t.Errorf("GiveAllowance on an approved call: %v, want ErrNotPending", err)
	}
	mustVerify(t, h.Audit, 4)
})

func mustTool(t *testing.T, h *handle, name string) *tools.Tool {
	t.Helper()
	tool, ok := h.q.Tools().Tool(name)
	if !ok {
		t.Fatalf("no tool %s", name)
	}
	return tool
}

var _ = add("allowances/who may give one: the rules of approving the base call", func(t *testing.T, s Stores) {
	ctx := context.Background()
	w := newAllowanceWorld(t, s)
	h := w.open(t)
	owned := mustSubmit(t, h, tokenOf(payer, "tok-owned", "alice"), refundOf(101, 1299, "n"))
	if _, _, err := h.q.GiveAllowance(ctx, giveIn(t, w, h, "alice", owned, refundChoices(w, 3, 5000))); !errors.Is(err, queue.ErrOwner) {
		t.Errorf("an owner of the agent gives: %v, want ErrOwner", err)
	}
	r := mustSubmit(t, h, deployer, restart("api"))
	ch := scope.Choices{Uses: 2, Until: w.clock.Now().Add(10 * time.Minute)}
	if _, _, err := h.q.GiveAllowance(ctx, giveIn(t, w, h, "alice", r, ch)); !errors.Is(err, queue.ErrNotAnApprover) {
		t.Errorf("an operator the tool's approvers leave out gives: %v, want ErrNotAnApprover", err)
	}
	note := mustSubmit(t, h, deployer, []byte(`{"tool":"ops.note","target":"service:api","args":{}}`))
	in := queue.GiveInput{Operator: "alice", Channel: audit.ChannelWeb, CallID: note.ID, Digest: note.Digest, ScopeDigest: note.Digest, Choices: ch}
	if _, _, err := h.q.GiveAllowance(ctx, in); !errors.Is(err, scope.ErrNoAllowance) {
		t.Errorf("a tool without an allowance block: %v, want scope.ErrNoAllowance", err)
	}
	if _, err := h.q.Freeze(ctx, "bob", audit.ChannelWeb, "ops.restart", "", "incident"); err != nil {
		t.Fatal(err)
	}
	var fz *queue.FrozenError
	if _, _, err := h.q.GiveAllowance(ctx, giveIn(t, w, h, "admin", r, ch)); !errors.As(err, &fz) {
		t.Errorf("a frozen tool: %v, want FrozenError", err)
	}
	if _, err := h.q.Unfreeze(ctx, "admin", audit.ChannelWeb, "ops.restart", ""); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.q.GiveAllowance(ctx, giveIn(t, w, h, "admin", r, ch)); err != nil {
		t.Errorf("an admin the tool's approvers name: %v", err)
	}
})

var _ = add("allowances/bounds: live allowances per tool and per giver, each refusal coded", func(t *testing.T, s Stores) {
	ctx := context.Background()
	w := newAllowanceWorld(t, s)
	w.maxAllowancesTool, w.maxAllowancesGiver = 2, 3
	h := w.open(t)
	// Each base call is above the amounts the allowances before it cover.
	var given []*queue.Allowance
	for i := range 2 {
		base := mustSubmit(t, h, payer, refundOf(randomInvoice(), int64(1000*(i+1)), "n"))
		given = append(given, mustGive(t, w, h, "alice", base, refundChoices(w, 2, int64(1000*(i+1)))))
	}
	base := mustSubmit(t, h, payer, refundOf(randomInvoice(), 3000, "n"))
	if _, _, err := h.q.GiveAllowance(ctx, giveIn(t, w, h, "bob", base, refundChoices(w, 2, 3000))); !errors.Is(err, queue.ErrAllowancesPerTool) {
		t.Fatalf("a third allowance of the tool: %v, want ErrAllowancesPerTool", err)
	}
	if got, _ := h.Queue.Call(ctx, base.ID); got.Status != queue.StatusPending {
		t.Fatalf("the refused give approved its base call: %s", got.Status)
	}
	d := mustSubmit(t, h, deployer, deploy("web"))
	mustGive(t, w, h, "alice", d, scope.Choices{Uses: 1, Until: w.clock.Now().Add(time.Minute)})
	d2 := mustSubmit(t, h, deployer, deploy("api"))
	if _, _, err := h.q.GiveAllowance(ctx, giveIn(t, w, h, "alice", d2, scope.Choices{Uses: 1, Until: w.clock.Now().Add(time.Minute)})); !errors.Is(err, queue.ErrAllowancesPerGiver) {
		t.Fatalf("a fourth allowance by alice: %v, want ErrAllowancesPerGiver", err)
	}
	// An allowance that ended, or whose time ran out, no longer counts.
	if _, err := h.q.RevokeAllowance(ctx, queue.RevokeInput{Operator: "alice", Channel: audit.ChannelWeb, AllowanceID: given[0].ID, Reason: "done"}); err != nil {
		t.Fatal(err)
	}
	mustGive(t, w, h, "bob", base, refundChoices(w, 2, 3000))
	w.clock.Advance(2 * time.Minute) // the deploy allowance (1 minute) is past its until
	mustGive(t, w, h, "alice", d2, scope.Choices{Uses: 1, Until: w.clock.Now().Add(time.Minute)})
})

var _ = add("allowances/a tool needing two approvals needs two confirmers before it covers anything", func(t *testing.T, s Stores) {
	ctx := context.Background()
	w := newAllowanceWorld(t, s)
	h := w.open(t)
	testkit.SeedUsers(t, s.Accounts, account.RoleOperator, "carol")
	base := mustSubmit(t, h, tokenOf(deployer, "tok-base", "carol"), deploy("web"))
	ch := scope.Choices{Uses: 3, Until: w.clock.Now().Add(20 * time.Minute), TargetPrefix: "service:"}
	a, c, err := h.q.GiveAllowance(ctx, giveIn(t, w, h, "alice", base, ch))
	if err != nil {
		t.Fatal(err)
	}
	if c.Status != queue.StatusPending || len(c.Approvals) != 1 || a.ConfirmersNeeded != 2 || a.Confirmed() || a.State(w.clock.Now()) != "waiting" {
		t.Fatalf("after giving: base %s with %d approvals, allowance needs %d, confirmed %t", c.Status, len(c.Approvals), a.ConfirmersNeeded, a.Confirmed())
	}
	waiting := mustSubmit(t, h, tokenOf(deployer, "tok-1"), deploy("api"))
	if waiting.Status != queue.StatusPending || len(waiting.Approvals) != 0 {
		t.Fatalf("a call inside the scope of an allowance with one confirmer of two: %s, %d approvals; want pending, none", waiting.Status, len(waiting.Approvals))
	}
	confirm := queue.ConfirmInput{Operator: "bob", Channel: audit.ChannelWeb, AllowanceID: a.ID, ScopeDigest: a.ScopeDigest, CallDigest: base.Digest}
	for _, r := range []struct {
		what string
		edit func(*queue.ConfirmInput)
		want error
	}{
		{"another scope digest", func(in *queue.ConfirmInput) { in.ScopeDigest = base.Digest }, queue.ErrScopeMismatch},
		{"the giver again", func(in *queue.ConfirmInput) { in.Operator = "alice" }, queue.ErrAlreadyConfirmer},
		{"an auditor", func(in *queue.ConfirmInput) { in.Operator = "audrey" }, queue.ErrNotADecider},
		{"an owner of the base call's agent, approving nothing else", func(in *queue.ConfirmInput) { in.Operator, in.CallDigest = "carol", "" }, queue.ErrOwner},
		{"no such allowance", func(in *queue.ConfirmInput) { in.AllowanceID = "alw_none" }, queue.ErrAllowanceNotFound},
		{"the base call's digest wrong", func(in *queue.ConfirmInput) { in.CallDigest = a.ScopeDigest }, queue.ErrDigestMismatch},
	} {
		in := confirm
		r.edit(&in)
		if _, err := h.q.ConfirmAllowance(ctx, in); !errors.Is(err, r.want) {
			t.Errorf("%s: ConfirmAllowance: %v, want %v", r.what, err, r.want)
		}
	}
	got, err := h.q.ConfirmAllowance(ctx, confirm)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Confirmed() || !slices.Equal(got.Confirmers, []string{"alice", "bob"}) {
		t.Fatalf("confirmed allowance: %+v", got)
	}
	if c, _ := h.Queue.Call(ctx, base.ID); c.Status != queue.StatusApproved || len(c.Approvals) != 2 {
		t.Fatalf("base call after bob confirmed with its digest: %s, %d approvals; want approved by two", c.Status, len(c.Approvals))
	}
	confirm.Operator = "op1"
	if _, err := h.q.ConfirmAllowance(ctx, confirm); !errors.Is(err, queue.ErrAllowanceConfirmed) {
		t.Errorf("a third confirmer: %v, want ErrAllowanceConfirmed", err)
	}
	// The call that arrived while it waited stays pending; the next is
	// covered, in the names of both confirmers.
	if c, _ := h.Queue.Call(ctx, waiting.ID); c.Status != queue.StatusPending {
		t.Errorf("the call that arrived before the second confirmer: %s, want pending", c.Status)
	}
	covered := mustSubmit(t, h, tokenOf(deployer, "tok-2"), deploy("db"))
	if covered.Status != queue.StatusApproved || len(covered.Approvals) != 2 {
		t.Fatalf("a call inside the confirmed scope: %s, %d approvals; want approved by both confirmers", covered.Status, len(covered.Approvals))
	}
	var who []string
	for _, ap := range covered.Approvals {
		who = append(who, ap.Operator)
		if ap.Channel != queue.ChannelAllowance || ap.Method != queue.MethodAllowance || ap.Human() != queue.HumanFalse ||
			ap.Via != a.ID || ap.Digest != covered.Digest || ap.Presented != nil {
			t.Errorf("approval %+v: channel %s, method %s, human %s; want allowance, allowance %s, false, the call's digest",
				ap, ap.Channel, ap.Method, ap.Human(), a.ID)
		}
	}
	slices.Sort(who)
	if !slices.Equal(who, []string{"alice", "bob"}) {
		t.Errorf("covered call approved by %v, want alice and bob", who)
	}
	if len(entriesOf(t, h, queue.KindAllowanceConfirmed)) != 1 {
		t.Errorf("want one allowance_confirmed entry")
	}
})

var _ = add("allowances/revoking ends it and revokes every unredeemed grant it minted, at once", func(t *testing.T, s Stores) {
	ctx := context.Background()
	w := newAllowanceWorld(t, s)
	h, other := w.open(t), w.open(t)
	base := mustSubmit(t, h, payer, refundOf(200, 1299, "n"))
	a := mustGive(t, w, h, "alice", base, refundChoices(w, 10, 5000))
	var covered []*queue.Call
	for i := range 3 {
		c := mustSubmit(t, h, payer, refundOf(uint32(201+i), 1299, "n"))
		if c.Status != queue.StatusApproved {
			t.Fatalf("call %d inside the scope: %s, want approved", i, c.Status)
		}
		covered = append(covered, c)
	}
	if r, err := h.q.Redeem(ctx, payer, redeemBody(covered[0])); err != nil || !r.Accepted {
		t.Fatalf("Redeem: %+v, %v", r, err)
	}
	for _, r := range []struct {
		who  string
		want error
	}{{"audrey", queue.ErrNotADecider}, {"nobody", queue.ErrNotADecider}} {
		if _, err := h.q.RevokeAllowance(ctx, queue.RevokeInput{Operator: r.who, Channel: audit.ChannelWeb, AllowanceID: a.ID, Reason: "x"}); !errors.Is(err, r.want) {
			t.Errorf("revoked by %s: %v, want %v", r.who, err, r.want)
		}
	}
	if _, err := h.q.RevokeAllowance(ctx, queue.RevokeInput{Operator: "bob", Channel: audit.ChannelWeb, AllowanceID: a.ID}); !errors.Is(err, queue.ErrReasonRequired) {
		t.Errorf("revoked without a reason: %v, want ErrReasonRequired", err)
	}
	var events []queue.Event
	var mu sync.Mutex
	other.q.Subscribe(func(ev queue.Event) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, ev)
	})
	// bob is no giver, but the tool lets every operator approve it.
	got, err := other.q.RevokeAllowance(ctx, queue.RevokeInput{Operator: "bob", Channel: audit.ChannelWeb, AllowanceID: a.ID, Reason: "wrong customer"})
	if err != nil {
		t.Fatal(err)
	}
	if got.EndReason != queue.EndRevoked || got.EndedBy != "bob" || !got.Ended() {
		t.Fatalf("revoked allowance: %+v", got)
	}
	mu.Lock()
	var kinds []string
	for _, ev := range events {
		kinds = append(kinds, ev.Kind)
	}
	if want := []string{audit.KindRevoked, audit.KindRevoked, queue.KindAllowanceRevoked}; !slices.Equal(kinds, want) ||
		events[2].Allowance == nil || events[2].Allowance.EndReason != queue.EndRevoked {
		t.Errorf("events published by the revocation: %v, want %v with the allowance last", kinds, want)
	}
	mu.Unlock()
	// At once, on the other handle: the unredeemed grants are refused,
	// the redeemed call stays as it was, and nothing more is covered.
	for i, c := range covered {
		r, err := h.q.Redeem(ctx, payer, redeemBody(c))
		switch {
		case err != nil:
			t.Fatal(err)
		case i == 0 && (r.Accepted || r.Reason != "replayed"):
			t.Errorf("the call redeemed before: %+v, want replayed", r)
		case i > 0 && (r.Accepted || r.Reason != "revoked"):
			t.Errorf("covered call %d: %+v, want revoked", i, r)
		}
	}
	if base, _ := h.Queue.Call(ctx, base.ID); base.Revoked != nil {
		t.Errorf("the base call's grant, minted by alice's own approval, was revoked")
	}
	next := mustSubmit(t, h, payer, refundOf(299, 1299, "n"))
	if next.Status != queue.StatusPending {
		t.Errorf("a call after the revocation: %s, want pending", next.Status)
	}
	revoked := entriesOf(t, h, queue.KindAllowanceRevoked)
	var grants []string
	if len(revoked) == 1 {
		list, _ := detail(revoked[0], "grants_revoked").([]any)
		for _, x := range list {
			grants = append(grants, fmt.Sprint(x))
		}
	}
	if len(revoked) != 1 || !sameSet(grants, []string{covered[1].ID, covered[2].ID}) ||
		revoked[0].Principal != "bob" || detail(revoked[0], "reason") != "wrong customer" {
		t.Errorf("allowance_revoked entries %+v", revoked)
	}
	if _, err := h.q.RevokeAllowance(ctx, queue.RevokeInput{Operator: "alice", Channel: audit.ChannelWeb, AllowanceID: a.ID, Reason: "again"}); !errors.Is(err, queue.ErrAllowanceEnded) {
		t.Errorf("revoked twice: %v, want ErrAllowanceEnded", err)
	}
	// Only the giver, an admin or an approver of the tool may revoke.
	r := mustSubmit(t, h, deployer, restart("api"))
	ra := mustGive(t, w, h, "admin", r, scope.Choices{Uses: 2, Until: w.clock.Now().Add(time.Minute)})
	if _, err := h.q.RevokeAllowance(ctx, queue.RevokeInput{Operator: "bob", Channel: audit.ChannelWeb, AllowanceID: ra.ID, Reason: "x"}); !errors.Is(err, queue.ErrMayNotRevoke) {
		t.Errorf("an operator the tool's approvers leave out revokes: %v, want ErrMayNotRevoke", err)
	}
	if _, err := h.q.RevokeAllowance(ctx, queue.RevokeInput{Operator: "admin2", Channel: audit.ChannelWeb, AllowanceID: ra.ID, Reason: "x"}); err != nil {
		t.Errorf("another admin revokes: %v", err)
	}
	mustVerify(t, h.Audit, 10)
})

// givenRefunds is a world with alice's allowance of uses refunds: any
// invoice, up to 200000 minor units (the ask rule raises calls above
// 100000 to two approvals), from a base call of 1299.
func givenRefunds(t *testing.T, s Stores, uses int) (*world, *handle, *queue.Allowance) {
	t.Helper()
	w := newAllowanceWorld(t, s)
	h := w.open(t)
	base := mustSubmit(t, h, payer, refundOf(1, 1299, "n"))
	return w, h, mustGive(t, w, h, "alice", base, refundChoices(w, uses, 200000))
}

// mustWait submits a call and fails unless it waits for people, with no
// approval.
func mustWait(t *testing.T, h *handle, who queue.Principal, body []byte) *queue.Call {
	t.Helper()
	c := mustSubmit(t, h, who, body)
	if c.Status != queue.StatusPending || len(c.Approvals) != 0 {
		t.Fatalf("%s: %s with %d approvals, want pending with none", body, c.Status, len(c.Approvals))
	}
	return c
}

// mustCover submits a call and fails unless the allowance approved it.
func mustCover(t *testing.T, h *handle, who queue.Principal, body []byte, a *queue.Allowance) *queue.Call {
	t.Helper()
	c := mustSubmit(t, h, who, body)
	if c.Status != queue.StatusApproved || c.Grant == "" || len(c.Approvals) == 0 {
		t.Fatalf("%s: %s with %d approvals, want approved by allowance %s", body, c.Status, len(c.Approvals), a.ID)
	}
	for _, e := range mustTimeline(t, h, c.ID) {
		if e.Kind == audit.KindApproved && (detail(e, "method") != "allowance" || detail(e, "allowance") != a.ID ||
			detail(e, "scope_digest") != a.ScopeDigest || e.Channel != queue.ChannelAllowance) {
			t.Fatalf("approved entry of a covered call: %+v", e)
		}
	}
	return c
}

func mustTimeline(t *testing.T, h *handle, id string) []audit.Entry {
	t.Helper()
	tl, err := h.Audit.Timeline(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return tl
}

// mustState reads the allowance and checks how many uses it made and how
// it ended ("" for not ended).
func mustState(t *testing.T, h *handle, id string, used int, ended string) *queue.Allowance {
	t.Helper()
	a, err := h.q.Allowance(context.Background(), id)
	if err != nil || a.Used != used || a.EndReason != ended || a.Ended() != (ended != "") {
		t.Fatalf("allowance %s: used %d, ended %q (%v); want used %d, ended %q", id, a.Used, a.EndReason, err, used, ended)
	}
	return a
}

var _ = add("allowances/use: a covered call is approved in the submission's transaction, one use each", func(t *testing.T, s Stores) {
	ctx := context.Background()
	_, h, a := givenRefunds(t, s, 3)
	c := mustCover(t, h, payer, refundOf(2, 150, "n"), a)
	if got, err := h.Queue.Call(ctx, c.ID); err != nil || got.Status != queue.StatusApproved || got.GrantJTI != c.GrantJTI ||
		len(got.Approvals) != 1 || got.Approvals[0].Operator != "alice" || got.Approvals[0].Channel != queue.ChannelAllowance {
		t.Fatalf("covered call reads back %+v, %v", got, err)
	}
	kinds := []string{}
	for _, e := range mustTimeline(t, h, c.ID) {
		kinds = append(kinds, e.Kind)
	}
	if want := []string{"submitted", "approved", "granted"}; !slices.Equal(kinds, want) {
		t.Errorf("covered call's timeline %v, want %v", kinds, want)
	}
	mustState(t, h, a.ID, 1, "")
	if r, err := h.q.Redeem(ctx, payer, []byte(fmt.Sprintf(`{"grant":%q,"call":{"tool":"payments.refund","target":%q,"args":{"amount_minor":150,"currency":"EUR","notes":"n"}}}`,
		c.Grant, c.Target))); err != nil || !r.Accepted {
		t.Fatalf("redeeming the covered call: %+v, %v", r, err)
	}
	// Outside the scope: another currency, an amount above the maximum, a
	// target the prefix does not start.
	mustWait(t, h, payer, []byte(`{"tool":"payments.refund","target":"invoice:INV-3","args":{"amount_minor":150,"currency":"USD"}}`))
	mustWait(t, h, payer, refundOf(4, 200001, "n"))
	mustState(t, h, a.ID, 1, "")
})

var _ = add("allowances/use: exactly its uses, then it ends used_up", func(t *testing.T, s Stores) {
	_, h, a := givenRefunds(t, s, 3)
	for i := range 3 {
		mustCover(t, h, payer, refundOf(uint32(10+i), 100, "n"), a)
	}
	mustState(t, h, a.ID, 3, queue.EndUsedUp)
	mustWait(t, h, payer, refundOf(20, 100, "n"))
	ended := entriesOf(t, h, queue.KindAllowanceEnded)
	if len(ended) != 1 || detail(ended[0], "reason") != queue.EndUsedUp || detail(ended[0], "allowance") != a.ID {
		t.Fatalf("allowance_ended entries %+v, want one used_up", ended)
	}
})

var _ = add("allowances/use: an ask rule raising a call to two approvals is not covered by one confirmer", func(t *testing.T, s Stores) {
	_, h, a := givenRefunds(t, s, 5)
	c := mustWait(t, h, payer, refundOf(30, 150000, "n"))
	if c.ApprovalsRequired != 2 {
		t.Fatalf("the ask rule made the call need %d approvals, want 2", c.ApprovalsRequired)
	}
	mustState(t, h, a.ID, 0, "")
	mustCover(t, h, payer, refundOf(31, 100000, "n"), a)
})

var _ = add("allowances/use: a call whose token names the giver as owner is not covered", func(t *testing.T, s Stores) {
	_, h, a := givenRefunds(t, s, 5)
	mustWait(t, h, tokenOf(payer, "tok-owned", "alice"), refundOf(40, 100, "n"))
	mustWait(t, h, tokenOf(payer, "tok-owned-by-team", "ALICE"), refundOf(41, 100, "n"))
	mustState(t, h, a.ID, 0, "")
	mustCover(t, h, tokenOf(payer, "tok-other", "bob"), refundOf(42, 100, "n"), a)
})

var _ = add("allowances/use: a disabled giver covers nothing, and the allowance ends", func(t *testing.T, s Stores) {
	ctx := context.Background()
	_, h, a := givenRefunds(t, s, 5)
	mustCover(t, h, payer, refundOf(50, 100, "n"), a)
	if err := h.a.DisableUser(ctx, "alice", "admin", audit.ChannelCLI); err != nil {
		t.Fatal(err)
	}
	mustWait(t, h, payer, refundOf(51, 100, "n"))
	mustState(t, h, a.ID, 1, queue.EndConfirmerDisabled)
	ended := entriesOf(t, h, queue.KindAllowanceEnded)
	if len(ended) != 1 || detail(ended[0], "confirmer") != "alice" || detail(ended[0], "why") != "disabled" {
		t.Fatalf("allowance_ended entries %+v, want one naming alice, disabled", ended)
	}
})

var _ = add("allowances/use: a changed tool covers nothing, and the allowance ends tool_changed", func(t *testing.T, s Stores) {
	w, h, a := givenRefunds(t, s, 5)
	changed, err := policy.Parse([]byte(strings.Replace(allowanceToolsYAML, "grant_ttl: 60s", "grant_ttl: 61s", 1)))
	if err != nil {
		t.Fatal(err)
	}
	other := w.openWith(t, changed)
	mustWait(t, other, payer, refundOf(60, 100, "n"))
	mustState(t, h, a.ID, 0, queue.EndToolChanged)
	// Ended: a console still on the old file covers nothing either.
	mustWait(t, h, payer, refundOf(61, 100, "n"))
})

var _ = add("allowances/use: a rule that denies, a rule that fails, a deception warning: not covered", func(t *testing.T, s Stores) {
	ctx := context.Background()
	_, h, a := givenRefunds(t, s, 5)
	c, _, err := h.q.Submit(ctx, payer, refundOf(70, 4343, "n"))
	var denied *queue.PolicyDeniedError
	if !errors.As(err, &denied) || c.Status != queue.StatusDenied || len(c.Approvals) != 0 {
		t.Fatalf("a call a rule denies: %v, %v; want denied by the rule", c, err)
	}
	if f := mustWait(t, h, payer, refundOf(71, 4242, "n")); f.ApprovalsRequired != 1 {
		t.Fatalf("the failing rule made the call need %d approvals; the case needs 1", f.ApprovalsRequired)
	}
	mustWait(t, h, payer, refundOf(72, 100, "zero\u200bwidth"))
	mustState(t, h, a.ID, 0, "")
	mustCover(t, h, payer, refundOf(73, 100, "plain"), a)
})

var _ = add("allowances/use: a freeze suspends it without ending it", func(t *testing.T, s Stores) {
	ctx := context.Background()
	_, h, a := givenRefunds(t, s, 5)
	if _, err := h.q.Freeze(ctx, "bob", audit.ChannelWeb, "payments.refund", "", "incident"); err != nil {
		t.Fatal(err)
	}
	var fz *queue.FrozenError
	if c, _, err := h.q.Submit(ctx, payer, refundOf(80, 100, "n")); !errors.As(err, &fz) || c != nil {
		t.Fatalf("a call while frozen: %v, %v; want frozen", c, err)
	}
	mustState(t, h, a.ID, 0, "")
	if _, err := h.q.Unfreeze(ctx, "admin", audit.ChannelWeb, "payments.refund", ""); err != nil {
		t.Fatal(err)
	}
	mustCover(t, h, payer, refundOf(81, 100, "n"), a)
})

var _ = add("allowances/use: past its until it covers nothing and ends expired", func(t *testing.T, s Stores) {
	w, h, a := givenRefunds(t, s, 5)
	w.clock.Set(a.Until.Add(-time.Millisecond))
	mustCover(t, h, payer, refundOf(90, 100, "n"), a)
	w.clock.Set(a.Until)
	mustWait(t, h, payer, refundOf(91, 100, "n"))
	mustState(t, h, a.ID, 1, queue.EndExpired)
})

var _ = add("allowances/use: once per call, and the identical call again when the giver chose it", func(t *testing.T, s Stores) {
	w, h, a := givenRefunds(t, s, 5)
	mustCover(t, h, tokenOf(payer, "tok-1"), refundOf(100, 100, "n"), a)
	mustWait(t, h, tokenOf(payer, "tok-2"), refundOf(100, 100, "n"))
	// The base call's own digest was approved once, when it was given.
	mustWait(t, h, tokenOf(payer, "tok-3"), refundOf(1, 1299, "n"))
	mustState(t, h, a.ID, 1, "")

	base := mustSubmit(t, h, deployer, deploy("web"))
	ch := scope.Choices{Uses: 3, Until: w.clock.Now().Add(time.Minute), TargetPrefix: "service:", RepeatCalls: true}
	r := mustGive(t, w, h, "alice", base, ch)
	if _, err := h.q.ConfirmAllowance(context.Background(), queue.ConfirmInput{Operator: "bob", Channel: audit.ChannelWeb,
		AllowanceID: r.ID, ScopeDigest: r.ScopeDigest}); err != nil {
		t.Fatal(err)
	}
	mustCover(t, h, tokenOf(deployer, "tok-1"), deploy("api"), r)
	mustCover(t, h, tokenOf(deployer, "tok-2"), deploy("api"), r)
	mustState(t, h, r.ID, 2, "")
})

// Races. Uses are counted in the approving transaction, so that no number
// of submissions at once, on any number of handles (processes on one
// SQLite file, replicas on one PostgreSQL database), approves more than
// the allowance's uses; and a revocation takes effect at its commit.

var _ = add("allowances/race: 64 submissions at once on two handles inside an allowance of 10: exactly 10 approved", func(t *testing.T, s Stores) {
	const submissions, uses = 64, 10
	ctx := context.Background()
	w, h, a := givenRefunds(t, s, uses)
	hs := []*handle{h, w.open(t)}
	var mu sync.Mutex
	approved := map[string]bool{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range submissions {
		wg.Go(func() {
			<-start
			c, _, err := hs[i%2].q.Submit(ctx, payer, refundOf(uint32(1000+i), 100, "n"))
			if err != nil {
				t.Errorf("Submit: %v", err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			switch c.Status {
			case queue.StatusApproved:
				approved[c.ID] = true
			case queue.StatusPending:
			default:
				t.Errorf("call %s: %s", c.ID, c.Status)
			}
		})
	}
	close(start)
	wg.Wait()
	if len(approved) != uses {
		t.Fatalf("%d calls approved, want exactly %d", len(approved), uses)
	}
	got := mustState(t, hs[1], a.ID, uses, queue.EndUsedUp)
	var used []string
	update(t, hs[1].Stores, func(tx queue.Tx) error {
		var err error
		used, err = tx.AllowanceCalls(got.ID)
		return err
	})
	byAllowance := []string{}
	for _, e := range auditEntries(t, hs[0].Stores) {
		if e.Kind == audit.KindApproved && detail(e, "allowance") == a.ID {
			byAllowance = append(byAllowance, e.CallID)
		}
	}
	var want []string
	for id := range approved {
		want = append(want, id)
	}
	if !sameSet(used, want) || !sameSet(byAllowance, want) {
		t.Fatalf("uses %v and approved entries %v, want the approved calls %v", used, byAllowance, want)
	}
	mustVerify(t, hs[0].Audit, int64(submissions+uses*2))
})

var _ = add("allowances/race: revocation against uses and redemptions on two handles: nothing after its commit", func(t *testing.T, s Stores) {
	ctx := context.Background()
	w, h, a := givenRefunds(t, s, 100)
	hs := []*handle{h, w.open(t)}
	const agents, perAgent = 8, 12
	var wg sync.WaitGroup
	start := make(chan struct{})
	revokedAt := make(chan struct{})
	for g := range agents {
		wg.Go(func() {
			<-start
			for i := range perAgent {
				hd := hs[(g+i)%2]
				c, _, err := hd.q.Submit(ctx, payer, refundOf(uint32(10000+g*100+i), 100, "n"))
				if err != nil {
					t.Errorf("Submit: %v", err)
					return
				}
				if c.Status == queue.StatusApproved {
					// Redeem at once, as an agent would, on the other handle.
					if _, err := hs[(g+i+1)%2].q.Redeem(ctx, payer, []byte(fmt.Sprintf(
						`{"grant":%q,"call":{"tool":"payments.refund","target":%q,"args":{"amount_minor":100,"currency":"EUR","notes":"n"}}}`,
						c.Grant, c.Target))); err != nil {
						t.Errorf("Redeem: %v", err)
					}
				}
				if g == 0 && i == perAgent/3 {
					if _, err := hd.q.RevokeAllowance(ctx, queue.RevokeInput{Operator: "bob", Channel: audit.ChannelWeb,
						AllowanceID: a.ID, Reason: "stop"}); err != nil {
						t.Errorf("RevokeAllowance: %v", err)
					}
					close(revokedAt)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	<-revokedAt
	entries := auditEntries(t, hs[0].Stores)
	var revokeSeq int64
	for _, e := range entries {
		if e.Kind == queue.KindAllowanceRevoked {
			revokeSeq = e.Seq
		}
	}
	if revokeSeq == 0 {
		t.Fatal("no allowance_revoked entry")
	}
	covered := map[string]bool{}
	redeemedBefore := map[string]bool{}
	for _, e := range entries {
		switch {
		case e.Kind == audit.KindApproved && detail(e, "allowance") == a.ID:
			covered[e.CallID] = true
			if e.Seq > revokeSeq {
				t.Errorf("call %s approved by the allowance at entry %d, after its revocation at %d", e.CallID, e.Seq, revokeSeq)
			}
		case e.Kind == audit.KindRedeemed && covered[e.CallID]:
			if e.Seq > revokeSeq {
				t.Errorf("call %s redeemed at entry %d, after the revocation at %d", e.CallID, e.Seq, revokeSeq)
			}
			redeemedBefore[e.CallID] = true
		}
	}
	if len(covered) == 0 {
		t.Fatal("the allowance approved nothing before its revocation; the race raced nothing")
	}
	t.Logf("%d calls covered before the revocation, %d of them redeemed before it", len(covered), len(redeemedBefore))
	// Every covered call was either redeemed before the revocation, or
	// its grant is revoked and refused now.
	for id := range covered {
		c, err := hs[1].Queue.Call(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if redeemedBefore[id] {
			if c.Status != queue.StatusRedeemed {
				t.Errorf("call %s redeemed before the revocation is %s", id, c.Shown())
			}
			continue
		}
		if c.Revoked == nil {
			t.Errorf("covered call %s, unredeemed at the revocation, has no revoked grant (%s)", id, c.Shown())
		}
		r, err := hs[0].q.Redeem(ctx, payer, []byte(fmt.Sprintf(
			`{"grant":%q,"call":{"tool":"payments.refund","target":%q,"args":{"amount_minor":100,"currency":"EUR","notes":"n"}}}`,
			c.Grant, c.Target)))
		if err != nil || r.Accepted {
			t.Errorf("redeeming %s after the revocation: %+v, %v; want refused", id, r, err)
		}
	}
	mustState(t, hs[0], a.ID, len(covered), queue.EndRevoked)
	// The other handle verifies the whole chain, the revocation and every
	// entry before it included (the export's first line is its header,
	// not an entry).
	mustVerify(t, hs[1].Audit, revokeSeq)
})
