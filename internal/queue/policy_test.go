package queue_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/db"
	"github.com/countersign/countersign/internal/grant"
	"github.com/countersign/countersign/internal/policy"
	"github.com/countersign/countersign/internal/problem"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/testkit"
	"github.com/countersign/countersign/internal/testkit/sqlitekit"
)

// rulesFile is payments.refund with rules, for the policy tests.
const rulesFile = `tools:
  payments.refund:
    audience: payments-host
    target: '^invoice:INV-[0-9]+$'
    approvals: 1
    auto_approve: allowed
    informational: [/notes]
    args:
      type: object
      additionalProperties: false
      required: [amount_minor, currency]
      properties:
        amount_minor: {type: integer, minimum: 0}
        currency: {type: string, enum: [USD, EUR, JPY]}
        notes: {type: string}
    rules:
      - id: divide
        when: args.amount_minor == 7 && 10 / (args.amount_minor - 7) > 0
        then: ask
      - id: jpy
        when: args.currency == "JPY"
        then: deny
        reason: JPY refunds go through finance
      - id: big-asks-three
        when: args.amount_minor > 100000
        then: ask
        approvals: 3
      - id: small-refunds
        when: args.amount_minor <= 5000
        then: approve
        reason: small refunds
`

// policyEnv is a real database, a keyring and a Service with rules.
type policyEnv struct {
	clock *testkit.Clock
	dir   string
	db    *db.DB
	keys  *grant.Keyring
	q     *queue.Service
	pol   *policy.Policy
	log   *bytes.Buffer
}

func newPolicyEnv(tb testing.TB, src string) *policyEnv {
	tb.Helper()
	k := sqlitekit.NewQueue(tb)
	testkit.SeedUsers(tb, k.DB.Accounts(), account.RoleOperator, "alice", "bob", "carol", "dave")
	testkit.SeedUsers(tb, k.DB.Accounts(), account.RoleAdmin, "admin")
	e := &policyEnv{clock: k.Clock, dir: filepath.Dir(k.Path), db: k.DB, keys: k.Keys, log: &bytes.Buffer{}}
	e.reload(tb, src)
	return e
}

// reload replaces the Service with one over a new tools file, as a
// restart with another file would.
func (e *policyEnv) reload(tb testing.TB, src string) {
	tb.Helper()
	pol, err := policy.Parse([]byte(src))
	if err != nil {
		tb.Fatal(err)
	}
	e.pol = pol
	e.q = queue.NewService(queue.Config{Store: e.db.Store(), Policy: pol, Signer: e.keys, Now: e.clock.Now,
		Logger: slog.New(slog.NewTextHandler(&syncWriter{w: e.log}, nil))})
}

type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (e *policyEnv) submit(tb testing.TB, who queue.Principal, amount int, currency string) (*queue.Call, error) {
	tb.Helper()
	body := fmt.Sprintf(`{"tool":"payments.refund","target":"invoice:INV-%d","args":{"amount_minor":%d,"currency":%q,"notes":"n"}}`,
		amount, amount, currency)
	c, _, err := e.q.Submit(context.Background(), who, []byte(body))
	return c, err
}

func auditOf(tb testing.TB, d *db.DB, callID, kind string) audit.Entry {
	tb.Helper()
	entries, err := d.Timeline(context.Background(), callID)
	if err != nil {
		tb.Fatal(err)
	}
	for _, en := range entries {
		if en.Kind == kind {
			return en
		}
	}
	tb.Fatalf("no %s entry for %s in %+v", kind, callID, entries)
	return audit.Entry{}
}

// detail reads one member of an audit entry's details.
func detail(en audit.Entry, key string) any {
	if o, ok := en.Details.(canonical.Object); ok {
		v, _ := o.Get(key)
		return v
	}
	return nil
}

