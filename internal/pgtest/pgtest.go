// Package pgtest starts throwaway PostgreSQL servers for tests: one shared
// cluster per test binary, a fresh database per test, and clusters of their
// own for tests that stop and restart the server.
//
// A cluster is made with the system's initdb and pg_ctl in a temporary
// folder, listening on a free port on 127.0.0.1 only, run as the postgres
// user when the tests run as root (the server refuses to run as root).
// COUNTERSIGN_TEST_POSTGRES, when set, names a server to use instead (a
// URL whose user may create databases); tests that must restart the server
// still start their own. Without PostgreSQL binaries the tests are skipped,
// and fail under CI=true.
//
// A package whose tests use Database must run them through Main:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/testkit"
	"github.com/jackc/pgx/v5"
)

// EnvURL names an existing PostgreSQL server for the tests to use.
const EnvURL = "COUNTERSIGN_TEST_POSTGRES"

// binDirs are searched, in order, for initdb and pg_ctl.
var binDirs = []string{"/usr/lib/postgresql/17/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/15/bin",
	"/usr/lib/postgresql/14/bin", "/usr/local/pgsql/bin"}

// Bin returns the folder holding initdb, pg_ctl and postgres, or "" when
// there is none.
func Bin() string {
	for _, d := range binDirs {
		if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err == nil {
			return d
		}
	}
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		return filepath.Dir(p)
	}
	return ""
}

// Missing skips the test when PostgreSQL cannot be had here, or fails it
// under CI=true, where every test must run.
func Missing(tb testing.TB, why string) {
	tb.Helper()
	testkit.Need(tb, "PostgreSQL is needed: "+why+" (apt-get install -y postgresql, or set "+EnvURL+")")
}

var shared struct {
	mu      sync.Mutex
	main    bool // Main is running the tests
	cluster *Cluster
	admin   string // URL of the maintenance database
	err     error
	n       int
}

// Main runs the tests and then stops the shared cluster, if one was
// started. Use it from TestMain in every package that calls Database.
func Main(m *testing.M) int {
	shared.mu.Lock()
	shared.main = true
	shared.mu.Unlock()
	code := m.Run()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.cluster != nil {
		if err := shared.cluster.stop("immediate"); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: stop the shared cluster: %v\n", err)
		}
		shared.cluster.remove()
		shared.cluster = nil
	}
	return code
}

// Database creates a fresh, empty database for the test on the shared
// cluster (started on first use) and returns its URL. It is dropped when
// the test ends.
func Database(tb testing.TB) string {
	tb.Helper()
	admin := sharedAdmin(tb)
	if admin == "" {
		Missing(tb, "no initdb and pg_ctl on this machine")
	}
	shared.mu.Lock()
	shared.n++
	name := fmt.Sprintf("t%d_%s", shared.n, randHex(4))
	shared.mu.Unlock()
	return createDatabase(tb, admin, name)
}

func sharedAdmin(tb testing.TB) string {
	tb.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.main {
		tb.Fatal("pgtest: run this package's tests through pgtest.Main: func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }")
	}
	if shared.admin != "" {
		return shared.admin
	}
	if shared.err != nil {
		if Bin() == "" {
			return ""
		}
		tb.Fatalf("pgtest: the shared cluster did not start: %v", shared.err)
	}
	if u := os.Getenv(EnvURL); u != "" {
		shared.admin = u
		return u
	}
	if Bin() == "" {
		shared.err = errors.New("no initdb and pg_ctl on this machine")
		return ""
	}
	c, err := startCluster()
	if err != nil {
		shared.err = err
		tb.Fatalf("pgtest: %v", err)
	}
	shared.cluster = c
	shared.admin = c.URL("postgres")
	return shared.admin
}

func createDatabase(tb testing.TB, admin, name string) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		tb.Fatalf("pgtest: connect to %s: %v", redact(admin), err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize()+` TEMPLATE template0 ENCODING 'UTF8'`); err != nil {
		tb.Fatalf("pgtest: create database %s: %v", name, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			return // the server is gone; so is the database with it
		}
		defer conn.Close(ctx)
		_, _ = conn.Exec(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{name}.Sanitize()+` WITH (FORCE)`)
	})
	u, err := url.Parse(admin)
	if err != nil {
		tb.Fatalf("pgtest: %s: %v", EnvURL, err)
	}
	u.Path = "/" + name
	return u.String()
}

