package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/policy"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/testkit"
	"github.com/countersign/countersign/internal/testkit/sqlitekit"
	"github.com/countersign/countersign/internal/tools"
)

// counterTools has a refund whose amount and reason an operator may edit,
// a rule that asks two people for large amounts and one that denies the
// fraud reason, and a tool without a counter block.
const counterTools = `tools:
  pay.refund:
    audience: payments-host
    target: '^invoice:[0-9]+$'
    approvals: 1
    decide_within: 15m
    counter: {edit: [/amount_minor, /reason]}
    rules:
      - {id: big, when: 'args.amount_minor > 100000', then: ask, approvals: 2}
      - {id: no-fraud, when: 'args.reason == "fraud"', then: deny, reason: fraud refunds go to the risk team}
    args:
      type: object
      additionalProperties: false
      required: [amount_minor, reason]
      properties:
        amount_minor: {type: integer, minimum: 1, maximum: 5000000}
        reason: {type: string, enum: [duplicate, fraud, requested]}
  pay.charge:
    audience: payments-host
    target: '.+'
    args: {type: object, additionalProperties: false}
  keys.rotate:
    audience: payments-host
    target: '^key:[a-z]+$'
    confirm: target
    counter: {edit: [target]}
    args: {type: object, additionalProperties: false}
`

type counterEnv struct {
	clock   *testkit.Clock
	q       *queue.Service
	invoice int
}

func newCounterEnv(t *testing.T) *counterEnv {
	t.Helper()
	reg, err := tools.Parse([]byte(counterTools))
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Compile(reg)
	if err != nil {
		t.Fatal(err)
	}
	k := sqlitekit.NewQueue(t, sqlitekit.WithTools(reg), sqlitekit.WithPolicy(pol))
	testkit.SeedUsers(t, k.DB.Accounts(), account.RoleOperator, "alice", "bob", "carol")
	return &counterEnv{clock: k.Clock, q: k.Service}
}

var payer = queue.Principal{Actor: "agent:payer", Audience: "payments-host", TokenID: "tok_payer"}

