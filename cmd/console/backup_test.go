package main

import (
	"archive/tar"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/db"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/testkit"
)

// allowanceApp opens the console of a data directory made by allowanceData.
func allowanceApp(t *testing.T, data string) (*app, error) {
	t.Helper()
	return openApp(data, "", filepath.Join(data, "tools.yaml"), nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

func redeemAs(t *testing.T, a *app, p queue.Principal, c *queue.Call) *queue.Redemption {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"grant": c.Grant, "call": map[string]any{"tool": c.Tool, "target": c.Target, "args": c.Args}})
	r, err := a.queue.Redeem(context.Background(), p, body)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestBackupRestoreRollback: a backup taken while the console runs, restored
// after the console went on (a grant its allowance minted was redeemed), is
// refused by serve, says so when restored, and once an admin accepts the
// rollback the allowance alive in the copy is revoked in the admin's name
// (audited) and the redeemed grant is refused.
func TestBackupRestoreRollback(t *testing.T) {
	ctx := context.Background()
	data, alw, covered := allowanceData(t)
	a, err := allowanceApp(t, data)
	if err != nil {
		t.Fatal(err)
	}
	testkit.SeedUsers(t, a.db.accounts, account.RoleAdmin, "adam")
	archive := filepath.Join(t.TempDir(), "backup.tar")
	code, out, errs := userRun(t, "", "backup", "--data", data, "--out", archive)
	for _, want := range []string{"backed up", "database identity  " + a.db.Identity(), "audit chain        ends at entry",
		"keys               not included", "console restore --from " + archive} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("backup = %d %q %q; want it to say %q", code, out, errs, want)
		}
	}
	if fi, err := os.Stat(archive); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("archive mode = %v, %v; want 0600", fi, err)
	}
	if code, _, errs := userRun(t, "", "backup", "--data", data, "--out", archive); code != 1 || !strings.Contains(errs, "exists") {
		t.Errorf("backup over an existing file = %d %q", code, errs)
	}
	payer := queue.Principal{Actor: "agent:billing", Audience: "payments-host"}
	if r := redeemAs(t, a, payer, covered); !r.Accepted {
		t.Fatalf("redeem after the backup: %s", r.Reason)
	}
	a.Close()

	code, out, errs = userRun(t, "", "restore", "--from", archive, "--data", data)
	for _, want := range []string{"restored", "the database it replaces is kept in " + filepath.Join(data, "replaced-"),
		"console serve refuses it until an admin accepts the rollback", "revokes every allowance alive in the copy"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("restore = %d %q %q; want it to say %q", code, out, errs, want)
		}
	}
	if _, err := allowanceApp(t, data); err == nil || !strings.Contains(err.Error(), "behind this data directory's high-water mark") {
		t.Fatalf("serve on the restored copy: %v, want the high-water mark's refusal", err)
	}
	code, out, errs = userRun(t, "", "audit", "accept-rollback", "--as", "adam", "--data", data)
	if want := "the one allowance alive in the restored database (" + alw.ID + ") is revoked"; code != 0 || !strings.Contains(out, want) {
		t.Fatalf("accept-rollback = %d %q %q; want it to say %q", code, out, errs, want)
	}

	a, err = allowanceApp(t, data)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	got, err := a.queue.Allowance(ctx, alw.ID)
	if err != nil || got.EndReason != queue.EndRevoked || got.EndedBy != "adam" {
		t.Errorf("allowance after the rollback: %+v, %v; want revoked by adam", got, err)
	}
	var n int
	if err := a.db.storage.(*db.DB).SQL().QueryRowContext(ctx, `SELECT COUNT(*) FROM audit WHERE kind = 'allowance_revoked'
		AND principal = 'adam' AND details LIKE '%"rollback":true%' AND details LIKE '%`+alw.ID+`%'`).Scan(&n); err != nil || n != 1 {
		t.Errorf("allowance_revoked entries of the rollback = %d, %v; want 1", n, err)
	}
	if r := redeemAs(t, a, payer, covered); r.Accepted || r.Reason != "revoked" {
		t.Errorf("the grant redeemed after the backup: accepted=%v %q, want revoked", r.Accepted, r.Reason)
	}
}

