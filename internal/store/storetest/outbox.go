package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
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
	// An endpoint stays with the account that registered it: another
	// account registering it is refused, and the row is unchanged.
	if err := s.Push.SavePushSubscription(ctx, sub("root", "https://push.example/1", 5)); !errors.Is(err, notify.ErrPushEndpointTaken) {
		t.Fatalf("another account's endpoint: %v, want ErrPushEndpointTaken", err)
	}
	// The same account subscribing the same browser again renews its keys.
	renewed := sub("alice", "https://push.example/1", 6)
	renewed.P256dh = "p-new"
	if err := s.Push.SavePushSubscription(ctx, renewed); err != nil {
		t.Fatalf("renew: %v", err)
	}
	if got, _ := s.Push.PushSubscriptions(ctx); len(got) != 2 || got[0].Account != "root" || got[1] != renewed {
		t.Fatalf("after the refusal and the renewal: %+v", got)
	}
	if err := s.Push.DeleteAccountPushSubscription(ctx, "root", "https://push.example/1", t0); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Push.PushSubscriptions(ctx); len(got) != 2 {
		t.Fatalf("after another account's delete: %+v", got)
	}
	if err := s.Push.DeletePushSubscription(ctx, "https://push.example/1", t0); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Push.PushSubscriptions(ctx); len(got) != 1 || got[0].Endpoint != "https://push.example/3" {
		t.Fatalf("after DeletePushSubscription: %+v", got)
	}
})

// Each account subscribes at most notify.MaxPushSubscriptionsPerAccount
// browsers; a full account never refuses another's.
var _ = add("push/bounded per account", func(t *testing.T, s Stores) {
	ctx := context.Background()
	addUser(t, s, "alice", account.RoleOperator)
	addUser(t, s, "bob", account.RoleOperator)
	sub := func(account string, i int) notify.Subscription {
		return notify.Subscription{Endpoint: fmt.Sprintf("https://push.example/%s/%d", account, i), P256dh: "p", Auth: "a",
			Account: account, CreatedAt: t0.Add(timeMS(i))}
	}
	for i := 0; i < notify.MaxPushSubscriptionsPerAccount; i++ {
		if err := s.Push.SavePushSubscription(ctx, sub("alice", i)); err != nil {
			t.Fatalf("subscription %d: %v", i+1, err)
		}
	}
	if err := s.Push.SavePushSubscription(ctx, sub("alice", 99)); !errors.Is(err, notify.ErrTooManyPushSubscriptions) {
		t.Fatalf("subscription %d: %v, want ErrTooManyPushSubscriptions", notify.MaxPushSubscriptionsPerAccount+1, err)
	}
	if err := s.Push.SavePushSubscription(ctx, sub("alice", 0)); err != nil {
		t.Fatalf("renewing a held subscription when full: %v", err)
	}
	if err := s.Push.SavePushSubscription(ctx, sub("bob", 0)); err != nil {
		t.Fatalf("another account: %v", err)
	}
	if err := s.Push.DeleteAccountPushSubscription(ctx, "alice", sub("alice", 3).Endpoint, t0); err != nil {
		t.Fatal(err)
	}
	if err := s.Push.SavePushSubscription(ctx, sub("alice", 99)); err != nil {
		t.Fatalf("after removing one: %v", err)
	}
	if got, _ := s.Push.PushSubscriptions(ctx); len(got) != notify.MaxPushSubscriptionsPerAccount+1 {
		t.Fatalf("%d subscriptions, want %d", len(got), notify.MaxPushSubscriptionsPerAccount+1)
	}
})

// The console keeps at most notify.MaxPushSubscriptions in all; a full
// store refuses a new one from anyone, and still renews one held.
var _ = add("push/bounded in all", func(t *testing.T, s Stores) {
	ctx := context.Background()
	if s.FillPush == nil {
		t.Fatal("the engine's Stores has no FillPush")
	}
	addUser(t, s, "bulk", account.RoleOperator)
	addUser(t, s, "alice", account.RoleOperator)
	s.FillPush(t, "bulk", notify.MaxPushSubscriptions-1)
	x := notify.Subscription{Endpoint: "https://push.example/alice/0", P256dh: "p", Auth: "a", Account: "alice", CreatedAt: t0}
	if err := s.Push.SavePushSubscription(ctx, x); err != nil {
		t.Fatalf("the last place: %v", err)
	}
	y := x
	y.Endpoint = "https://push.example/alice/1"
	if err := s.Push.SavePushSubscription(ctx, y); !errors.Is(err, notify.ErrPushSubscriptionsFull) {
		t.Fatalf("one past the bound: %v, want ErrPushSubscriptionsFull", err)
	}
	x.P256dh = "p-new"
	if err := s.Push.SavePushSubscription(ctx, x); err != nil {
		t.Fatalf("renewing when full: %v", err)
	}
	if err := s.Push.DeleteAccountPushSubscription(ctx, "alice", x.Endpoint, t0); err != nil {
		t.Fatal(err)
	}
	if err := s.Push.SavePushSubscription(ctx, y); err != nil {
		t.Fatalf("after one was removed: %v", err)
	}
})

