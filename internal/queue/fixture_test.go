package queue_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/db"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/testkit"
	"github.com/countersign/countersign/internal/testkit/sqlitekit"
)

// agent is the trusted context of the token that submits and redeems.
var agent = queue.Principal{Actor: "agent:a", Audience: "payments-host"}

// refundArgs are valid arguments of payments.refund in examples/tools.yaml.
const refundArgs = `{"amount_minor":1299,"currency":"EUR","reason_code":"duplicate","notes":"charged twice"}`

// hookStore is the database's store with a function run at the start of
// every write transaction, before the write lock is asked for.
type hookStore struct {
	queue.Store
	mu     sync.Mutex
	before func()
}

func (s *hookStore) Update(ctx context.Context, fn func(queue.Tx) error) error {
	s.mu.Lock()
	before := s.before
	s.mu.Unlock()
	if before != nil {
		before()
	}
	return s.Store.Update(ctx, fn)
}

// setBefore arms (or with nil disarms) the hook.
func (s *hookStore) setBefore(fn func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.before = fn
}

// env is a real database file, a keyring and the tools of
// examples/tools.yaml behind one Service on a fake clock.
type env struct {
	clock *testkit.Clock
	db    *db.DB
	store *hookStore
	q     *queue.Service
}

func newEnv(tb testing.TB) *env {
	tb.Helper()
	return newEnvWith(tb, nil)
}

// newEnvWith is newEnv with the service's Config adjusted.
func newEnvWith(tb testing.TB, adjust func(*queue.Config)) *env {
	tb.Helper()
	var st *hookStore
	k := sqlitekit.NewQueue(tb, sqlitekit.WithConfig(func(cfg *queue.Config) {
		st = &hookStore{Store: cfg.Store}
		cfg.Store = st
		if adjust != nil {
			adjust(cfg)
		}
	}))
	testkit.SeedUsers(tb, k.DB.Accounts(), account.RoleOperator, "alice", "bob", "carol")
	return &env{clock: k.Clock, db: k.DB, store: st, q: k.Service}
}

// MustApproved submits a refund of a fresh invoice and approves it.
func MustApproved(tb testing.TB, e *env) *queue.Call {
	tb.Helper()
	ctx := context.Background()
	body := fmt.Sprintf(`{"tool":"payments.refund","target":"invoice:INV-%d","args":%s}`, rand.Uint32(), refundArgs)
	c, created, err := e.q.Submit(ctx, agent, []byte(body))
	if err != nil || !created {
		tb.Fatalf("Submit: created %t, %v", created, err)
	}
	c, err = e.q.Approve(ctx, "alice", audit.ChannelCLI, c.ID, c.Digest)
	if err != nil {
		tb.Fatalf("Approve: %v", err)
	}
	if c.Status != queue.StatusApproved || c.Grant == "" {
		tb.Fatalf("Approve: status %s, grant %q; want approved with a grant", c.Status, c.Grant)
	}
	return c
}

// body is a redemption request.
func body(token, tool, target string, args any) []byte {
	b, err := json.Marshal(map[string]any{
		"grant": token,
		"call":  map[string]any{"tool": tool, "target": target, "args": args},
	})
	if err != nil {
		panic(err)
	}
	return b
}

// exactBody presents c exactly as it was approved.
func exactBody(c *queue.Call) []byte { return body(c.Grant, c.Tool, c.Target, c.Args) }

// MustObject parses a JSON object strictly.
func MustObject(tb testing.TB, s string) canonical.Object {
	tb.Helper()
	v, err := canonical.Parse([]byte(s))
	if err != nil {
		tb.Fatalf("parse %s: %v", s, err)
	}
	return v.(canonical.Object)
}

// checks spells a redemption's checks and reason in one line.
func checks(r *queue.Redemption) string {
	var b strings.Builder
	for _, c := range r.Checks {
		ok := "null"
		if c.OK != nil {
			ok = fmt.Sprint(*c.OK)
		}
		fmt.Fprintf(&b, "%s:%s ", c.Name, ok)
	}
	fmt.Fprintf(&b, "reason=%q", r.Reason)
	return b.String()
}

// wantChecks spells the expected list: the first passed checks true, then
// one false when reason is set, the rest null.
func wantChecks(passed int, reason string) string {
	names := []string{"shape", "signature", "claims", "actor", "audience", "tool", "target",
		"digest", "time", "status", "nonce"}
	var b strings.Builder
	for i, n := range names {
		ok := "null"
		switch {
		case i < passed:
			ok = "true"
		case i == passed && reason != "":
			ok = "false"
		}
		fmt.Fprintf(&b, "%s:%s ", n, ok)
	}
	fmt.Fprintf(&b, "reason=%q", reason)
	return b.String()
}

// ledgerState is what the database holds about one call's redemption.
type ledgerState struct {
	Status      string
	Redemptions int // rows of the nonce ledger for the call
	Redeemed    int // audit entries of kind redeemed
	Refused     int // audit entries of kind redemption_refused
}

func stateOf(tb testing.TB, d *db.DB, id string) ledgerState {
	tb.Helper()
	var s ledgerState
	q := d.SQL()
	for _, r := range []struct {
		query string
		dst   any
	}{
		{`SELECT status FROM calls WHERE id = ?`, &s.Status},
		{`SELECT COUNT(*) FROM redemptions WHERE call_id = ?`, &s.Redemptions},
		{`SELECT COUNT(*) FROM audit WHERE call_id = ? AND kind = 'redeemed'`, &s.Redeemed},
		{`SELECT COUNT(*) FROM audit WHERE call_id = ? AND kind = 'redemption_refused'`, &s.Refused},
	} {
		if err := q.QueryRow(r.query, id).Scan(r.dst); err != nil && err != sql.ErrNoRows {
			tb.Fatalf("%s: %v", r.query, err)
		}
	}
	return s
}

// countRefused counts every redemption_refused audit entry.
func countRefused(tb testing.TB, d *db.DB) int {
	tb.Helper()
	return countOf(tb, d, `SELECT COUNT(*) FROM audit WHERE kind = 'redemption_refused'`)
}

// countLedger counts the rows of the nonce ledger.
func countLedger(tb testing.TB, d *db.DB) int {
	tb.Helper()
	return countOf(tb, d, `SELECT COUNT(*) FROM redemptions`)
}

func countOf(tb testing.TB, d *db.DB, query string) int {
	tb.Helper()
	var n int
	if err := d.SQL().QueryRow(query).Scan(&n); err != nil {
		tb.Fatalf("%s: %v", query, err)
	}
	return n
}