// TestRestoreOnNewHost: a backup with --keys restores into an empty
// directory with the keys, the identity and the mark, and serve starts on
// it; a tampered archive or a directory of another database is refused and
// nothing changes.
func TestRestoreOnNewHost(t *testing.T) {
	data, _, _ := allowanceData(t)
	a, err := allowanceApp(t, data)
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(t.TempDir(), "backup.tar")
	code, out, errs := userRun(t, "", "backup", "--data", data, "--out", archive, "--keys")
	if code != 0 || !strings.Contains(out, "keys               included: keys/ and audit-key") {
		t.Fatalf("backup --keys = %d %q %q", code, out, errs)
	}
	a.Close()

	host := filepath.Join(t.TempDir(), "new")
	code, out, errs = userRun(t, "", "restore", "--from", archive, "--data", host)
	for _, want := range []string{"keys: the archive's keys/ and audit-key are in place", "had no mark of this database", "serve starts on it"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("restore on a new host = %d %q %q; want it to say %q", code, out, errs, want)
		}
	}
	keyFiles, err := keyMembers(data)
	if err != nil || len(keyFiles) == 0 {
		t.Fatalf("the source's keys: %v, %v", keyFiles, err)
	}
	names := []string{"countersign.db", "database-identity", "audit-mark"}
	for _, k := range keyFiles {
		names = append(names, k.name)
		if want, got := mustRead(t, k.path), mustRead(t, filepath.Join(host, k.name)); want != got {
			t.Errorf("restored %s differs from the source's", k.name)
		}
	}
	for _, name := range names {
		if fi, err := os.Stat(filepath.Join(host, name)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, %v; want an owner-only file", name, fi, err)
		}
	}
	if err := os.WriteFile(filepath.Join(host, "tools.yaml"), []byte(allowanceToolsFile), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := allowanceApp(t, host)
	if err != nil {
		t.Fatalf("serve on the restored copy: %v", err)
	}
	if b.db.Identity() != a.db.Identity() {
		t.Errorf("restored identity %s, want %s", b.db.Identity(), a.db.Identity())
	}
	b.Close()

	// Another database's directory is refused.
	other := t.TempDir()
	if code, _, _ := userRun(t, "", "user", "list", "--data", other); code == 0 {
		t.Fatal("user list on an empty directory succeeded")
	}
	od, _, _ := allowanceData(t)
	c, err := allowanceApp(t, od)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if code, _, errs := userRun(t, "", "restore", "--from", archive, "--data", od); code != 1 || !strings.Contains(errs, "belongs to another database") {
		t.Errorf("restore into another database's directory = %d %q", code, errs)
	}

	// A member changed after the manifest was written is refused.
	bad := filepath.Join(t.TempDir(), "bad.tar")
	tamper(t, archive, bad, "countersign.db")
	if code, _, errs := userRun(t, "", "restore", "--from", bad, "--data", filepath.Join(t.TempDir(), "x")); code != 1 || !strings.Contains(errs, "does not match the digest") {
		t.Errorf("restore of a tampered archive = %d %q", code, errs)
	}
}

