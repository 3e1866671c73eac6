package storetest

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/notify"
	"github.com/countersign/countersign/internal/notify/outboxtest"
	"github.com/countersign/countersign/internal/queue"
)

// The notification outbox: every case of internal/notify/outboxtest, with
// the notices written through queue.Tx.Enqueue as a change's transaction
// writes them.
var _ = func() struct{} {
	for _, c := range outboxtest.Cases {
		add("outbox/"+c.Name, func(t *testing.T, s Stores) { c.Fn(t, outboxHarness(s)) })
	}
	return struct{}{}
}()

func outboxHarness(s Stores) outboxtest.Harness {
	return outboxtest.Harness{
		Outbox: s.Outbox,
		Enqueue: func(tb testing.TB, ns ...queue.Notice) {
			tb.Helper()
			if err := s.Queue.Update(context.Background(), func(tx queue.Tx) error { return tx.Enqueue(ns) }); err != nil {
				tb.Fatalf("Enqueue: %v", err)
			}
		},
		NewCall: func(tb testing.TB) string {
			tb.Helper()
			c := newCall("agent:a", "payments.refund", t0)
			if err := s.Queue.Update(context.Background(), func(tx queue.Tx) error { return tx.InsertCall(c) }); err != nil {
				tb.Fatalf("InsertCall: %v", err)
			}
			return c.ID
		},
		EndCall: func(tb testing.TB, id string) {
			tb.Helper()
			err := s.Queue.Update(context.Background(), func(tx queue.Tx) error {
				c, err := tx.Call(id)
				if err != nil {
					return err
				}
				c.Status, c.DecidedAt = queue.StatusDenied, t0
				c.Denial = &queue.Denial{By: "alice", Channel: "web", Reason: "no", At: t0}
				return tx.UpdateCall(c)
			})
			if err != nil {
				tb.Fatalf("EndCall: %v", err)
			}
		},
	}
}

// A change that rolls back takes its notices with it.
var _ = add("outbox/rolled back notices", func(t *testing.T, s Stores) {
	err := s.Queue.Update(context.Background(), func(tx queue.Tx) error {
		if err := tx.Enqueue([]queue.Notice{{EventID: "evt_x", Kind: notify.CallSubmitted, Channel: "hook", Body: []byte(`{}`), At: t0, DueAt: t0}}); err != nil {
			return err
		}
		return errRollback
	})
	if err != errRollback {
		t.Fatalf("Update = %v", err)
	}
	if rows, err := s.Outbox.Deliveries(context.Background(), notify.Query{}); err != nil || len(rows) != 0 {
		t.Fatalf("after a rollback %d rows, %v", len(rows), err)
	}
})

var _ = add("push/subscriptions", func(t *testing.T, s Stores) {
	ctx := context.Background()
	addUser(t, s, "alice", account.RoleOperator)
	addUser(t, s, "aude", account.RoleAuditor)
	addUser(t, s, "root", account.RoleAdmin)
	addUser(t, s, "olga", account.RoleOperator)
	sub := func(account, endpoint string, at int) notify.Subscription {
		return notify.Subscription{Endpoint: endpoint, P256dh: "p-" + endpoint, Auth: "a-" + endpoint, Account: account,
			CreatedAt: t0.Add(timeMS(at))}
	}
	for _, x := range []notify.Subscription{sub("alice", "https://push.example/1", 1), sub("aude", "https://push.example/2", 2),
		sub("root", "https://push.example/3", 3), sub("olga", "https://push.example/4", 4)} {
		if err := s.Push.SavePushSubscription(ctx, x); err != nil {
			t.Fatalf("SavePushSubscription: %v", err)
		}
	}
	accountUpdate(t, s, func(tx account.Tx) error { return tx.DisableUser("olga", t0) })
	got, err := s.Push.PushSubscriptions(ctx)
	want := []notify.Subscription{sub("alice", "https://push.example/1", 1), sub("root", "https://push.example/3", 3)}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("PushSubscriptions = %+v, %v; want the enabled deciders' %+v", got, err, want)
	}
	// The same browser subscribing again (or for another account) replaces
	// its row.
	if err := s.Push.SavePushSubscription(ctx, sub("root", "https://push.example/1", 5)); err != nil {
		t.Fatal(err)
	}
	if err := s.Push.DeleteAccountPushSubscription(ctx, "alice", "https://push.example/1"); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Push.PushSubscriptions(ctx); len(got) != 2 || got[0].Account != "root" {
		t.Fatalf("after another account's delete: %+v", got)
	}
	if err := s.Push.DeletePushSubscription(ctx, "https://push.example/1"); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Push.PushSubscriptions(ctx); len(got) != 1 || got[0].Endpoint != "https://push.example/3" {
		t.Fatalf("after DeletePushSubscription: %+v", got)
	}
})

func timeMS(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// Dispatchers on several handles of one database (replicas, or processes
// on one SQLite file) claim each row once: the database's locking, not a
// process's mutex, keeps a row to one claimer.
var _ = add("outbox/claims across handles", func(t *testing.T, s Stores) {
	if testing.Short() {
		t.Skip("-short: a race of claimers on several handles")
	}
	if s.Reopen == nil {
		t.Fatal("storetest: this case needs a second handle on the database: set Stores.Reopen")
	}
	ctx := context.Background()
	const rows = 240
	var ns []queue.Notice
	for i := 0; i < rows; i++ {
		ns = append(ns, queue.Notice{EventID: fmt.Sprintf("evt_%03d", i), Kind: notify.CallSubmitted, Channel: "hook",
			CallID: fmt.Sprintf("call_%d", i%23), Body: []byte(`{}`), At: t0.Add(timeMS(i)), DueAt: t0})
	}
	update(t, s, func(tx queue.Tx) error { return tx.Enqueue(ns) })
	other := s.Reopen(t)
	var mu sync.Mutex
	seen := map[int64]string{}
	var wg sync.WaitGroup
	for w := 0; w < 6; w++ {
		out := s.Outbox
		if w%2 == 1 {
			out = other.Outbox
		}
		owner := fmt.Sprintf("replica-%d", w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				got, _, err := out.Claim(ctx, owner, t0, time.Hour, 5)
				if err != nil {
					t.Error(err)
					return
				}
				if len(got) == 0 {
					return
				}
				for _, d := range got {
					mu.Lock()
					if prev, dup := seen[d.Seq]; dup {
						t.Errorf("row %d claimed by %s and %s", d.Seq, prev, owner)
					}
					seen[d.Seq] = owner
					mu.Unlock()
					if err := out.Finish(ctx, owner, notify.Result{Seq: d.Seq, At: t0, Delivered: true}); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if len(seen) != rows {
		t.Fatalf("%d rows delivered, want %d", len(seen), rows)
	}
})

// The channels a rule asked for are kept with the call.
var _ = add("calls/notify channels round trip", func(t *testing.T, s Stores) {
	c := newCall("agent:a", "payments.refund", t0)
	c.Notify = []string{"oncall", "security-team"}
	plain := newCall("agent:a", "payments.refund", t0)
	insert(t, s, c, plain)
	got, err := s.Queue.Call(context.Background(), c.ID)
	if err != nil || !reflect.DeepEqual(got.Notify, c.Notify) {
		t.Fatalf("Notify = %v, %v; want %v", got.Notify, err, c.Notify)
	}
	if got, _ := s.Queue.Call(context.Background(), plain.ID); got.Notify != nil {
		t.Fatalf("a call no rule named channels for reads back %v", got.Notify)
	}
})
