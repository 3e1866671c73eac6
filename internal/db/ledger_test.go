package db

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/grant"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/store"
)

// TestConcurrentRedemptionsAcceptOne races 64 goroutines redeeming one
// grant, 100 times over: exactly one is accepted each time and the other 63
// are refused as replayed.
func TestConcurrentRedemptionsAcceptOne(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: heavy race: many goroutines redeeming one grant")
	}
	const rounds, redeemers = 100, 64
	l := newLedger(t, nil)
	ctx := context.Background()
	jtis := map[string]bool{}
	for round := range rounds {
		c := MustApprove(t, l)
		jtis[c.GrantJTI] = true
		body := redemptionBody(c)
		start := make(chan struct{})
		results := make([]*queue.Redemption, redeemers)
		errs := make([]error, redeemers)
		var wg sync.WaitGroup
		for i := range redeemers {
			wg.Go(func() {
				<-start
				results[i], errs[i] = l.q.Redeem(ctx, agent, body)
			})
		}
		close(start)
		wg.Wait()
		accepted, replayed := 0, 0
		for i, r := range results {
			switch {
			case errs[i] != nil:
				t.Fatalf("round %d, redeemer %d: %v", round, i, errs[i])
			case r.Accepted:
				accepted++
				if r.Call == nil || r.Call.Status != queue.StatusRedeemed || r.Call.GrantJTI != c.GrantJTI {
					t.Fatalf("round %d: accepted redemption's call = %+v, want %s redeemed", round, r.Call, c.ID)
				}
			case r.Reason == grant.ReasonReplayed:
				replayed++
			default:
				t.Fatalf("round %d, redeemer %d: reason %q, want accepted or replayed", round, i, r.Reason)
			}
		}
		if accepted != 1 || replayed != redeemers-1 {
			t.Fatalf("round %d: accepted %d, replayed %d; want 1 and %d", round, accepted, replayed, redeemers-1)
		}
	}
	sqldb := l.db.SQL()
	ledger := ledgerJTIs(t, sqldb)
	audited := redeemedJTIs(t, sqldb)
	if len(ledger) != rounds || len(audited) != rounds {
		t.Fatalf("redemptions %d, redeemed audit entries %d; want %d each", len(ledger), len(audited), rounds)
	}
	for jti := range jtis {
		if ledger[jti] != 1 || audited[jti] != 1 {
			t.Errorf("jti %s: %d ledger rows, %d redeemed entries; want 1 and 1", jti, ledger[jti], audited[jti])
		}
	}
	if got, want := countRows(t, sqldb, `SELECT COUNT(*) FROM audit WHERE kind = ?`, audit.KindRedemptionRefused), rounds*(redeemers-1); got != want {
		t.Errorf("redemption_refused entries = %d, want %d", got, want)
	}
	verifyAuditChain(t, sqldb)
}

// TestRedemptionSurvivesRestart redeems a grant, closes the database, opens
// it again with a new Service, and redeems the same grant again.
func TestRedemptionSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	l := newLedger(t, nil)
	c := MustApprove(t, l)
	body := redemptionBody(c)
	r, err := l.q.Redeem(ctx, agent, body)
	if err != nil || !r.Accepted {
		t.Fatalf("first redemption: %+v, %v; want accepted", r, err)
	}
	if err := l.db.Close(); err != nil {
		t.Fatal(err)
	}
	MustOpen(t, l)
	for i := range 2 {
		r, err = l.q.Redeem(ctx, agent, body)
		if err != nil {
			t.Fatal(err)
		}
		if r.Accepted || r.Reason != grant.ReasonReplayed {
			t.Errorf("redemption %d after restart: accepted %t, reason %q; want replayed", i+1, r.Accepted, r.Reason)
		}
		if got := checkOK(r.Checks, grant.StepNonce); got != "false" {
			t.Errorf("nonce check = %s, want false", got)
		}
	}
	if got := countRows(t, l.db.SQL(), `SELECT COUNT(*) FROM redemptions`); got != 1 {
		t.Errorf("redemptions = %d, want 1", got)
	}
}