func (e *counterEnv) submit(t *testing.T, amount string) *queue.Call {
	t.Helper()
	e.invoice++
	c, _, err := e.q.Submit(context.Background(), payer,
		[]byte(`{"tool":"pay.refund","target":"invoice:4`+strconv.Itoa(e.invoice)+`","args":{"amount_minor":`+amount+`,"reason":"duplicate"}}`))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func edits(kv ...string) map[string]json.RawMessage {
	m := map[string]json.RawMessage{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = json.RawMessage(kv[i+1])
	}
	return m
}

// TestCounterLifecycle: an operator counters a pending call; the original
// ends countered naming the counter, the counter carries the original's
// actor, audience and token with its links, the editor's approval counts
// once, and the grant is minted only after the agent accepts. The original
// can never be approved, and an identical resubmission is refused with the
// counter.
func TestCounterLifecycle(t *testing.T) {
	ctx := context.Background()
	e := newCounterEnv(t)
	orig := e.submit(t, "40000")
	editors := make(chan string, 4)
	e.q.Subscribe(func(ev queue.Event) {
		if ev.Kind == audit.KindCountered {
			editors <- ev.Call.ID + " " + ev.Editor
		}
	})
	counter, err := e.q.Counter(ctx, queue.CounterInput{Operator: "alice", Channel: audit.ChannelCLI, CallID: orig.ID,
		Digest: orig.Digest, Edits: edits("/amount_minor", "4000")})
	if err != nil {
		t.Fatal(err)
	}
	if counter.CounteredFrom != orig.ID || counter.EditedBy != "alice" || counter.Actor != payer.Actor ||
		counter.Audience != payer.Audience || counter.SubmittedBy != payer.TokenID || counter.Digest == orig.Digest {
		t.Fatalf("counter = %+v", counter)
	}
	if counter.Status != queue.StatusPending || counter.Grant != "" {
		t.Fatalf("counter before accept: status %s grant %q; want pending without a grant", counter.Status, counter.Grant)
	}
	select {
	case got := <-editors:
		if got != orig.ID+" alice" {
			t.Fatalf("the countered event: %q, want the original and its editor, alice", got)
		}
	default:
		t.Fatal("no countered event was published")
	}
	if len(counter.Approvals) != 1 || counter.Approvals[0].Method != queue.MethodCounter || counter.Approvals[0].Operator != "alice" {
		t.Fatalf("counter approvals = %+v, want alice's by counter", counter.Approvals)
	}
	got, err := e.q.Call(ctx, orig.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != queue.StatusCountered || got.CounteredBy != counter.ID || !got.Status.Terminal() {
		t.Fatalf("original = %s countered_by %q", got.Status, got.CounteredBy)
	}
	if _, err := e.q.Approve(ctx, "bob", audit.ChannelCLI, orig.ID, orig.Digest); !errors.Is(err, queue.ErrNotPending) {
		t.Fatalf("approving the original: %v, want not pending", err)
	}
	// Only the submitting token accepts.
	other := payer
	other.TokenID = "tok_other"
	if _, err := e.q.Accept(ctx, other, counter.ID); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("accept by another token: %v", err)
	}
	if _, err := e.q.Accept(ctx, payer, orig.ID); !errors.Is(err, queue.ErrNotCounter) {
		t.Fatalf("accepting the original: %v", err)
	}
	acc, err := e.q.Accept(ctx, payer, counter.ID)
	if err != nil {
		t.Fatal(err)
	}
	if acc.Status != queue.StatusApproved || acc.Grant == "" || acc.AcceptedAt.IsZero() {
		t.Fatalf("after accept: status %s grant %q", acc.Status, acc.Grant)
	}
	// The identical call again: refused with the counter.
	_, _, err = e.q.Submit(ctx, payer, []byte(`{"tool":"pay.refund","target":"invoice:41","args":{"amount_minor":40000,"reason":"duplicate"}}`))
	var ce *queue.CounteredError
	if !errors.As(err, &ce) || ce.CounterID != counter.ID || ce.CallID != orig.ID || !errors.Is(err, queue.ErrPreviouslyCountered) {
		t.Fatalf("resubmission: %v, want previously countered naming %s", err, counter.ID)
	}
	e.clock.Advance(queue.CounteredMemory + time.Second)
	if _, created, err := e.q.Submit(ctx, payer, []byte(`{"tool":"pay.refund","target":"invoice:41","args":{"amount_minor":40000,"reason":"duplicate"}}`)); err != nil || !created {
		t.Fatalf("resubmission after the memory: created %t, %v", created, err)
	}
}

// TestCounterRequirement: an edit that raises a rule's requirement needs
// it; the original's requirement holds even when the edit lowers it; the
// original's approvals do not carry over.
func TestCounterRequirement(t *testing.T) {
	ctx := context.Background()
	e := newCounterEnv(t)
	// Raised: 400 -> 200000 asks two people; the editor is one of them.
	c := e.submit(t, "400")
	ct, err := e.q.Counter(ctx, queue.CounterInput{Operator: "alice", Channel: audit.ChannelCLI, CallID: c.ID,
		Digest: c.Digest, Edits: edits("/amount_minor", "200000")})
	if err != nil {
		t.Fatal(err)
	}
	if ct.ApprovalsRequired != 2 {
		t.Fatalf("required %d, want 2", ct.ApprovalsRequired)
	}
	if ct, err = e.q.Accept(ctx, payer, ct.ID); err != nil || ct.Status != queue.StatusPending || ct.Grant != "" {
		t.Fatalf("accept with one of two approvals: %v %s", err, ct.Status)
	}
	if _, err := e.q.Approve(ctx, "alice", audit.ChannelCLI, ct.ID, ct.Digest); !errors.Is(err, queue.ErrAlreadyApproved) {
		t.Fatalf("the editor approving again: %v", err)
	}
	if ct, err = e.q.Approve(ctx, "bob", audit.ChannelCLI, ct.ID, ct.Digest); err != nil || ct.Status != queue.StatusApproved || ct.Grant == "" {
		t.Fatalf("second approval after accept: %v %s", err, ct.Status)
	}

	// Lowered: 200000 (two people, one approved already) -> 400 still
	// needs two, and bob's approval of the original does not count.
	c = e.submit(t, "200000")
	if _, err := e.q.Approve(ctx, "bob", audit.ChannelCLI, c.ID, c.Digest); err != nil {
		t.Fatal(err)
	}
	ct, err = e.q.Counter(ctx, queue.CounterInput{Operator: "alice", Channel: audit.ChannelCLI, CallID: c.ID,
		Digest: c.Digest, Edits: edits("/amount_minor", "400")})
	if err != nil {
		t.Fatal(err)
	}
	if ct.ApprovalsRequired != 2 || len(ct.Approvals) != 1 || ct.Approvals[0].Operator != "alice" {
		t.Fatalf("lowered counter: required %d approvals %+v", ct.ApprovalsRequired, ct.Approvals)
	}
	if ct, err = e.q.Accept(ctx, payer, ct.ID); err != nil || ct.Grant != "" {
		t.Fatalf("accepted with one of two: %v grant %q", err, ct.Grant)
	}
}

// TestCounterRefusals: every problem of an edit is listed; members the
// tool does not list, an edit that changes nothing, a rule's deny, a tool
// without a counter block and a call that is no longer pending are
// refused, and each leaves the original pending.
func TestCounterRefusals(t *testing.T) {
	ctx := context.Background()
	e := newCounterEnv(t)
	c := e.submit(t, "400")
	try := func(op string, ed map[string]json.RawMessage) error {
		_, err := e.q.Counter(ctx, queue.CounterInput{Operator: op, Channel: audit.ChannelCLI, CallID: c.ID, Digest: c.Digest, Edits: ed})
		return err
	}
	var pe *queue.ProposalError
	err := try("alice", edits("/amount_minor", "0", "/reason", `"unheard"`))
	if !errors.As(err, &pe) || len(pe.Problems) != 2 {
		t.Fatalf("two bad values: %v, want both listed", err)
	}
	paths := pe.Problems[0].Path + " " + pe.Problems[1].Path
	if !strings.Contains(paths, "/args/amount_minor") || !strings.Contains(paths, "/args/reason") {
		t.Errorf("problem paths %q", paths)
	}
	if err := try("alice", edits("target", `"invoice:43"`, "/extra", "1")); !errors.As(err, &pe) || len(pe.Problems) != 2 ||
		pe.Problems[0].Code != "not_editable" {
		t.Fatalf("members not listed: %v", err)
	}
	// A value that is not JSON does not hide the problems of the rest.
	if err := try("alice", edits("/amount_minor", "abc", "/reason", `"unheard"`)); !errors.As(err, &pe) || len(pe.Problems) != 2 ||
		pe.Problems[0].Code != "malformed_json" || pe.Problems[1].Path != "/args/reason" {
		t.Fatalf("a value that is not JSON beside a bad value: %v", err)
	}
	if err := try("alice", edits("/amount_minor", "400")); !errors.Is(err, queue.ErrCounterUnchanged) {
		t.Fatalf("no change: %v", err)
	}
	var de *queue.CounterDeniedError
	if err := try("alice", edits("/reason", `"fraud"`)); !errors.As(err, &de) || de.Rule != "no-fraud" {
		t.Fatalf("denied edit: %v", err)
	}
	if err := try(payer.Actor, edits("/amount_minor", "300")); !errors.Is(err, queue.ErrNotADecider) && !errors.Is(err, queue.ErrOwnCall) {
		t.Fatalf("the agent countering: %v", err)
	}
	if got, _ := e.q.Call(ctx, c.ID); got.Status != queue.StatusPending {
		t.Fatalf("after refusals the original is %s", got.Status)
	}
	plain, _, err := e.q.Submit(ctx, payer, []byte(`{"tool":"pay.charge","target":"x","args":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.q.Counter(ctx, queue.CounterInput{Operator: "alice", Channel: audit.ChannelCLI, CallID: plain.ID,
		Digest: plain.Digest, Edits: edits("target", `"y"`)}); !errors.Is(err, queue.ErrNotCounterable) {
		t.Fatalf("a tool without counter: %v", err)
	}
	if _, err := e.q.Approve(ctx, "alice", audit.ChannelCLI, c.ID, c.Digest); err != nil {
		t.Fatal(err)
	}
	if err := try("bob", edits("/amount_minor", "300")); !errors.Is(err, queue.ErrNotPending) {
		t.Fatalf("countering an approved call: %v", err)
	}
}

// TestCounterConfirmation: the editor's approval carries what the tool asks
// every approval to: the edited call's target typed; the original's target,
// or nothing, refuses the counter and the original stays pending.
func TestCounterConfirmation(t *testing.T) {
	ctx := context.Background()
	e := newCounterEnv(t)
	orig, _, err := e.q.Submit(ctx, payer, []byte(`{"tool":"keys.rotate","target":"key:alpha","args":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	in := queue.CounterInput{Operator: "alice", Channel: audit.ChannelCLI, CallID: orig.ID, Digest: orig.Digest,
		Edits: edits("target", `"key:beta"`)}
	for _, typed := range []string{"", "key:alpha"} {
		in.Confirm = typed
		var ce *queue.ConfirmationError
		if _, err := e.q.Counter(ctx, in); !errors.As(err, &ce) || ce.Want != "key:beta" {
			t.Fatalf("counter with %q typed: %v, want a confirmation error wanting key:beta", typed, err)
		}
		if got, _ := e.q.Call(ctx, orig.ID); got.Status != queue.StatusPending {
			t.Fatalf("after a refused counter the original is %s", got.Status)
		}
	}
	in.Confirm = "key:beta"
	if c, err := e.q.Counter(ctx, in); err != nil || c.Target != "key:beta" || len(c.Approvals) != 1 {
		t.Fatalf("counter with the edited target typed: %+v %v", c, err)
	}
}
