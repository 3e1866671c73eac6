package client_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/docs"
	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/db"
	"github.com/countersign/countersign/internal/grant"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/server"
	"github.com/countersign/countersign/internal/testkit"
	"github.com/countersign/countersign/internal/tools"
)

// testConsole is a real Countersign server on 127.0.0.1 over a real SQLite
// file, booted the way `console serve` boots it.
type testConsole struct {
	t      testing.TB
	url    string
	addr   string
	db     *db.DB
	queue  *queue.Service
	server *server.Server
	cancel context.CancelFunc
	done   chan error
}

// startConsole boots a console over the database in dir, listening on addr
// ("127.0.0.1:0" for any port).
func startConsole(tb testing.TB, dir, addr string) *testConsole {
	tb.Helper()
	d, err := db.Open(filepath.Join(dir, "x.db"))
	if err != nil {
		tb.Fatal(err)
	}
	keys, err := grant.OpenKeyring(filepath.Join(dir, "keys"), "countersign", time.Now)
	if err != nil {
		tb.Fatal(err)
	}
	reg, err := tools.Load("../examples/tools.yaml")
	if err != nil {
		tb.Fatal(err)
	}
	testkit.SeedUsers(tb, d.Accounts(), account.RoleOperator, "alice")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	q := queue.NewService(queue.Config{Store: d.Store(), Tools: reg, Signer: keys, Logger: log})
	srv, err := server.New(server.Config{Queue: q, Accounts: account.NewService(d.Accounts(), nil), Audit: d, Ping: d.Ping, Keys: keys, Logger: log, OpenAPI: docs.OpenAPI})
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tc := &testConsole{t: tb, url: "http://" + ln.Addr().String(), addr: ln.Addr().String(), db: d, queue: q,
		server: srv, cancel: cancel, done: make(chan error, 1)}
	go q.Run(ctx)
	go func() { tc.done <- srv.Serve(ctx, ln) }()
	tb.Cleanup(tc.stop)
	return tc
}

// stop shuts the server down gracefully and closes its database.
func (tc *testConsole) stop() {
	if tc.cancel == nil {
		return
	}
	tc.cancel()
	select {
	case err := <-tc.done:
		if err != nil {
			tc.t.Errorf("server: %v", err)
		}
	case <-time.After(30 * time.Second):
		tc.t.Errorf("server did not shut down within 30s")
	}
	tc.db.Close()
	tc.cancel = nil
}

// token creates an API token for (actor, audience).
func (tc *testConsole) token(actor, audience string) string {
	tc.t.Helper()
	_, secret, err := accountsOf(tc.db).CreateToken(context.Background(), actor, audience, "", "test", audit.ChannelCLI)
	if err != nil {
		tc.t.Fatal(err)
	}
	return secret
}

// waitForWaiters blocks until n long-polls are open on the console.
func (tc *testConsole) waitForWaiters(n int64) {
	tc.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for tc.queue.Waiting() < n {
		if time.Now().After(deadline) {
			tc.t.Fatalf("Waiting()=%d, want %d", tc.queue.Waiting(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// countingTransport counts requests and transport errors.
type countingTransport struct {
	requests atomic.Int64
	failures atomic.Int64
	next     http.RoundTripper
}

func (ct *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	ct.requests.Add(1)
	res, err := ct.next.RoundTrip(r)
	if err != nil {
		ct.failures.Add(1)
	}
	return res, err
}

func newCountingClient() (*http.Client, *countingTransport) {
	ct := &countingTransport{next: http.DefaultTransport.(*http.Transport).Clone()}
	return &http.Client{Transport: ct}, ct
}

// accountsOf is the account service over d.
func accountsOf(d *db.DB) *account.Service { return account.NewService(d.Accounts(), nil) }
