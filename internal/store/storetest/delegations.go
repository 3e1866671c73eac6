package storetest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/policy"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/testkit"
)

// Delegations (docs/team.md): what queue.Tx keeps of them, and an
// approval given through one, read back by every read of a call.

// storedDelegation is a delegation from delegator to delegate given at
// at, until an hour later.
func storedDelegation(delegator, delegate string, at time.Time) *queue.Delegation {
	return &queue.Delegation{ID: randomID("dlg_"), Delegator: delegator, Delegate: delegate, GivenBy: delegator,
		GivenAt: at, Until: at.Add(time.Hour)}
}

var _ = add("delegations/stored, found live, counted and ended, read back", func(t *testing.T, s Stores) {
	ctx := context.Background()
	ab := storedDelegation("alice", "bob", t0)
	older := storedDelegation("alice", "bob", t0.Add(-time.Minute))
	cb := storedDelegation("carol", "bob", t0.Add(time.Second))
	for _, d := range []*queue.Delegation{ab, older, cb} {
		update(t, s, func(tx queue.Tx) error { return tx.InsertDelegation(d) })
	}
	update(t, s, func(tx queue.Tx) error {
		got, err := tx.Delegation(ab.ID)
		if err != nil || *got != *ab {
			t.Errorf("Delegation = %+v, %v; want %+v", got, err, ab)
		}
		if _, err := tx.Delegation("dlg_nope"); !errors.Is(err, queue.ErrDelegationNotFound) {
			t.Errorf("Delegation(nope) = %v, want ErrDelegationNotFound", err)
		}
		live, err := tx.LiveDelegation("alice", "bob", t0)
		if err != nil || live.ID != older.ID {
			t.Errorf("LiveDelegation(alice, bob) = %+v, %v; want the oldest, %s", live, err, older.ID)
		}
		// older runs out first: at its until, ab is the live one.
		if live, err := tx.LiveDelegation("alice", "bob", older.Until); err != nil || live.ID != ab.ID {
			t.Errorf("LiveDelegation at older's until = %+v, %v; want %s", live, err, ab.ID)
		}
		if _, err := tx.LiveDelegation("bob", "alice", t0); !errors.Is(err, queue.ErrDelegationNotFound) {
			t.Errorf("LiveDelegation the other way = %v, want ErrDelegationNotFound", err)
		}
		if _, err := tx.LiveDelegation("alice", "bob", ab.Until); !errors.Is(err, queue.ErrDelegationNotFound) {
			t.Errorf("LiveDelegation at its until = %v, want ErrDelegationNotFound", err)
		}
		for _, tc := range []struct {
			person        string
			at            time.Time
			limit         int
			ofPerson, all int
		}{
			{"bob", t0, 10, 3, 3},
			{"alice", t0, 10, 2, 3},
			{"carol", t0, 10, 1, 3},
			{"dave", t0, 10, 0, 3},
			{"bob", t0, 2, 2, 2},
			{"bob", older.Until, 10, 2, 2},
		} {
			p, a, err := tx.LiveDelegations(tc.person, tc.at, tc.limit)
			if err != nil || p != tc.ofPerson || a != tc.all {
				t.Errorf("LiveDelegations(%s, limit %d) = %d, %d, %v; want %d, %d", tc.person, tc.limit, p, a, err, tc.ofPerson, tc.all)
			}
		}
		ok, err := tx.EndDelegation(ab.ID, queue.DelegationEndedByPerson, "bob", t0.Add(time.Minute))
		if err != nil || !ok {
			t.Errorf("EndDelegation = %t, %v; want true", ok, err)
		}
		if ok, err := tx.EndDelegation(ab.ID, queue.DelegationEndedByPerson, "alice", t0.Add(2*time.Minute)); err != nil || ok {
			t.Errorf("EndDelegation again = %t, %v; want false", ok, err)
		}
		if p, _, err := tx.LiveDelegations("alice", t0.Add(time.Minute), 10); err != nil || p != 1 {
			t.Errorf("LiveDelegations(alice) after ending one = %d, %v; want 1", p, err)
		}
		return nil
	})
	list, err := s.Queue.Delegations(ctx, queue.DelegationFilter{Person: "bob", Limit: 10})
	if err != nil || len(list) != 3 || list[0].ID != cb.ID || list[1].ID != ab.ID || list[2].ID != older.ID {
		t.Fatalf("Delegations(bob) = %d, %v; want cb, ab, older (newest first)", len(list), err)
	}
	if e := list[1]; !e.EndedAt.Equal(t0.Add(time.Minute)) || e.EndedBy != "bob" || e.EndReason != queue.DelegationEndedByPerson {
		t.Errorf("ended delegation reads back %+v", e)
	}
	if list, err := s.Queue.Delegations(ctx, queue.DelegationFilter{Person: "carol", Limit: 10}); err != nil || len(list) != 1 || list[0].ID != cb.ID {
		t.Errorf("Delegations(carol) = %v, %v; want cb", list, err)
	}
	if list, err := s.Queue.Delegations(ctx, queue.DelegationFilter{Limit: 2}); err != nil || len(list) != 2 {
		t.Errorf("Delegations(all, 2) = %d, %v; want 2", len(list), err)
	}
	// Live ones only: ab has ended, and older has run out by its until.
	if list, err := s.Queue.Delegations(ctx, queue.DelegationFilter{Person: "bob", LiveAt: older.Until, Limit: 10}); err != nil ||
		len(list) != 1 || list[0].ID != cb.ID {
		t.Errorf("live Delegations(bob) = %v, %v; want cb alone", list, err)
	}
})

