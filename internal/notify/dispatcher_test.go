package notify_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/notify"
	"github.com/countersign/countersign/internal/notify/outboxtest"
	"github.com/countersign/countersign/internal/queue"
)

// recorder is a channel that records what it is sent, and can be made to
// block or fail.
type recorder struct {
	mu      sync.Mutex
	got     []notify.Message
	at      []time.Time
	block   chan struct{} // when not nil, Send waits on it or ctx
	started chan string
	err     error
	sent    chan string
}

func newRecorder() *recorder {
	return &recorder{started: make(chan string, 100), sent: make(chan string, 100)}
}

func (r *recorder) Send(ctx context.Context, m notify.Message) (string, error) {
	r.started <- m.Event.ID
	if r.block != nil {
		select {
		case <-r.block:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return "", r.err
	}
	r.got = append(r.got, m)
	r.at = append(r.at, time.Now())
	r.sent <- m.Event.ID
	return "", nil
}

func event(id, call string, at time.Time) queue.Notice {
	at = at.Truncate(time.Millisecond) // as stores keep it
	body := fmt.Sprintf(`{"id":%q,"type":"call.submitted","timestamp":%q,"data":{"id":%q,"tool":"t","url":"u"}}`, id, at.Format(time.RFC3339), call)
	return queue.Notice{EventID: id, Kind: notify.CallSubmitted, Channel: "rec", CallID: call, Body: []byte(body), At: at, DueAt: at}
}

func waitFor(t *testing.T, ch <-chan string, what string) string {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		return ""
	}
}

