package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/grant"
	"github.com/countersign/countersign/internal/queue"
)

// TestFailedCheckConsumesNothing presents each grant once in a way that
// fails one check, then exactly: the failure is recorded but consumes
// nothing, so the exact presentation is still accepted, once.
func TestFailedCheckConsumesNothing(t *testing.T) {
	tests := []struct {
		name   string
		who    queue.Principal
		body   func(t *testing.T, c *queue.Call) []byte
		shift  time.Duration // clock offset during the failed redemption
		passed int           // checks passed before the failing one
		reason string
	}{
		{name: "malformed grant", passed: 0, reason: grant.ReasonMalformed,
			body: func(t *testing.T, c *queue.Call) []byte { return body("not.a.grant", c.Tool, c.Target, c.Args) }},
		{name: "tampered signature", passed: 1, reason: grant.ReasonBadSignature,
			body: func(t *testing.T, c *queue.Call) []byte { return body(tamper(t, c.Grant), c.Tool, c.Target, c.Args) }},
		{name: "another actor", passed: 3, reason: grant.ReasonActorMismatch,
			who:  queue.Principal{Actor: "agent:b", Audience: agent.Audience},
			body: exactBodyOf},
		{name: "another audience", passed: 4, reason: grant.ReasonAudienceMismatch,
			who:  queue.Principal{Actor: agent.Actor, Audience: "files-host"},
			body: exactBodyOf},
		{name: "another tool", passed: 5, reason: grant.ReasonToolMismatch,
			body: func(t *testing.T, c *queue.Call) []byte {
				return body(c.Grant, "files.delete", c.Target, MustObject(t, `{"reason":"cleanup"}`))
			}},
		{name: "another target", passed: 6, reason: grant.ReasonTargetMismatch,
			body: func(t *testing.T, c *queue.Call) []byte { return body(c.Grant, c.Tool, "invoice:INV-0", c.Args) }},
		{name: "another amount (wrong digest)", passed: 7, reason: grant.ReasonDigestMismatch,
			body: func(t *testing.T, c *queue.Call) []byte {
				return body(c.Grant, c.Tool, c.Target,
					MustObject(t, `{"amount_minor":129900,"currency":"EUR","reason_code":"duplicate","notes":"charged twice"}`))
			}},
		{name: "another reason code (wrong digest)", passed: 7, reason: grant.ReasonDigestMismatch,
			body: func(t *testing.T, c *queue.Call) []byte {
				return body(c.Grant, c.Tool, c.Target,
					MustObject(t, `{"amount_minor":1299,"currency":"EUR","reason_code":"fraud","notes":"charged twice"}`))
			}},
		{name: "an extra member (wrong digest)", passed: 7, reason: grant.ReasonDigestMismatch,
			body: func(t *testing.T, c *queue.Call) []byte {
				return body(c.Grant, c.Tool, c.Target,
					MustObject(t, `{"amount_minor":1299,"currency":"EUR","reason_code":"duplicate","notes":"charged twice","sql":"x"}`))
			}},
		{name: "before iat", passed: 8, reason: grant.ReasonNotYetValid, shift: -2 * time.Second,
			body: exactBodyOf},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t)
			c := MustApproved(t, e)
			who := tt.who
			if who.Actor == "" && who.Audience == "" {
				who = agent
			}
			start := e.clock.Now()
			e.clock.Set(start.Add(tt.shift))
			r, err := e.q.Redeem(ctx, who, tt.body(t, c))
			e.clock.Set(start)
			if err != nil {
				t.Fatalf("failing Redeem: %v", err)
			}
			if got, want := checks(r), wantChecks(tt.passed, tt.reason); r.Accepted || got != want {
				t.Fatalf("failing Redeem: accepted %t\n got %s\nwant %s", r.Accepted, got, want)
			}
			// The refusal is audited; against the call only once the grant's
			// signed claims name it.
			onCall := 0
			if tt.passed >= 3 {
				onCall = 1
			}
			if got, want := stateOf(t, e.db, c.ID), (ledgerState{Status: "approved", Refused: onCall}); got != want {
				t.Fatalf("after the failure: %+v, want %+v", got, want)
			}
			if got := countRefused(t, e.db); got != 1 {
				t.Fatalf("redemption_refused entries = %d, want 1", got)
			}
			if got := countLedger(t, e.db); got != 0 {
				t.Fatalf("redemptions = %d after a failed check, want 0", got)
			}

			r, err = e.q.Redeem(ctx, agent, exactBody(c))
			if err != nil {
				t.Fatal(err)
			}
			if got, want := checks(r), wantChecks(11, ""); !r.Accepted || got != want {
				t.Fatalf("exact Redeem: accepted %t\n got %s\nwant %s", r.Accepted, got, want)
			}
			if r.CallID != c.ID || r.Call == nil || r.Call.Status != queue.StatusRedeemed {
				t.Errorf("exact Redeem: call %s %+v, want %s redeemed", r.CallID, r.Call, c.ID)
			}
			if got, want := stateOf(t, e.db, c.ID), (ledgerState{Status: "redeemed", Redemptions: 1, Redeemed: 1, Refused: onCall}); got != want {
				t.Errorf("after the acceptance: %+v, want %+v", got, want)
			}

			r, err = e.q.Redeem(ctx, agent, exactBody(c))
			if err != nil {
				t.Fatal(err)
			}
			if got, want := checks(r), wantChecks(10, grant.ReasonReplayed); r.Accepted || got != want {
				t.Errorf("second exact Redeem: accepted %t\n got %s\nwant %s", r.Accepted, got, want)
			}
			if got, want := stateOf(t, e.db, c.ID), (ledgerState{Status: "redeemed", Redemptions: 1, Redeemed: 1, Refused: onCall + 1}); got != want {
				t.Errorf("after the replay: %+v, want %+v", got, want)
			}
		})
	}
}

