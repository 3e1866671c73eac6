package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
		m.entries, _, _ = r.d.AuditHead(ctx)
		t.Logf("%d entries, pack %d bytes: writing it took %.1f MiB of heap at most, verifying it %.1f MiB",
			m.entries, m.size, float64(m.pack)/(1<<20), float64(m.check)/(1<<20))
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
}