var _ = add("delegations/an approval for a delegator counts once and reads back on every read", func(t *testing.T, s Stores) {
	ctx := context.Background()
	w := newWorld(t, s)
	testkit.SeedUsers(t, s.Accounts, account.RoleOperator, "carol")
	h := w.open(t)
	if _, err := h.q.GiveDelegation(ctx, queue.DelegationInput{By: "alice", Channel: audit.ChannelWeb,
		Delegator: "alice", Delegate: "bob", Until: w.clock.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	c := mustSubmit(t, h, deployer, deploy("checkout"))
	approve := func(operator, behalf string) error {
		_, err := h.q.ApproveWith(ctx, queue.ApproveInput{Operator: operator, Channel: audit.ChannelCLI, CallID: c.ID,
			Digest: c.Digest, For: behalf})
		return err
	}
	if err := approve("bob", "alice"); err != nil {
		t.Fatalf("bob for alice: %v", err)
	}
	for _, who := range [][2]string{{"bob", ""}, {"alice", ""}} {
		if err := approve(who[0], who[1]); !errors.Is(err, queue.ErrAlreadyApproved) {
			t.Fatalf("%s after bob for alice = %v, want ErrAlreadyApproved", who[0], err)
		}
	}
	check := func(read string, got *queue.Call) {
		t.Helper()
		if len(got.Approvals) == 0 || got.Approvals[0].Operator != "bob" || got.Approvals[0].For != "alice" {
			t.Errorf("%s: approvals %+v, want bob for alice first", read, got.Approvals)
		}
	}
	got, err := h.Queue.Call(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	check("Call", got)
	pending, err := h.Queue.PendingCalls(ctx, 10)
	if err != nil || len(pending) != 1 {
		t.Fatalf("PendingCalls = %d, %v", len(pending), err)
	}
	check("PendingCalls", pending[0])
	page, err := h.Queue.PendingPage(ctx, queue.PageKey{}, 10)
	if err != nil || len(page) != 1 {
		t.Fatalf("PendingPage = %d, %v", len(page), err)
	}
	check("PendingPage", page[0])
	if err := approve("carol", ""); err != nil {
		t.Fatalf("carol completes: %v", err)
	}
	hist, _, err := h.History.History(ctx, queue.HistoryFilter{Limit: 10})
	if err != nil || len(hist) != 1 {
		t.Fatalf("History = %d, %v", len(hist), err)
	}
	check("History", hist[0])
	if len(hist[0].Approvals) != 2 || hist[0].Approvals[1].For != "" {
		t.Errorf("History: approvals %+v, want carol's for nobody second", hist[0].Approvals)
	}
})

// tierToolsYAML has a tool with two escalation tiers.
const tierToolsYAML = `tools:
  vault.rotate:
    audience: vault-host
    target: '^secret:[a-z]+$'
    approvals: 1
    decide_within: 1h
    approvers: {groups: [security]}
    escalate:
      - {after: 10m, add_groups: [leads]}
      - {after: 30m, add_roles: [admin], notify: [oncall]}
    args: {type: object, additionalProperties: false, properties: {}}
`

var _ = add("escalations/a call's tiers are scheduled, reached, read back and dropped once it is decided", func(t *testing.T, s Stores) {
	ctx := context.Background()
	w := newWorld(t, s)
	pol, err := policy.Parse([]byte(tierToolsYAML))
	if err != nil {
		t.Fatal(err)
	}
	w.policy, w.tools = pol, pol.Registry()
	h := w.open(t)
	vault := queue.Principal{Actor: "agent:vault", Audience: "vault-host"}
	c := mustSubmit(t, h, vault, []byte(`{"tool":"vault.rotate","target":"secret:db","args":{}}`))
	next, ok, err := h.Queue.NextEscalation(ctx)
	if err != nil || !ok || !next.Equal(c.CreatedAt.Add(10*time.Minute)) {
		t.Fatalf("NextEscalation = %v, %t, %v; want %v", next, ok, err, c.CreatedAt.Add(10*time.Minute))
	}
	if due, err := h.Queue.DueEscalations(ctx, w.clock.Now(), 10); err != nil || len(due) != 0 {
		t.Fatalf("DueEscalations now = %v, %v; want none", due, err)
	}
	w.clock.Advance(10 * time.Minute)
	if due, err := h.Queue.DueEscalations(ctx, w.clock.Now(), 10); err != nil || len(due) != 1 || due[0] != c.ID {
		t.Fatalf("DueEscalations at the tier = %v, %v; want %s", due, err, c.ID)
	}
	if n, err := h.q.EscalateDue(ctx); err != nil || n != 1 {
		t.Fatalf("EscalateDue = %d, %v; want 1", n, err)
	}
	check := func(read string, got *queue.Call, reached int) {
		t.Helper()
		if got.Reached != reached || len(got.Escalate) != 2 || got.Escalate[1].After != 30*time.Minute ||
			!slices.Equal(got.Escalate[1].AddRoles, []string{"admin"}) || !slices.Equal(got.Escalate[1].Notify, []string{"oncall"}) ||
			!slices.Equal(got.Approvers.Groups, []string{"security", "leads"}) {
			t.Errorf("%s: reached %d of %+v, approvers %+v; want %d reached and leads added", read, got.Reached, got.Escalate, got.Approvers, reached)
		}
	}
	got, err := h.Queue.Call(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	check("Call", got, 1)
	page, err := h.Queue.PendingPage(ctx, queue.PageKey{}, 10)
	if err != nil || len(page) != 1 {
		t.Fatalf("PendingPage = %d, %v", len(page), err)
	}
	check("PendingPage", page[0], 1)
	if next, ok, err := h.Queue.NextEscalation(ctx); err != nil || !ok || !next.Equal(c.CreatedAt.Add(30*time.Minute)) {
		t.Errorf("NextEscalation after the first tier = %v, %t, %v", next, ok, err)
	}
	if _, err := h.q.Approve(ctx, "admin", audit.ChannelCLI, c.ID, c.Digest); err == nil {
		t.Fatal("an admin approved before the tier that adds admins")
	}
	if _, err := h.q.Deny(ctx, "alice", audit.ChannelCLI, c.ID, "not now"); err != nil {
		t.Fatalf("alice denies: %v", err)
	}
	hist, _, err := h.History.History(ctx, queue.HistoryFilter{Limit: 10})
	if err != nil || len(hist) != 1 {
		t.Fatalf("History = %d, %v", len(hist), err)
	}
	check("History", hist[0], 1)
	w.clock.Advance(20 * time.Minute)
	if n, err := h.q.EscalateDue(ctx); err != nil || n != 0 {
		t.Errorf("EscalateDue of a decided call = %d, %v; want 0", n, err)
	}
	if _, ok, err := h.Queue.NextEscalation(ctx); err != nil || ok {
		t.Errorf("NextEscalation once decided = %t, %v; want none", ok, err)
	}
})