// Cluster is a PostgreSQL server of the tests' own, in a temporary folder.
type Cluster struct {
	bin, dir string
	port     int
	asUser   string // run the server's commands as this user ("" for ourselves)
	mu       sync.Mutex
	n        int
}

// Start starts a cluster for this test alone, stopped and removed when the
// test ends: for tests that stop, kill or restart the server.
func Start(tb testing.TB) *Cluster {
	tb.Helper()
	if Bin() == "" {
		Missing(tb, "no initdb and pg_ctl on this machine")
	}
	c, err := startCluster()
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	tb.Cleanup(func() {
		_ = c.stop("immediate")
		c.remove()
	})
	return c
}

// URL is the address of database db on the cluster.
func (c *Cluster) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, db)
}

// Database creates a fresh database on the cluster and returns its URL.
func (c *Cluster) Database(tb testing.TB) string {
	tb.Helper()
	c.mu.Lock()
	c.n++
	name := fmt.Sprintf("d%d", c.n)
	c.mu.Unlock()
	return createDatabase(tb, c.URL("postgres"), name)
}

// Stop stops the server: mode "fast" (disconnect clients, clean shutdown)
// or "immediate" (as if the machine lost power, WAL replayed on start).
func (c *Cluster) Stop(mode string) error { return c.stop(mode) }

// Start starts the stopped server again on the same port.
func (c *Cluster) Start() error { return c.start() }

// Port is the TCP port the server listens on.
func (c *Cluster) Port() int { return c.port }

func startCluster() (*Cluster, error) {
	bin := Bin()
	dir, err := os.MkdirTemp("", "countersign-pg-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{bin: bin, dir: dir}
	if os.Geteuid() == 0 {
		// The server refuses to run as root.
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("running as root and there is no postgres user to run the server as: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		c.asUser = "postgres"
	}
	out, err := c.command(filepath.Join(bin, "initdb"), "-D", c.data(), "-U", "postgres", "--auth=trust",
		"-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions").CombinedOutput()
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	// A free port: ask the kernel for one, then give it to the server. Another
	// process may take it in between; try again then.
	for attempt := 0; ; attempt++ {
		c.port, err = freePort()
		if err != nil {
			c.remove()
			return nil, err
		}
		if err = c.start(); err == nil {
			return c, nil
		}
		if attempt == 4 {
			c.remove()
			return nil, err
		}
	}
}

func (c *Cluster) data() string { return filepath.Join(c.dir, "data") }

func (c *Cluster) command(name string, args ...string) *exec.Cmd {
	if c.asUser != "" {
		return exec.Command("runuser", append([]string{"-u", c.asUser, "--", name}, args...)...)
	}
	return exec.Command(name, args...)
}

func (c *Cluster) start() error {
	// fsync is off: these servers live as long as a test binary, and a
	// lost machine loses the test run anyway. Everything else is the
	// default, READ COMMITTED included.
	opts := strings.Join([]string{
		"-c listen_addresses=127.0.0.1", "-c port=" + strconv.Itoa(c.port), "-c unix_socket_directories=''",
		"-c fsync=off", "-c full_page_writes=off", "-c max_connections=300", "-c shared_buffers=32MB",
		"-c log_min_messages=warning", "-c max_locks_per_transaction=128",
	}, " ")
	out, err := c.command(filepath.Join(c.bin, "pg_ctl"), "start", "-w", "-t", "60", "-D", c.data(),
		"-l", filepath.Join(c.dir, "server.log"), "-o", opts).CombinedOutput()
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(c.dir, "server.log"))
		return fmt.Errorf("pg_ctl start: %v\n%s\n%s", err, out, tail(log, 2000))
	}
	return nil
}

func (c *Cluster) stop(mode string) error {
	out, err := c.command(filepath.Join(c.bin, "pg_ctl"), "stop", "-w", "-t", "60", "-m", mode, "-D", c.data()).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl stop: %v\n%s", err, out)
	}
	return nil
}

func (c *Cluster) remove() { os.RemoveAll(c.dir) }

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func randHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

func redact(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "the server"
	}
	return p.Redacted()
}
