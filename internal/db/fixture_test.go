package db

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/grant"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/testkit"
	"github.com/countersign/countersign/internal/tools"
)

// toolsFile is the example tools file every ledger test loads.
const toolsFile = "../../examples/tools.yaml"

// agent is the trusted context of the token that submits and redeems.
var agent = queue.Principal{Actor: "agent:a", Audience: "payments-host"}

// epoch is where the tests' clocks start.
var epoch = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// ledger is a Countersign database file, a key directory and a queue
// Service over them, as one console process would hold them.
type ledger struct {
	path   string // the database file
	keyDir string
	now    func() time.Time

	db    *DB
	keys  *grant.Keyring
	tools *tools.Registry
	q     *queue.Service
}

// newLedger creates a database and key directory in a fresh temporary
// directory. now nil means the real clock.
func newLedger(tb testing.TB, now func() time.Time) *ledger {
	tb.Helper()
	dir := tb.TempDir()
	l := &ledger{path: filepath.Join(dir, "countersign.db"), keyDir: filepath.Join(dir, "keys"), now: now}
	if l.now == nil {
		l.now = time.Now
	}
	MustOpen(tb, l)
	return l
}

// MustOpen opens (or reopens) the ledger's database, keyring and Service.
// The database is closed when the test ends.
func MustOpen(tb testing.TB, l *ledger) {
	tb.Helper()
	if err := l.open(); err != nil {
		tb.Fatal(err)
	}
	d := l.db
	tb.Cleanup(func() { d.Close() })
}

func (l *ledger) open() error {
	d, err := Open(l.path)
	if err != nil {
		return fmt.Errorf("Open: %w", err)
	}
	keys, err := grant.OpenKeyring(l.keyDir, "countersign", l.now)
	if err != nil {
		d.Close()
		return fmt.Errorf("OpenKeyring: %w", err)
	}
	reg, err := tools.Load(toolsFile)
	if err != nil {
		d.Close()
		return fmt.Errorf("tools.Load: %w", err)
	}
	if err := testkit.Seed(context.Background(), d.Accounts(), account.RoleOperator, deciders...); err != nil {
		d.Close()
		return fmt.Errorf("seed deciders: %w", err)
	}
	l.db, l.keys, l.tools = d, keys, reg
	l.q = queue.NewService(queue.Config{Store: d.Store(), Tools: reg, Signer: keys, Now: l.now,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	return nil
}

// approve submits a fresh refund (a random invoice, so no two calls share a
// digest) and approves it, returning the call with its grant.
func (l *ledger) approve(ctx context.Context) (*queue.Call, error) {
	body := fmt.Sprintf(`{"tool":"payments.refund","target":"invoice:INV-%d",`+
		`"args":{"amount_minor":1299,"currency":"EUR","reason_code":"duplicate"}}`, rand.Uint64())
	c, created, err := l.q.Submit(ctx, agent, []byte(body))
	if err != nil {
		return nil, fmt.Errorf("Submit: %w", err)
	}
	if !created {
		return nil, fmt.Errorf("Submit: call %s was not new", c.ID)
	}
	c, err = l.q.Approve(ctx, "alice", audit.ChannelCLI, c.ID, c.Digest)
	if err != nil {
		return nil, fmt.Errorf("Approve: %w", err)
	}
	if c.Status != queue.StatusApproved || c.Grant == "" {
		return nil, fmt.Errorf("Approve: status %s, grant %q; want approved with a grant", c.Status, c.Grant)
	}
	return c, nil
}

// MustApprove is approve for tests.
func MustApprove(tb testing.TB, l *ledger) *queue.Call {
	tb.Helper()
	c, err := l.approve(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// redeemBody is the redemption request for c's grant, presenting c exactly.
func redemptionBody(c *queue.Call) []byte {
	return redemptionBodyOf(c.Grant, c.Tool, c.Target, c.Args)
}

func redemptionBodyOf(token, tool, target string, args canonical.Object) []byte {
	b, err := json.Marshal(map[string]any{
		"grant": token,
		"call":  map[string]any{"tool": tool, "target": target, "args": args},
	})
	if err != nil {
		panic(err) // only strings and a canonical object
	}
	return b
}

// count runs a COUNT query.
func countRows(tb testing.TB, db *sql.DB, query string, args ...any) int {
	tb.Helper()
	var n int
	if err := db.QueryRow(query, args...).Scan(&n); err != nil {
		tb.Fatalf("%s: %v", query, err)
	}
	return n
}

// redeemedJTIs returns, for every audit entry of kind redeemed, its jti and
// how many such entries name it.
func redeemedJTIs(tb testing.TB, db *sql.DB) map[string]int {
	tb.Helper()
	rows, err := db.Query(`SELECT details FROM audit WHERE kind = ?`, audit.KindRedeemed)
	if err != nil {
		tb.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var details string
		if err := rows.Scan(&details); err != nil {
			tb.Fatal(err)
		}
		var d struct {
			JTI string `json:"jti"`
		}
		if err := json.Unmarshal([]byte(details), &d); err != nil || d.JTI == "" {
			tb.Fatalf("redeemed entry details %s: no jti (%v)", details, err)
		}
		out[d.JTI]++
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

// ledgerJTIs returns every jti in the redemptions table with its number of
// rows.
func ledgerJTIs(tb testing.TB, db *sql.DB) map[string]int {
	tb.Helper()
	rows, err := db.Query(`SELECT jti FROM redemptions`)
	if err != nil {
		tb.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var jti string
		if err := rows.Scan(&jti); err != nil {
			tb.Fatal(err)
		}
		out[jti]++
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

// verifyAuditChain reads the whole audit table and checks its hash chain.
func verifyAuditChain(tb testing.TB, db *sql.DB) int64 {
	tb.Helper()
	rows, err := db.Query(`SELECT seq, time, kind, call_id, principal, channel, details, prev_hash, hash FROM audit ORDER BY seq`)
	if err != nil {
		tb.Fatal(err)
	}
	defer rows.Close()
	v := audit.NewVerifier()
	for rows.Next() {
		var e audit.Entry
		var details string
		if err := rows.Scan(&e.Seq, &e.Time, &e.Kind, &e.CallID, &e.Principal, &e.Channel, &details, &e.PrevHash, &e.Hash); err != nil {
			tb.Fatal(err)
		}
		if e.Details, err = canonical.Parse([]byte(details)); err != nil {
			tb.Fatalf("audit %d: details do not parse: %v", e.Seq, err)
		}
		if err := v.Add(&e); err != nil {
			tb.Fatalf("audit chain: %v", err)
		}
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	n, _, err := v.Finish()
	if err != nil {
		tb.Fatalf("audit chain: %v", err)
	}
	return n
}

// integrityCheck runs PRAGMA integrity_check.
func integrityCheck(tb testing.TB, db *sql.DB) {
	tb.Helper()
	rows, err := db.Query(`PRAGMA integrity_check`)
	if err != nil {
		tb.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			tb.Fatal(err)
		}
		got = append(got, s)
	}
	if len(got) != 1 || got[0] != "ok" {
		tb.Fatalf("PRAGMA integrity_check = %q, want [ok]", got)
	}
}

// accountsOf is the account service over d, on d's clock.
func accountsOf(d *DB) *account.Service {
	return account.NewService(d.Accounts(), func() time.Time { return d.now() })
}

// deciders are the operators the tests decide as.
var deciders = []string{"alice", "bob", "op:ann", "op:bob", "op:carl", "op:dan"}
