package console

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/db"
	"github.com/countersign/countersign/internal/grant"
	"github.com/countersign/countersign/internal/pgstore"
	"github.com/countersign/countersign/internal/pgtest"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/server"
	"github.com/countersign/countersign/internal/testkit"
	"github.com/countersign/countersign/internal/tools"
)

// replicaStores is one handle on a database shared by several consoles.
type replicaStores struct {
	queue    queue.Store
	history  queue.History
	accounts account.Store
	trail    audit.Trail
	ping     func(context.Context) error
}

// sqliteReplica opens another handle on the SQLite file at path.
func sqliteReplica(tb testing.TB, path string) replicaStores {
	tb.Helper()
	d, err := db.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { d.Close() })
	return replicaStores{d.Store(), d.Store(), d.Accounts(), d, d.Ping}
}

// pgReplica opens another pool on the PostgreSQL database at url.
func pgReplica(tb testing.TB, url string) replicaStores {
	tb.Helper()
	d, err := pgstore.Open(context.Background(), url, pgstore.Options{MaxConns: 8})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { d.Close() })
	return replicaStores{d.Store(), d.Store(), d.Accounts(), d, d.Ping}
}

// replicaConsole is one console server on 127.0.0.1 over st, with keys of
// its own and the shared clock.
type replicaConsole struct {
	url string
	c   *Console
}

// adjust may change the configuration before the server is made (its
// Console is set).
func startReplicaConsole(tb testing.TB, st replicaStores, clock *testkit.Clock, adjust ...func(*envConfig)) *replicaConsole {
	tb.Helper()
	reg, err := tools.Load("../../examples/tools.yaml")
	if err != nil {
		tb.Fatal(err)
	}
	keys, err := grant.OpenKeyring(filepath.Join(tb.TempDir(), "keys"), "countersign", clock.Now)
	if err != nil {
		tb.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	q := queue.NewService(queue.Config{Store: st.queue, Tools: reg, Signer: keys, Now: clock.Now, Logger: log})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	cfg := envConfig{Config: server.Config{Queue: q, Accounts: account.NewService(st.accounts, clock.Now), Audit: st.trail,
		Ping: st.ping, Keys: keys, Logger: log, Now: clock.Now, PublicURL: url}, Console: Config{PublicURL: url, SweepInterval: time.Hour}}
	for _, f := range adjust {
		f(&cfg)
	}
	// The console's own goroutines (its socket hub, the session sweep)
	// run as on a real replica: ending a session talks to the hub.
	_, c, done, ran, cancel := serveStack(tb, ln, cfg.Config, cfg.Console, st.history)
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("Serve: %v", err)
		}
		<-ran
	})
	return &replicaConsole{url: url, c: c}
}

var csrfInput = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// rawLoginForm fetches the login form from base and returns its cookie
// header and token.
func rawLoginForm(t *testing.T, base string) (cookie, token string) {
	t.Helper()
	res, err := http.Get(base + "/login")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(res.Body)
	res.Body.Close()
	m := csrfInput.FindSubmatch(page)
	if m == nil {
		t.Fatalf("no login form token on %s", base)
	}
	for _, c := range res.Cookies() {
		cookie += c.Name + "=" + c.Value + "; "
	}
	return cookie, string(m[1])
}

// TestLoginThrottleAcrossReplicas: 100 wrong logins for one account sent
// at once, spread over three consoles sharing one database (SQLite: three
// handles on one file; PostgreSQL: three pools), have exactly the policy's
// number of passwords checked between them; the right password then waits
// on every console. The clock does not move.
func TestLoginThrottleAcrossReplicas(t *testing.T) {
	for _, engine := range []struct {
		name string
		open func(t *testing.T) func() replicaStores
	}{
		{"sqlite", func(t *testing.T) func() replicaStores {
			path := filepath.Join(t.TempDir(), "countersign.db")
			return func() replicaStores { return sqliteReplica(t, path) }
		}},
		{"postgres", func(t *testing.T) func() replicaStores {
			url := pgtest.Database(t)
			return func() replicaStores { return pgReplica(t, url) }
		}},
	} {
		t.Run(engine.name, func(t *testing.T) {
			open := engine.open(t)
			clock := newConsoleClock()
			var replicas []*replicaConsole
			var checked atomic.Int64
			for range 3 {
				st := open()
				r := startReplicaConsole(t, st, clock)
				r.c.verify = func(hash, pw string) error {
					checked.Add(1)
					return account.Verify(hash, pw)
				}
				replicas = append(replicas, r)
			}
			if _, err := replicas[0].c.accounts.AddUser(context.Background(), "olivia", account.RoleOperator,
				cheapHash(t, rolePassword), "test", audit.ChannelCLI); err != nil {
				t.Fatal(err)
			}
			// One form, as an attacker would fetch it: the consoles share
			// their cookie keys through the database.
			cookie, token := rawLoginForm(t, replicas[0].url)
			const n = 100
			statuses := make([]int, n)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					statuses[i] = rawLogin(replicas[i%3].url, cookie, token, "olivia", "wrong password")
				}()
			}
			close(start)
			wg.Wait()
			counts := map[int]int{}
			for _, s := range statuses {
				counts[s]++
			}
			allowed := account.AccountPolicy.Free + 1
			if got := checked.Load(); got != int64(allowed) {
				t.Errorf("passwords checked on the three consoles = %d, want %d (the policy's allowance at one instant)", got, allowed)
			}
			if counts[http.StatusUnauthorized] != allowed || counts[http.StatusTooManyRequests] != n-allowed {
				t.Errorf("statuses = %v, want %d × 401 and %d × 429", counts, allowed, n-allowed)
			}
			before := checked.Load()
			for i, r := range replicas {
				if s := rawLogin(r.url, cookie, token, "olivia", rolePassword); s != http.StatusTooManyRequests {
					t.Errorf("right password on console %d while throttled = %d, want 429", i, s)
				}
			}
			if checked.Load() != before {
				t.Error("a throttled attempt had its password checked")
			}
			// Once the wait is over, the right password logs in on any of them.
			clock.Advance(account.AccountPolicy.Base)
			if s := rawLogin(replicas[2].url, cookie, token, "olivia", rolePassword); s != http.StatusSeeOther {
				t.Errorf("right password after the wait = %d, want 303", s)
			}
		})
	}
}