func exactBodyOf(t *testing.T, c *queue.Call) []byte { return exactBody(c) }

// tamper changes one character in the middle of the token's signature.
func tamper(t *testing.T, token string) string {
	t.Helper()
	i := len(token) - 20
	b := []byte(token)
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}

// TestInformationalMembersAreNotBound presents the call with a different
// note, a member the tool declares informational: the digest still matches.
func TestInformationalMembersAreNotBound(t *testing.T) {
	e := newEnv(t)
	c := MustApproved(t, e)
	r, err := e.q.Redeem(context.Background(), agent, body(c.Grant, c.Tool, c.Target,
		MustObject(t, `{"amount_minor":1299,"currency":"EUR","reason_code":"duplicate","notes":"a different note"}`)))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := checks(r), wantChecks(11, ""); !r.Accepted || got != want {
		t.Fatalf("Redeem: accepted %t\n got %s\nwant %s", r.Accepted, got, want)
	}
}

// TestTimeRecheckedUnderTheWriteLock moves the clock after the grant has
// been verified and before the write transaction begins: the time check
// made under the lock decides, and an expired grant consumes nothing.
func TestTimeRecheckedUnderTheWriteLock(t *testing.T) {
	tests := []struct {
		name       string
		untilExp   time.Duration // the clock under the lock, relative to exp
		accepted   bool
		wantChecks string
	}{
		{"one second before exp", -time.Second, true, wantChecks(11, "")},
		{"at exp", 0, false, wantChecks(8, grant.ReasonExpired)},
		{"after exp", time.Minute, false, wantChecks(8, grant.ReasonExpired)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t)
			c := MustApproved(t, e)
			if !c.GrantExpiresAt.After(e.clock.Now()) {
				t.Fatalf("grant expires at %s, not after now %s", c.GrantExpiresAt, e.clock.Now())
			}
			calls := 0
			e.store.setBefore(func() {
				calls++
				e.clock.Set(c.GrantExpiresAt.Add(tt.untilExp))
			})
			r, err := e.q.Redeem(ctx, agent, exactBody(c))
			e.store.setBefore(nil)
			if err != nil {
				t.Fatal(err)
			}
			if calls != 1 {
				t.Fatalf("Redeem ran %d write transactions, want 1", calls)
			}
			if got := checks(r); r.Accepted != tt.accepted || got != tt.wantChecks {
				t.Fatalf("Redeem: accepted %t, want %t\n got %s\nwant %s", r.Accepted, tt.accepted, got, tt.wantChecks)
			}
			want := ledgerState{Status: "approved", Refused: 1}
			if tt.accepted {
				want = ledgerState{Status: "redeemed", Redemptions: 1, Redeemed: 1}
			}
			if got := stateOf(t, e.db, c.ID); got != want {
				t.Errorf("ledger: %+v, want %+v", got, want)
			}
		})
	}
}

