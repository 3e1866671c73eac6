package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/problem"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/testkit"
)

// teamTools: a tool two people approve, and peopleTools' vault.rotate,
// which only admins and the security group approve and olga and the
// vault-admins team own.
const teamTools = peopleTools + `  ledger.close:
    audience: ledger-host
    target: '^period:[0-9]+$'
    approvals: 2
    args: {type: object, additionalProperties: false, properties: {}}
`

const sec = "oidc:idp.example.com/00u-sec"
const vaulter = "oidc:idp.example.com/00u-vaulter"

var ledgerBot = queue.Principal{Actor: "agent:ledger", Audience: "ledger-host"}

func newTeamEnv(t *testing.T) *env {
	t.Helper()
	e := newPeopleEnvFrom(t, teamTools)
	testkit.SeedUsers(t, e.db.Accounts(), account.RoleOperator, "dave")
	return e
}

// MustDelegate gives a delegation from delegator to delegate for a day.
func MustDelegate(t *testing.T, e *env, delegator, delegate string) *queue.Delegation {
	t.Helper()
	d, err := e.q.GiveDelegation(context.Background(), queue.DelegationInput{By: delegator, Channel: audit.ChannelWeb,
		Delegator: delegator, Delegate: delegate, Until: e.clock.Now().Add(24 * time.Hour)})
	if err != nil {
		t.Fatalf("%s delegates to %s: %v", delegator, delegate, err)
	}
	return d
}

func approveFor(e *env, operator, behalf string, c *queue.Call) (*queue.Call, error) {
	return e.q.ApproveWith(context.Background(), queue.ApproveInput{Operator: operator, Channel: audit.ChannelCLI,
		CallID: c.ID, Digest: c.Digest, For: behalf})
}

// TestDelegationQuorumCountsEachNameOnce: an approval is (person, on
// behalf of), and two count as distinct only if no name repeats: bob
// cannot approve as himself and again for alice, in either order; after
// bob for alice, neither alice nor another delegate of alice adds an
// approval; carol completes the quorum.
func TestDelegationQuorumCountsEachNameOnce(t *testing.T) {
	e := newTeamEnv(t)
	MustDelegate(t, e, "alice", "bob")
	MustDelegate(t, e, "alice", "dave")
	type step struct{ operator, behalf string }
	cases := []struct {
		name   string
		first  step
		second step
	}{
		{"bob, then bob for alice", step{"bob", ""}, step{"bob", "alice"}},
		{"bob for alice, then bob", step{"bob", "alice"}, step{"bob", ""}},
		{"bob for alice, then alice", step{"bob", "alice"}, step{"alice", ""}},
		{"alice, then bob for alice", step{"alice", ""}, step{"bob", "alice"}},
		{"bob for alice, then dave for alice", step{"bob", "alice"}, step{"dave", "alice"}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := submitAs(t, e, ledgerBot, "ledger.close", "period:"+string(rune('1'+i)), `{}`)
			if _, err := approveFor(e, tc.first.operator, tc.first.behalf, c); err != nil {
				t.Fatalf("first approval: %v", err)
			}
			_, err := approveFor(e, tc.second.operator, tc.second.behalf, c)
			if !errors.Is(err, queue.ErrAlreadyApproved) {
				t.Fatalf("second approval = %v, want ErrAlreadyApproved", err)
			}
			got, err := e.q.Get(context.Background(), ledgerBot, c.ID)
			if err != nil || got.Status != queue.StatusPending || len(got.Approvals) != 1 {
				t.Fatalf("after a repeated name: %v, status %s with %d approvals; want pending with 1", err, got.Status, len(got.Approvals))
			}
			got, err = approveFor(e, "carol", "", c)
			if err != nil || got.Status != queue.StatusApproved {
				t.Fatalf("carol completes the quorum: %v", err)
			}
		})
	}
}

