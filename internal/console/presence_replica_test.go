package console

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/gorilla/websocket"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/pgstore"
	"github.com/countersign/countersign/internal/pgtest"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/testkit"
)

// presenceReplica is a console on a pool of its own with the listener
// that shares its call pages' viewers.
type presenceReplica struct {
	*replicaConsole
	d    *pgstore.DB
	stop context.CancelFunc // ends the listener
	env  *consoleEnv        // for browsers on this console
}

func startPresenceReplica(t *testing.T, url string, clock *testkit.Clock, refresh time.Duration) *presenceReplica {
	t.Helper()
	d, err := pgstore.Open(context.Background(), url, pgstore.Options{MaxConns: 8, PresenceRefresh: refresh})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st := replicaStores{d.Store(), d.Store(), d.Accounts(), d, d.Ping}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	r := startReplicaConsole(t, st, clock, func(c *envConfig) {
		l, err := d.Listen(ctx, c.Queue.Apply, quiet)
		if err != nil {
			t.Fatal(err)
		}
		c.Live, c.Console.Presence = l, l.Presence()
	})
	return &presenceReplica{replicaConsole: r, d: d, stop: cancel, env: &consoleEnv{t: t, clock: clock, url: r.url, c: r.c}}
}

// presenceViewers reads socket messages until a presence fragment names
// exactly want (sorted), and fails after a while.
func presenceViewers(t *testing.T, conn *websocket.Conn, want ...string) {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	var last []string
	for {
		_, msg, err := conn.ReadMessage()
		if err != nil {
			t.Fatalf("waiting for the viewers %v (last told %v): %v", want, last, err)
		}
		doc := fragmentDoc(t, string(msg)).Find(`#presence`)
		if doc.Length() == 0 {
			continue
		}
		var names []string
		doc.Last().Find(`[data-viewer]`).Each(func(_ int, s *goquery.Selection) {
			n, _ := s.Attr("data-viewer")
			names = append(names, n)
		})
		if slices.Equal(names, want) {
			return
		}
		last = names
	}
}

// TestCallPresenceAcrossReplicas: two consoles on one PostgreSQL database,
// one operator on each with the same call page open: each page names both.
// One closing the page is told to the other at once; a replica killed (it
// can say nothing more) has its viewers forgotten once it falls silent.
func TestCallPresenceAcrossReplicas(t *testing.T) {
	url := pgtest.Database(t)
	clock := newConsoleClock()
	const refresh = 150 * time.Millisecond
	a := startPresenceReplica(t, url, clock, refresh)
	b := startPresenceReplica(t, url, clock, refresh)
	ctx := context.Background()
	for _, name := range []string{"olivia", "adam"} {
		if _, err := a.c.accounts.AddUser(ctx, name, account.RoleOperator, cheapHash(t, rolePassword), "test", audit.ChannelCLI); err != nil {
			t.Fatal(err)
		}
	}
	agent := queue.Principal{Actor: "agent:billing-bot", Audience: "payments-host"}
	call, _, err := a.c.q.Submit(ctx, agent, []byte(conRefundBody))
	if err != nil {
		t.Fatal(err)
	}
	olivia, adam := a.env.browser(), b.env.browser()
	olivia.login("olivia", rolePassword)
	adam.login("adam", rolePassword)

	oc, _ := olivia.mustDial("/ws?call=" + call.ID)
	presenceViewers(t, oc, "olivia")
	ac, _ := adam.mustDial("/ws?call=" + call.ID)
	// adam's page on B names olivia on A, and olivia's page hears of adam.
	presenceViewers(t, ac, "adam", "olivia")
	presenceViewers(t, oc, "adam", "olivia")

	// Another call's page on A hears nothing of adam.
	other, _, err := a.c.q.Submit(ctx, agent,
		[]byte(`{"tool":"payments.refund","target":"invoice:INV-1043","args":{"amount_minor":100,"currency":"USD","reason_code":"duplicate"}}`))
	if err != nil {
		t.Fatal(err)
	}
	xc, _ := olivia.mustDial("/ws?call=" + other.ID)
	presenceViewers(t, xc, "olivia")
	xc.Close()

	// adam leaves: olivia's page on A says she is alone.
	ac.Close()
	presenceViewers(t, oc, "olivia")

	// adam comes back on B; then A is killed: it can tell nobody, so B
	// forgets olivia once A has been silent for its presence's lifetime.
	ac, _ = adam.mustDial("/ws?call=" + call.ID)
	presenceViewers(t, ac, "adam", "olivia")
	a.d.Close() // nothing more leaves A, not even its goodbye
	a.stop()
	presenceViewers(t, ac, "adam")
}
