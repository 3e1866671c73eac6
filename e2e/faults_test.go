package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/db"
	"github.com/countersign/countersign/internal/testkit"
)

// ledger records what the server acknowledged, to be checked against the
// database after the crashes.
type ledger struct {
	mu        sync.Mutex
	submitted map[string]string // id -> digest, for every 2xx submission
	approved  map[string]string // id -> grant, for every 2xx approval that minted a grant
	accepted  map[string]int    // id -> accepted redemptions
}

func newLedger() *ledger {
	return &ledger{submitted: map[string]string{}, approved: map[string]string{}, accepted: map[string]int{}}
}

// mixedLoad submits, approves over the control socket, and redeems, until
// ctx ends. Errors from a dying server are expected and ignored; only what
// the server acknowledged is recorded.
func mixedLoad(ctx context.Context, a *rawAgent, data string, l *ledger, worker int, seq *atomic.Int64) {
	for ctx.Err() == nil {
		n := seq.Add(1)
		call := fmt.Sprintf(`{"tool":"weather.search","target":"weather:forecast","args":{"city":"K%d"}}`, n)
		r, err := a.submit(ctx, call)
		if err != nil || r.status != http.StatusCreated {
			continue
		}
		id, digest := r.str("id"), r.str("digest")
		l.mu.Lock()
		l.submitted[id] = digest
		l.mu.Unlock()
		ar, err := controlApprove(ctx, data, id, fmt.Sprintf("op%d", worker), digest)
		if err != nil || ar.status != http.StatusOK {
			continue
		}
		c, _ := ar.body["call"].(map[string]any)
		grant, _ := c["grant"].(string)
		l.mu.Lock()
		l.approved[id] = grant
		l.mu.Unlock()
		rr, err := a.redeem(ctx, grant, `{"tool":"weather.search","target":"weather:forecast","args":{"city":"K`+fmt.Sprint(n)+`"}}`)
		if err != nil {
			continue
		}
		if rr.status == http.StatusOK {
			l.mu.Lock()
			l.accepted[id]++
			l.mu.Unlock()
		}
	}
}