// checkOK spells one check's outcome: true, false or null.
func checkOK(checks []grant.Check, name string) string {
	for _, c := range checks {
		if c.Name == name {
			if c.OK == nil {
				return "null"
			}
			if *c.OK {
				return "true"
			}
			return "false"
		}
	}
	return "missing"
}

// TestRedemptionFailsClosedWhenTheFileIsReplaced removes the database file,
// or moves another Countersign database over it, while the Service runs:
// redemption fails with store.ErrReplaced and nothing is accepted in either
// file.
func TestRedemptionFailsClosedWhenTheFileIsReplaced(t *testing.T) {
	tests := []struct {
		name    string
		replace func(t *testing.T, l *ledger) (other string)
	}{
		{"removed", func(t *testing.T, l *ledger) string {
			removeDB(t, l.path)
			return ""
		}},
		{"removed, redeemed on a new connection", func(t *testing.T, l *ledger) string {
			removeDB(t, l.path)
			// Hold every idle connection, the writer's included, so the
			// redemption runs on one the pool opens after the removal
			// (SQLite creates an empty file).
			l.db.releaseWriter()
			ctx := context.Background()
			for range 7 {
				c, err := l.db.SQL().Conn(ctx)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
			}
			if st := l.db.SQL().Stats(); st.Idle != 0 || st.OpenConnections >= 8 {
				t.Fatalf("pool: %d idle, %d open; want none idle and room for a new one", st.Idle, st.OpenConnections)
			}
			return ""
		}},
		{"replaced by another database", func(t *testing.T, l *ledger) string {
			path := l.path
			other := newLedger(t, nil)
			MustApprove(t, other)
			if err := other.db.Close(); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(other.path, path); err != nil {
				t.Fatal(err)
			}
			return path
		}},
		{"replaced by a copy of itself", func(t *testing.T, l *ledger) string {
			path := l.path
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			tmp := path + ".copy"
			if err := os.WriteFile(tmp, data, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
			return ""
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			l := newLedger(t, nil)
			c := MustApprove(t, l)
			// Checkpoint so that the file alone holds the approved call.
			if _, err := l.db.SQL().Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
				t.Fatal(err)
			}
			other := tt.replace(t, l)
			r, err := l.q.Redeem(ctx, agent, redemptionBody(c))
			if r != nil {
				t.Errorf("Redeem returned a redemption (accepted %t, reason %q)", r.Accepted, r.Reason)
			}
			if !errors.Is(err, store.ErrReplaced) {
				t.Fatalf("Redeem error = %v; want store.ErrReplaced", err)
			}
			if msg := err.Error(); !strings.Contains(msg, "removed or replaced") {
				t.Errorf("error %q does not say the file was removed or replaced", msg)
			}
			// A second attempt fails the same way: nothing was cached.
			if _, err := l.q.Redeem(ctx, agent, redemptionBody(c)); !errors.Is(err, store.ErrReplaced) {
				t.Errorf("second Redeem: %v; want store.ErrReplaced", err)
			}
			if other != "" {
				o, err := Open(other)
				if err != nil {
					t.Fatal(err)
				}
				defer o.Close()
				if got := countRows(t, o.SQL(), `SELECT COUNT(*) FROM redemptions`); got != 0 {
					t.Errorf("the replacing database has %d redemptions, want 0", got)
				}
			}
		})
	}
}

func removeDB(t *testing.T, path string) {
	t.Helper()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
}