func TestRuleApprovesAndTheGrantRedeems(t *testing.T) {
	e := newPolicyEnv(t, rulesFile)
	ctx := context.Background()
	c, err := e.submit(t, agent, 1200, "USD")
	if err != nil {
		t.Fatal(err)
	}
	if c.Status != queue.StatusApproved || c.Grant == "" || c.DecidedByRule() != "small-refunds" {
		t.Fatalf("status %s, grant %q, rule %q: want approved by small-refunds with a grant", c.Status, c.Grant, c.DecidedByRule())
	}
	// A long-poll returns the grant at once.
	got, err := e.q.Wait(ctx, agent, c.ID, 5*time.Second)
	if err != nil || got.Status != queue.StatusApproved || got.Grant != c.Grant {
		t.Fatalf("Wait = %v %v", got, err)
	}
	if len(got.Approvals) != 1 || got.Approvals[0].Operator != "policy:small-refunds" || got.Approvals[0].Method != queue.MethodPolicy {
		t.Errorf("approvals = %+v, want one by policy:small-refunds with method %q", got.Approvals, queue.MethodPolicy)
	}
	r, err := e.q.Redeem(ctx, agent, exactBody(c))
	if err != nil || !r.Accepted {
		t.Fatalf("Redeem: %v %s", err, checks(r))
	}
	// The audit entry names the rule, its digest, the tool's definition
	// and the tools file.
	tl, _ := e.pol.Registry().Tool("payments.refund")
	rule := e.pol.Rules("payments.refund")[3]
	en := auditOf(t, e.db, c.ID, audit.KindApproved)
	want := map[string]any{"rule": "small-refunds", "rule_digest": rule.Digest, "tool_digest": tl.DefinitionDigest,
		"tools_digest": e.pol.ToolsDigest(), "digest": c.Digest}
	if en.Principal != "policy:small-refunds" || en.Channel != queue.ChannelPolicy {
		t.Errorf("approved by %s over %s", en.Principal, en.Channel)
	}
	for k, v := range want {
		if detail(en, k) != v {
			t.Errorf("approved entry %s = %v, want %v", k, detail(en, k), v)
		}
	}
	if sub := auditOf(t, e.db, c.ID, audit.KindSubmitted); detail(sub, "tool_digest") != tl.DefinitionDigest {
		t.Errorf("submitted entry tool_digest = %v", detail(sub, "tool_digest"))
	}
	auditOf(t, e.db, c.ID, audit.KindGranted)
}

func TestRuleDenies(t *testing.T) {
	e := newPolicyEnv(t, rulesFile)
	c, err := e.submit(t, agent, 100, "JPY")
	var pd *queue.PolicyDeniedError
	if !errors.As(err, &pd) || pd.Reason != "JPY refunds go through finance" || pd.Rule != "jpy" {
		t.Fatalf("Submit: %v, want a PolicyDeniedError with the rule's reason", err)
	}
	stored, err := e.q.Call(context.Background(), c.ID)
	if err != nil || stored.Status != queue.StatusDenied || stored.Denial.By != "policy:jpy" {
		t.Fatalf("stored %+v %v", stored, err)
	}
	if en := auditOf(t, e.db, c.ID, audit.KindDenied); detail(en, "reason") != pd.Reason || detail(en, "tools_digest") != e.pol.ToolsDigest() {
		t.Errorf("denied entry %+v", en.Details)
	}
	// The same call again within ten minutes: previously denied, with
	// the rule's reason.
	e.clock.Advance(5 * time.Minute)
	_, err = e.submit(t, agent, 100, "JPY")
	var de *queue.DeniedError
	if !errors.As(err, &de) || de.Reason != pd.Reason || de.CallID != c.ID {
		t.Fatalf("resubmission: %v, want previously_denied with the rule's reason", err)
	}
}

// TestPreviouslyDeniedNamesTheCallToItsTokenOnly: a denied call is
// remembered for its actor, so another token of the same actor is refused
// the same call as well, but only the token that submitted it is told
// which call it was (invariant 20).
func TestPreviouslyDeniedNamesTheCallToItsTokenOnly(t *testing.T) {
	e := newPolicyEnv(t, rulesFile)
	mine := queue.Principal{Actor: agent.Actor, Audience: agent.Audience, TokenID: "tok_mine"}
	other := queue.Principal{Actor: agent.Actor, Audience: agent.Audience, TokenID: "tok_other"}
	_, err := e.submit(t, mine, 100, "JPY")
	var pd *queue.PolicyDeniedError
	if !errors.As(err, &pd) {
		t.Fatalf("Submit: %v, want a PolicyDeniedError", err)
	}
	e.clock.Advance(time.Minute)
	for _, tc := range []struct {
		name   string
		who    queue.Principal
		callID string
	}{
		{"the submitting token", mine, pd.CallID},
		{"another token of the actor", other, ""},
	} {
		_, err := e.submit(t, tc.who, 100, "JPY")
		var de *queue.DeniedError
		if !errors.As(err, &de) || de.Reason != pd.Reason || de.CallID != tc.callID {
			t.Errorf("%s: %v, want previously_denied naming call %q", tc.name, err, tc.callID)
			continue
		}
		if p := problem.Of(err); p.Code != "previously_denied" || p.CallID != tc.callID {
			t.Errorf("%s answers %s with call_id %q, want previously_denied with %q", tc.name, p.Code, p.CallID, tc.callID)
		}
		if tc.callID == "" && strings.Contains(err.Error(), pd.CallID) {
			t.Errorf("%s: %q names the call", tc.name, err)
		}
	}
}

