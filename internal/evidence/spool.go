package evidence

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"io"
	"os"
	"strings"
)

// spool is one large file of a pack (the chain, the lineage, the passkey
// files), written to a temporary file before the archive is assembled, so
// that the manifest, which comes first in the archive, can name its size
// and SHA-256 without the file being held in memory. The SHA-256 is
// computed as the bytes are written.
type spool struct {
	f *os.File
	w *bufio.Writer
	h hash.Hash
	n int64
}

func newSpool(dir, name string) (*spool, error) {
	f, err := os.CreateTemp(dir, strings.ReplaceAll(name, "/", "-")+"-*")
	if err != nil {
		return nil, err
	}
	return &spool{f: f, w: bufio.NewWriterSize(f, 1<<16), h: sha256.New()}, nil
}

func (s *spool) Write(p []byte) (int, error) {
	s.h.Write(p)
	s.n += int64(len(p))
	return s.w.Write(p)
}

// reset empties the spool, to write it again.
func (s *spool) reset() error {
	s.w.Reset(s.f)
	s.h.Reset()
	s.n = 0
	if err := s.f.Truncate(0); err != nil {
		return err
	}
	_, err := s.f.Seek(0, io.SeekStart)
	return err
}

// reader flushes what was written and returns a reader of it from the
// start.
func (s *spool) reader() (io.Reader, error) {
	if err := s.w.Flush(); err != nil {
		return nil, err
	}
	return io.NewSectionReader(s.f, 0, s.n), nil
}

func (s *spool) sum() string { return hex.EncodeToString(s.h.Sum(nil)) }

func (s *spool) close() { s.f.Close() }

// fifo is a map of at most max entries that forgets the oldest entry put
// in it when full. The passes over a chain keep what they know of recent
// calls in one and ask the store again for a call they forgot: what they
// hold stays bounded however long the chain is.
type fifo[V any] struct {
	max   int
	m     map[string]V
	order []string
	next  int
}

func newFIFO[V any](max int) *fifo[V] {
	return &fifo[V]{max: max, m: make(map[string]V, max)}
}

func (c *fifo[V]) get(k string) (V, bool) {
	v, ok := c.m[k]
	return v, ok
}

// put remembers v under a copy of k (an entry's call id shares the memory
// of its whole line).
func (c *fifo[V]) put(k string, v V) {
	if _, ok := c.m[k]; ok {
		c.m[k] = v
		return
	}
	k = strings.Clone(k)
	if len(c.order) < c.max {
		c.order = append(c.order, k)
	} else {
		delete(c.m, c.order[c.next])
		c.order[c.next] = k
		c.next = (c.next + 1) % c.max
	}
	c.m[k] = v
}

func (c *fifo[V]) del(k string) { delete(c.m, k) }
