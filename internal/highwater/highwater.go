// Package highwater keeps a data directory's high-water mark of the audit
// chain: the sequence number and hash of the newest entry this data
// directory has seen committed. It is written durably after every commit
// and before the change is acknowledged, outside the database, so that a
// database restored from an older copy (the same database, its identity
// intact, but behind) is refused at start instead of forgetting which
// grants were redeemed.
//
// The mark is a lower bound of the chain, never more: each replica of a
// shared database keeps its own mark of the shared chain in its own data
// directory, and every mark must be contained in the chain.
package highwater

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/countersign/countersign/internal/store"
)

// Mark is a position on the audit chain: entry Seq has hash Head. The zero
// Mark is the empty chain.
type Mark struct {
	Seq  int64
	Head string
}

func (m Mark) String() string {
	if m.Seq == 0 {
		return "the empty chain"
	}
	return fmt.Sprintf("entry %d (hash %s)", m.Seq, m.Head)
}

// The file holds two fixed-size slots written in turn, each a line of
// text with a generation number and a checksum, so that a write torn by a
// crash leaves the other slot whole; the valid slot of the higher
// generation is the mark.
const (
	slotSize = 192
	magic    = "countersign-highwater/v1"
)

// File is an open mark file. It is safe for concurrent use.
type File struct {
	mu       sync.Mutex
	f        *os.File
	path     string
	identity string
	cur      Mark
	gen      uint64 // the generation of the newest slot
	next     int    // the slot the next write goes to
	refused  atomic.Int64
}

// Open opens (creating if needed, owner-only) the mark file at path for
// the database whose identity is given. A mark recorded for another
// database identity is not this database's: it reads as the empty chain,
// since a data directory started over on purpose has removed its identity
// record.
func Open(path, identity string) (*File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	switch {
	case err == nil:
		// A new file's name is durable only once its directory is synced:
		// without it, a crash soon after could leave no mark at all, which
		// reads as the empty chain and would let an older copy of the
		// database in.
		if err := syncDir(filepath.Dir(path)); err != nil {
			f.Close()
			return nil, fmt.Errorf("highwater: sync the directory of %s: %w", path, err)
		}
	case errors.Is(err, fs.ErrExist):
		f, err = os.OpenFile(path, os.O_RDWR, 0o600)
	}
	if err != nil {
		return nil, fmt.Errorf("highwater: open %s: %w", path, err)
	}
	hw := &File{f: f, path: path, identity: identity}
	var best int
	best, hw.gen, hw.cur = readSlots(f, identity)
	hw.next = (best + 1) % 2
	return hw, nil
}

// Read returns the mark recorded at path for the database whose identity
// is given, creating and changing nothing: the empty chain when the file
// records none for it, an error wrapping fs.ErrNotExist when there is no
// file.
func Read(path, identity string) (Mark, error) {
	f, err := os.Open(path)
	if err != nil {
		return Mark{}, fmt.Errorf("highwater: open %s: %w", path, err)
	}
	defer f.Close()
	_, _, m := readSlots(f, identity)
	return m, nil
}

// readSlots returns the valid slot of identity with the highest
// generation: its index (-1 when none is valid), generation and mark.
func readSlots(f *os.File, identity string) (best int, gen uint64, cur Mark) {
	best = -1
	buf := make([]byte, 2*slotSize)
	n, _ := f.ReadAt(buf, 0)
	for i := range 2 {
		if (i+1)*slotSize > n {
			break
		}
		id, g, m, ok := parseSlot(buf[i*slotSize : (i+1)*slotSize])
		if !ok || id != identity {
			continue
		}
		if best < 0 || g > gen {
			best, gen, cur = i, g, m
		}
	}
	return best, gen, cur
}

// Path is the file's path.
func (hw *File) Path() string { return hw.path }

// Mark returns the recorded mark.
func (hw *File) Mark() Mark {
	hw.mu.Lock()
	defer hw.mu.Unlock()
	return hw.cur
}