func TestRunWakesOnKickAndSleepsUntilDue(t *testing.T) {
	out := outboxtest.NewMemory()
	rec := newRecorder()
	d := notify.NewDispatcher(notify.DispatcherConfig{Outbox: out, Channels: map[string]notify.Channel{"rec": rec},
		IdleWake: time.Hour, Logger: quiet})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	// Nothing is due: Run sleeps (IdleWake is an hour). A commit kicks it.
	now := time.Now().UTC()
	out.Enqueue(event("evt_1", "call_1", now))
	d.Kick()
	if got := waitFor(t, rec.sent, "the kicked delivery"); got != "evt_1" {
		t.Fatalf("sent %s", got)
	}
	// A row due shortly is sent by the timer, without a kick.
	out.Enqueue(event("evt_2", "call_2", now.Add(300*time.Millisecond)))
	d.Kick() // wakes Run to compute the new due time
	if got := waitFor(t, rec.sent, "the scheduled delivery"); got != "evt_2" {
		t.Fatalf("sent %s", got)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if due := out.Rows()[1].DueAt; rec.at[1].Before(due) {
		t.Fatalf("sent at %s, before it was due at %s", rec.at[1], due)
	}
}

func TestShutdownDuringASendLeavesTheRowDueAtOnce(t *testing.T) {
	out := outboxtest.NewMemory()
	rec := newRecorder()
	rec.block = make(chan struct{})
	d := notify.NewDispatcher(notify.DispatcherConfig{Outbox: out, Channels: map[string]notify.Channel{"rec": rec}, Logger: quiet})
	out.Enqueue(event("evt_1", "call_1", time.Now().UTC()))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	waitFor(t, rec.started, "the send to start")
	cancel()
	<-done
	r := out.Rows()[0]
	if r.State != notify.StatePending || r.LeaseOwner != "" || !strings.Contains(r.LastError, "interrupted by shutdown") ||
		r.DueAt.After(time.Now()) {
		t.Fatalf("after shutdown: %+v", r)
	}
	// The next process sends it at once, not after the lease.
	rec.block = nil
	d2 := notify.NewDispatcher(notify.DispatcherConfig{Outbox: out, Channels: map[string]notify.Channel{"rec": rec}, Logger: quiet})
	if n, err := d2.Dispatch(context.Background()); n != 1 || err != nil {
		t.Fatalf("Dispatch = %d, %v", n, err)
	}
	if r := out.Rows()[0]; r.State != notify.StateDelivered || r.Attempts != 2 {
		t.Fatalf("after restart: %+v", r)
	}
}

func TestUnknownChannelsAndBadBodiesAreDead(t *testing.T) {
	out := outboxtest.NewMemory()
	d := notify.NewDispatcher(notify.DispatcherConfig{Outbox: out, Channels: map[string]notify.Channel{"rec": newRecorder()}, Logger: quiet})
	now := time.Now().UTC()
	gone := event("evt_1", "call_1", now)
	gone.Channel = "removed"
	bad := event("evt_2", "call_2", now)
	bad.Body = []byte(`{"id":"evt_2","type":"call.nonsense"}`)
	out.Enqueue(gone, bad)
	d.Dispatch(context.Background())
	for _, r := range out.Rows() {
		if r.State != notify.StateDead {
			t.Fatalf("%s: %s %q, want dead", r.EventID, r.State, r.LastError)
		}
	}
	if r := out.Rows()[0]; !strings.Contains(r.LastError, `no channel named "removed"`) {
		t.Fatalf("error %q", r.LastError)
	}
}

// TestTwoDispatchersDeliverEachRowOnce races two dispatchers, as two
// replicas would, over one outbox.
func TestTwoDispatchersDeliverEachRowOnce(t *testing.T) {
	out := outboxtest.NewMemory()
	rec := newRecorder()
	rec.sent = make(chan string, 1000)
	rec.started = make(chan string, 1000)
	now := time.Now().UTC()
	for i := 0; i < 300; i++ {
		out.Enqueue(event(fmt.Sprintf("evt_%03d", i), fmt.Sprintf("call_%d", i%17), now.Add(time.Duration(i)*time.Microsecond)))
	}
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		d := notify.NewDispatcher(notify.DispatcherConfig{Outbox: out, Channels: map[string]notify.Channel{"rec": rec},
			Owner: fmt.Sprintf("replica-%d", i), Batch: 5, Workers: 3, Logger: quiet})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n, err := d.Dispatch(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				if n == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	seen := map[string]int{}
	perCall := map[string][]string{}
	for _, m := range rec.got {
		seen[m.Event.ID]++
		perCall[m.Event.Data.ID] = append(perCall[m.Event.Data.ID], m.Event.ID)
	}
	if len(seen) != 300 || len(rec.got) != 300 {
		t.Fatalf("%d sends of %d events, want each of 300 once", len(rec.got), len(seen))
	}
	for call, ids := range perCall {
		for i := 1; i < len(ids); i++ {
			if ids[i] < ids[i-1] {
				t.Fatalf("%s: events out of order: %v", call, ids)
			}
		}
	}
}

// leaseThief takes a row over while its first owner is still sending.
type leaseThief struct {
	*outboxtest.Memory
}

func (l leaseThief) Finish(ctx context.Context, owner string, r notify.Result) error {
	// Another dispatcher claimed the row after the lease ran out.
	l.Memory.Claim(ctx, "thief", time.Now().Add(time.Hour), time.Hour, 10)
	return l.Memory.Finish(ctx, owner, r)
}

func TestALostLeaseKeepsTheNewOwnersResult(t *testing.T) {
	out := leaseThief{outboxtest.NewMemory()}
	d := notify.NewDispatcher(notify.DispatcherConfig{Outbox: out, Channels: map[string]notify.Channel{"rec": newRecorder()}, Logger: quiet})
	out.Enqueue(event("evt_1", "call_1", time.Now().UTC()))
	d.Dispatch(context.Background())
	r := out.Rows()[0]
	if r.State != notify.StatePending || r.LeaseOwner != "thief" || r.Attempts != 0 {
		t.Fatalf("row %+v: the first owner's late result must not overwrite the thief's lease", r)
	}
	if err := out.Memory.Finish(context.Background(), "test", notify.Result{Seq: r.Seq, Delivered: true}); !errors.Is(err, notify.ErrLeaseLost) {
		t.Fatalf("Finish = %v", err)
	}
}
