package db

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
)

// walFrames returns the page number of every frame of the current WAL
// file at path+"-wal" (those whose salts match the WAL's header) and how
// many of them end a commit.
func walFrames(tb testing.TB, path string) (pages []uint32, commits int) {
	tb.Helper()
	b, err := os.ReadFile(path + "-wal")
	if err != nil {
		tb.Fatal(err)
	}
	if len(b) < 32 {
		return nil, 0
	}
	size := int(binary.BigEndian.Uint32(b[8:]))
	salt1, salt2 := binary.BigEndian.Uint32(b[16:]), binary.BigEndian.Uint32(b[20:])
	for off := 32; off+24+size <= len(b); off += 24 + size {
		h := b[off:]
		if binary.BigEndian.Uint32(h[8:]) != salt1 || binary.BigEndian.Uint32(h[12:]) != salt2 {
			break
		}
		pages = append(pages, binary.BigEndian.Uint32(h))
		if binary.BigEndian.Uint32(h[4:]) != 0 {
			commits++
		}
	}
	return pages, commits
}

// pageOwners maps every b-tree page of the database file at path (freshly
// checkpointed) to the table or index it belongs to, page 1 to
// "sqlite_schema". Overflow and free pages are left out.
func pageOwners(tb testing.TB, d *DB, path string) map[uint32]string {
	tb.Helper()
	roots := map[string]uint32{"sqlite_schema": 1}
	rows, err := d.SQL().Query(`SELECT name, rootpage FROM sqlite_schema WHERE rootpage > 0`)
	if err != nil {
		tb.Fatal(err)
	}
	for rows.Next() {
		var name string
		var root uint32
		if err := rows.Scan(&name, &root); err != nil {
			tb.Fatal(err)
		}
		roots[name] = root
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	rows.Close()
	file, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	size := int(binary.BigEndian.Uint16(file[16:]))
	if size == 1 {
		size = 65536
	}
	owners := map[uint32]string{}
	var walk func(name string, pg uint32)
	walk = func(name string, pg uint32) {
		start := int(pg-1) * size
		if pg == 0 || start+size > len(file) || owners[pg] != "" {
			return
		}
		owners[pg] = name
		p := file[start : start+size]
		h := p
		if pg == 1 {
			h = p[100:]
		}
		if h[0] != 2 && h[0] != 5 { // a leaf
			return
		}
		n := int(binary.BigEndian.Uint16(h[3:]))
		for i := range n {
			cell := int(binary.BigEndian.Uint16(h[12+2*i:]))
			walk(name, binary.BigEndian.Uint32(p[cell:]))
		}
		walk(name, binary.BigEndian.Uint32(h[8:]))
	}
	for name, root := range roots {
		walk(name, root)
	}
	return owners
}

// seedCalls stores n calls made before from, one a second, most of them
// redeemed, the rest denied, expired, cancelled, approved (their grants
// unused) or pending, so that the pages of each status lie apart in the
// indexes as in a console that has been in use.
func seedCalls(tb testing.TB, d *DB, n int, from time.Time) {
	tb.Helper()
	tx, err := d.SQL().Begin()
	if err != nil {
		tb.Fatal(err)
	}
	defer tx.Rollback()
	ins, err := tx.Prepare(`INSERT INTO calls (id, actor, audience, tool, target, args, envelope, digest, status,
		approvals_required, grant_ttl_ms, created_at, decide_by, grant_jti, redeemed_at, outcome_status, outcome_at, submitted_by)
		VALUES (?, ?, 'pay-host', 'test.pay', ?, '{}', X'7b7d', ?, ?, 1, 60000, ?, ?, ?, ?, ?, ?, 'tok_seed')`)
	if err != nil {
		tb.Fatal(err)
	}
	defer ins.Close()
	statuses := []string{"redeemed", "redeemed", "redeemed", "redeemed", "redeemed", "redeemed", "redeemed",
		"denied", "denied", "expired", "cancelled", "approved", "pending", "redeemed"}
	for i := range n {
		at := from.Add(time.Duration(i-n) * time.Second).UnixMilli()
		status := statuses[i%len(statuses)]
		sum := sha256.Sum256([]byte(strconv.Itoa(i)))
		var jti, outcome sql.NullString
		var redeemed sql.NullInt64
		if status == "redeemed" || status == "approved" {
			jti = sql.NullString{String: fmt.Sprintf("seed%028x", i), Valid: true}
		}
		if status == "redeemed" {
			redeemed, outcome = sql.NullInt64{Int64: at, Valid: true}, sql.NullString{String: "succeeded", Valid: true}
		}
		if _, err := ins.Exec(fmt.Sprintf("call_seed%022d", i), fmt.Sprintf("agent:seed%d", i%7), fmt.Sprintf("invoice:%d", i),
			hex.EncodeToString(sum[:]), status, at, at+600_000, jti, redeemed, outcome, redeemed); err != nil {
			tb.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		tb.Fatal(err)
	}
}

// framesPerFlow runs flows whole flows of one agent, one after another
// (submit, approve, redeem: three commits each), after as many to warm
// the database up (after seedCalls), and returns the WAL frames they wrote per flow, by the
// table or index each frame's page belongs to.
func framesPerFlow(t *testing.T, flows int) (total float64, by map[string]float64) {
	t.Helper()
	h := newAuditHarness(t)
	ctx := context.Background()
	path := h.d.Path()
	n := 0
	flow := func() {
		n++
		c := h.submit(t, h.agent, payBody(n))
		c, err := h.q.Approve(ctx, "op:ann", audit.ChannelWeb, c.ID, c.Digest)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.q.Redeem(ctx, h.agent, []byte(redeemBody(c))); err != nil {
			t.Fatal(err)
		}
		h.clock.Advance(37 * time.Millisecond)
	}
	checkpoint := func() {
		var busy, log, done int
		if err := h.d.writer.QueryRowContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&busy, &log, &done); err != nil || busy != 0 {
			t.Fatalf("checkpoint: busy %d, %v", busy, err)
		}
	}
	seedCalls(t, h.d, 4000, h.clock.Now().Add(-24*time.Hour))
	for range flows {
		flow()
	}
	checkpoint()
	for range flows {
		flow()
	}
	pages, commits := walFrames(t, path)
	if commits != 3*flows {
		t.Fatalf("%d commits in the WAL, want %d (3 per flow)", commits, 3*flows)
	}
	checkpoint()
	owners := pageOwners(t, h.d, path)
	by = map[string]float64{}
	for _, pg := range pages {
		name := owners[pg]
		if name == "" {
			name = "(overflow or free)"
		}
		by[name] += 1 / float64(flows)
	}
	return float64(len(pages)) / float64(flows), by
}

// TestFramesPerFlow counts the pages a whole flow writes to the WAL, and
// which table or index each belongs to: an index added to the hot path
// adds at least one page to every commit that writes it, and shows here.
func TestFramesPerFlow(t *testing.T) {
	total, by := framesPerFlow(t, 80)
	names := slices.Sorted(maps.Keys(by))
	var lines []string
	for _, name := range names {
		lines = append(lines, fmt.Sprintf("%6.2f %s", by[name], name))
	}
	report := strings.Join(lines, "\n")
	t.Logf("%.2f frames per flow:\n%s", total, report)
	// Every table and index a flow writes, with at most how many pages a
	// flow writes to it (a page per commit that writes it, and the splits).
	// calls_status_created moves a call's entry at each change of status:
	// a page at submission, two at approval and two at redemption.
	written := map[string]float64{
		"calls": 3.9, "sqlite_autoindex_calls_1": 2, "sqlite_autoindex_calls_2": 3.25,
		"calls_created": 1.3, "calls_actor_created": 1.8, "calls_tool_created": 1.5, "calls_actor_tool_created": 1.9,
		"calls_digest": 1.5, "calls_pending": 2.25, "calls_pending_by_token": 2.25,
		"calls_status_created": 5.3, "calls_open_created": 1.25, "calls_actor_status_created": 1.8, "calls_lease": 1.25,
		"approvals": 1.3, "sqlite_autoindex_approvals_1": 1.3,
		"call_deciders": 1.25, "call_deciders_operator": 1.25, "call_deciders_channel": 1.25,
		"redemptions": 1.3,
		"audit":       3.75, "audit_time": 4.05, "audit_call": 4, "sqlite_schema": 1.3, "(overflow or free)": 0.25,
	}
	for _, name := range names {
		if limit, ok := written[name]; !ok {
			t.Errorf("a flow writes %.2f pages of %s, which it did not write before", by[name], name)
		} else if by[name] > limit {
			t.Errorf("a flow writes %.2f pages of %s, want at most %.2f", by[name], name, limit)
		}
	}
	// 47.0 when the nonce ledger was a rowid table with an index on its jti.
	const budget = 46.5
	if total > budget {
		t.Errorf("%.2f frames per flow, want at most %.1f", total, budget)
	}
}

// TestLedgerMigrate applies migration 251 to a database made before it, with calls in every state and redemptions in
// the ledger: every row stays, the history's filters answer as before,
// and the ledger still accepts a jti once.
func TestLedgerMigrate(t *testing.T) {
	h := newAuditHarness(t)
	ctx := context.Background()
	seedCalls(t, h.d, 300, h.clock.Now().Add(-time.Hour))
	for i := range 6 {
		c := h.submit(t, h.agent, payBody(i+1))
		if i == 5 {
			break // left pending
		}
		c, err := h.q.Approve(ctx, "op:ann", audit.ChannelWeb, c.ID, c.Digest)
		if err != nil {
			t.Fatal(err)
		}
		if i == 4 {
			continue // approved, its grant unused
		}
		if _, err := h.q.Redeem(ctx, h.agent, []byte(redeemBody(c))); err != nil {
			t.Fatal(err)
		}
	}
	filters := []queue.HistoryFilter{{Status: "pending"}, {Status: "approved"}, {Status: "redeemed"}, {Status: "denied"},
		{Outcome: queue.OutcomeFilterOpen}, {Outcome: queue.OutcomeFilterSucceeded}, {Actor: h.agent.Actor, Status: "redeemed"}, {}}
	history := func(d *DB) [][]string {
		var all [][]string
		for _, f := range filters {
			f.Limit = queue.MaxHistoryLimit
			var ids []string
			for {
				calls, next, err := d.History(ctx, f)
				if err != nil {
					t.Fatalf("History(%+v): %v", f, err)
				}
				for _, c := range calls {
					ids = append(ids, c.ID)
				}
				if next == 0 {
					break
				}
				f.After = next
			}
			all = append(all, ids)
		}
		return all
	}
	ledger := func(d *DB) []string {
		rows, err := d.SQL().Query(`SELECT jti || ' ' || call_id || ' ' || at FROM redemptions ORDER BY jti`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			out = append(out, s)
		}
		return out
	}
	wantHistory, wantLedger := history(h.d), ledger(h.d)
	if len(wantLedger) != 4 {
		t.Fatalf("%d redemptions in the ledger, want 4", len(wantLedger))
	}
	// The ledger as it was before the migration.
	tx, err := h.d.SQL().Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`CREATE TEMP TABLE r AS SELECT jti, call_id, at FROM redemptions;
		DROP TABLE redemptions;
		CREATE TABLE redemptions (jti TEXT PRIMARY KEY, call_id TEXT NOT NULL REFERENCES calls (id), at INTEGER NOT NULL) STRICT;
		INSERT INTO redemptions SELECT jti, call_id, at FROM r;
		DROP TABLE r;
		DELETE FROM schema_migrations WHERE version = 251;`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	d, err := Open(h.d.Path())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	var check, ledgerSQL string
	if err := d.SQL().QueryRow(`PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity_check = %q, %v", check, err)
	}
	if err := d.SQL().QueryRow(`SELECT sql FROM sqlite_schema WHERE name = 'redemptions'`).Scan(&ledgerSQL); err != nil ||
		!strings.Contains(ledgerSQL, "WITHOUT ROWID") {
		t.Fatalf("the ledger after the migration: %q, %v", ledgerSQL, err)
	}
	var n int
	if err := d.SQL().QueryRow(`SELECT COUNT(*) FROM sqlite_schema WHERE name = 'sqlite_autoindex_redemptions_1'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d ledger index left, %v", n, err)
	}
	if got := ledger(d); !slices.Equal(got, wantLedger) {
		t.Errorf("ledger after the migration %v, want %v", got, wantLedger)
	}
	if got := history(d); !slices.EqualFunc(got, wantHistory, slices.Equal) {
		t.Errorf("history after the migration %v, want %v", got, wantHistory)
	}
	jti, call, _ := strings.Cut(wantLedger[0], " ")
	call, _, _ = strings.Cut(call, " ")
	if _, err := d.SQL().Exec(`INSERT INTO redemptions (jti, call_id, at) VALUES (?, ?, 1)`, jti, call); err == nil {
		t.Error("the ledger accepted a jti twice")
	}
}
