package highwater

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/store"
)

func hash(c byte) string { return strings.Repeat(string(c), 64) }

func TestMarkPersists(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit-mark")
	hw, err := Open(path, "id1")
	if err != nil {
		t.Fatal(err)
	}
	if m := hw.Mark(); m != (Mark{}) {
		t.Fatalf("new mark = %v", m)
	}
	for i := int64(1); i <= 5; i++ {
		if err := hw.Advance(Mark{Seq: i, Head: hash(byte('a' + i))}); err != nil {
			t.Fatal(err)
		}
	}
	hw.Close()
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mark file mode: %v %v", fi.Mode(), err)
	}
	hw, _ = Open(path, "id1")
	if m := hw.Mark(); m != (Mark{Seq: 5, Head: hash('f')}) {
		t.Errorf("reopened mark = %v", m)
	}
	hw.Close()
	// Another database's mark is not this one's.
	other, _ := Open(path, "id2")
	if m := other.Mark(); m != (Mark{}) {
		t.Errorf("mark for another identity = %v, want empty", m)
	}
	other.Close()
}

// TestMarkTornWrite: a write cut short by a crash leaves the previous mark.
func TestMarkTornWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit-mark")
	hw, _ := Open(path, "id1")
	hw.Advance(Mark{Seq: 1, Head: hash('a')})
	hw.Advance(Mark{Seq: 2, Head: hash('b')}) // slot 1
	hw.Close()
	f, _ := os.OpenFile(path, os.O_RDWR, 0)
	// The next write goes to slot 0; tear it half way.
	f.WriteAt(formatSlot("id1", 3, Mark{Seq: 3, Head: hash('c')})[:slotSize/2], 0)
	f.Close()
	hw, _ = Open(path, "id1")
	defer hw.Close()
	if m := hw.Mark(); m != (Mark{Seq: 2, Head: hash('b')}) {
		t.Errorf("mark after a torn write = %v, want entry 2", m)
	}
}

// TestMarkAdvanceRefusesGoingBack: a commit that leaves the chain behind the
// mark, or on another history at the mark, is a rollback under the running
// console; Reset accepts one on purpose.
func TestMarkAdvanceRefusesGoingBack(t *testing.T) {
	hw, _ := Open(filepath.Join(t.TempDir(), "audit-mark"), "id1")
	defer hw.Close()
	hw.Advance(Mark{Seq: 10, Head: hash('a')})
	for _, m := range []Mark{{Seq: 9, Head: hash('b')}, {Seq: 10, Head: hash('c')}} {
		if err := hw.Advance(m); !errors.Is(err, store.ErrRolledBack) {
			t.Errorf("Advance(%v) = %v, want ErrRolledBack", m, err)
		}
	}
	if err := hw.Advance(Mark{Seq: 10, Head: hash('a')}); err != nil {
		t.Errorf("the same head again: %v", err)
	}
	// Each refusal is counted (countersign_highwater_refusals_total).
	if n := hw.Refusals(); n != 2 {
		t.Errorf("Refusals() = %d, want the 2 refused", n)
	}
	if err := hw.Reset(Mark{Seq: 4, Head: hash('d')}); err != nil || hw.Mark().Seq != 4 {
		t.Errorf("Reset: %v, mark %v", err, hw.Mark())
	}
}

func TestCheck(t *testing.T) {
	chain := map[int64]string{1: hash('a'), 2: hash('b'), 3: hash('c')}
	at := func(seq int64) (string, error) { return chain[seq], nil }
	head := Mark{Seq: 3, Head: hash('c')}
	for _, tc := range []struct {
		mark     Mark
		behind   bool
		diverged bool
	}{
		{Mark{}, false, false},
		{Mark{Seq: 2, Head: hash('b')}, false, false},
		{Mark{Seq: 3, Head: hash('c')}, false, false},
		{Mark{Seq: 4, Head: hash('d')}, true, false},
		{Mark{Seq: 2, Head: hash('x')}, true, true},
	} {
		err := Check(tc.mark, head, at)
		var be *BehindError
		if got := errors.As(err, &be); got != tc.behind || (got && be.Diverged != tc.diverged) {
			t.Errorf("Check(%v) = %v, want behind %v diverged %v", tc.mark, err, tc.behind, tc.diverged)
		}
	}
}

// BenchmarkAdvance is the cost the mark adds to each commit: one slot
// write and one fsync.
func BenchmarkAdvance(b *testing.B) {
	hw, _ := Open(filepath.Join(b.TempDir(), "audit-mark"), "id1")
	defer hw.Close()
	for i := range b.N {
		if err := hw.Advance(Mark{Seq: int64(i + 1), Head: hash('a')}); err != nil {
			b.Fatal(err)
		}
	}
}