// tamper copies the archive at from to to with one byte of member name
// flipped.
func tamper(t *testing.T, from, to, name string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	tr, tw := tar.NewReader(in), tar.NewWriter(out)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == name {
			b[len(b)-1] ^= 1
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write(b)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestBackupUnderLoad: backups taken while agents submit calls keep the
// writes' p99 within twice that of the same writers without a backup
// running, in the same run, and refuse nothing. Phases with and without
// backups alternate; a write counts as "with" when it began in a phase
// with backups and overlapped one, and as "without" when it ran in a phase
// without one and overlapped none. Each phase with backups is compared
// with the phases on either side of it, and the median of those ratios is
// held to twice the median spread between those neighbouring phases
// themselves (at least 2): the machine's other load comes in bursts (a test binary
// starting beside this one), and a burst that falls on one phase moves
// that phase's p99 alone, where a p99 pooled over the whole run would take
// it as the backup's. Writers submit at a steady pace rather than as fast
// as they can, so the test measures what a backup adds to a write, not how
// two cores are shared by a flood.
func TestBackupUnderLoad(t *testing.T) {
	const (
		writers = 2
		phases  = 21 // alternating: without, with, without, ..., without
		phase   = 400 * time.Millisecond
		// writeEvery paces each writer.
		writeEvery = 2 * time.Millisecond
	)
	data := t.TempDir()
	a := rollbackApp(t, data)
	defer a.Close()
	ctx := context.Background()
	// A database with some history, so a copy takes several steps.
	for i := range 300 {
		if _, _, err := a.queue.Submit(ctx, rollbackAgent, refundBody(fmt.Sprintf("INV-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	type span struct{ from, to time.Time }
	var (
		mu        sync.Mutex
		writes    []span
		backups   []span
		failed    []error
		n         atomic.Int64
		backingUp atomic.Bool
		stop      atomic.Bool
		out       = t.TempDir()
		wake      = make(chan struct{}, 1)
	)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A steady stream, as agents make it, not a flood that keeps
			// both cores busy by itself: what is measured is what a backup
			// adds to a write, not how the machine shares a saturated CPU.
			tick := time.NewTicker(writeEvery)
			defer tick.Stop()
			for !stop.Load() {
				<-tick.C
				from := time.Now()
				_, _, err := a.queue.Submit(ctx, rollbackAgent, refundBody(fmt.Sprintf("INV-%d%07d", w+1, n.Add(1))))
				to := time.Now()
				mu.Lock()
				if err != nil {
					failed = append(failed, err)
				}
				writes = append(writes, span{from, to})
				mu.Unlock()
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range wake {
			for i := 0; backingUp.Load(); i++ {
				file := filepath.Join(out, fmt.Sprintf("b%d.tar", len(backups)))
				from := time.Now()
				_, err := backup(ctx, data, file, false, time.Now)
				to := time.Now()
				os.Remove(file)
				mu.Lock()
				backups = append(backups, span{from, to})
				if err != nil {
					failed = append(failed, fmt.Errorf("backup: %w", err))
				}
				mu.Unlock()
			}
		}
	}()
	var spans []span // every phase, with backups in the odd ones
	for i := range phases {
		on := i%2 == 1
		from := time.Now()
		backingUp.Store(on)
		if on {
			select {
			case wake <- struct{}{}:
			default: // a backup still running goes on into this phase
			}
		}
		time.Sleep(phase)
		spans = append(spans, span{from, time.Now()})
	}
	backingUp.Store(false)
	close(wake)
	stop.Store(true)
	wg.Wait()
	if len(failed) > 0 {
		t.Fatalf("%d writes or backups failed under load, the first: %v", len(failed), failed[0])
	}
	overlaps := func(w span, in []span) bool {
		for _, s := range in {
			if w.from.Before(s.to) && s.from.Before(w.to) {
				return true
			}
		}
		return false
	}
	// byPhase[i] holds the latencies of the writes that began in phase i
	// and count for it: in a phase with backups those that overlapped one,
	// in a phase without those that overlapped none.
	byPhase := make([][]time.Duration, phases)
	for _, w := range writes {
		i := slices.IndexFunc(spans, func(s span) bool { return !w.from.Before(s.from) && w.from.Before(s.to) })
		if i < 0 || overlaps(w, backups) != (i%2 == 1) {
			continue
		}
		byPhase[i] = append(byPhase[i], w.to.Sub(w.from))
	}
	if len(backups) < phases/2 {
		t.Fatalf("%d backups ran, want at least one a phase", len(backups))
	}
	p99 := func(d []time.Duration) time.Duration {
		d = slices.Clone(d)
		slices.Sort(d)
		return d[len(d)*99/100]
	}
	var ratios, spreads []float64
	var report strings.Builder
	for i := 1; i < phases; i += 2 {
		with, without := byPhase[i], slices.Concat(byPhase[i-1], byPhase[i+1])
		if len(with) < 50 || len(without) < 100 {
			// A phase the machine's other work stalled measures too few
			// writes for a p99: it is left out, and reported.
			fmt.Fprintf(&report, " (phase %d: %d/%d writes, left out)", i, len(with), len(without))
			continue
		}
		r := float64(p99(with)) / float64(p99(without))
		ratios = append(ratios, r)
		fmt.Fprintf(&report, " %v/%v", p99(with).Round(10*time.Microsecond), p99(without).Round(10*time.Microsecond))
		// The machine's own spread: the two phases without backups on
		// either side of this one, the larger p99 over the smaller.
		if before, after := byPhase[i-1], byPhase[i+1]; len(before) >= 50 && len(after) >= 50 {
			a, b := float64(p99(before)), float64(p99(after))
			spreads = append(spreads, max(a, b)/min(a, b))
		}
	}
	if len(ratios) < (phases/2+1)/2 {
		t.Fatalf("only %d of %d phases with backups measured at least 50 writes during them and 100 beside them:%s", len(ratios), phases/2, report.String())
	}
	slices.Sort(ratios)
	median := ratios[len(ratios)/2]
	// On a quiet machine two phases without backups differ little and the
	// limit is 2; when the machine's other work makes them differ by a
	// factor s (the median of those spreads), the limit is 2s: what a
	// backup adds must stand out from what the machine does by itself. A
	// backup that held writers up (a lock across steps, a sync per step)
	// multiplies the p99 by ten or more.
	spread := 1.0
	if len(spreads) > 0 {
		slices.Sort(spreads)
		spread = max(1, spreads[len(spreads)/2])
	}
	limit := 2 * spread
	t.Logf("%d backups; write p99 during backups / beside them, phase by phase:%s; median ratio %.2f; the machine's own spread between phases %.2f, limit %.2f", len(backups), report.String(), median, spread, limit)
	if median > limit {
		t.Errorf("write p99 during backups is %.2f times that beside them (median of %d phases), more than %.2f (twice the machine's own spread between phases without backups, %.2f)", median, len(ratios), limit, spread)
	}
}

func refundBody(invoice string) []byte {
	return []byte(`{"tool":"payments.refund","target":"invoice:` + invoice + `","args":{"amount_minor":1299,"currency":"USD","reason_code":"duplicate"}}`)
}