// TestDelegationPassesStanding: a delegate approves with the delegator's
// roles and groups as they stand at the decision: sam, outside the
// tool's approvers, approves for a member of the security group; the
// record and its audit entry name whom it was for; once the delegator
// has left the group, the same delegation passes nothing.
func TestDelegationPassesStanding(t *testing.T) {
	e := newTeamEnv(t)
	d := MustDelegate(t, e, sec, "sam")
	c := submitAs(t, e, vaultBot, "vault.rotate", "secret:db", `{}`)
	if _, err := approveFor(e, "sam", "", c); !errors.Is(err, queue.ErrNotAnApprover) {
		t.Fatalf("sam as himself = %v, want ErrNotAnApprover", err)
	}
	got, err := approveFor(e, "sam", sec, c)
	if err != nil || got.Status != queue.StatusApproved {
		t.Fatalf("sam for sec: %v", err)
	}
	if a := got.Approvals[0]; a.Operator != "sam" || a.For != sec {
		t.Fatalf("approval by %q for %q, want sam for %s", a.Operator, a.For, sec)
	}
	stored, err := e.q.Get(context.Background(), vaultBot, c.ID)
	if err != nil || stored.Approvals[0].For != sec {
		t.Fatalf("stored approval: %v, %+v; want for %s", err, stored.Approvals, sec)
	}
	var details map[string]any
	if err := json.Unmarshal([]byte(auditKinds(t, e, c.ID)[audit.KindApproved]), &details); err != nil {
		t.Fatal(err)
	}
	if details["for"] != sec || details["delegation"] != d.ID {
		t.Fatalf("approved entry %v, want for %s through %s", details, sec, d.ID)
	}

	accountsUpdate(t, e, func(tx account.Tx) error {
		u, err := tx.User(sec)
		if err != nil {
			return err
		}
		u.Groups = []string{"finance"}
		return tx.UpdateOIDCUser(u)
	})
	c2 := submitAs(t, e, vaultBot, "vault.rotate", "secret:api", `{}`)
	if _, err := approveFor(e, "sam", sec, c2); !errors.Is(err, queue.ErrNotAnApprover) {
		t.Fatalf("sam for sec after sec left the group = %v, want ErrNotAnApprover", err)
	}
}

// TestDelegationOwnersBothWays: owners and the own-call ban hold against
// the delegate and the delegator: a delegate who owns the agent cannot
// approve for a delegator who could, and a delegate cannot approve for a
// delegator who owns it (through a team); each proposer is refused too.
func TestDelegationOwnersBothWays(t *testing.T) {
	e := newTeamEnv(t)
	MustDelegate(t, e, sec, "olga")
	MustDelegate(t, e, vaulter, "sam")
	c := submitAs(t, e, vaultBot, "vault.rotate", "secret:db", `{}`)
	if _, err := approveFor(e, "olga", sec, c); !errors.Is(err, queue.ErrOwner) {
		t.Fatalf("olga (an owner) for sec = %v, want ErrOwner", err)
	}
	if _, err := approveFor(e, "sam", vaulter, c); !errors.Is(err, queue.ErrOwner) {
		t.Fatalf("sam for vaulter (an owner through a team) = %v, want ErrOwner", err)
	}
	if got, err := approveFor(e, "root", "", c); err != nil || got.Status != queue.StatusApproved {
		t.Fatalf("root, neither owner nor delegated, approves: %v", err)
	}

	// The own-call ban: a call proposed under alice's name.
	MustDelegate(t, e, "alice", "bob")
	own := submitAs(t, e, queue.Principal{Actor: "alice", Audience: "ledger-host"}, "ledger.close", "period:7", `{}`)
	if _, err := approveFor(e, "bob", "alice", own); !errors.Is(err, queue.ErrOwnCall) {
		t.Fatalf("bob for alice on alice's own call = %v, want ErrOwnCall", err)
	}
}

