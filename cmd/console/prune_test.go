package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/db"
	"github.com/countersign/countersign/internal/grant"
	"github.com/countersign/countersign/internal/highwater"
	"github.com/countersign/countersign/internal/pgstore"
	"github.com/countersign/countersign/internal/pgtest"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/testkit"
	"github.com/countersign/countersign/internal/tools"
)

// agedRun is a data directory whose trail holds its tools file, calls run to their end
// 100 days ago and `recent` calls approved today, with checkpoints after
// each, and `openOld` calls proposed 100 days ago and still pending.
type agedRun struct {
	data string
	key  *audit.Signer
	d    *db.DB // SQLite only
	// st is the store on either engine; url the PostgreSQL database's
	// ("" on SQLite).
	st  agedStore
	url string
	q   *queue.Service
	c   *testkit.Clock
	// toolsDigest is the tools file's, recorded as entry 1.
	toolsDigest string
	// submit proposes one more call; submitMany proposes n more at once,
	// so that the store's group commit writes them in a few transactions;
	// finish runs n more to their end.
	submit     func() *queue.Call
	submitMany func(n int)
	finish     func(n int)
}

// agedStore is what the tests read and write of either engine.
type agedStore interface {
	pruneStore
	audit.Trail
	Identity() string
	AuditHashAt(ctx context.Context, seq int64) (string, error)
	Checkpoint(ctx context.Context, signer *audit.Signer) (audit.Checkpoint, error)
	Timeline(ctx context.Context, callID string) ([]audit.Entry, error)
}

func newAgedRun(t *testing.T, old, openOld, recent int) *agedRun {
	return newAgedRunOn(t, "", old, openOld, recent)
}

// onEngines runs fn on SQLite and on PostgreSQL.
func onEngines(t *testing.T, fn func(t *testing.T, url string)) {
	t.Run("sqlite", func(t *testing.T) { fn(t, "") })
	t.Run("postgres", func(t *testing.T) { fn(t, pgtest.Database(t)) })
}

// fillHolds writes n legal holds straight into the database, past what a
// test would add one by one.
func (r *agedRun) fillHolds(t *testing.T, n int) {
	t.Helper()
	if r.d != nil {
		if _, err := r.d.SQL().Exec(`WITH RECURSIVE i(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM i WHERE n < ?)
			INSERT INTO retention_holds (id, kind, value, reason, created_by, created_at) SELECT 'hold_fill' || n, 'actor', 'agent:' || n, 'x', 'root', 0 FROM i`, n); err != nil {
			t.Fatal(err)
		}
		return
	}
	conn, err := pgx.Connect(context.Background(), r.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), `INSERT INTO retention_holds (id, kind, value, reason, created_by, created_at)
		SELECT 'hold_fill' || n, 'actor', 'agent:' || n, 'x', 'root', 0 FROM generate_series(1, $1::int) AS n`, n); err != nil {
		t.Fatal(err)
	}
}

// run runs a console command on the run's database: args, then --db on
// PostgreSQL.
func (r *agedRun) run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	if r.url != "" {
		args = append(args, "--db", r.url)
	}
	return auditRun(t, args...)
}

