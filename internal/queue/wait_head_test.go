package queue_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/db"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/testkit"
	"github.com/countersign/countersign/internal/testkit/sqlitekit"
)

// readCounter is the database's store counting its reads of whole calls
// outside a write, and the heads it has read.
type readCounter struct {
	db.Store
	calls, heads atomic.Int64
}

func (s *readCounter) CallHead(ctx context.Context, id string) (queue.CallHead, error) {
	h, err := s.Store.CallHead(ctx, id)
	s.heads.Add(1)
	return h, err
}

func (s *readCounter) Call(ctx context.Context, id string) (*queue.Call, error) {
	s.calls.Add(1)
	return s.Store.Call(ctx, id)
}

// TestLongPollReadsTheHeadOfAPendingCall: a long-poll of a pending call
// reads its status and owner only (db's CallHead) before it waits, and is
// answered with the whole call by the decision that wakes it; a decided
// call, another token's, one not found and a poll that does not wait are
// answered as a read of the whole call answers them.
func TestLongPollReadsTheHeadOfAPendingCall(t *testing.T) {
	var st *readCounter
	k := sqlitekit.NewQueue(t, sqlitekit.WithConfig(func(cfg *queue.Config) {
		st = &readCounter{Store: cfg.Store.(db.Store)}
		cfg.Store = st
	}))
	testkit.SeedUsers(t, k.DB.Accounts(), account.RoleOperator, "alice")
	e := &env{clock: k.Clock, db: k.DB, q: k.Service}
	ctx := context.Background()
	c := submitRefund(t, e)

	waited := make(chan *queue.Call, 1)
	go func() {
		got, err := e.q.Wait(ctx, agent, c.ID, time.Minute)
		if err != nil {
			t.Error(err)
		}
		waited <- got
	}()
	// The long-poll is registered before it reads the head: approving
	// before the head was read would answer it from a decided call.
	for st.heads.Load() < 1 {
		time.Sleep(100 * time.Microsecond)
	}
	// The approval takes the call as submitted for its hint (as the
	// console's page gives it), so it reads nothing outside its write.
	if _, err := e.q.ApproveWith(ctx, queue.ApproveInput{Operator: "alice", Channel: audit.ChannelWeb, CallID: c.ID,
		Digest: c.Digest, Seen: c}); err != nil {
		t.Fatal(err)
	}
	got := <-waited
	if got.Status != queue.StatusApproved || got.Grant == "" || got.Args == nil {
		t.Fatalf("woken with status %s, grant %q, args %v: want the approved call", got.Status, got.Grant, got.Args)
	}
	if n := st.calls.Load(); n != 0 {
		t.Errorf("a long-poll of a pending call read the whole call %d times, want 0 (its head only)", n)
	}

	// Decided: the whole call at once.
	if got, err := e.q.Wait(ctx, agent, c.ID, time.Minute); err != nil || got.Status != queue.StatusApproved || got.Grant == "" {
		t.Errorf("Wait on an approved call = %v, %v", got, err)
	}
	// Another actor's call, and a missing one: not found.
	other := submitRefund(t, e)
	if _, err := e.q.Wait(ctx, queue.Principal{Actor: "agent:b", Audience: agent.Audience}, other.ID, time.Minute); !errors.Is(err, queue.ErrNotFound) {
		t.Errorf("Wait as another actor = %v, want ErrNotFound", err)
	}
	if _, err := e.q.Wait(ctx, agent, "call_missing", time.Minute); !errors.Is(err, queue.ErrNotFound) {
		t.Errorf("Wait on a missing call = %v, want ErrNotFound", err)
	}
	// A poll that does not wait answers the pending call whole.
	if got, err := e.q.Wait(ctx, agent, other.ID, 0); err != nil || got.Status != queue.StatusPending || got.Args == nil {
		t.Errorf("Wait 0 = %v, %v: want the pending call", got, err)
	}
}

// headGate is the database's store whose head reads say they began on
// reached and wait for open.
type headGate struct {
	db.Store
	reached, open chan struct{}
}

func (s *headGate) CallHead(ctx context.Context, id string) (queue.CallHead, error) {
	s.reached <- struct{}{}
	<-s.open
	return s.Store.CallHead(ctx, id)
}

// TestWaitingCountsLongPollsThatReadTheirCall: Waiting counts a long-poll
// once it has read its call pending, not while the read is under way, so
// a decision made after Waiting counts it is delivered by the wake.
func TestWaitingCountsLongPollsThatReadTheirCall(t *testing.T) {
	gate := &headGate{reached: make(chan struct{}, 1), open: make(chan struct{})}
	k := sqlitekit.NewQueue(t, sqlitekit.WithConfig(func(cfg *queue.Config) {
		gate.Store = cfg.Store.(db.Store)
		cfg.Store = gate
	}))
	e := &env{clock: k.Clock, db: k.DB, q: k.Service}
	c := submitRefund(t, e)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.q.Wait(ctx, agent, c.ID, time.Minute)
	}()
	<-gate.reached // registered, and reading the head
	if n := e.q.Waiting(); n != 0 {
		t.Errorf("Waiting = %d while the long-poll's read is under way, want 0", n)
	}
	close(gate.open)
	for e.q.Waiting() < 1 {
		time.Sleep(100 * time.Microsecond)
	}
	cancel()
	<-done
	if n := e.q.Waiting(); n != 0 {
		t.Errorf("Waiting = %d after the long-poll ended, want 0", n)
	}
}