// TestInformationalMembersAreValidated presents an approved call with an
// informational member that breaks the tool's schema: an object carrying
// another amount, and a note longer than maxLength. Each is refused with
// its problems, audited, and consumes nothing; the exact call still
// redeems once.
func TestInformationalMembersAreValidated(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := MustApproved(t, e)
	for name, notes := range map[string]string{
		"an object": `{"amount_minor":999999,"account":"attacker"}`,
		"too long":  `"` + strings.Repeat("n", 200000) + `"`,
		"a number":  `42`,
	} {
		args := `{"amount_minor":1299,"currency":"EUR","reason_code":"duplicate","notes":` + notes + `}`
		_, err := e.q.Redeem(ctx, agent, body(c.Grant, c.Tool, c.Target, json.RawMessage(args)))
		var pe *queue.ProposalError
		if !errors.As(err, &pe) || pe.Kind != "invalid_arguments" || len(pe.Problems) == 0 {
			t.Fatalf("%s: Redeem = %v, want the call's problems", name, err)
		}
		for _, p := range pe.Problems {
			if !strings.HasPrefix(p.Path, "/call/args/") {
				t.Errorf("%s: problem %s at %s, want a path under /call/args/", name, p.Code, p.Path)
			}
		}
	}
	if got, want := stateOf(t, e.db, c.ID), (ledgerState{Status: "approved", Refused: 3}); got != want {
		t.Fatalf("after invalid presentations: %+v, want %+v", got, want)
	}
	if n := countOf(t, e.db, `SELECT COUNT(*) FROM audit WHERE kind = 'redemption_refused' AND details LIKE '%"reason":"invalid_arguments"%'`); n != 3 {
		t.Fatalf("%d refusals recorded as invalid_arguments, want 3", n)
	}
	r, err := e.q.Redeem(ctx, agent, exactBody(c))
	if err != nil || !r.Accepted {
		t.Fatalf("exact Redeem after the refusals: %v %s", err, checks(r))
	}
}

// TestRedeemRefusesRedeemedStatus: a call whose status is already redeemed
// is refused as replayed even when its nonce ledger row is missing (a
// restored or edited database), and nothing changes.
func TestRedeemRefusesRedeemedStatus(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := MustApproved(t, e)
	if r, err := e.q.Redeem(ctx, agent, exactBody(c)); err != nil || !r.Accepted {
		t.Fatalf("first Redeem: %v %s", err, checks(r))
	}
	if _, err := e.db.SQL().Exec(`DELETE FROM redemptions WHERE call_id = ?`, c.ID); err != nil {
		t.Fatal(err)
	}
	r, err := e.q.Redeem(ctx, agent, exactBody(c))
	if err != nil || r.Accepted || r.Reason != "replayed" {
		t.Fatalf("Redeem of a redeemed call without its ledger row: %v accepted=%v reason %q, want replayed", err, r != nil && r.Accepted, r.Reason)
	}
	if n := countLedger(t, e.db); n != 0 {
		t.Errorf("ledger rows = %d, want 0: the refusal consumed something", n)
	}
}
