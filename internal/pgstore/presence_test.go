package pgstore_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/pgstore"
	"github.com/countersign/countersign/internal/pgtest"
	"github.com/countersign/countersign/internal/queue"
)

// presenceReplica is a pool with a listening presence.
type presenceReplica struct {
	d       *pgstore.DB
	l       *pgstore.Listener
	p       *pgstore.Presence
	stop    context.CancelFunc
	changed chan string
}

func listenPresence(t *testing.T, url string, refresh time.Duration) *presenceReplica {
	t.Helper()
	d, err := pgstore.Open(context.Background(), url, pgstore.Options{MaxConns: 4, PresenceRefresh: refresh})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	l, err := d.Listen(ctx, func(queue.Event) {}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	r := &presenceReplica{d: d, l: l, p: l.Presence(), stop: cancel, changed: make(chan string, 10000)}
	r.p.OnChange(func(id string) {
		select {
		case r.changed <- id:
		default:
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for !l.Connected() {
		if time.Now().After(deadline) {
			t.Fatal("the listener never connected")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return r
}

// await waits, change by change, until ok holds of the replica's view of
// the others.
func (r *presenceReplica) await(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for !ok() {
		select {
		case <-r.changed:
		case <-deadline:
			t.Fatalf("never: %s", what)
		}
	}
}

func (r *presenceReplica) others(call string, want ...string) func() bool {
	return func() bool { return slices.Equal(r.p.Others(call), want) }
}

// Replicas hear each other's viewers as they change; a replica that starts
// later asks for them and hears them at once; a replica that stops says
// goodbye and its viewers are forgotten; messages too big for one
// notification are split. The refresh is an hour, so nothing here is a
// restatement.
func TestPresenceAcrossReplicas(t *testing.T) {
	url := pgtest.Database(t)
	a, b := listenPresence(t, url, time.Hour), listenPresence(t, url, time.Hour)
	a.p.Viewing("call_1", []string{"olivia", "adam", "olivia"})
	b.await(t, "B hears A's viewers", b.others("call_1", "adam", "olivia"))
	if got := a.p.Others("call_1"); len(got) != 0 {
		t.Errorf("A counts its own viewers among the others: %v", got)
	}
	b.p.Viewing("call_1", []string{"bob"})
	a.await(t, "A hears B's viewer", a.others("call_1", "bob"))
	b.await(t, "B still has A's viewers beside its own", b.others("call_1", "adam", "olivia"))

	// A late replica asks, and hears both at once (not after an hour).
	c := listenPresence(t, url, time.Hour)
	c.await(t, "C hears A and B on starting", c.others("call_1", "adam", "bob", "olivia"))

	// A viewer leaving.
	a.p.Viewing("call_1", []string{"olivia"})
	c.await(t, "C hears adam leave", c.others("call_1", "bob", "olivia"))

	// Many calls, and one call with more names than a notification holds:
	// every call is heard, the crowded one with the names that fit.
	long := strings.Repeat("x", 56)
	for i := range 300 {
		a.p.Viewing(fmt.Sprintf("call_many_%03d", i), []string{fmt.Sprintf("%s-%03d", long, i)})
	}
	var crowd []string
	for i := range 150 {
		crowd = append(crowd, fmt.Sprintf("%s-%03d", long, i))
	}
	a.p.Viewing("call_crowded", crowd)
	b.await(t, "B hears all 300 calls and the crowded one", func() bool {
		for i := range 300 {
			if len(b.p.Others(fmt.Sprintf("call_many_%03d", i))) != 1 {
				return false
			}
		}
		return len(b.p.Others("call_crowded")) > 0
	})
	if n := len(b.p.Others("call_crowded")); n >= 150 {
		t.Errorf("the crowded call has all %d names in one notification, which PostgreSQL refuses over 8000 bytes", n)
	}
	if !a.l.Connected() || !b.l.Connected() {
		t.Error("a listener dropped its connection")
	}

	// A stops: its goodbye makes B and C forget its viewers at once.
	a.stop()
	<-a.l.Done()
	b.await(t, "B forgets A's viewers after its goodbye", func() bool {
		return slices.Equal(b.p.Others("call_1"), nil) && len(b.p.Others("call_crowded")) == 0
	})
	c.await(t, "C forgets A's viewers after its goodbye", c.others("call_1", "bob"))
}

// A replica killed says nothing more: the others forget its viewers once
// it has been silent for its stated lifetime (three of its refreshes),
// while the viewers of a replica that keeps restating them stay past
// their lifetime. (C's lifetime, 6 s, is wide so that a slow machine
// cannot miss a restatement.)
func TestPresenceOfAKilledReplicaExpires(t *testing.T) {
	url := pgtest.Database(t)
	a, b, c := listenPresence(t, url, 100*time.Millisecond), listenPresence(t, url, time.Hour), listenPresence(t, url, time.Second)
	c.p.Viewing("call_1", []string{"carol"})
	b.await(t, "B hears C", b.others("call_1", "carol"))
	heard := time.Now()
	a.p.Viewing("call_1", []string{"olivia"})
	b.await(t, "B hears A and C", b.others("call_1", "carol", "olivia"))
	a.d.Close() // nothing leaves A any more, not even a goodbye
	a.stop()
	b.await(t, "B forgets the killed A's viewer", b.others("call_1", "carol"))
	// C's viewer outlives its first statement's lifetime: C restated it.
	for time.Since(heard) < 5*time.Second {
		if got := b.p.Others("call_1"); !slices.Equal(got, []string{"carol"}) {
			t.Fatalf("C's viewer was forgotten while C refreshes: %v", got)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