// Adding and removing a subscription, and an admin's retry of a delivery,
// are audited in the transaction of the change; a refused change writes
// nothing.
var _ = add("push/audited", func(t *testing.T, s Stores) {
	ctx := context.Background()
	addUser(t, s, "alice", account.RoleOperator)
	addUser(t, s, "bob", account.RoleOperator)
	const endpoint = "https://push.example/alice"
	x := notify.Subscription{Endpoint: endpoint, P256dh: "p", Auth: "a", Account: "alice", CreatedAt: t0}
	before := auditEntries(t, s)
	if err := s.Push.SavePushSubscription(ctx, x); err != nil {
		t.Fatal(err)
	}
	taken := x
	taken.Account = "bob"
	if err := s.Push.SavePushSubscription(ctx, taken); !errors.Is(err, notify.ErrPushEndpointTaken) {
		t.Fatalf("taken: %v", err)
	}
	if err := s.Push.DeleteAccountPushSubscription(ctx, "bob", endpoint, t0); err != nil {
		t.Fatal(err)
	}
	if err := s.Push.DeleteAccountPushSubscription(ctx, "alice", endpoint, t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	c := newCall("agent:a", "payments.refund", t0)
	if err := s.Queue.Update(ctx, func(tx queue.Tx) error {
		if err := tx.InsertCall(c); err != nil {
			return err
		}
		return tx.Enqueue([]queue.Notice{{EventID: "evt_r", Kind: notify.CallSubmitted, Channel: "hook", CallID: c.ID,
			Body: []byte(`{}`), At: t0, DueAt: t0}})
	}); err != nil {
		t.Fatal(err)
	}
	rows, _, err := s.Outbox.Claim(ctx, "d", t0, time.Minute, 10)
	if err != nil || len(rows) != 1 {
		t.Fatalf("Claim = %d rows, %v", len(rows), err)
	}
	if err := s.Outbox.Finish(ctx, "d", notify.Result{Seq: rows[0].Seq, At: t0, Error: "refused", Dead: true}); err != nil {
		t.Fatal(err)
	}
	mid := len(auditEntries(t, s))
	if err := s.Outbox.Retry(ctx, rows[0].Seq, t0.Add(time.Hour), "root"); err != nil {
		t.Fatal(err)
	}
	all := auditEntries(t, s)
	var got []string
	for _, e := range all[len(before):] {
		if e.Kind == audit.KindPushSubscribed || e.Kind == audit.KindPushUnsubscribed || e.Kind == audit.KindDeliveryRetried {
			got = append(got, e.Kind+" "+e.Principal+" "+e.CallID)
		}
	}
	want := []string{"push_subscribed alice ", "push_unsubscribed alice ", "delivery_retried root " + c.ID}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("audit entries %q, want %q", got, want)
	}
	if last := all[len(all)-1]; len(all) != mid+1 || last.Kind != audit.KindDeliveryRetried {
		t.Fatalf("the retry wrote %d entries, last %s", len(all)-mid, last.Kind)
	}
	for _, e := range all {
		if strings.Contains(fmt.Sprint(e.Details), endpoint) {
			t.Fatalf("entry %d writes the endpoint out: %v", e.Seq, e.Details)
		}
	}
	if res, err := s.Audit.VerifyChain(ctx); err != nil || !res.OK {
		t.Fatalf("VerifyChain = %+v, %v", res, err)
	}
})

func auditEntries(t *testing.T, s Stores) []audit.Entry {
	t.Helper()
	var buf bytes.Buffer
	if _, err := s.Audit.ExportAudit(context.Background(), &buf, audit.ExportOptions{Format: "jsonl"}); err != nil {
		t.Fatal(err)
	}
	var out []audit.Entry
	dec := json.NewDecoder(&buf)
	for dec.More() {
		var e audit.Entry
		if err := dec.Decode(&e); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

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