// newAgedRunOn is newAgedRun on the PostgreSQL database at url, or on
// SQLite when url is "".
func newAgedRunOn(t *testing.T, url string, old, openOld, recent int) *agedRun {
	t.Helper()
	data := t.TempDir()
	toolsPath := filepath.Join(data, "tools.yaml")
	if err := os.WriteFile(toolsPath, []byte(allowanceToolsFile), 0o600); err != nil {
		t.Fatal(err)
	}
	key, err := audit.LoadOrCreateKey(auditKeyPath(data))
	if err != nil {
		t.Fatal(err)
	}
	var (
		st       agedStore
		d        *db.DB
		qs       queue.Store
		accounts account.Store
	)
	if url == "" {
		var err error
		if d, err = db.Open(dbPath(data)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		st, qs, accounts = d, d.Store(), d.Accounts()
	} else {
		p, err := pgstore.Open(context.Background(), url, pgstore.Options{MaxConns: 8})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		// The data directory bound to the database, as console serve
		// --db binds it.
		if err := writeFileAtomic(identityPath(data), []byte(p.Identity()+"\n")); err != nil {
			t.Fatal(err)
		}
		st, qs, accounts = p, p.Store(), p.Accounts()
	}
	keys, err := grant.OpenKeyring(keysDir(data), Issuer, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.Load(toolsPath)
	if err != nil {
		t.Fatal(err)
	}
	testkit.SeedUsers(t, accounts, account.RoleOperator, "alice", "bob")
	testkit.SeedUsers(t, accounts, account.RoleAdmin, "root")
	clock := testkit.NewClock(time.Now().Add(-100 * 24 * time.Hour))
	q := queue.NewService(queue.Config{Store: qs, Tools: reg, Signer: keys, Now: clock.Now, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	r := &agedRun{data: data, key: key, d: d, st: st, url: url, q: q, c: clock, toolsDigest: reg.Digest()}
	ctx := context.Background()
	// Entry 1: the tools file, as a server records it when it starts.
	if err := q.RecordTools(ctx, "console", toolsPath); err != nil {
		t.Fatal(err)
	}
	payer := queue.Principal{Actor: "agent:billing", Audience: "payments-host", TokenID: "tok1"}
	n := 0
	body := func(k int) []byte {
		return []byte(`{"tool":"payments.refund","target":"invoice:INV-` + strconv.Itoa(k) + `","args":{"amount_minor":100,"currency":"EUR"}}`)
	}
	submit := func() *queue.Call {
		t.Helper()
		n++
		c, _, err := q.Submit(ctx, payer, body(n))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	r.submitMany = func(count int) {
		t.Helper()
		errs := make(chan error, count)
		var wg sync.WaitGroup
		for k := n + 1; k <= n+count; k++ {
			wg.Go(func() {
				if _, _, err := q.Submit(ctx, payer, body(k)); err != nil {
					errs <- err
				}
			})
		}
		n += count
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	for range openOld {
		submit()
	}
	r.submit = submit
	r.finish = func(count int) {
		t.Helper()
		for range count {
			r.finishOne(t, submit(), payer)
		}
	}
	r.finish(old)
	checkpoint := func() {
		t.Helper()
		if _, err := st.Checkpoint(ctx, key); err != nil && !errors.Is(err, audit.ErrNoCheckpoint) {
			t.Fatal(err)
		}
	}
	checkpoint()
	clock.Set(time.Now())
	for range recent {
		c := submit()
		if _, err := q.Approve(ctx, "alice", audit.ChannelCLI, c.ID, c.Digest); err != nil {
			t.Fatal(err)
		}
	}
	checkpoint()
	return r
}

// finishOne approves, redeems and reports the outcome of c.
func (r *agedRun) finishOne(t *testing.T, c *queue.Call, payer queue.Principal) {
	t.Helper()
	ctx := context.Background()
	c, err := r.q.Approve(ctx, "bob", audit.ChannelCLI, c.ID, c.Digest)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{"grant": c.Grant, "call": map[string]any{"tool": c.Tool, "target": c.Target, "args": c.Args}})
	if red, err := r.q.Redeem(ctx, payer, body); err != nil || !red.Accepted {
		t.Fatalf("redeem = %+v, %v", red, err)
	}
	if _, err := r.q.ReportOutcome(ctx, payer, c.ID, "succeeded", "refunded"); err != nil {
		t.Fatal(err)
	}
}

var removedRE = regexp.MustCompile(`removed entries (\d+) to (\d+) \((\d+)\)`)

// TestAuditPruneKeepsTheProof: prune removes the entries older than the
// horizon after archiving them in a pack that verifies with both
// verifiers; the trail left verifies behind its pruned entry; removing one
// more entry is damage; a later pack of what is left verifies; retention
// below 30 days and a prune by anyone but an admin are refused; compact
// reports the pages it freed.
func TestAuditPruneKeepsTheProof(t *testing.T) {
	r := newAgedRun(t, 40, 0, 3)
	archive := t.TempDir()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--retain", "10d", "--as", "root"}, 2, "shorter than 30 days"},
		{[]string{"--retain", "720h", "--as", "bob"}, 1, "not an enabled admin"},
		{[]string{"--retain", "60d", "--keep", "payments.refund=40d", "--as", "root"}, 2, "may only be kept longer"},
		{[]string{"--retain", "30d", "--keep", "payments.refund=120d", "--as", "root"}, 0, "nothing to prune"},
	} {
		code, out, errs := auditRun(t, append([]string{"audit", "prune", "--data", r.data, "--archive", archive}, tc.args...)...)
		if code != tc.code || !strings.Contains(out+errs, tc.want) {
			t.Errorf("prune %v = %d %q %q, want %d and %q", tc.args, code, out, errs, tc.code, tc.want)
		}
	}
	// At most 120 entries a run: the first run stops at the checkpoint
	// before entry 120 (there is none: nothing), then without the cap.
	code, out, errs := auditRun(t, "audit", "prune", "--data", r.data, "--retain", "30d", "--max-entries", "120", "--archive", archive, "--as", "root")
	if code != 0 || !strings.Contains(out, "nothing to prune: no signed checkpoint between entries 1 and 120") {
		t.Fatalf("prune --max-entries 120 = %d %q %q", code, out, errs)
	}
	code, out, errs = auditRun(t, "audit", "prune", "--data", r.data, "--retain", "30d", "--archive", archive, "--as", "root")
	m := removedRE.FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("prune = %d %q %q", code, out, errs)
	}
	if m[1] != "1" || m[2] != strconv.Itoa(40*5+1) {
		t.Errorf("removed %s to %s, want 1 to %d (every old entry, up to the checkpoint after them)", m[1], m[2], 40*5+1)
	}
	if oldest, _ := r.st.OldestEntry(context.Background()); oldest != int64(40*5+2) {
		t.Errorf("the oldest entry kept is %d, want %d", oldest, 40*5+2)
	}
	if code, out, _ := auditRun(t, "audit", "verify", "--data", r.data); code != 0 || !strings.Contains(out, "pruned: entries 1 to 201 were removed") {
		t.Fatalf("verify after prune = %d\n%s", code, out)
	}
	packs, _ := filepath.Glob(filepath.Join(archive, "*.tar"))
	if len(packs) != 1 {
		t.Fatalf("archive holds %v, want one pack", packs)
	}
	if code, out, _ := auditRun(t, "audit", "verify", packs[0], "--audit-key-fingerprint", fingerprintOf(r.key)); code != 0 {
		t.Errorf("the archive does not verify: %d\n%s", code, out)
	}
	if code, out := pyVerify(t, nil, packs[0], "--audit-key-fingerprint", fingerprintOf(r.key)); code != 0 {
		t.Errorf("the archive does not verify with python: %d\n%s", code, out)
	}
	// A pack of what is left starts at the oldest entry kept, vouched for
	// by the checkpoint at the last entry removed.
	left := makePack(t, r.data)
	if code, out, _ := auditRun(t, "audit", "verify", left, "--audit-key-fingerprint", fingerprintOf(r.key)); code != 0 || !strings.Contains(out, "entries 202 to") {
		t.Errorf("a pack after the prune = %d\n%s", code, out)
	}
	if code, out := pyVerify(t, nil, left, "--audit-key-fingerprint", fingerprintOf(r.key)); code != 0 {
		t.Errorf("a pack after the prune, python = %d\n%s", code, out)
	}
	if code, out, _ := auditRun(t, "compact", "--data", r.data); code != 0 || !regexp.MustCompile(`\d+ pages freed`).MatchString(out) {
		t.Errorf("compact = %d %q", code, out)
	}
	// Nothing vouches for one more entry removed.
	auditSQL(t, r.data, `DELETE FROM audit WHERE seq = 202`)
	if code, out, _ := auditRun(t, "audit", "verify", "--data", r.data); code != 1 || !strings.Contains(out, "DAMAGED: first bad entry 1: expected entry 1, found 203") {
		t.Errorf("verify with an entry removed behind the prune = %d\n%s", code, out)
	}
}

// TestAuditPruneKeepsOpenCalls: a call proposed before the horizon and
// still pending keeps its entries and every later one.
func TestAuditPruneKeepsOpenCalls(t *testing.T) { onEngines(t, testAuditPruneKeepsOpenCalls) }

func testAuditPruneKeepsOpenCalls(t *testing.T, url string) {
	r := newAgedRunOn(t, url, 10, 0, 0)
	ctx := context.Background()
	// A pending call, then more finished ones and a checkpoint, all old;
	// then one today.
	r.c.Set(time.Now().Add(-90 * 24 * time.Hour))
	open := r.submit()
	r.finish(5)
	if _, err := r.st.Checkpoint(ctx, r.key); err != nil {
		t.Fatal(err)
	}
	r.c.Set(time.Now())
	r.finish(1)
	if _, err := r.st.Checkpoint(ctx, r.key); err != nil {
		t.Fatal(err)
	}
	tl, err := r.st.Timeline(ctx, open.ID)
	if err != nil {
		t.Fatal(err)
	}
	code, out, errs := r.run(t, "audit", "prune", "--data", r.data, "--retain", "30d", "--archive", t.TempDir(), "--as", "root")
	m := removedRE.FindStringSubmatch(out)
	if code != 0 || m == nil || !strings.Contains(out, "a call still open") {
		t.Fatalf("prune = %d %q %q", code, out, errs)
	}
	if to, _ := strconv.ParseInt(m[2], 10, 64); to != tl[0].Seq-1 {
		t.Errorf("removed up to entry %d, want %d: the checkpoint before the open call's first entry", to, tl[0].Seq-1)
	}
	if _, err := r.st.Timeline(ctx, open.ID); err != nil {
		t.Fatal(err)
	}
	if got, _ := r.st.Timeline(ctx, open.ID); len(got) != len(tl) {
		t.Errorf("the open call's timeline has %d entries after the prune, want %d", len(got), len(tl))
	}
	if code, out, _ := r.run(t, "audit", "verify", "--data", r.data); code != 0 {
		t.Fatalf("verify after prune = %d\n%s", code, out)
	}
}

// TestLegalHolds: an admin adds a hold on one call, listed and audited;
// prune keeps that call's entries and every later one; a hold twice, a
// non-admin, and a 1,001st hold are refused; removing it lets the next
// prune go on.
func TestLegalHolds(t *testing.T) { onEngines(t, testLegalHolds) }

func testLegalHolds(t *testing.T, url string) {
	r := newAgedRunOn(t, url, 4, 0, 0)
	ctx := context.Background()
	r.c.Set(time.Now().Add(-90 * 24 * time.Hour))
	held := r.submit()
	r.finishOne(t, held, queue.Principal{Actor: "agent:billing", Audience: "payments-host", TokenID: "tok1"})
	r.finish(3)
	if _, err := r.st.Checkpoint(ctx, r.key); err != nil {
		t.Fatal(err)
	}
	r.c.Set(time.Now())
	r.finish(1)
	if _, err := r.st.Checkpoint(ctx, r.key); err != nil {
		t.Fatal(err)
	}
	hold := func(args ...string) (int, string, string) {
		return r.run(t, append([]string{"hold"}, append(args, "--data", r.data)...)...)
	}
	if code, _, errs := hold("add", "--call", held.ID, "--reason", "case 12", "--as", "bob"); code != 1 || !strings.Contains(errs, "not an enabled admin") {
		t.Errorf("hold by an operator = %d %q", code, errs)
	}
	code, out, errs := hold("add", "--call", held.ID, "--reason", "case 12", "--as", "root")
	if code != 0 || !strings.Contains(out, "added hold hold_") {
		t.Fatalf("hold add = %d %q %q", code, out, errs)
	}
	id := strings.Fields(out)[2]
	if code, _, errs := hold("add", "--call", held.ID, "--reason", "again", "--as", "root"); code != 1 || !strings.Contains(errs, "there already") {
		t.Errorf("the same hold twice = %d %q", code, errs)
	}
	if code, out, _ := hold("list"); code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "case 12") {
		t.Errorf("hold list = %d %q", code, out)
	}
	tl, err := r.st.Timeline(ctx, held.ID)
	if err != nil {
		t.Fatal(err)
	}
	code, out, errs = r.run(t, "audit", "prune", "--data", r.data, "--retain", "30d", "--archive", t.TempDir(), "--as", "root")
	m := removedRE.FindStringSubmatch(out)
	if code != 0 || m == nil || !strings.Contains(out, "a legal hold") {
		t.Fatalf("prune = %d %q %q", code, out, errs)
	}
	if to, _ := strconv.ParseInt(m[2], 10, 64); to != tl[0].Seq-1 {
		t.Errorf("removed up to entry %d, want %d: the checkpoint before the held call", to, tl[0].Seq-1)
	}
	if got, _ := r.st.Timeline(ctx, held.ID); len(got) != len(tl) {
		t.Errorf("the held call has %d entries after the prune, want %d", len(got), len(tl))
	}
	if code, out, _ := hold("remove", id, "--as", "root"); code != 0 {
		t.Fatalf("hold remove = %d %q", code, out)
	}
	var export bytes.Buffer
	if _, err := r.st.ExportAudit(ctx, &export, audit.ExportOptions{Format: "jsonl"}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{audit.KindHoldAdded, audit.KindHoldRemoved} {
		if n := strings.Count(export.String(), `"kind":"`+k+`"`); n != 1 {
			t.Errorf("%d audit entries of %s, want 1", n, k)
		}
	}
	r.fillHolds(t, 1000)
	if code, _, errs := hold("add", "--tool", "payments.refund", "--reason", "one more", "--as", "root"); code != 1 || !strings.Contains(errs, "already 1000 legal holds") {
		t.Errorf("the 1,001st hold = %d %q", code, errs)
	}
	if code, out, _ := r.run(t, "audit", "verify", "--data", r.data); code != 0 {
		t.Fatalf("verify = %d\n%s", code, out)
	}
}

// TestAuditPruneTenThousandCalls: 10,000 calls proposed and expired 100
// days ago go through a prune: the archive holds them all and verifies
// with both verifiers, the trail left verifies, and compact frees the
// pages they took.
func TestAuditPruneTenThousandCalls(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 calls: make test runs it")
	}
	onEngines(t, pruneTenThousandCalls)
}

func pruneTenThousandCalls(t *testing.T, url string) {
	calls := 10000
	if n, err := strconv.Atoi(os.Getenv("COUNTERSIGN_RETENTION_CALLS")); err == nil && n >= 10000 {
		calls = n // scripts/retention-bench.sh
	}
	r := newAgedRunOn(t, url, 0, 0, 0)
	ctx := context.Background()
	// In rounds of 50, under what one token may keep waiting: each round
	// proposed, then expired an hour later; the last round ends 100 days
	// ago, whatever the number of calls.
	const round = 50
	r.c.Set(time.Now().Add(-100*24*time.Hour - time.Duration(calls/round)*time.Hour))
	t.Logf("load average %s at the start", loadAverage())
	start := time.Now()
	for done := 0; done < calls; done += round {
		if done > 0 && done%100000 == 0 {
			t.Logf("%d calls proposed and expired in %s (load average %s)", done, time.Since(start).Round(time.Second), loadAverage())
		}
		if done > 0 && done%1000 == 0 {
			if _, err := r.st.Checkpoint(ctx, r.key); err != nil {
				t.Fatal(err)
			}
		}
		r.submitMany(round)
		r.c.Advance(time.Hour)
		for expired := 0; expired < round; {
			n, err := r.q.ExpireDue(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				t.Fatalf("expired %d of a round of %d calls, then none", expired, round)
			}
			expired += n
		}
	}
	if _, err := r.st.Checkpoint(ctx, r.key); err != nil {
		t.Fatal(err)
	}
	r.c.Set(time.Now())
	r.finish(1)
	if _, err := r.st.Checkpoint(ctx, r.key); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d calls proposed and expired in %s", calls, time.Since(start).Round(time.Millisecond))
	archive := t.TempDir()
	if fi, err := os.Stat(dbPath(r.data)); err == nil {
		t.Logf("database file %d bytes before the prune (load average %s)", fi.Size(), loadAverage())
	}
	// Runs of at most 13,000 entries, each ending at a checkpoint (the
	// first at entry 12,001, after the tools file and 6,000 calls), until
	// nothing is left to remove. The whole trail is verified after each
	// run up to 100,000 calls, and after every 20th run and the last one
	// beyond (each verification reads all that is left).
	removed, runs := 0, 0
	var peak uint64
	pruneStart := time.Now()
	verify := func() {
		t.Helper()
		if code, out, _ := r.run(t, "audit", "verify", "--data", r.data); code != 0 {
			t.Fatalf("verify after prune %d = %d\n%s", runs, code, out)
		}
	}
	for {
		start = time.Now()
		var (
			code      int
			out, errs string
		)
		prune := func() {
			code, out, errs = r.run(t, "audit", "prune", "--data", r.data, "--retain", "30d", "--max-entries", "13000", "--archive", archive, "--as", "root")
		}
		// The heap of the first run and of every tenth: measuring slows
		// a run down (see peakHeap).
		heap, measured := uint64(0), runs%10 == 0
		if measured {
			heap = peakHeap(prune)
			peak = max(peak, heap)
		} else {
			prune()
		}
		if code != 0 {
			t.Fatalf("prune %d = %d %q %q", runs+1, code, out, errs)
		}
		m := removedRE.FindStringSubmatch(out)
		if m == nil {
			if !strings.Contains(out, "nothing to prune") {
				t.Fatalf("prune %d = %q", runs+1, out)
			}
			break
		}
		if runs == 0 && m[0] != "removed entries 1 to 12001 (12001)" {
			t.Errorf("the first run %s, want removed entries 1 to 12001 (12001)", m[0])
		}
		n, _ := strconv.Atoi(m[3])
		removed, runs = removed+n, runs+1
		if measured {
			t.Logf("%s in %s, peak heap %.1f MiB above the start", m[0], time.Since(start).Round(time.Millisecond), float64(heap)/(1<<20))
		} else {
			t.Logf("%s in %s", m[0], time.Since(start).Round(time.Millisecond))
		}
		if calls <= 100000 || runs%20 == 0 {
			verify()
		}
	}
	verify()
	t.Logf("removed entries: %d in %d runs in %s, the most heap a run took %.1f MiB (load average %s)",
		removed, runs, time.Since(pruneStart).Round(time.Second), float64(peak)/(1<<20), loadAverage())
	if removed != 2*calls+1 {
		t.Errorf("removed %d entries in %d runs, want %d (and the tools file's)", removed, runs, 2*calls+1)
	}
	packs, _ := filepath.Glob(filepath.Join(archive, "*.tar"))
	if len(packs) != runs || runs < 2 {
		t.Fatalf("archive holds %v", packs)
	}
	start = time.Now()
	for _, p := range packs {
		if code, out := pyVerify(t, nil, p, "--audit-key-fingerprint", fingerprintOf(r.key)); code != 0 {
			t.Errorf("python verify of %s = %d\n%s", p, code, out)
		}
		if code, out, _ := auditRun(t, "audit", "verify", p, "--audit-key-fingerprint", fingerprintOf(r.key)); code != 0 {
			t.Errorf("verify of %s = %d\n%s", p, code, out)
		}
	}
	t.Logf("%d archives verified with both verifiers in %s", len(packs), time.Since(start).Round(time.Second))
	start = time.Now()
	code, out, _ := r.run(t, "compact", "--data", r.data)
	t.Logf("compacted in %s (load average %s)", time.Since(start).Round(time.Millisecond), loadAverage())
	if url != "" {
		// PostgreSQL's plain VACUUM makes the space reusable and gives
		// back only empty pages at the table's end
		// (TestCompactMakesPrunedSpaceReusable in internal/pgstore).
		fm := regexp.MustCompile(`vacuumed the audit table: \d+ pages \(\d+ bytes\) with its indexes before, \d+ pages \(\d+ bytes\) after; about (\d+) pages free`).FindStringSubmatch(out)
		if code != 0 || fm == nil {
			t.Errorf("compact = %d %q", code, out)
		} else if free, _ := strconv.Atoi(fm[1]); free < 500 {
			t.Errorf("compact = %q: about %d pages free after 20,000 of 20,003 entries were removed, want most of the table", out, free)
		}
	} else if fm := regexp.MustCompile(`(\d+) pages freed`).FindStringSubmatch(out); code != 0 || fm == nil || fm[1] == "0" {
		t.Errorf("compact = %d %q, want pages freed", code, out)
	}
	t.Logf("%s (%s)", strings.TrimSpace(out), time.Since(start).Round(time.Millisecond))
}

// TestAuditPruneKeepsTheHighWaterMark: a prune never removes the entry the
// data directory's high-water mark names, which console serve looks up.
func TestAuditPruneKeepsTheHighWaterMark(t *testing.T) {
	r := newAgedRun(t, 40, 0, 1)
	hw, err := highwater.Open(markPath(r.data), r.d.Identity())
	if err != nil {
		t.Fatal(err)
	}
	hash, err := r.d.AuditHashAt(context.Background(), 150)
	if err != nil {
		t.Fatal(err)
	}
	if err := hw.Advance(highwater.Mark{Seq: 150, Head: hash}); err != nil {
		t.Fatal(err)
	}
	hw.Close()
	code, out, errs := auditRun(t, "audit", "prune", "--data", r.data, "--retain", "30d", "--archive", t.TempDir(), "--as", "root")
	if code != 0 || !strings.Contains(out, "high-water mark is at entry 150") {
		t.Fatalf("prune = %d %q %q", code, out, errs)
	}
	if oldest, _ := r.st.OldestEntry(context.Background()); oldest != 1 {
		t.Errorf("the oldest entry is %d after a refused prune, want 1", oldest)
	}
}

// TestAuditPruneRecordsPasskeys: the pruned entry's snapshot names each
// live passkey with the seq and hash of its registration entry, which the
// prune removed.
func TestAuditPruneRecordsPasskeys(t *testing.T) {
	r := newAgedRun(t, 0, 0, 0)
	ctx := context.Background()
	r.c.Set(time.Now().Add(-100 * 24 * time.Hour))
	// The recorded WebAuthn evidence's passkey, registered to alice.
	evRaw, err := os.ReadFile(filepath.Join("..", "..", "internal", "passkey", "testdata", "evidence.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ev struct {
		CallID       string `json:"call_id"`
		Digest       string `json:"digest"`
		CredentialID string `json:"credential_id"`
		PublicKey    string `json:"public_key"`
	}
	if err := json.Unmarshal(evRaw, &ev); err != nil {
		t.Fatal(err)
	}
	credID, _ := base64.RawURLEncoding.DecodeString(ev.CredentialID)
	pub, _ := base64.RawURLEncoding.DecodeString(ev.PublicKey)
	if err := account.NewService(r.d.Accounts(), r.c.Now).AddPasskey(ctx, account.Passkey{ID: credID, User: "alice", Name: "virtual key",
		PublicKey: pub, Record: []byte("{}")}, audit.ChannelWeb); err != nil {
		t.Fatal(err)
	}
	regSeq, regHash, err := r.d.PasskeyRegistration(ctx, ev.CredentialID)
	if err != nil || regSeq != 2 {
		t.Fatalf("registration = %d %q %v", regSeq, regHash, err)
	}
	r.finish(3)
	if _, err := r.st.Checkpoint(ctx, r.key); err != nil {
		t.Fatal(err)
	}
	r.c.Set(time.Now())
	// An approval signed with it, kept by the prune, whose registration
	// the prune removes.
	evv, err := canonical.Parse(evRaw)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.d.AppendAudit(ctx, &audit.Entry{Time: audit.FormatTime(r.c.Now()), Kind: audit.KindApproved, CallID: ev.CallID, Principal: "alice",
		Channel: audit.ChannelWeb, Details: map[string]any{"digest": ev.Digest, "received": int64(1), "required": int64(1), "method": "passkey",
			"human": "true", "evidence": evv}}); err != nil {
		t.Fatal(err)
	}
	r.finish(1)
	if _, err := r.st.Checkpoint(ctx, r.key); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := auditRun(t, "audit", "prune", "--data", r.data, "--retain", "30d", "--archive", t.TempDir(), "--as", "root"); code != 0 || !strings.Contains(out, "removed entries 1 to") {
		t.Fatalf("prune = %d %q %q", code, out, errs)
	}
	code, out, _ := auditRun(t, "audit", "verify", "--data", r.data)
	if code != 0 || !strings.Contains(out, "passkeys: 1 approval signatures re-verified") || strings.Contains(out, "note: the passkey") {
		t.Errorf("verify after the prune = %d\n%s\nwant the approval settled by the pruned entry's snapshot", code, out)
	}
	// So do both verifiers of a pack of what is left.
	left := makePack(t, r.data)
	code, out, _ = auditRun(t, "audit", "verify", left, "--audit-key-fingerprint", fingerprintOf(r.key))
	pcode, pout := pyVerify(t, nil, left, "--audit-key-fingerprint", fingerprintOf(r.key))
	for _, got := range []struct {
		who  string
		code int
		out  string
	}{{"console audit verify", code, out}, {"python", pcode, pout}} {
		if got.code != 0 || !strings.Contains(got.out, "passkeys: 1 approval signatures re-verified") || strings.Contains(got.out, "note: the passkey") {
			t.Errorf("%s of a pack after the prune = %d\n%s\nwant the approval settled by the pruned entry's snapshot", got.who, got.code, got.out)
		}
	}
	var details string
	if err := r.d.SQL().QueryRow(`SELECT details FROM audit WHERE kind = 'pruned'`).Scan(&details); err != nil {
		t.Fatal(err)
	}
	var d struct {
		Snapshot struct {
			ToolsDigest string `json:"tools_digest"`
			Passkeys    []struct {
				User             string `json:"user"`
				RegistrationHash string `json:"registration_hash"`
				RegistrationSeq  int64  `json:"registration_seq"`
			} `json:"passkeys"`
		} `json:"snapshot"`
	}
	if err := json.Unmarshal([]byte(details), &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Snapshot.Passkeys) != 1 || d.Snapshot.Passkeys[0].RegistrationHash != regHash || d.Snapshot.Passkeys[0].RegistrationSeq != 2 ||
		d.Snapshot.Passkeys[0].User != "alice" {
		t.Errorf("the snapshot's passkeys = %+v, want alice's with registration 2 %s", d.Snapshot.Passkeys, regHash)
	}
	if d.Snapshot.ToolsDigest != r.toolsDigest {
		t.Errorf("the snapshot's tools digest = %q, want %q", d.Snapshot.ToolsDigest, r.toolsDigest)
	}
}

// TestAuditPackReachesBackToTheApproval: a pack whose period starts
// between a call's approval and its redemption, with a checkpoint between
// them, starts its chain section before the call's first entry, so that
// the redeemed digest is compared with the approved one.
func TestAuditPackReachesBackToTheApproval(t *testing.T) {
	r := newAgedRun(t, 2, 0, 0)
	ctx := context.Background()
	payer := queue.Principal{Actor: "agent:billing", Audience: "payments-host", TokenID: "tok1"}
	r.c.Set(time.Now().Add(-10 * 24 * time.Hour))
	c := r.submit()
	c, err := r.q.Approve(ctx, "bob", audit.ChannelCLI, c.ID, c.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.st.Checkpoint(ctx, r.key); err != nil {
		t.Fatal(err)
	}
	approvedAt := r.c.Now()
	r.c.Advance(30 * time.Second)
	body, _ := json.Marshal(map[string]any{"grant": c.Grant, "call": map[string]any{"tool": c.Tool, "target": c.Target, "args": c.Args}})
	if red, err := r.q.Redeem(ctx, payer, body); err != nil || !red.Accepted {
		t.Fatalf("redeem = %+v, %v", red, err)
	}
	tl, err := r.st.Timeline(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "pack.tar")
	since := approvedAt.Add(15 * time.Second).UTC().Format(time.RFC3339Nano)
	code, stdout, errs := auditRun(t, "audit", "pack", "--data", r.data, "--since", since, "--until", "2100-01-01", "--out", out)
	if code != 0 {
		t.Fatalf("audit pack = %d %q %q", code, stdout, errs)
	}
	m := regexp.MustCompile(`entries (\d+) to`).FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("audit pack said %q", stdout)
	}
	if from, _ := strconv.ParseInt(m[1], 10, 64); from > tl[0].Seq {
		t.Errorf("the section starts at entry %d, after the call's first entry %d", from, tl[0].Seq)
	}
	if code, stdout, _ := auditRun(t, "audit", "verify", out, "--audit-key-fingerprint", fingerprintOf(r.key)); code != 0 || !strings.Contains(stdout, "redemptions: 1") {
		t.Errorf("verify = %d\n%s", code, stdout)
	}
}

// TestAuditPruneOnPostgres: on PostgreSQL, a prune started while another
// holds the prune lock (a prune under way from another replica's host) is
// refused and removes nothing; once the lock is free, it removes the old
// entries, the trail verifies, and compact vacuums the audit table.
func TestAuditPruneOnPostgres(t *testing.T) {
	url := pgtest.Database(t)
	r := newAgedRunOn(t, url, 5, 0, 1)
	ctx := context.Background()
	other, err := pgstore.Open(ctx, url, pgstore.Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	unlock, err := other.LockPrune(ctx)
	if err != nil {
		t.Fatal(err)
	}
	archive := t.TempDir()
	code, out, errs := r.run(t, "audit", "prune", "--data", r.data, "--retain", "30d", "--archive", archive, "--as", "root")
	unlock()
	if code != 1 || !strings.Contains(errs, "another prune of this database is under way") || !strings.Contains(errs, "nothing was removed") {
		t.Fatalf("prune while another runs = %d %q %q", code, out, errs)
	}
	if oldest, err := r.st.OldestEntry(ctx); err != nil || oldest != 1 {
		t.Fatalf("oldest entry after the refused prune = %d, %v", oldest, err)
	}
	code, out, errs = r.run(t, "audit", "prune", "--data", r.data, "--retain", "30d", "--archive", archive, "--as", "root")
	if m := removedRE.FindStringSubmatch(out); code != 0 || m == nil || m[1] != "1" || m[2] != strconv.Itoa(5*5+1) {
		t.Fatalf("prune = %d %q %q", code, out, errs)
	}
	if code, out, _ := r.run(t, "audit", "verify", "--data", r.data); code != 0 || !strings.Contains(out, "pruned: entries 1 to 26 were removed") {
		t.Fatalf("verify after prune = %d\n%s", code, out)
	}
	if code, out, errs := r.run(t, "compact", "--data", r.data); code != 0 || !strings.Contains(out, "vacuumed the audit table") {
		t.Errorf("compact = %d %q %q", code, out, errs)
	}
}

// TestAuditPruneLeavesAnotherReplicasMark: on PostgreSQL the prune's host
// sees only its own data directory's high-water mark. Another replica
// whose mark names an entry the prune removed still starts (the chain's
// head is past its mark, behind the prune's checkpoint), and its mark
// moves to the head; a mark past the head is still refused.
func TestAuditPruneLeavesAnotherReplicasMark(t *testing.T) {
	url := pgtest.Database(t)
	r := newAgedRunOn(t, url, 5, 0, 1)
	ctx := context.Background()
	other := t.TempDir()
	if err := writeFileAtomic(identityPath(other), []byte(r.st.Identity()+"\n")); err != nil {
		t.Fatal(err)
	}
	hash, err := r.st.AuditHashAt(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	setMark := func(m highwater.Mark) {
		t.Helper()
		hw, err := highwater.Open(markPath(other), r.st.Identity())
		if err != nil {
			t.Fatal(err)
		}
		defer hw.Close()
		if err := hw.Reset(m); err != nil {
			t.Fatal(err)
		}
	}
	setMark(highwater.Mark{Seq: 10, Head: hash})
	if code, out, errs := r.run(t, "audit", "prune", "--data", r.data, "--retain", "30d", "--archive", t.TempDir(), "--as", "root"); code != 0 || !removedRE.MatchString(out) {
		t.Fatalf("prune = %d %q %q", code, out, errs)
	}
	if code, _, errs := auditRun(t, "audit", "accept-rollback", "--as", "root", "--data", other, "--db", url); code != 1 || !strings.Contains(errs, "there is no rollback to accept") {
		t.Errorf("accept-rollback with the mark's entry pruned = %d %q, want nothing to accept", code, errs)
	}
	eng, err := openExisting(ctx, other, url)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	hw, err := openMark(ctx, other, eng)
	if err != nil {
		t.Fatalf("the other replica's mark at a pruned entry: %v", err)
	}
	head, _, _ := r.st.AuditHead(ctx)
	if got := hw.Mark().Seq; got != head {
		t.Errorf("the other replica's mark is at %d, want the head %d", got, head)
	}
	hw.Close()
	setMark(highwater.Mark{Seq: head + 5, Head: hash})
	if hw, err := openMark(ctx, other, eng); err == nil {
		hw.Close()
		t.Fatal("a mark past the head opened")
	}
}

// TestAuditPruneTrustsTheClusterKeys: with several replicas each signs
// checkpoints with its own audit key. A prune whose archive holds a
// checkpoint another replica signed is refused, nothing removed, saying
// to pass the trust file; with it, the prune goes on.
func TestAuditPruneTrustsTheClusterKeys(t *testing.T) {
	url := pgtest.Database(t)
	r := newAgedRunOn(t, url, 3, 0, 0)
	ctx := context.Background()
	otherDir := t.TempDir()
	if code, out, errs := auditRun(t, "keys", "init", "--data", otherDir); code != 0 {
		t.Fatalf("keys init = %d %q %q", code, out, errs)
	}
	other, err := audit.LoadKey(auditKeyPath(otherDir))
	if err != nil {
		t.Fatal(err)
	}
	r.c.Set(time.Now().Add(-90 * 24 * time.Hour))
	r.finish(2)
	if _, err := r.st.Checkpoint(ctx, other); err != nil {
		t.Fatal(err)
	}
	r.c.Set(time.Now())
	r.finish(1)
	archive := t.TempDir()
	code, out, errs := r.run(t, "audit", "prune", "--data", r.data, "--retain", "30d", "--archive", archive, "--as", "root")
	if code != 1 || !strings.Contains(errs, "not a trusted audit key") || !strings.Contains(errs, "--trusted-keys FILE") || !strings.Contains(errs, "nothing was removed") {
		t.Fatalf("prune without the trust file = %d %q %q", code, out, errs)
	}
	if oldest, _ := r.st.OldestEntry(ctx); oldest != 1 {
		t.Fatalf("the oldest entry is %d after a refused prune, want 1", oldest)
	}
	code, jwks, errs := auditRun(t, "keys", "jwks", "--data", otherDir)
	if code != 0 {
		t.Fatalf("keys jwks = %d %q", code, errs)
	}
	trustFile := filepath.Join(t.TempDir(), "trust.json")
	if err := os.WriteFile(trustFile, []byte(jwks), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs = r.run(t, "audit", "prune", "--data", r.data, "--retain", "30d", "--archive", archive, "--as", "root", "--trusted-keys", trustFile)
	if m := removedRE.FindStringSubmatch(out); code != 0 || m == nil || m[1] != "1" {
		t.Fatalf("prune with the trust file = %d %q %q", code, out, errs)
	}
	// The archive verifies with both replicas' fingerprints, with both
	// verifiers, and not with the pruning host's alone.
	packs, _ := filepath.Glob(filepath.Join(archive, "*.tar"))
	if len(packs) != 1 {
		t.Fatalf("archive holds %v", packs)
	}
	both := []string{packs[0], "--audit-key-fingerprint", fingerprintOf(r.key), "--audit-key-fingerprint", fingerprintOf(other)}
	if code, out, _ := auditRun(t, append([]string{"audit", "verify"}, both...)...); code != 0 {
		t.Errorf("verify of the archive with both keys = %d\n%s", code, out)
	}
	if code, out := pyVerify(t, nil, both...); code != 0 {
		t.Errorf("python verify of the archive with both keys = %d\n%s", code, out)
	}
	if code, out, _ := auditRun(t, "audit", "verify", packs[0], "--audit-key-fingerprint", fingerprintOf(r.key)); code == 0 {
		t.Errorf("verify of the archive with the host's key alone = 0\n%s", out)
	}
}
