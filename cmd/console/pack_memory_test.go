package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/testkit"
)

// packHeapBound is how much more heap writing or verifying a pack of ten
// times the entries may take: the calls a pass remembers (8,192 at most,
// each its id, tool and actor: about 2.5 MiB) and what a collection finds
// live because it was allocated while the collection ran (up to 4 MiB
// seen on a loaded machine). Holding the entries would take about 2 KiB
// each: 90 MiB more for the larger pack.
const packHeapBound = 8 << 20

// TestAuditPackMemoryIsFlat: writing a pack and verifying it take about
// the same heap at 1,000 calls (5,000 entries) as at 10,000 (50,000
// entries): both stream, so what they hold does not grow with the range.
func TestAuditPackMemoryIsFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 calls: make test runs it")
	}
	r := newAgedRun(t, 0, 0, 0)
	r.c.Set(time.Now().Add(-24 * time.Hour))
	ctx := context.Background()
	type measure struct {
		entries     int64
		size        int64
		pack, check uint64
		// pyRSS is the Python verifier's peak resident set, in bytes.
		pyRSS int64
	}
	run := func(calls int) measure {
		t.Helper()
		for range calls {
			r.finish(1)
			r.c.Advance(time.Second)
		}
		if _, err := r.d.Checkpoint(ctx, r.key); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(t.TempDir(), "pack.tar")
		var code int
		var stdout, stderr string
		m := measure{}
		m.pack = peakHeap(func() {
			code, stdout, stderr = auditRun(t, "audit", "pack", "--data", r.data, "--since", "2000-01-01", "--until", "2100-01-01", "--out", out)
		})
		if code != 0 {
			t.Fatalf("audit pack = %d\n%s\n%s", code, stdout, stderr)
		}
		m.check = peakHeap(func() {
			code, stdout, stderr = auditRun(t, "audit", "verify", out, "--audit-key-fingerprint", fingerprintOf(r.key))
		})
		if code != 0 || !strings.Contains(stdout, "ok: evidence pack") {
			t.Fatalf("audit verify = %d\n%s\n%s", code, stdout, stderr)
		}
		fi, err := os.Stat(out)
		if err != nil {
			t.Fatal(err)
		}
		m.size = fi.Size()
		m.pyRSS = pyVerifyRSS(t, out, fingerprintOf(r.key))
		m.entries, _, _ = r.d.AuditHead(ctx)
		t.Logf("%d entries, pack %d bytes: writing it took %.1f MiB of heap at most, verifying it %.1f MiB; the Python verifier's peak RSS %.1f MiB",
			m.entries, m.size, float64(m.pack)/(1<<20), float64(m.check)/(1<<20), float64(m.pyRSS)/(1<<20))
		return m
	}
	small := run(1000)
	big := run(9000)
	if big.entries < 9*small.entries {
		t.Fatalf("the second pack covers %d entries, the first %d: want ten times as many", big.entries, small.entries)
	}
	if big.pack > small.pack+packHeapBound {
		t.Errorf("writing a pack of %d entries took %d bytes of heap, of %d entries %d: more than %d apart",
			big.entries, big.pack, small.entries, small.pack, packHeapBound)
	}
	if big.check > small.check+packHeapBound {
		t.Errorf("verifying a pack of %d entries took %d bytes of heap, of %d entries %d: more than %d apart",
			big.entries, big.check, small.entries, small.check, packHeapBound)
	}
	if big.pyRSS > small.pyRSS+pyRSSBound {
		t.Errorf("the Python verifier's peak RSS was %d bytes for a pack of %d entries, %d for %d: more than %d apart",
			big.pyRSS, big.entries, small.pyRSS, small.entries, pyRSSBound)
	}
}

// pyRSSBound is how much more resident memory the Python verifier may
// take for a pack of ten times the entries: its file buffers and the
// allocator's slack.
const pyRSSBound = 8 << 20

// pyVerifyRSS runs the Python verifier on a pack that must verify and
// returns its peak resident set: VmHWM of /proc/self/status as it exits.
// (getrusage's ru_maxrss of a child counts the memory of the process that
// started it, which Go's exec shares until the exec.)
func pyVerifyRSS(t *testing.T, pack, fingerprint string) int64 {
	t.Helper()
	if err := exec.Command("python3", "-c", "import cryptography.hazmat.primitives.asymmetric.ed25519").Run(); err != nil {
		testkit.Need(t, "the Python evidence pack verifier needs python3 and its cryptography package: apt install python3 python3-cryptography")
	}
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc/self/status to read a process's peak memory from")
	}
	const wrapper = `import atexit, runpy, sys
def peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            sys.stderr.write("peak rss kB " + line.split()[1] + "\n")
atexit.register(peak)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
`
	cmd := exec.Command("python3", "-c", wrapper, filepath.Join("..", "..", "scripts", "verify_evidence_pack.py"), pack, "--audit-key-fingerprint", fingerprint)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("python verify = %v\n%s%s", err, stdout.String(), stderr.String())
	}
	m := regexp.MustCompile(`peak rss kB (\d+)`).FindStringSubmatch(stderr.String())
	if m == nil || !strings.Contains(stdout.String(), "ok: evidence pack") {
		t.Fatalf("python verify said\n%s%s", stdout.String(), stderr.String())
	}
	kb, _ := strconv.ParseInt(m[1], 10, 64)
	return kb * 1024
}

// TestAuditPruneMemoryIsFlat: prune runs take about the same heap, however
// many runs came before, however much of the trail is left, and whether a
// run removes 1,000 entries or 7,000.
func TestAuditPruneMemoryIsFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("6,000 calls: make test runs it")
	}
	r := newAgedRun(t, 0, 0, 0)
	ctx := context.Background()
	const calls, round = 6000, 50
	r.c.Set(time.Now().Add(-100*24*time.Hour - time.Duration(calls/round)*time.Hour))
	for done := 0; done < calls; done += round {
		if done%100 == 0 {
			if _, err := r.d.Checkpoint(ctx, r.key); err != nil {
				t.Fatal(err)
			}
		}
		for range round {
			r.submit()
		}
		r.c.Advance(time.Hour)
		if _, err := r.q.ExpireDue(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.d.Checkpoint(ctx, r.key); err != nil {
		t.Fatal(err)
	}
	r.c.Set(time.Now())
	r.finish(1)
	if _, err := r.d.Checkpoint(ctx, r.key); err != nil {
		t.Fatal(err)
	}
	archive := t.TempDir()
	var heaps []uint64
	var runs []string
	// Five runs of at most 1,000 entries, then one of the rest.
	for _, max := range []string{"1000", "1000", "1000", "1000", "1000", "13000"} {
		var code int
		var out, errs string
		heap := peakHeap(func() {
			code, out, errs = auditRun(t, "audit", "prune", "--data", r.data, "--retain", "30d", "--max-entries", max, "--archive", archive, "--as", "root")
		})
		m := removedRE.FindStringSubmatch(out)
		if code != 0 || m == nil {
			t.Fatalf("prune %d = %d %q %q", len(heaps)+1, code, out, errs)
		}
		heaps = append(heaps, heap)
		runs = append(runs, fmt.Sprintf("%s entries: %.1f MiB", m[3], float64(heap)/(1<<20)))
	}
	t.Logf("the heap of each prune run: %s", strings.Join(runs, ", "))
	if lo, hi := slices.Min(heaps), slices.Max(heaps); hi > lo+packHeapBound {
		t.Errorf("prune runs took from %d to %d bytes of heap: more than %d apart", lo, hi, packHeapBound)
	}
}
