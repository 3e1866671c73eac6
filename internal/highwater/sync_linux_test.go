package highwater

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/countersign/countersign/internal/testkit"
)

// TestAdvanceSyncsWithFdatasync runs Open and three Advances in a child
// process under strace: a new mark file's directory is synced once (the
// only fsync), and each Advance is made durable with fdatasync, not fsync.
func TestAdvanceSyncsWithFdatasync(t *testing.T) {
	if dir := os.Getenv("COUNTERSIGN_HIGHWATER_CHILD"); dir != "" {
		hw, err := Open(filepath.Join(dir, "audit-mark"), "id1")
		if err != nil {
			t.Fatal(err)
		}
		for i := int64(1); i <= 3; i++ {
			if err := hw.Advance(Mark{Seq: i, Head: hash(byte('a' + i))}); err != nil {
				t.Fatal(err)
			}
		}
		hw.Close()
		return
	}
	strace, err := exec.LookPath("strace")
	if err != nil {
		testkit.Need(t, "counting syncs needs strace: apt-get install -y strace")
	}
	dir := t.TempDir()
	trace := filepath.Join(dir, "trace")
	cmd := exec.Command(strace, "-f", "-qq", "-e", "trace=fsync,fdatasync", "-e", "signal=none", "-o", trace,
		os.Args[0], "-test.run=^TestAdvanceSyncsWithFdatasync$", "-test.count=1")
	cmd.Env = append(os.Environ(), "COUNTERSIGN_HIGHWATER_CHILD="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child under strace: %v\n%s", err, out)
	}
	b, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	if failed := regexp.MustCompile(`(?m)= -1 .*$`).FindAll(b, -1); len(failed) > 0 {
		t.Errorf("a sync failed: %s\n%s", failed, b)
	}
	count := func(call string) int { return straceCalls(b, call) }
	if got := count("fdatasync"); got != 3 {
		t.Errorf("fdatasync calls = %d, want 3 (one per Advance)\n%s", got, b)
	}
	if got := count("fsync"); got != 1 {
		t.Errorf("fsync calls = %d, want 1 (the new file's directory)\n%s", got, b)
	}
	if fi, err := os.Stat(filepath.Join(dir, "audit-mark")); err != nil || fi.Size() != 2*slotSize {
		t.Errorf("mark file after three advances: %v %v", fi, err)
	}
}

// straceCalls counts the calls named call in strace's output. A call
// another thread interrupts is written in two lines, "fsync(8
// <unfinished ...>" and "<... fsync resumed>) = 0": it is counted by the
// line that starts it.
func straceCalls(trace []byte, call string) int {
	return len(regexp.MustCompile(`(?m)^\d+\s+`+regexp.QuoteMeta(call)+`\(\d+(\) += 0| <unfinished \.\.\.>)$`).FindAll(trace, -1))
}

// TestStraceCallsCountsInterruptedCalls: a call split over two lines by
// another thread's event counts once, as does a call on one line.
func TestStraceCallsCountsInterruptedCalls(t *testing.T) {
	trace := []byte(`29270 fsync(8 <unfinished ...>
29268 --- SIGURG {si_signo=SIGURG, si_code=SI_TKILL, si_pid=29268, si_uid=0} ---
29270 <... fsync resumed>)              = 0
29270 fdatasync(5)                      = 0
29270 fdatasync(5)                      = 0
`)
	if got := straceCalls(trace, "fsync"); got != 1 {
		t.Errorf("fsync calls = %d, want 1", got)
	}
	if got := straceCalls(trace, "fdatasync"); got != 2 {
		t.Errorf("fdatasync calls = %d, want 2", got)
	}
}