func TestRuleRaisesApprovalsAndNobodyApprovesTheirOwnCall(t *testing.T) {
	e := newPolicyEnv(t, rulesFile)
	ctx := context.Background()
	// An actor whose name is also an operator's.
	who := queue.Principal{Actor: "carol", Audience: "payments-host"}
	c, err := e.submit(t, who, 200000, "USD")
	if err != nil {
		t.Fatal(err)
	}
	if c.Status != queue.StatusPending || c.ApprovalsRequired != 3 {
		t.Fatalf("status %s, approvals %d: want pending, 3", c.Status, c.ApprovalsRequired)
	}
	for i, op := range []string{"alice", "carol", "bob", "carol", "dave"} {
		got, err := e.q.Approve(ctx, op, audit.ChannelWeb, c.ID, c.Digest)
		switch {
		case op == "carol":
			if !errors.Is(err, queue.ErrOwnCall) {
				t.Fatalf("approval %d by the call's actor: %v, want ErrOwnCall", i, err)
			}
		case err != nil:
			t.Fatalf("approval %d by %s: %v", i, op, err)
		case op == "dave" && got.Status != queue.StatusApproved:
			t.Fatalf("after three approvals: %s", got.Status)
		case op != "dave" && got.Status != queue.StatusPending:
			t.Fatalf("after approval by %s: %s, want pending", op, got.Status)
		}
	}
	// A rule's principal never approves for a person.
	if _, err := e.q.Approve(ctx, "policy:small-refunds", audit.ChannelWeb, c.ID, c.Digest); err == nil {
		t.Fatal("an approval in a rule's name was accepted")
	}
}

func TestEvaluationErrorGoesToPeopleAndIsLogged(t *testing.T) {
	e := newPolicyEnv(t, rulesFile)
	before := e.pol.EvalErrors()
	c, err := e.submit(t, agent, 7, "USD") // 10 / 0 in rule divide
	if err != nil {
		t.Fatal(err)
	}
	if c.Status != queue.StatusPending || c.ApprovalsRequired != 3 {
		t.Fatalf("status %s, approvals %d: want pending with the most any later rule asks (3)", c.Status, c.ApprovalsRequired)
	}
	if e.pol.EvalErrors() != before+1 {
		t.Fatalf("EvalErrors %d, want %d", e.pol.EvalErrors(), before+1)
	}
	if !strings.Contains(e.log.String(), "rule evaluation failed") || !strings.Contains(e.log.String(), "divide") {
		t.Fatalf("log:\n%s", e.log.String())
	}
}

func TestToolChanged(t *testing.T) {
	e := newPolicyEnv(t, rulesFile)
	ctx := context.Background()
	pending, err := e.submit(t, agent, 9000, "USD")
	if err != nil {
		t.Fatal(err)
	}
	approved, err := e.submit(t, agent, 100, "USD")
	if err != nil || approved.Status != queue.StatusApproved {
		t.Fatalf("small refund: %v %v", approved, err)
	}
	pendingToo, err := e.submit(t, agent, 9100, "USD")
	if err != nil {
		t.Fatal(err)
	}

	// Restart with the tool's maximum lowered.
	e.reload(t, strings.Replace(rulesFile, "minimum: 0}", "minimum: 0, maximum: 8000}", 1))
	if _, err := e.q.Approve(ctx, "alice", audit.ChannelWeb, pending.ID, pending.Digest); !errors.Is(err, queue.ErrToolChanged) {
		t.Fatalf("Approve under a changed definition: %v, want ErrToolChanged", err)
	}
	r, err := e.q.Redeem(ctx, agent, exactBody(approved))
	if err != nil || r.Accepted || r.Reason != grant.ReasonToolChanged {
		t.Fatalf("Redeem under a changed definition: %v %s", err, checks(r))
	}
	if want := wantChecks(9, grant.ReasonToolChanged); checks(r) != want {
		t.Errorf("checks %s, want %s", checks(r), want)
	}
	// Such a call can still be denied or cancelled.
	if _, err := e.q.Deny(ctx, "alice", audit.ChannelWeb, pending.ID, "the tool changed"); err != nil {
		t.Fatalf("Deny: %v", err)
	}
	if _, err := e.q.Cancel(ctx, agent, pendingToo.ID); err != nil {
		t.Fatalf("Cancel: %v", err)
	}

	// A tool that is gone refuses the same way.
	gone := strings.Replace(strings.Replace(rulesFile, "payments.refund:", "payments.other:", 1), "payments.refund", "payments.other", -1)
	e.reload(t, gone)
	fresh := e.mustPending(t, rulesFile)
	e.reload(t, gone)
	if _, err := e.q.Approve(ctx, "alice", audit.ChannelWeb, fresh.ID, fresh.Digest); !errors.Is(err, queue.ErrToolChanged) {
		t.Fatalf("Approve of a removed tool: %v, want ErrToolChanged", err)
	}
}