// Advance records a commit whose chain head is m, durably (fdatasync)
// before it returns. A head behind the mark, or at the mark with another
// hash, is refused with store.ErrRolledBack and nothing is written:
// the database under the running console was rolled back or replaced.
func (hw *File) Advance(m Mark) error {
	hw.mu.Lock()
	defer hw.mu.Unlock()
	switch {
	case m.Seq < hw.cur.Seq:
		hw.refused.Add(1)
		return fmt.Errorf("%w: a commit ended at %s, but this data directory has seen %s", store.ErrRolledBack, m, hw.cur)
	case m.Seq == hw.cur.Seq && m.Head != hw.cur.Head && m.Seq > 0:
		hw.refused.Add(1)
		return fmt.Errorf("%w: a commit ended at %s, but this data directory has seen entry %d with hash %s", store.ErrRolledBack, m, hw.cur.Seq, hw.cur.Head)
	case m == hw.cur:
		return nil
	}
	return hw.write(m)
}

// Refusals counts the commits Advance refused since the file was opened.
func (hw *File) Refusals() int64 { return hw.refused.Load() }

// Reset records m even when it is behind the mark: a rollback accepted on
// purpose.
func (hw *File) Reset(m Mark) error {
	hw.mu.Lock()
	defer hw.mu.Unlock()
	return hw.write(m)
}

func (hw *File) write(m Mark) error {
	if _, err := hw.f.WriteAt(formatSlot(hw.identity, hw.gen+1, m), int64(hw.next*slotSize)); err != nil {
		return fmt.Errorf("highwater: write %s: %w", hw.path, err)
	}
	if err := datasync(hw.f); err != nil {
		return fmt.Errorf("highwater: sync %s: %w", hw.path, err)
	}
	hw.cur, hw.gen, hw.next = m, hw.gen+1, (hw.next+1)%2
	return nil
}

// syncDir makes the names in the directory at dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Close closes the file.
func (hw *File) Close() error { return hw.f.Close() }

// BehindError is a database whose chain does not contain the mark.
type BehindError struct {
	Mark     Mark // what the data directory has seen
	Database Mark // the database's chain head
	Diverged bool // the chain reaches the mark's entry, with another hash
}

func (e *BehindError) Error() string {
	if e.Diverged {
		return fmt.Sprintf("the database's audit chain holds another history: this data directory recorded %s, "+
			"but the database's entry %d has another hash (its head is %s)", e.Mark, e.Mark.Seq, e.Database)
	}
	return fmt.Sprintf("the database's audit chain is behind this data directory's high-water mark: the database ends at %s, "+
		"but this data directory recorded %s before acknowledging what followed", e.Database, e.Mark)
}

// Check reports whether a database whose chain head is head, and whose
// entry seq has the hash hashAt returns, contains the mark. It returns a
// *BehindError when it does not.
func Check(mark, head Mark, hashAt func(seq int64) (string, error)) error {
	if mark.Seq == 0 {
		return nil
	}
	if head.Seq < mark.Seq {
		return &BehindError{Mark: mark, Database: head}
	}
	h, err := hashAt(mark.Seq)
	if err != nil {
		return err
	}
	if h != mark.Head {
		return &BehindError{Mark: mark, Database: head, Diverged: true}
	}
	return nil
}

func checksum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:8])
}

func formatSlot(identity string, gen uint64, m Mark) []byte {
	head := m.Head
	if head == "" {
		head = "-"
	}
	line := fmt.Sprintf("%s %s %d %d %s", magic, identity, gen, m.Seq, head)
	line += " " + checksum(line)
	out := []byte(line + strings.Repeat(" ", slotSize-1-len(line)) + "\n")
	return out[:slotSize]
}

func parseSlot(b []byte) (identity string, gen uint64, m Mark, ok bool) {
	f := strings.Fields(string(b))
	if len(f) != 6 || f[0] != magic || checksum(strings.Join(f[:5], " ")) != f[5] {
		return "", 0, Mark{}, false
	}
	gen, err := strconv.ParseUint(f[2], 10, 64)
	if err != nil {
		return "", 0, Mark{}, false
	}
	seq, err := strconv.ParseInt(f[3], 10, 64)
	if err != nil || seq < 0 {
		return "", 0, Mark{}, false
	}
	head := f[4]
	if head == "-" {
		head = ""
	}
	return f[1], gen, Mark{Seq: seq, Head: head}, true
}
