// Package storetest is the conformance suite of Countersign's stores: one
// set of tests that every implementation of the domain's store interfaces
// (queue.Store, queue.History, account.Store, audit.Trail, notify.Outbox)
// must pass,
// whatever its engine. It speaks only through those interfaces, so it holds
// no SQL. SQLite (internal/db) and PostgreSQL (internal/pgstore) both run
// it unchanged: a change to what a store does is made in both engines, with
// a migration of the same number in each, and a case here.
//
// A store runs it from its own tests:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) storetest.Stores { ... a fresh, empty database ... })
//	}
//
// Adding a case is one function in one file of this package, registered
// beside it with add:
//
//	var _ = add("what it checks", func(t *testing.T, s Stores) { ... })
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/notify"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/retention"
)

// Stores are the views of one database that the domain uses.
type Stores struct {
	Queue    queue.Store
	History  queue.History
	Accounts account.Store
	Audit    audit.Trail
	// Reopen opens another handle on the same database, with connections
	// of its own, as another process or replica would hold it (closed
	// when the test ends). The races between handles need it.
	Reopen func(t *testing.T) Stores
	// Outbox delivers the notices queue.Tx.Enqueue writes; Push keeps
	// browsers' Web Push subscriptions.
	Outbox notify.Outbox
	Push   PushStore
	// FillPush writes n push subscriptions of account straight into the
	// database, past the per-account bound, so that the console-wide
	// bound can be reached without thousands of transactions.
	FillPush func(t *testing.T, account string, n int)
	// Retention prunes the audit trail and keeps its legal holds.
	Retention RetentionStore
}

// RetentionStore is the store a prune uses: the retention reads and
// writes, checkpoints, and verification against trusted keys.
type RetentionStore interface {
	retention.Store
	Checkpoint(ctx context.Context, signer *audit.Signer) (audit.Checkpoint, error)
	Verify(ctx context.Context, opts audit.VerifyOptions) (audit.VerifyResult, error)
}

// PushStore is the store of Web Push subscriptions: what the push channel
// reads and what the console writes.
type PushStore interface {
	notify.Subscriptions
	SavePushSubscription(ctx context.Context, s notify.Subscription) error
	DeleteAccountPushSubscription(ctx context.Context, account, endpoint string, now time.Time) error
}

type testCase struct {
	name string
	fn   func(t *testing.T, s Stores)
}

var (
	mu    sync.Mutex
	cases []testCase
)

// add registers a case; it returns nothing useful, so that a case can be
// registered with a package-level var beside its function.
func add(name string, fn func(t *testing.T, s Stores)) struct{} {
	mu.Lock()
	defer mu.Unlock()
	cases = append(cases, testCase{name, fn})
	return struct{}{}
}

// Run runs every case as a subtest, each on the fresh, empty database that
// open returns (open registers its own cleanup).
func Run(t *testing.T, open func(t *testing.T) Stores) {
	mu.Lock()
	all := append([]testCase(nil), cases...)
	mu.Unlock()
	sort.Slice(all, func(i, j int) bool { return all[i].name < all[j].name })
	for _, c := range all {
		t.Run(c.name, func(t *testing.T) { c.fn(t, open(t)) })
	}
}

// t0 is the time the cases start at: whole milliseconds, as stores keep.
var t0 = time.Date(2030, 5, 6, 7, 8, 9, 0, time.UTC)

func randomID(prefix string) string {
	var b [10]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// newCall is a pending call of actor and tool, created at created; each
// call gets a digest of its own.
func newCall(actor, tool string, created time.Time) *queue.Call {
	id := randomID("call_")
	var d [32]byte
	rand.Read(d[:])
	return &queue.Call{
		ID: id, Actor: actor, Audience: "payments-host", Tool: tool, Target: "invoice:" + id,
		Args:     canonical.Object{{Name: "amount_minor", Value: int64(1299)}, {Name: "note", Value: "x"}},
		Envelope: []byte(`{"v":1}`), Digest: hex.EncodeToString(d[:]), Status: queue.StatusPending,
		ApprovalsRequired: 1, GrantTTL: 2 * time.Minute, CreatedAt: created, DecideBy: created.Add(time.Hour),
	}
}

// update runs fn in one queue transaction and fails the test on error.
func update(t *testing.T, s Stores, fn func(tx queue.Tx) error) {
	t.Helper()
	if err := s.Queue.Update(context.Background(), fn); err != nil {
		t.Fatalf("Update: %v", err)
	}
}

// insert stores calls, each in a transaction of its own.
func insert(t *testing.T, s Stores, calls ...*queue.Call) {
	t.Helper()
	for _, c := range calls {
		update(t, s, func(tx queue.Tx) error { return tx.InsertCall(c) })
	}
}

// entry is an audit entry of kind for call id at time at.
func entry(kind, id string, at time.Time) *audit.Entry {
	return &audit.Entry{Time: audit.FormatTime(at), Kind: kind, CallID: id, Principal: "storetest",
		Channel: audit.ChannelAPI, Details: map[string]any{"n": int64(1)}}
}

// queueTx is queue.Tx, short for the cases.
type queueTx = queue.Tx

var errRollback = errors.New("storetest: roll back")
