package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/testkit"
)

// packHeapBound is how much more heap writing or verifying a pack of ten
// times the entries may take: the calls a pass remembers (8,192 at most,
// each its id, tool and actor: about 2.5 MiB) and the collector's slack.
const packHeapBound = 5 << 20

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