// TestDelegationEndsBetweenPageAndClick: a delegate reads the call and
// is offered "for alice"; the delegation ends (ended by alice, run out,
// or alice disabled) before the click; the approval is refused and
// nothing is approved.
func TestDelegationEndsBetweenPageAndClick(t *testing.T) {
	cases := []struct {
		name string
		end  func(t *testing.T, e *env, d *queue.Delegation)
	}{
		{"ended by the delegator", func(t *testing.T, e *env, d *queue.Delegation) {
			if _, err := e.q.EndDelegation(context.Background(), "alice", audit.ChannelWeb, d.ID); err != nil {
				t.Fatal(err)
			}
		}},
		{"ran out", func(t *testing.T, e *env, d *queue.Delegation) { e.clock.Set(d.Until) }},
		{"the delegator disabled", func(t *testing.T, e *env, d *queue.Delegation) {
			accountsUpdate(t, e, func(tx account.Tx) error { return tx.DisableUser("alice", e.clock.Now()) })
		}},
		{"the delegate disabled", func(t *testing.T, e *env, d *queue.Delegation) {
			accountsUpdate(t, e, func(tx account.Tx) error { return tx.DisableUser("bob", e.clock.Now()) })
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newTeamEnv(t)
			// A minute, so that it runs out before the call does.
			d, err := e.q.GiveDelegation(context.Background(), queue.DelegationInput{By: "alice", Channel: audit.ChannelWeb,
				Delegator: "alice", Delegate: "bob", Until: e.clock.Now().Add(time.Minute)})
			if err != nil {
				t.Fatal(err)
			}
			c := submitAs(t, e, ledgerBot, "ledger.close", "period:1", `{}`)
			seen, err := e.q.Get(context.Background(), ledgerBot, c.ID)
			if err != nil {
				t.Fatal(err)
			}
			tc.end(t, e, d)
			_, err = e.q.ApproveWith(context.Background(), queue.ApproveInput{Operator: "bob", Channel: audit.ChannelCLI,
				CallID: c.ID, Digest: c.Digest, For: "alice", Seen: seen})
			var de *queue.DeciderError
			if !errors.Is(err, queue.ErrNotDelegated) && !errors.As(err, &de) {
				t.Fatalf("approval after the delegation ended = %v, want ErrNotDelegated (or the delegate refused)", err)
			}
			got, err := e.q.Get(context.Background(), ledgerBot, c.ID)
			if err != nil || len(got.Approvals) != 0 {
				t.Fatalf("after the refusal: %v, %d approvals; want none", err, len(got.Approvals))
			}
		})
	}
}

// TestGiveDelegationRules: no delegation to oneself (or another account
// of oneself), none back to one's delegator, none beyond 14 days, at
// most three live per person, given only by the delegator or an admin;
// and no re-delegation: bob's delegate carol cannot act for alice.
func TestGiveDelegationRules(t *testing.T) {
	e := newTeamEnv(t)
	ctx := context.Background()
	now := e.clock.Now()
	give := func(by, from, to string, until time.Time) error {
		_, err := e.q.GiveDelegation(ctx, queue.DelegationInput{By: by, Channel: audit.ChannelWeb, Delegator: from, Delegate: to, Until: until})
		return err
	}
	day := now.Add(24 * time.Hour)
	for _, tc := range []struct {
		name         string
		by, from, to string
		until        time.Time
		want         error
	}{
		{"to oneself", "alice", "alice", "alice", day, queue.ErrSelfDelegation},
		{"beyond 14 days", "alice", "alice", "bob", now.Add(queue.MaxDelegationFor + time.Second), queue.ErrDelegationWindow},
		{"in the past", "alice", "alice", "bob", now.Add(-time.Second), queue.ErrDelegationWindow},
		{"by someone else", "carol", "alice", "bob", day, queue.ErrMayNotDelegate},
		{"an admin to themselves for alice", "root", "alice", "root", day, queue.ErrMayNotDelegate},
	} {
		if err := give(tc.by, tc.from, tc.to, tc.until); !errors.Is(err, tc.want) {
			t.Errorf("%s = %v, want %v", tc.name, err, tc.want)
		}
	}
	if err := give("root", "alice", "bob", now.Add(queue.MaxDelegationFor)); err != nil {
		t.Fatalf("an admin for alice, exactly 14 days: %v", err)
	}
	if err := give("bob", "bob", "alice", day); !errors.Is(err, queue.ErrMutualDelegation) {
		t.Errorf("bob back to alice = %v, want ErrMutualDelegation", err)
	}
	MustDelegate(t, e, "bob", "carol")
	c := submitAs(t, e, ledgerBot, "ledger.close", "period:1", `{}`)
	if _, err := approveFor(e, "carol", "alice", c); !errors.Is(err, queue.ErrNotDelegated) {
		t.Errorf("carol for alice through bob = %v, want ErrNotDelegated", err)
	}
	if _, err := approveFor(e, "carol", "bob", c); err != nil {
		t.Errorf("carol for bob: %v", err)
	}
	// alice has one live (to bob); two more reach the bound.
	MustDelegate(t, e, "alice", "dave")
	MustDelegate(t, e, "alice", "sam")
	if err := give("alice", "alice", "olga", day); !errors.Is(err, queue.ErrTooManyDelegations) {
		t.Errorf("alice's fourth = %v, want ErrTooManyDelegations", err)
	}
	// bob has two (from alice, to carol); one more received is his third.
	MustDelegate(t, e, "olga", "bob")
	if err := give("root", "root", "bob", day); !errors.Is(err, queue.ErrTooManyDelegations) {
		t.Errorf("bob's fourth = %v, want ErrTooManyDelegations", err)
	}
	// An ended one no longer counts.
	ds, err := e.q.Delegations(ctx, queue.DelegationFilter{Person: "alice", LiveAt: e.clock.Now(), Limit: 10})
	if err != nil || len(ds) != 3 {
		t.Fatalf("alice's delegations: %v, %d; want 3", err, len(ds))
	}
	var toSam string
	for _, d := range ds {
		if d.Delegate == "sam" {
			toSam = d.ID
		}
	}
	if _, err := e.q.EndDelegation(ctx, "sam", audit.ChannelWeb, toSam); err != nil {
		t.Fatalf("the delegate ends one: %v", err)
	}
	if err := give("alice", "alice", "olga", day); err != nil {
		t.Errorf("alice's third after one ended: %v", err)
	}
}

