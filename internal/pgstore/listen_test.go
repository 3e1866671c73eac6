package pgstore_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/grant"
	"github.com/countersign/countersign/internal/pgstore"
	"github.com/countersign/countersign/internal/pgtest"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/testkit"
	"github.com/countersign/countersign/internal/tools"
)

const listenTools = `tools:
  payments.refund:
    description: Refund an invoice
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
`

// replica is one pool and queue service on the shared database.
type replica struct {
	d *pgstore.DB
	q *queue.Service

	mu     sync.Mutex
	events []queue.Event
	got    chan struct{}
}

func newReplica(t *testing.T, url string, keys *grant.Keyring, reg *tools.Registry) *replica {
	t.Helper()
	d := mustOpen(t, url)
	r := &replica{d: d, got: make(chan struct{}, 1000),
		q: queue.NewService(queue.Config{Store: d.Store(), Tools: reg, Signer: keys,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})}
	r.q.Subscribe(func(ev queue.Event) {
		if !ev.Remote {
			return
		}
		r.mu.Lock()
		r.events = append(r.events, ev)
		r.mu.Unlock()
		r.got <- struct{}{}
	})
	return r
}

// waitFor waits until the replica heard a remote event for which ok holds.
func (r *replica) waitFor(t *testing.T, what string, ok func(queue.Event) bool) queue.Event {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		r.mu.Lock()
		for _, ev := range r.events {
			if ok(ev) {
				r.mu.Unlock()
				return ev
			}
		}
		r.mu.Unlock()
		select {
		case <-r.got:
		case <-deadline:
			t.Fatalf("no remote event: %s", what)
		}
	}
}

func (r *replica) remote() []queue.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]queue.Event(nil), r.events...)
}

// A change committed on one replica reaches the other's subscribers and
// long-polls, never its own twice; after the listener's connection is
// killed it reconnects and catches up on what was committed meanwhile.
func TestListenerAcrossReplicas(t *testing.T) {
	url := pgtest.Database(t)
	keys, err := grant.OpenKeyring(filepath.Join(t.TempDir(), "keys"), "countersign", nil)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.Parse([]byte(listenTools))
	if err != nil {
		t.Fatal(err)
	}
	a, b := newReplica(t, url, keys, reg), newReplica(t, url, keys, reg)
	testkit.SeedUsers(t, a.d.Accounts(), account.RoleOperator, "alice")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	la, err := a.d.Listen(ctx, a.q.Apply, quiet)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := b.d.Listen(ctx, b.q.Apply, quiet)
	if err != nil {
		t.Fatal(err)
	}
	agent := queue.Principal{Actor: "agent:a", Audience: "payments-host"}
	c, _, err := a.q.Submit(ctx, agent, []byte(`{"tool":"payments.refund","target":"invoice:INV-1","args":{"amount_minor":5}}`))
	if err != nil {
		t.Fatal(err)
	}
	ev := b.waitFor(t, "submitted on B", func(ev queue.Event) bool { return ev.Call != nil && ev.Call.ID == c.ID })
	if ev.Kind != audit.KindSubmitted || ev.Call.Status != queue.StatusPending {
		t.Fatalf("B heard %s of a %s call, want submitted and pending", ev.Kind, ev.Call.Status)
	}

	// A long-poll on B wakes when A approves.
	woke := make(chan *queue.Call, 1)
	go func() {
		got, err := b.q.Wait(ctx, agent, c.ID, 30*time.Second)
		if err != nil {
			t.Error(err)
		}
		woke <- got
	}()
	for b.q.Waiting() == 0 {
		time.Sleep(time.Millisecond)
	}
	if _, err := a.q.Approve(ctx, "alice", audit.ChannelWeb, c.ID, c.Digest); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-woke:
		if got.Status != queue.StatusApproved || got.Grant == "" {
			t.Fatalf("B's long-poll woke with %s, want approved with the grant", got.Status)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("B's long-poll did not wake when A approved")
	}

	// Kill B's listener connection, commit on A while it is down: B says
	// it is disconnected, reconnects and catches up.
	admin := mustOpen(t, url)
	if _, err := admin.Pool().Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE application_name = 'countersign-listener' AND datname = current_database()`); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := 0; i < 5; i++ {
		c, _, err := a.q.Submit(ctx, agent, []byte(fmt.Sprintf(`{"tool":"payments.refund","target":"invoice:INV-%d","args":{"amount_minor":5}}`, 100+i)))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, c.ID)
	}
	for _, id := range ids {
		b.waitFor(t, "a call submitted while B's listener was down", func(ev queue.Event) bool { return ev.Call != nil && ev.Call.ID == id })
	}
	deadline := time.Now().Add(20 * time.Second)
	for lb.Reconnects() == 0 || !lb.Connected() || la.Reconnects() == 0 || !la.Connected() {
		if time.Now().After(deadline) {
			t.Fatalf("listeners: A connected %t after %d reconnects, B %t after %d", la.Connected(), la.Reconnects(), lb.Connected(), lb.Reconnects())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The listener publishes a batch's changes before it moves its cursor
	// past them, so the cursor may trail the events just waited for.
	for lb.Cursor() < 7 {
		if time.Now().After(deadline) {
			t.Fatalf("B's cursor %d, want at least the 7 entries committed", lb.Cursor())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A never hears its own changes as remote.
	for _, ev := range a.remote() {
		t.Errorf("A heard its own change as remote: %s %v", ev.Kind, ev.Call.ID)
	}
	cancel()
	<-la.Done()
	<-lb.Done()
}

// pool_max_conns in the URL sizes the pool, and the listener, which opens a
// connection of its own from the same URL, does not send it to the server.
func TestPoolSizeInURL(t *testing.T) {
	url := pgtest.Database(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	d, err := pgstore.Open(context.Background(), url+sep+"pool_max_conns=3", pgstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if got := d.Pool().Config().MaxConns; got != 3 {
		t.Fatalf("pool of %d connections, want 3", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l, err := d.Listen(ctx, func(queue.Event) {}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !l.Connected() {
		if time.Now().After(deadline) {
			t.Fatal("the listener did not connect with pool settings in the URL")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-l.Done()
}
