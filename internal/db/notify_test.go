package db

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/notify"
	"github.com/countersign/countersign/internal/policy"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/testkit"
)

const notifyYAML = `
channels:
  hook: {type: webhook, url: "https://hooks.example.com/cs", secret: {env: S}}
routes:
  - tools: ["*"]
    notify: [hook]
    escalate_after: 5m
    escalate_to: [hook]
    remind_before: 2m
`

func routedService(t *testing.T, l *ledger, store queue.Store) *queue.Service {
	t.Helper()
	cfg, err := notify.ParseConfig([]byte(notifyYAML), notify.Env{Getenv: func(string) string {
		return "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	}})
	if err != nil {
		t.Fatal(err)
	}
	return queue.NewService(queue.Config{Store: store, Tools: l.tools, Signer: l.keys, Now: l.now,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Notifier: notify.NewRouter(cfg, "https://cs.example.com")})
}

func outboxKinds(t *testing.T, d *DB, callID string) string {
	t.Helper()
	rows, err := d.Outbox().Deliveries(context.Background(), notify.Query{CallID: callID, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i := len(rows) - 1; i >= 0; i-- {
		out = append(out, rows[i].Kind)
	}
	return strings.Join(out, " ")
}

const refund = `{"tool":"payments.refund","target":"invoice:INV-7","args":{"amount_minor":1299,"currency":"EUR","reason_code":"duplicate"}}`

// TestChangesWriteTheirNoticesInTheSameTransaction: a committed change has
// its outbox rows, a refused one has none.
func TestChangesWriteTheirNoticesInTheSameTransaction(t *testing.T) {
	clock := testkit.NewClock(epoch)
	l := newLedger(t, clock.Now)
	q := routedService(t, l, l.db.Store())
	ctx := context.Background()
	c, _, err := q.Submit(ctx, agent, []byte(refund))
	if err != nil {
		t.Fatal(err)
	}
	if got := outboxKinds(t, l.db, c.ID); got != "call.submitted call.escalated call.reminder" {
		t.Fatalf("after submission: %s", got)
	}
	if _, err := q.Approve(ctx, "alice", audit.ChannelWeb, c.ID, strings.Repeat("0", 64)); !errors.Is(err, queue.ErrDigestMismatch) {
		t.Fatalf("Approve with a wrong digest = %v", err)
	}
	if got := outboxKinds(t, l.db, c.ID); got != "call.submitted call.escalated call.reminder" {
		t.Fatalf("a refused approval wrote notices: %s", got)
	}
	if _, err := q.Approve(ctx, "alice", audit.ChannelWeb, c.ID, c.Digest); err != nil {
		t.Fatal(err)
	}
	if got := outboxKinds(t, l.db, c.ID); got != "call.submitted call.escalated call.reminder call.approved" {
		t.Fatalf("after approval: %s", got)
	}
	// The approved call's reminder and escalation are skipped, not sent.
	clock.Advance(time.Hour)
	claimed, skipped, err := l.db.Outbox().Claim(ctx, "me", clock.Now(), time.Minute, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(claimed) != 1 || len(skipped) != 2 || claimed[0].Kind != notify.CallSubmitted {
		t.Fatalf("claimed %d, skipped %d: want the submission (the approval waits behind it) and both conditional rows skipped", len(claimed), len(skipped))
	}
	if err := l.db.Outbox().Finish(ctx, "me", notify.Result{Seq: claimed[0].Seq, At: clock.Now(), Delivered: true}); err != nil {
		t.Fatal(err)
	}
	if claimed, _, _ = l.db.Outbox().Claim(ctx, "me", clock.Now(), time.Minute, 10); len(claimed) != 1 || claimed[0].Kind != notify.CallApproved {
		t.Fatalf("then claimed %d rows, want the approval", len(claimed))
	}

	// A call found overdue is expired on the spot, and that commit
	// announces the expiry.
	d, _, err := q.Submit(ctx, agent, []byte(strings.Replace(refund, "INV-7", "INV-8", 1)))
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour)
	if _, err := q.Deny(ctx, "alice", audit.ChannelWeb, d.ID, "late"); !errors.Is(err, queue.ErrNotPending) {
		t.Fatalf("Deny of an overdue call = %v", err)
	}
	if got := outboxKinds(t, l.db, d.ID); !strings.HasSuffix(got, "call.expired") {
		t.Fatalf("the on-the-spot expiry wrote %s", got)
	}
}

// failingOutbox is a store whose outbox writes fail.
type failingOutbox struct{ queue.Store }

type failingTx struct{ queue.Tx }

func (f failingOutbox) Update(ctx context.Context, fn func(queue.Tx) error) error {
	return f.Store.Update(ctx, func(tx queue.Tx) error { return fn(failingTx{tx}) })
}

func (failingTx) Enqueue([]queue.Notice) error { return errors.New("outbox full") }

// TestAFailedOutboxWriteUndoesTheChange: a change whose notices cannot be
// written is not committed either, so nothing that notifies can happen
// without its notification.
func TestAFailedOutboxWriteUndoesTheChange(t *testing.T) {
	l := newLedger(t, nil)
	q := routedService(t, l, failingOutbox{l.db.Store()})
	if _, _, err := q.Submit(context.Background(), agent, []byte(refund)); err == nil || !strings.Contains(err.Error(), "outbox full") {
		t.Fatalf("Submit = %v, want the outbox's error", err)
	}
	var n int
	if err := l.db.SQL().QueryRow(`SELECT COUNT(*) FROM calls`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d calls stored (%v), want none", n, err)
	}
	if err := l.db.SQL().QueryRow(`SELECT COUNT(*) FROM audit WHERE kind = 'submitted'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d submissions audited, want none", n)
	}
}

const ruledTools = `tools:
  payments.refund:
    audience: payments-host
    target: '^invoice:INV-[0-9]+$'
    approvals: 1
    grant_ttl: 60s
    decide_within: 15m
    args:
      type: object
      additionalProperties: false
      required: [amount_minor]
      properties:
        amount_minor: {type: integer, minimum: 1, maximum: 5000000}
    rules:
      - id: large
        when: args.amount_minor > 100000
        then: ask
        approvals: 2
        notify: [oncall]
`

// TestARulesChannelsHearEveryEvent: a rule's notify list is kept with the
// call, so its channels hear the submission and, later, the decision.
func TestARulesChannelsHearEveryEvent(t *testing.T) {
	l := newLedger(t, nil)
	pol, err := policy.Parse([]byte(ruledTools))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := notify.ParseConfig([]byte(`
channels:
  hook: {type: webhook, url: "https://hooks.example.com/cs", secret: {env: S}}
  oncall: {type: webhook, url: "https://oncall.example.com/cs", secret: {env: S}}
routes:
  - tools: ["*"]
    notify: [hook]
`), notify.Env{Getenv: func(string) string { return "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" }})
	if err != nil {
		t.Fatal(err)
	}
	q := queue.NewService(queue.Config{Store: l.db.Store(), Policy: pol, Signer: l.keys,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Notifier: notify.NewRouter(cfg, "https://cs.example.com")})
	ctx := context.Background()
	large, _, err := q.Submit(ctx, agent, []byte(`{"tool":"payments.refund","target":"invoice:INV-1","args":{"amount_minor":200000}}`))
	if err != nil {
		t.Fatal(err)
	}
	small, _, err := q.Submit(ctx, agent, []byte(`{"tool":"payments.refund","target":"invoice:INV-2","args":{"amount_minor":100}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Deny(ctx, "alice", audit.ChannelWeb, large.ID, "too large"); err != nil {
		t.Fatal(err)
	}
	channels := func(id string) string {
		rows, _ := l.db.Outbox().Deliveries(ctx, notify.Query{CallID: id})
		var out []string
		for i := len(rows) - 1; i >= 0; i-- {
			out = append(out, rows[i].Kind+"@"+rows[i].Channel)
		}
		return strings.Join(out, " ")
	}
	if got := channels(large.ID); got != "call.submitted@hook call.submitted@oncall call.denied@hook call.denied@oncall" {
		t.Fatalf("the large refund's notices: %s", got)
	}
	if got := channels(small.ID); got != "call.submitted@hook" {
		t.Fatalf("the small refund's notices: %s", got)
	}
}

// Prune deletes every finished row before the cutoff however many there
// are, in transactions of at most pruneBatch rows, and leaves pending rows
// and newer ones.
func TestOutboxPruneInBatches(t *testing.T) {
	d := openTestDB(t)
	defer func(n int) { pruneBatch = n }(pruneBatch)
	pruneBatch = 7
	old, recent := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	add := func(i int, state string, at time.Time) {
		t.Helper()
		if _, err := d.sql.Exec(`INSERT INTO outbox (event_id, kind, channel, body, at, scheduled_at, due_at, state)
			VALUES (?, 'call.submitted', 'hook', x'7b7d', ?, ?, ?, ?)`, fmt.Sprintf("evt_%d", i), ms(at), ms(at), ms(at), state); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 {
		add(i, []string{"delivered", "dead", "skipped"}[i%3], old)
	}
	for i := 20; i < 23; i++ {
		add(i, "pending", old)
	}
	add(23, "delivered", recent)
	commits := d.commits.Load()
	n, err := d.Outbox().Prune(context.Background(), old.Add(time.Hour))
	if err != nil || n != 20 {
		t.Fatalf("Prune = %d, %v; want 20", n, err)
	}
	if got := d.commits.Load() - commits; got < 3 {
		t.Errorf("20 rows pruned in %d transactions, want at least 3 of at most 7 rows", got)
	}
	var left int
	if err := d.sql.QueryRow(`SELECT count(*) FROM outbox`).Scan(&left); err != nil || left != 4 {
		t.Fatalf("%d rows left (%v), want the 3 pending and the recent one", left, err)
	}
}