// TestDelegationGivenOnce: a delegator delegates to one delegate once at a
// time, whoever gives it, so one giver takes at most one of the delegate's
// MaxDelegationsPerPerson. Distinct givers may fill a delegate's share,
// each with one of their own; the delegate ends what they do not want, and
// gives their own again.
func TestDelegationGivenOnce(t *testing.T) {
	e := newTeamEnv(t)
	ctx := context.Background()
	give := func(by, from, to string) (*queue.Delegation, error) {
		return e.q.GiveDelegation(ctx, queue.DelegationInput{By: by, Channel: audit.ChannelWeb, Delegator: from, Delegate: to,
			Until: e.clock.Now().Add(time.Hour)})
	}
	first := MustDelegate(t, e, "alice", "bob")
	for _, by := range []string{"alice", "root"} {
		_, err := give(by, "alice", "bob")
		if !errors.Is(err, queue.ErrDelegationExists) {
			t.Errorf("alice to bob again, by %s = %v, want ErrDelegationExists", by, err)
		}
		if p := problem.Of(err); p.Status != http.StatusConflict || p.Code != "delegation_exists" {
			t.Errorf("alice to bob again answers %d %s, want 409 delegation_exists", p.Status, p.Code)
		}
	}
	// bob holds one of his three: two more givers fill his share.
	fromCarol := MustDelegate(t, e, "carol", "bob")
	MustDelegate(t, e, "dave", "bob")
	if _, err := give("bob", "bob", "sam"); !errors.Is(err, queue.ErrTooManyDelegations) {
		t.Errorf("bob's own with three received = %v, want ErrTooManyDelegations", err)
	}
	if _, err := e.q.EndDelegation(ctx, "bob", audit.ChannelWeb, fromCarol.ID); err != nil {
		t.Fatalf("bob ends carol's: %v", err)
	}
	if _, err := give("bob", "bob", "sam"); err != nil {
		t.Errorf("bob's own after ending one he received: %v", err)
	}
	// Once ended, the same pair may be given again.
	if _, err := e.q.EndDelegation(ctx, "alice", audit.ChannelWeb, first.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := give("alice", "alice", "bob"); err != nil {
		t.Errorf("alice to bob after the first ended: %v", err)
	}
}

// TestDelegationsLiveInAll: the console keeps at most MaxDelegationsLive
// live delegations, every person's together; one more is refused even
// between two people with none of their own, and an ended one makes room.
func TestDelegationsLiveInAll(t *testing.T) {
	e := newTeamEnv(t)
	ctx := context.Background()
	now := e.clock.Now()
	// Others' delegations, written straight to the store: the bound in all
	// is reached by many people, never by a few.
	err := e.store.Update(ctx, func(tx queue.Tx) error {
		for i := range queue.MaxDelegationsLive - 1 {
			if err := tx.InsertDelegation(&queue.Delegation{ID: fmt.Sprintf("dlg_other%04d", i), Delegator: fmt.Sprint("giver", i),
				Delegate: fmt.Sprint("taker", i), GivenBy: fmt.Sprint("giver", i), GivenAt: now, Until: now.Add(time.Hour)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	last := MustDelegate(t, e, "alice", "bob")
	give := func() error {
		_, err := e.q.GiveDelegation(ctx, queue.DelegationInput{By: "carol", Channel: audit.ChannelWeb, Delegator: "carol",
			Delegate: "dave", Until: now.Add(time.Hour)})
		return err
	}
	if err := give(); !errors.Is(err, queue.ErrTooManyDelegations) || !strings.Contains(err.Error(), "in all") {
		t.Fatalf("carol to dave with %d live = %v, want ErrTooManyDelegations in all", queue.MaxDelegationsLive, err)
	}
	if _, err := e.q.EndDelegation(ctx, "alice", audit.ChannelWeb, last.ID); err != nil {
		t.Fatal(err)
	}
	if err := give(); err != nil {
		t.Errorf("carol to dave after one ended: %v", err)
	}
}

// TestDelegationBoundUnderRace: many people delegate to one delegate at
// once; the delegate ends up with exactly MaxDelegationsPerPerson live,
// whatever the interleaving, because the bound is counted in the giving
// transaction.
func TestDelegationBoundUnderRace(t *testing.T) {
	e := newTeamEnv(t)
	names := []string{"p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7"}
	testkit.SeedUsers(t, e.db.Accounts(), account.RoleOperator, names...)
	ctx := context.Background()
	errs := make(chan error, len(names))
	for _, n := range names {
		go func() {
			_, err := e.q.GiveDelegation(ctx, queue.DelegationInput{By: n, Channel: audit.ChannelWeb, Delegator: n, Delegate: "dave",
				Until: e.clock.Now().Add(time.Hour)})
			errs <- err
		}()
	}
	given := 0
	for range names {
		switch err := <-errs; {
		case err == nil:
			given++
		case !errors.Is(err, queue.ErrTooManyDelegations):
			t.Errorf("GiveDelegation = %v, want nil or ErrTooManyDelegations", err)
		}
	}
	live, err := e.q.Delegations(ctx, queue.DelegationFilter{Person: "dave", LiveAt: e.clock.Now(), Limit: 20})
	if given != queue.MaxDelegationsPerPerson || err != nil || len(live) != queue.MaxDelegationsPerPerson {
		t.Fatalf("%d given, %d live (%v); want %d", given, len(live), err, queue.MaxDelegationsPerPerson)
	}
}

// TestDelegationQuorumCountsPeopleAcrossAccounts: the names of an
// approval for someone are matched as quorums match people: after bob
// approved for alice, alice's single-sign-on account (short name Alice)
// cannot add an approval, as herself or for anyone.
func TestDelegationQuorumCountsPeopleAcrossAccounts(t *testing.T) {
	e := newTeamEnv(t)
	const ssoAlice = "oidc:idp.example.com/00u-alice"
	accountsUpdate(t, e, func(tx account.Tx) error {
		return tx.InsertUser(account.User{Name: ssoAlice, Role: account.RoleOperator, Kind: account.KindOIDC,
			Issuer: "https://idp.example.com", Subject: "00u-alice", ShortName: "Alice", CreatedAt: time.Now().UTC().Truncate(time.Millisecond)})
	})
	MustDelegate(t, e, "alice", "bob")
	MustDelegate(t, e, "carol", ssoAlice)
	c := submitAs(t, e, ledgerBot, "ledger.close", "period:1", `{}`)
	if _, err := approveFor(e, "bob", "alice", c); err != nil {
		t.Fatalf("bob for alice: %v", err)
	}
	for _, behalf := range []string{"", "carol"} {
		_, err := approveFor(e, ssoAlice, behalf, c)
		var sp *queue.SamePersonError
		if !errors.As(err, &sp) || sp.Other != "alice" {
			t.Errorf("alice's other account (for %q) = %v, want SamePersonError naming alice", behalf, err)
		}
	}
}
