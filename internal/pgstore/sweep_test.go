package pgstore_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/grant"
	"github.com/countersign/countersign/internal/pgtest"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/testkit"
	"github.com/countersign/countersign/internal/tools"
)

// One replica at a time sweeps: the lock is refused to a second while the
// first holds it, and replicas sweeping together expire each call once.
func TestOneSweeperAtATime(t *testing.T) {
	url := pgtest.Database(t)
	a, b := mustOpen(t, url), mustOpen(t, url)
	ctx := context.Background()
	release, ok, err := a.Store().TrySweep(ctx)
	if err != nil || !ok {
		t.Fatalf("first TrySweep = %t %v", ok, err)
	}
	if _, ok, err := b.Store().TrySweep(ctx); err != nil || ok {
		t.Fatalf("TrySweep while another replica sweeps = %t %v, want refused", ok, err)
	}
	release()
	release2, ok, err := b.Store().TrySweep(ctx)
	if err != nil || !ok {
		t.Fatalf("TrySweep after the release = %t %v", ok, err)
	}
	release2()

	clock := testkit.NewClock(time.Now().UTC().Truncate(time.Millisecond))
	keys, err := grant.OpenKeyring(filepath.Join(t.TempDir(), "keys"), "countersign", clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.Parse([]byte(listenTools))
	if err != nil {
		t.Fatal(err)
	}
	var qs []*queue.Service
	for _, st := range []queue.Store{a.Store(), b.Store(), mustOpen(t, url).Store()} {
		qs = append(qs, queue.NewService(queue.Config{Store: st, Tools: reg, Signer: keys, Now: clock.Now}))
	}
	agent := queue.Principal{Actor: "agent:a", Audience: "payments-host"}
	const n = 20
	for i := 0; i < n; i++ {
		if _, _, err := qs[0].Submit(ctx, agent, []byte(fmt.Sprintf(`{"tool":"payments.refund","target":"invoice:INV-%d","args":{"amount_minor":5}}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(16 * time.Minute)
	var mu sync.Mutex
	total := 0
	var wg sync.WaitGroup
	for round := 0; round < 5; round++ {
		for _, q := range qs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				k, err := q.ExpireDue(ctx)
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				total += k
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	if total != n {
		t.Fatalf("%d expiries by the sweeping replicas, want each of the %d calls expired once", total, n)
	}
	if pending, err := a.Store().PendingCalls(ctx, 100); err != nil || len(pending) != 0 {
		t.Fatalf("pending after the sweeps: %d %v", len(pending), err)
	}
}
