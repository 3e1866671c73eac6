package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/policy"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/testkit"
)

// tierTools: vault.rotate may be approved by the security group, two
// people, with a passkey; after 10 minutes the leads group may too, after
// 30 admins, and the on-call channel hears of it.
const tierTools = `tools:
  vault.rotate:
    audience: vault-host
    target: '^secret:[a-z]+$'
    approvals: 2
    decide_within: 1h
    approvers: {groups: [security]}
    escalate:
      - {after: 10m, add_groups: [leads]}
      - {after: 30m, add_roles: [admin], notify: [oncall]}
    args: {type: object, additionalProperties: false, properties: {}}
`

// TestEscalationTiers: a call reaches each tier when it is due, not
// before; each tier reached is audited and widens who may approve, and
// nothing else: the approvals required, owners and the tiers' record are
// as they were, read back from the store.
func TestEscalationTiers(t *testing.T) {
	e := newPeopleEnvFrom(t, tierTools)
	ctx := context.Background()
	testkit.SeedUsers(t, e.db.Accounts(), account.RoleAdmin, "olga-admin")
	accountsUpdate(t, e, func(tx account.Tx) error {
		return tx.InsertUser(account.User{Name: "oidc:idp.example.com/00u-lead", Role: account.RoleOperator, Kind: account.KindOIDC,
			Issuer: "https://idp.example.com", Subject: "00u-lead", ShortName: "lead", Groups: []string{"leads"},
			CreatedAt: time.Now().UTC().Truncate(time.Millisecond)})
	})
	const lead = "oidc:idp.example.com/00u-lead"
	c := submitAs(t, e, vaultBot, "vault.rotate", "secret:db", `{}`)
	approve := func(who string) error {
		_, err := e.q.Approve(ctx, who, audit.ChannelCLI, c.ID, c.Digest)
		return err
	}
	if err := approve(lead); !errors.Is(err, queue.ErrNotAnApprover) {
		t.Fatalf("a lead before the first tier = %v, want ErrNotAnApprover", err)
	}
	e.clock.Advance(10*time.Minute - time.Second)
	if n, err := e.q.EscalateDue(ctx); err != nil || n != 0 {
		t.Fatalf("a second before the tier: %d escalated, %v", n, err)
	}
	e.clock.Advance(time.Second)
	if n, err := e.q.EscalateDue(ctx); err != nil || n != 1 {
		t.Fatalf("at the tier: %d escalated, %v; want 1", n, err)
	}
	if n, err := e.q.EscalateDue(ctx); err != nil || n != 0 {
		t.Fatalf("the same tier again: %d escalated, %v; want 0", n, err)
	}
	if err := approve("root"); !errors.Is(err, queue.ErrNotAnApprover) {
		t.Fatalf("an admin after the first tier = %v, want ErrNotAnApprover", err)
	}
	if err := approve(lead); err != nil {
		t.Fatalf("a lead after the first tier: %v", err)
	}
	e.clock.Advance(20 * time.Minute)
	if n, err := e.q.EscalateDue(ctx); err != nil || n != 1 {
		t.Fatalf("at the second tier: %d escalated, %v; want 1", n, err)
	}
	got, err := e.q.Get(ctx, vaultBot, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Reached != 2 || len(got.Escalate) != 2 || got.ApprovalsRequired != 2 || got.Status != queue.StatusPending ||
		!slices.Equal(got.Approvers.Groups, []string{"security", "leads"}) || !slices.Equal(got.Approvers.Roles, []string{"admin"}) ||
		!slices.Contains(got.Notify, "oncall") || !slices.Equal(got.Owners, vaultBot.Owners) {
		t.Fatalf("after both tiers: reached %d of %d, required %d, %s, approvers %+v, notify %v, owners %v",
			got.Reached, len(got.Escalate), got.ApprovalsRequired, got.Status, got.Approvers, got.Notify, got.Owners)
	}
	if err := approve("olga"); !errors.Is(err, queue.ErrOwner) {
		t.Fatalf("an owner after every tier = %v, want ErrOwner", err)
	}
	var details map[string]any
	if err := json.Unmarshal([]byte(auditKinds(t, e, c.ID)[queue.KindEscalated]), &details); err != nil {
		t.Fatal(err)
	}
	if details["tier"] != float64(2) || details["required"] != float64(2) || !strings.Contains(fmt.Sprint(details["approvers"]), "admin") {
		t.Errorf("the second escalated entry: %v", details)
	}
	if got, err := e.q.Approve(ctx, "root", audit.ChannelCLI, c.ID, c.Digest); err != nil || got.Status != queue.StatusApproved {
		t.Fatalf("an admin after the second tier completes the quorum: %v", err)
	}
	e.clock.Advance(time.Hour)
	if n, err := e.q.EscalateDue(ctx); err != nil || n != 0 {
		t.Fatalf("nothing is left to escalate: %d, %v", n, err)
	}
}

// person is a reviewer as the property test sees one.
type person struct {
	role   account.Role
	groups []string
}

// TestTierNeverLowersTheRequirement: over generated tools files (any
// approvals, passkey or not, approvers or not, up to three tiers adding
// any roles, groups and channels), a call escalated through every tier
// needs as many approvals as before, a passkey if it did, keeps its
// owners, and lets approve everyone who could approve before.
func TestTierNeverLowersTheRequirement(t *testing.T) {
	groups := []string{"security", "leads", "payments", "sre"}
	people := []person{{account.RoleOperator, nil}, {account.RoleAdmin, nil}}
	for _, g := range groups {
		people = append(people, person{account.RoleOperator, []string{g}}, person{account.RoleAdmin, []string{g}})
	}
	list := func(xs []string) string { return "[" + strings.Join(xs, ", ") + "]" }
	runs := 0
	rapid.Check(t, func(rt *rapid.T) {
		approvals := rapid.IntRange(1, 3).Draw(rt, "approvals")
		passkey := rapid.Bool().Draw(rt, "passkey")
		roles := rapid.SliceOfDistinct(rapid.SampledFrom([]string{"operator", "admin"}), rapid.ID[string]).Draw(rt, "roles")
		grps := rapid.SliceOfDistinct(rapid.SampledFrom(groups), rapid.ID[string]).Draw(rt, "groups")
		var yaml strings.Builder
		fmt.Fprintf(&yaml, "tools:\n  vault.rotate:\n    audience: vault-host\n    target: '^secret:[a-z]+$'\n    approvals: %d\n    decide_within: 2h\n", approvals)
		if passkey {
			yaml.WriteString("    approve_with: passkey\n")
		}
		if len(roles)+len(grps) > 0 {
			fmt.Fprintf(&yaml, "    approvers: {roles: %s, groups: %s}\n", list(roles), list(grps))
		}
		tiers := rapid.IntRange(0, 3).Draw(rt, "tiers")
		if tiers > 0 {
			yaml.WriteString("    escalate:\n")
		}
		for i := range tiers {
			addRoles := rapid.SliceOfDistinct(rapid.SampledFrom([]string{"operator", "admin"}), rapid.ID[string]).Draw(rt, "add_roles")
			addGroups := rapid.SliceOfDistinct(rapid.SampledFrom(groups), rapid.ID[string]).Draw(rt, "add_groups")
			if len(roles)+len(grps) == 0 {
				addRoles, addGroups = nil, nil // the linter refuses names added to "every operator"
			}
			fmt.Fprintf(&yaml, "      - {after: %dm, add_roles: %s, add_groups: %s, notify: [oncall]}\n", 10*(i+1), list(addRoles), list(addGroups))
		}
		yaml.WriteString("    args: {type: object, additionalProperties: false, properties: {}}\n")
		pol, err := policy.Parse([]byte(yaml.String()))
		if err != nil {
			rt.Fatalf("a generated tools file does not load: %v\n%s", err, yaml.String())
		}
		e := newEnvWith(t, func(c *queue.Config) { c.Tools, c.Policy = pol.Registry(), pol })
		c := submitAs(t, e, vaultBot, "vault.rotate", "secret:db", `{}`)
		before := *c
		for range tiers {
			e.clock.Advance(10 * time.Minute)
			if _, err := e.q.EscalateDue(context.Background()); err != nil {
				rt.Fatal(err)
			}
		}
		after, err := e.q.Get(context.Background(), vaultBot, c.ID)
		if err != nil {
			rt.Fatal(err)
		}
		if after.Reached != tiers || after.ApprovalsRequired != before.ApprovalsRequired || after.RequirePasskey != before.RequirePasskey ||
			!slices.Equal(after.Owners, before.Owners) {
			rt.Fatalf("after %d tiers: reached %d, required %d (was %d), passkey %t (was %t), owners %v (were %v)\n%s", tiers, after.Reached,
				after.ApprovalsRequired, before.ApprovalsRequired, after.RequirePasskey, before.RequirePasskey, after.Owners, before.Owners, yaml.String())
		}
		for _, p := range people {
			if before.Approvers.Allows(string(p.role), p.groups) && !after.Approvers.Allows(string(p.role), p.groups) {
				rt.Fatalf("%s in %v could approve before the tiers, not after: %+v then %+v\n%s", p.role, p.groups, before.Approvers, after.Approvers, yaml.String())
			}
		}
		runs++
	})
	if runs == 0 {
		t.Fatal("no generated tools file was checked")
	}
}

// counterTierTools: operators may counter a refund only admins may
// approve once it reached its first tier; a second tier adds leads.
const counterTierTools = `tools:
  pay.refund:
    audience: payments-host
    target: '^invoice:[0-9]+$'
    approvals: 1
    decide_within: 1h
    approvers: {roles: [admin]}
    escalate:
      - {after: 5m, add_roles: [operator], notify: [oncall]}
      - {after: 20m, add_groups: [leads]}
    counter: {edit: [/amount_minor]}
    args:
      type: object
      additionalProperties: false
      required: [amount_minor]
      properties:
        amount_minor: {type: integer, minimum: 1, maximum: 5000000}
`

// TestCounterKeepsTiersReached: a counter-proposal of a call that reached
// a tier keeps it reached (who may approve, whom it notifies) and reaches
// the rest counted from its own submission.
func TestCounterKeepsTiersReached(t *testing.T) {
	e := newPeopleEnvFrom(t, counterTierTools)
	ctx := context.Background()
	bot := queue.Principal{Actor: "agent:payer", Audience: "payments-host", TokenID: "tok_payer"}
	orig := submitAs(t, e, bot, "pay.refund", "invoice:1", `{"amount_minor":4000}`)
	e.clock.Advance(5 * time.Minute)
	if n, err := e.q.EscalateDue(ctx); err != nil || n != 1 {
		t.Fatalf("the first tier: %d, %v", n, err)
	}
	counter, err := e.q.Counter(ctx, queue.CounterInput{Operator: "alice", Channel: audit.ChannelCLI, CallID: orig.ID,
		Digest: orig.Digest, Edits: map[string]json.RawMessage{"/amount_minor": json.RawMessage("3000")}})
	if err != nil {
		t.Fatalf("alice counters after the first tier: %v", err)
	}
	if counter.Reached != 1 || len(counter.Escalate) != 2 || !slices.Contains(counter.Approvers.Roles, "operator") ||
		!slices.Contains(counter.Notify, "oncall") {
		t.Fatalf("the counter: reached %d of %d, approvers %+v, notify %v", counter.Reached, len(counter.Escalate), counter.Approvers, counter.Notify)
	}
	e.clock.Advance(20*time.Minute - time.Second)
	if n, err := e.q.EscalateDue(ctx); err != nil || n != 0 {
		t.Fatalf("before the counter's second tier: %d, %v", n, err)
	}
	e.clock.Advance(time.Second)
	if n, err := e.q.EscalateDue(ctx); err != nil || n != 1 {
		t.Fatalf("the counter's second tier: %d, %v", n, err)
	}
	got, err := e.q.Call(ctx, counter.ID)
	if err != nil || got.Reached != 2 || !slices.Contains(got.Approvers.Groups, "leads") {
		t.Fatalf("the counter after its second tier: %v, %+v", err, got)
	}
}