func (e *policyEnv) mustPending(tb testing.TB, src string) *queue.Call {
	tb.Helper()
	e.reload(tb, src)
	c, err := e.submit(tb, agent, 9999, "EUR")
	if err != nil || c.Status != queue.StatusPending {
		tb.Fatalf("submit: %v %v", c, err)
	}
	return c
}

func TestFreeze(t *testing.T) {
	e := newPolicyEnv(t, rulesFile)
	ctx := context.Background()
	approved, _ := e.submit(t, agent, 100, "USD")
	pending, _ := e.submit(t, agent, 9000, "USD")
	toDeny, _ := e.submit(t, agent, 9001, "USD")
	f, err := e.q.Freeze(ctx, "admin", audit.ChannelCLI, "payments.refund", "", "incident 42: refunds paused")
	if err != nil {
		t.Fatal(err)
	}
	// No approval, by a person or a rule, and no redemption.
	var fe *queue.FrozenError
	if _, err := e.q.Approve(ctx, "alice", audit.ChannelWeb, pending.ID, pending.Digest); !errors.As(err, &fe) || fe.Freeze.Reason != f.Reason {
		t.Fatalf("Approve while frozen: %v", err)
	}
	r, err := e.q.Redeem(ctx, agent, exactBody(approved))
	if err != nil || r.Reason != grant.ReasonFrozen || r.Freeze == nil || r.Freeze.Reason != f.Reason {
		t.Fatalf("Redeem while frozen: %v %s", err, checks(r))
	}
	if _, err := e.submit(t, agent, 200, "USD"); !errors.As(err, &fe) {
		t.Fatalf("Submit while frozen: %v", err)
	}
	// Another tool's and another actor's freeze do not match.
	if got, err := e.q.Freezes(ctx); err != nil || len(got) != 1 {
		t.Fatalf("Freezes = %v %v", got, err)
	}
	// Denial still works while frozen.
	if _, err := e.q.Deny(ctx, "alice", audit.ChannelWeb, toDeny.ID, "not now"); err != nil {
		t.Fatalf("Deny while frozen: %v", err)
	}
	other, _ := e.q.Unfreeze(ctx, "admin", audit.ChannelCLI, "payments.refund", "agent:nobody")
	if len(other) != 0 {
		t.Fatalf("lifted %v with another scope", other)
	}
	lifted, err := e.q.Unfreeze(ctx, "admin", audit.ChannelCLI, "payments.refund", "")
	if err != nil || len(lifted) != 1 {
		t.Fatalf("Unfreeze: %v %v", lifted, err)
	}
	if r, err := e.q.Redeem(ctx, agent, exactBody(approved)); err != nil || !r.Accepted {
		t.Fatalf("Redeem after unfreeze: %v %s", err, checks(r))
	}
	if _, err := e.q.Approve(ctx, "alice", audit.ChannelWeb, pending.ID, pending.Digest); err != nil {
		t.Fatalf("Approve after unfreeze: %v", err)
	}
	// An actor-scoped freeze stops only that actor (one with no token or
	// call yet, so asked for explicitly).
	if _, err := e.q.FreezeWith(ctx, queue.FreezeRequest{By: "admin", Channel: audit.ChannelCLI, Actor: "agent:b",
		Reason: "that bot is looping", AllowUnknown: true}); err != nil {
		t.Fatal(err)
	}
	if c, err := e.submit(t, agent, 300, "USD"); err != nil || c.Status != queue.StatusApproved {
		t.Fatalf("another actor during an actor freeze: %v %v", c, err)
	}
	if _, err := e.submit(t, queue.Principal{Actor: "agent:b", Audience: "payments-host"}, 300, "USD"); !errors.As(err, &fe) {
		t.Fatalf("the frozen actor: %v", err)
	}
	// Frozen and unfrozen are audited.
	if n := countOf(t, e.db, `SELECT COUNT(*) FROM audit WHERE kind IN ('frozen','unfrozen')`); n != 3 {
		t.Fatalf("%d freeze entries, want 3", n)
	}
}
