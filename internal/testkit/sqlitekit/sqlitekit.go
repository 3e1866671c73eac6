// Package sqlitekit builds what most tests above the store start from: a
// queue Service over a real SQLite file, with its keyring and tools, on a
// testkit.Clock. It is apart from testkit because it imports internal/db,
// whose own tests import testkit. Only tests import it.
package sqlitekit

import (
	"io"
	"log/slog"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/db"
	"github.com/countersign/countersign/internal/grant"
	"github.com/countersign/countersign/internal/policy"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/testkit"
	"github.com/countersign/countersign/internal/tools"
)

// Issuer is the keyring's issuer, the grants' iss.
const Issuer = "countersign"

// T0 is where the clock starts unless WithClock gives another: a whole
// second, so that a grant's iat is exactly the clock.
var T0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// Queue is a queue Service and what it runs on. Everything is closed by
// the test's cleanup, after the cleanups registered later (a server built
// on it stops first).
type Queue struct {
	Path    string // the database file
	DB      *db.DB
	Keys    *grant.Keyring // in the directory "keys" beside Path
	Tools   *tools.Registry
	Clock   *testkit.Clock // the Service's and the keyring's clock
	Service *queue.Service
}

type options struct {
	path   string
	tools  *tools.Registry
	policy *policy.Policy
	clock  *testkit.Clock
	adjust []func(*queue.Config)
}

// An Option changes what NewQueue builds.
type Option func(*options)

// WithPath opens (or reopens) the database file at path instead of a new
// one in a temporary directory; the keys are beside it.
func WithPath(path string) Option { return func(o *options) { o.path = path } }

// WithTools validates calls against reg instead of examples/tools.yaml,
// with no rules unless WithPolicy gives them.
func WithTools(reg *tools.Registry) Option { return func(o *options) { o.tools = reg } }

// WithPolicy decides calls by pol's rules and validates them against the
// registry pol was compiled for (unless WithTools names another).
func WithPolicy(pol *policy.Policy) Option { return func(o *options) { o.policy = pol } }

// WithClock runs the Service and the keyring on c instead of a clock
// stopped at T0.
func WithClock(c *testkit.Clock) Option { return func(o *options) { o.clock = c } }

// WithConfig adjusts the Service's Config last, before NewService.
func WithConfig(fn func(*queue.Config)) Option {
	return func(o *options) { o.adjust = append(o.adjust, fn) }
}

// ExampleTools returns the registry of the repository's
// examples/tools.yaml.
func ExampleTools(tb testing.TB) *tools.Registry {
	tb.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		tb.Fatal("sqlitekit: cannot locate examples/tools.yaml")
	}
	reg, err := tools.Load(filepath.Join(filepath.Dir(file), "..", "..", "..", "examples", "tools.yaml"))
	if err != nil {
		tb.Fatal(err)
	}
	return reg
}

// NewQueue opens a database, a keyring and a registry and returns a queue
// Service over them, with a discarding logger. The Service's expiry loop
// is not started: a test that needs it calls Run.
func NewQueue(tb testing.TB, opts ...Option) *Queue {
	tb.Helper()
	var o options
	for _, f := range opts {
		f(&o)
	}
	if o.path == "" {
		o.path = filepath.Join(tb.TempDir(), "countersign.db")
	}
	if o.clock == nil {
		o.clock = testkit.NewClock(T0)
	}
	if o.tools == nil && o.policy == nil {
		o.tools = ExampleTools(tb)
	}
	d, err := db.Open(o.path)
	if err != nil {
		tb.Fatal(err)
	}
	keys, err := grant.OpenKeyring(filepath.Join(filepath.Dir(o.path), "keys"), Issuer, o.clock.Now)
	if err != nil {
		d.Close()
		tb.Fatal(err)
	}
	cfg := queue.Config{Store: d.Store(), Tools: o.tools, Policy: o.policy, Signer: keys, Now: o.clock.Now,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, f := range o.adjust {
		f(&cfg)
	}
	q := &Queue{Path: o.path, DB: d, Keys: keys, Clock: o.clock, Service: queue.NewService(cfg)}
	q.Tools = q.Service.Tools()
	tb.Cleanup(func() {
		q.Service.Shutdown()
		if err := d.Close(); err != nil {
			tb.Errorf("close %s: %v", o.path, err)
		}
	})
	return q
}