// TestTerminalStatusTrigger changes call status with plain SQL, below the
// queue's rules: the schema's trigger refuses every move out of a terminal
// status and allows the moves the queue makes.
func TestTerminalStatusTrigger(t *testing.T) {
	tests := []struct {
		from, to string
		allowed  bool
	}{
		{"pending", "approved", true},
		{"pending", "denied", true},
		{"pending", "expired", true},
		{"pending", "cancelled", true},
		{"approved", "redeemed", true},
		{"denied", "denied", true},
		{"denied", "approved", false},
		{"denied", "pending", false},
		{"approved", "denied", false},
		{"approved", "pending", false},
		{"approved", "expired", false},
		{"expired", "pending", false},
		{"expired", "approved", false},
		{"cancelled", "pending", false},
		{"redeemed", "approved", false},
		{"redeemed", "pending", false},
	}
	l := newLedger(t, nil)
	sqldb := l.db.SQL()
	for i, tt := range tests {
		t.Run(tt.from+"→"+tt.to, func(t *testing.T) {
			id := "call_trigger_" + string(rune('a'+i))
			if _, err := sqldb.Exec(`INSERT INTO calls (id, actor, audience, tool, target, args, envelope, digest,
				status, approvals_required, grant_ttl_ms, created_at, decide_by) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)`,
				id, "agent:a", "payments-host", "payments.refund", "invoice:INV-1", "{}", []byte("{}"),
				strings.Repeat("0", 64), tt.from, 1, 60000, 1, 2); err != nil {
				t.Fatal(err)
			}
			_, err := sqldb.Exec(`UPDATE calls SET status = ? WHERE id = ?`, tt.to, id)
			if gotAllowed := err == nil; gotAllowed != tt.allowed {
				t.Fatalf("UPDATE %s→%s: error %v; want allowed %t", tt.from, tt.to, err, tt.allowed)
			}
			if err != nil && !strings.Contains(err.Error(), "terminal call status cannot change") {
				t.Errorf("error %q is not the trigger's", err)
			}
			want := tt.from
			if tt.allowed {
				want = tt.to
			}
			var got string
			if err := sqldb.QueryRow(`SELECT status FROM calls WHERE id = ?`, id).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("status = %s, want %s", got, want)
			}
		})
	}
}

// TestPragmasOnEveryConnection holds several pooled connections at once and
// reads each one's pragmas: every connection runs in WAL mode with
// synchronous=FULL, foreign keys on and the busy timeout set.
func TestPragmasOnEveryConnection(t *testing.T) {
	ctx := context.Background()
	l := newLedger(t, nil)
	l.db.releaseWriter() // the fixture's writes left the writer connection out of the pool
	const held = 8       // Open's pool size: every connection the pool may open
	conns := make([]*sql.Conn, held)
	for i := range conns {
		c, err := l.db.SQL().Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[i] = c
	}
	want := pragmas{journal: "wal", synchronous: 2, foreignKeys: 1, busyTimeout: 10000}
	var wg sync.WaitGroup
	got := make([]pragmas, held)
	errs := make([]error, held)
	for i, c := range conns {
		wg.Go(func() { got[i], errs[i] = readPragmas(ctx, c) })
	}
	wg.Wait()
	for i := range conns {
		if errs[i] != nil {
			t.Fatalf("connection %d: %v", i, errs[i])
		}
		if got[i] != want {
			t.Errorf("connection %d: %+v, want %+v", i, got[i], want)
		}
	}
	if got, want := l.db.SQL().Stats().OpenConnections, held; got != want {
		t.Errorf("open connections = %d, want %d distinct ones", got, want)
	}

	// The same query tells a connection opened without the DSN's pragmas
	// apart: the driver's default is synchronous=NORMAL.
	plain, err := sql.Open("sqlite3", "file:"+l.path)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	c, err := plain.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := readPragmas(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if p.synchronous == want.synchronous {
		t.Errorf("a connection without the DSN's pragmas reports synchronous=%d too; the check cannot tell", p.synchronous)
	}
}

type pragmas struct {
	journal     string
	synchronous int
	foreignKeys int
	busyTimeout int
}

func readPragmas(ctx context.Context, c *sql.Conn) (pragmas, error) {
	var p pragmas
	for _, q := range []struct {
		sql string
		dst any
	}{
		{`PRAGMA journal_mode`, &p.journal},
		{`PRAGMA synchronous`, &p.synchronous},
		{`PRAGMA foreign_keys`, &p.foreignKeys},
		{`PRAGMA busy_timeout`, &p.busyTimeout},
	} {
		if err := c.QueryRowContext(ctx, q.sql).Scan(q.dst); err != nil {
			return p, err
		}
	}
	return p, nil
}

// TestOpenRefusesMemory keeps the ledger on a file: an in-memory database
// would give every pooled connection its own ledger.
func TestOpenRefusesMemory(t *testing.T) {
	for _, path := range []string{"", ":memory:", "file::memory:?cache=shared"} {
		if d, err := Open(path); err == nil {
			d.Close()
			t.Errorf("Open(%q) succeeded, want an error", path)
		}
	}
}