// TestKillUnderLoad kills the real server with SIGKILL at random moments
// under mixed load, twenty times, restarting it each time, and then checks
// that nothing acknowledged was lost and nothing was accepted twice.
func TestKillUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: kill loop: kill -9 of the real binary under load, many rounds")
	}
	data := t.TempDir()
	s := startServer(t, data)
	token := s.token("agent:weather", "weather-host")
	for w := 0; w < 4; w++ {
		s.addUser(fmt.Sprintf("op%d", w), "operator")
	}
	l := newLedger()
	var seq atomic.Int64
	const rounds = 20
	for round := 0; round < rounds; round++ {
		if round > 0 {
			s = startServer(t, data)
		}
		a := newRawAgent(s.url, token)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func(w int) { defer wg.Done(); mixedLoad(ctx, a, data, l, w, &seq) }(w)
		}
		time.Sleep(time.Duration(100+rand.IntN(400)) * time.Millisecond)
		s.kill()
		cancel()
		wg.Wait()
	}
	// One more start: the console recovers, and replays are refused.
	s = startServer(t, data)
	a := newRawAgent(s.url, token)
	for id := range l.accepted {
		r, err := a.do(context.Background(), http.MethodGet, "/api/v1/calls/"+id, nil)
		if err != nil || r.str("status") != "redeemed" {
			t.Errorf("accepted call %s: status %q (%v), want redeemed", id, r.str("status"), err)
		}
	}
	s.stop()

	d, err := db.Open(filepath.Join(data, "countersign.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var integrity string
	if err := d.SQL().QueryRow(`PRAGMA integrity_check`).Scan(&integrity); err != nil || integrity != "ok" {
		t.Fatalf("integrity_check = %q, %v", integrity, err)
	}
	for id, digest := range l.submitted {
		var got string
		if err := d.SQL().QueryRow(`SELECT digest FROM calls WHERE id = ?`, id).Scan(&got); err != nil || got != digest {
			t.Errorf("acknowledged call %s lost or changed: %v", id, err)
		}
	}
	for id := range l.approved {
		var status string
		if err := d.SQL().QueryRow(`SELECT status FROM calls WHERE id = ?`, id).Scan(&status); err != nil ||
			(status != "approved" && status != "redeemed") {
			t.Errorf("acknowledged approval of %s: status %q (%v), want approved or redeemed", id, status, err)
		}
	}
	for id, n := range l.accepted {
		if n != 1 {
			t.Errorf("call %s accepted %d times", id, n)
		}
		var rows, redeemed int
		d.SQL().QueryRow(`SELECT COUNT(*) FROM redemptions WHERE call_id = ?`, id).Scan(&rows)
		d.SQL().QueryRow(`SELECT COUNT(*) FROM audit WHERE call_id = ? AND kind = 'redeemed'`, id).Scan(&redeemed)
		if rows != 1 || redeemed != 1 {
			t.Errorf("call %s: %d ledger rows and %d redeemed entries, want 1 and 1", id, rows, redeemed)
		}
	}
	var dupes int
	d.SQL().QueryRow(`SELECT COUNT(*) FROM (SELECT call_id FROM redemptions GROUP BY call_id HAVING COUNT(*) > 1)`).Scan(&dupes)
	if dupes != 0 {
		t.Errorf("%d calls redeemed more than once", dupes)
	}
	count := verifyChain(t, d)
	t.Logf("%d rounds: %d calls acknowledged, %d approvals, %d redemptions accepted; audit chain of %d entries verifies",
		rounds, len(l.submitted), len(l.approved), len(l.accepted), count)
	if len(l.accepted) == 0 {
		t.Error("no redemption was accepted: the load did not exercise the ledger")
	}
}

// verifyChain recomputes the audit chain from the database and its
// checkpoints, and returns the number of entries.
func verifyChain(tb testing.TB, d *db.DB) int64 {
	tb.Helper()
	res, err := d.VerifyChain(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	if !res.OK {
		tb.Fatalf("audit chain does not verify: %v", res.Err)
	}
	return res.Count
}

// mountTmpfs mounts a small tmpfs at dir. Under CI the mount must work; on
// a developer machine without the privilege the test is skipped.
func mountTmpfs(t *testing.T, dir string, size string) {
	t.Helper()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput()
	if err != nil {
		testkit.Need(t, fmt.Sprintf("mounting a tmpfs needs root (run the suite as root, as CI does): %v: %s", err, out))
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
}

// TestDatabaseTrouble fills the file system that holds the database: writes
// fail with 503 and a clear error, nothing is half-written, and the console
// recovers when space is freed. (A read-only remount cannot be tested the
// same way: Linux refuses to remount a file system read-only while the
// server holds its files open for writing.)
func TestDatabaseTrouble(t *testing.T) {
	data := filepath.Join(t.TempDir(), "mnt")
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	mountTmpfs(t, data, "16m")
	s := startServer(t, data)
	a := newRawAgent(s.url, s.token("agent:weather", "weather-host"))
	ctx := context.Background()
	ok := 0
	submit := func(city string, want int) reply {
		t.Helper()
		r, err := a.submit(ctx, `{"tool":"weather.search","target":"weather:forecast","args":{"city":"`+city+`"}}`)
		if err != nil {
			t.Fatalf("submit %s: %v", city, err)
		}
		if r.status != want {
			t.Fatalf("submit %s = %d %s, want %d", city, r.status, r.raw, want)
		}
		if want == http.StatusCreated {
			ok++
		}
		return r
	}
	submit("before", 201)

	// Fill the file system, leaving no room for the next transaction.
	filler := filepath.Join(data, "filler")
	fill := exec.Command("dd", "if=/dev/zero", "of="+filler, "bs=64k")
	fill.Run() // ends with "no space left"
	full := 0
	for i := 0; i < 50; i++ {
		r, err := a.submit(ctx, fmt.Sprintf(`{"tool":"weather.search","target":"weather:forecast","args":{"city":"full %d"}}`, i))
		if err != nil {
			t.Fatal(err)
		}
		if r.status == http.StatusCreated {
			ok++
			continue
		}
		if r.status != http.StatusServiceUnavailable || r.code() != "unavailable" {
			t.Fatalf("disk full: %d %s, want 503 unavailable", r.status, r.raw)
		}
		full++
	}
	if full == 0 {
		t.Fatal("a full disk never refused a write")
	}
	if r := submit("still full", http.StatusServiceUnavailable); !strings.Contains(string(r.raw), "nothing was changed") {
		t.Errorf("disk-full error does not say what happened: %s", r.raw)
	}
	os.Remove(filler)
	submit("after full", 201)
	s.stop()

	d, err := db.Open(filepath.Join(data, "countersign.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var calls, submittedEntries int
	d.SQL().QueryRow(`SELECT COUNT(*) FROM calls`).Scan(&calls)
	d.SQL().QueryRow(`SELECT COUNT(*) FROM audit WHERE kind = 'submitted'`).Scan(&submittedEntries)
	if calls != ok || submittedEntries != ok {
		t.Errorf("%d calls and %d submitted entries stored, want %d acknowledged", calls, submittedEntries, ok)
	}
	var integrity string
	d.SQL().QueryRow(`PRAGMA integrity_check`).Scan(&integrity)
	if integrity != "ok" {
		t.Errorf("integrity_check = %q", integrity)
	}
	verifyChain(t, d)
}

// TestGracefulShutdownUnderLoad stops the server with SIGTERM while agents
// submit and long-poll: every acknowledged write survives and every waiter
// gets an answer.
func TestGracefulShutdownUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: shutdown under load")
	}
	data := t.TempDir()
	s := startServer(t, data)
	token := s.token("agent:weather", "weather-host")
	a := newRawAgent(s.url, token)
	ctx := context.Background()
	// Ten agents long-poll pending calls.
	waits := make(chan error, 10)
	for i := 0; i < 10; i++ {
		r, err := a.submit(ctx, fmt.Sprintf(`{"tool":"weather.search","target":"weather:forecast","args":{"city":"W%d"}}`, i))
		if err != nil || r.status != 201 {
			t.Fatalf("submit: %v %s", err, r.raw)
		}
		go func(id string) {
			r, err := a.do(ctx, http.MethodGet, "/api/v1/calls/"+id+"?wait=60s", nil)
			if err == nil && (r.status != 200 || r.str("status") != "pending") {
				err = fmt.Errorf("waiter got %d %s", r.status, r.raw)
			}
			waits <- err
		}(r.str("id"))
	}
	// Submitters keep going until the server stops.
	var mu sync.Mutex
	acked := map[string]bool{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var seq atomic.Int64
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				r, err := a.submit(ctx, fmt.Sprintf(`{"tool":"weather.search","target":"weather:forecast","args":{"city":"G%d"}}`, seq.Add(1)))
				if err == nil && r.status == 201 {
					mu.Lock()
					acked[r.str("id")] = true
					mu.Unlock()
				}
			}
		}()
	}
	// Stop once the ten long-polls are held and submissions are being
	// acknowledged: a fixed while could end before a long-poll reached the
	// server, and its dial would then fail against the stopped one.
	eventually(t, 30*time.Second, "ten held long-polls and acknowledged submissions", func() bool {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		return openWaiters(s.url) >= 10 && n > 0
	})
	start := time.Now()
	s.stop()
	close(stop)
	wg.Wait()
	// A shutdown that held the long-polls would take their whole 60 s wait.
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("graceful shutdown took %s, half the long-polls' 60 s wait or more", d)
	}
	for i := 0; i < 10; i++ {
		select {
		case err := <-waits:
			if err != nil {
				t.Errorf("waiter: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a waiter was left hanging by the shutdown")
		}
	}
	d, err := db.Open(filepath.Join(data, "countersign.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for id := range acked {
		var n int
		if d.SQL().QueryRow(`SELECT COUNT(*) FROM calls WHERE id = ?`, id).Scan(&n); n != 1 {
			t.Errorf("acknowledged call %s lost in shutdown", id)
		}
	}
	t.Logf("%d acknowledged submissions survived the shutdown", len(acked))
}

// TestSlowClientsAndFloods: a slow-loris client is cut off by the header
// timeout, an oversized body is refused without being buffered, and one
// token flooding invalid proposals does not stop others being served.
func TestSlowClientsAndFloods(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: slow-loris and flood clients")
	}
	// The bound below is on what the flood leaves behind. console serve's
	// GC target (300, cmd/console/gc.go) lets the heap reach four times the
	// live heap between collections, which after start-up's allocations is
	// more slack than the bound; Go's default target measures retention.
	t.Setenv("GOGC", "100")
	s := startServer(t, "")
	good := newRawAgent(s.url, s.token("agent:good", "weather-host"))
	flood := newRawAgent(s.url, s.token("agent:flood", "weather-host"))
	ctx := context.Background()
	addr := strings.TrimPrefix(s.url, "http://")

	// Slow loris: headers that never end.
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n"))
	closed := make(chan time.Duration, 1)
	start := time.Now()
	go func() {
		buf := make([]byte, 512)
		for {
			conn.SetReadDeadline(time.Now().Add(20 * time.Second))
			if _, err := conn.Read(buf); err != nil {
				closed <- time.Since(start)
				return
			}
		}
	}()

	// Oversized body.
	big := `{"tool":"weather.search","target":"weather:forecast","args":{"city":"` + strings.Repeat("x", 10<<20) + `"}}`
	r, err := good.submit(ctx, big)
	if err == nil && (r.status != http.StatusRequestEntityTooLarge || r.code() != "too_large") {
		t.Errorf("10 MiB body = %d %.200s, want 413 too_large", r.status, r.raw)
	}

	// A flood of invalid proposals from one token.
	rssBefore := rssKiB(t, s.pid())
	var floodDone atomic.Bool
	var limited atomic.Int64
	go func() {
		defer floodDone.Store(true)
		for i := 0; i < 2000; i++ {
			r, err := flood.submit(ctx, `{"tool":"weather.search","target":"weather:forecast","args":{"sql":"DROP TABLE x"}}`)
			if err == nil && r.status == http.StatusTooManyRequests {
				limited.Add(1)
			}
		}
	}()
	served := 0
	for i := 0; !floodDone.Load(); i++ {
		r, err := good.submit(ctx, fmt.Sprintf(`{"tool":"weather.search","target":"weather:forecast","args":{"city":"during flood %d"}}`, i))
		if err != nil || r.status != 201 {
			t.Fatalf("good agent refused during the flood: %v %s", err, r.raw)
		}
		// A well-behaved agent withdraws what it no longer needs: it keeps
		// one call waiting, far below its token's bound of pending calls.
		var made struct{ ID string }
		if json.Unmarshal(r.raw, &made) != nil || made.ID == "" {
			t.Fatalf("good agent's call: %s", r.raw)
		}
		if c, err := good.do(ctx, http.MethodDelete, "/api/v1/calls/"+made.ID, nil); err != nil || c.status != http.StatusOK {
			t.Fatalf("good agent cancelling %s: %v %s", made.ID, err, c.raw)
		}
		served++
	}
	rssAfter := rssKiB(t, s.pid())
	t.Logf("during a flood of 2000 invalid proposals (%d refused with retry_limit) the good agent was served %d times; server RSS %d -> %d KiB",
		limited.Load(), served, rssBefore, rssAfter)
	if limited.Load() < 1990 {
		t.Errorf("only %d of 2000 flood proposals hit the retry limit", limited.Load())
	}
	if served == 0 {
		t.Error("the good agent was never served during the flood")
	}
	if rssAfter-rssBefore > 64<<10 {
		t.Errorf("server memory grew by %d KiB during the flood", rssAfter-rssBefore)
	}

	select {
	case d := <-closed:
		if d > 15*time.Second {
			t.Errorf("slow-loris connection held for %s", d)
		}
	case <-time.After(25 * time.Second):
		t.Error("slow-loris connection never closed by the server")
	}
}
