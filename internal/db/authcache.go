package db

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/queue"
)

// Sessions and API tokens in memory.
//
// Every request with a session reads its session and account, every
// request with an API token reads its token: the same rows, again and
// again, while they almost never change. A DB keeps what it read of them,
// and answers from memory for as long as no account, session or token has
// been written since, by this process or any other on the same database
// file (the command line revokes a token while the console serves):
//
//   - Every connection of every process tells, through SQLite's update
//     hook, when a statement changes a row of users, sessions or tokens.
//     Its transaction then counts one more write begun in the data
//     directory's shared counters (authEpoch, a file beside the database
//     that every process maps into memory), and one more write ended once
//     the connection is out of the transaction, committed or rolled back.
//   - A row read when as many writes had ended as had begun is kept with
//     that count, and used while no write has begun since. A row read
//     while such a write is under way is not kept.
//
// The freezes in force, and an account's passkeys, are kept the same way:
// every call's page shows them, and they change as seldom.
//
// So a revocation, a disabled account or a role changed is seen by the
// first request that starts after its commit, in every process, as a read
// of the database would see it; the counters cost two atomic loads. A
// process killed inside such a transaction leaves its write begun and
// never ended: nothing is kept until every process has closed the
// database and the next one to open it, alone, sets the counters level.
//
// What would let a write go uncounted fails closed instead:
//
//   - Open fails when the counters cannot be opened and mapped; they are
//     named after the database's real path, so that every name of one
//     file counts into one place.
//   - A kept row is used only after a stat shows the counters file is
//     still the one mapped (current): removed or replaced while the
//     process runs, the process reads every row, and refuses its own
//     writes to these tables (it would count them where nobody reads).
//   - Triggers on the tables call countersign_auth_write, which only this
//     package's connections define (connector.Connect): a connection that
//     does not count has its write refused.

// authTables are the tables whose rows the caches hold or depend on: the
// accounts, sessions and tokens, their passkeys, and the freezes in force
// (read by every call's page, written as seldom).
var authTables = map[string]bool{"users": true, "sessions": true, "tokens": true, "freezes": true, "passkeys": true}

// maxAuthCached bounds each cache (sessions, accounts, tokens); a full cache is
// emptied and filled again.
const maxAuthCached = 4096

// authEpoch is the pair of counters shared, through a memory-mapped file,
// by every process that opens the database.
type authEpoch struct {
	f            *os.File
	mem          []byte
	begun, ended *atomic.Uint64
	// path is the counters' file, named after the database file's real
	// path (symbolic links resolved), and dev and ino the file mapped.
	path     string
	pathz    []byte // path, NUL-terminated, for statKey
	dev, ino uint64
	// closed is set before the file is let go of (close).
	closed atomic.Bool
}

// authEpochSuffix names the counters' file after the database file.
const authEpochSuffix = "-auth"

// openAuthEpoch maps the counters' file of the database at dbPath,
// creating it owner-only. It holds a shared lock on the file while open;
// when it finds no other process holding one, it sets the counters level
// (a write begun by a process that died never ends).
//
// The file is named after the database's real path, so that every name of
// one database (a symbolic link to it, or to its directory) counts into
// one file.
func openAuthEpoch(dbPath string) (*authEpoch, error) {
	real, err := filepath.EvalSymlinks(dbPath)
	if err != nil {
		return nil, fmt.Errorf("db: the shared counters of %s: %w", dbPath, err)
	}
	if real, err = filepath.Abs(real); err != nil {
		return nil, fmt.Errorf("db: the shared counters of %s: %w", dbPath, err)
	}
	path := real + authEpochSuffix
	f, err := openCounters(path, os.Getuid())
	if err != nil {
		return nil, fmt.Errorf("db: the shared counters %s: %w", path, err)
	}
	fail := func(err error) (*authEpoch, error) {
		f.Close()
		return nil, fmt.Errorf("db: the shared counters %s: %w", path, err)
	}
	if fi, err := f.Stat(); err != nil {
		return fail(err)
	} else if !fi.Mode().IsRegular() {
		return fail(fmt.Errorf("not a regular file"))
	} else if fi.Size() < authEpochSize {
		if err := f.Truncate(authEpochSize); err != nil {
			return fail(err)
		}
	}
	dev, ino, ok := fileKey(f)
	if !ok {
		return fail(fmt.Errorf("cannot read its device and inode"))
	}
	mem, err := mapShared(f, authEpochSize)
	if err != nil {
		return fail(err)
	}
	e := &authEpoch{f: f, mem: mem, path: path, pathz: append([]byte(path), 0), dev: dev, ino: ino,
		begun: (*atomic.Uint64)(unsafe.Pointer(&mem[0])), ended: (*atomic.Uint64)(unsafe.Pointer(&mem[8]))}
	alone, err := lockShared(f)
	if err != nil {
		e.close()
		return nil, fmt.Errorf("db: lock the shared counters %s: %w", path, err)
	}
	if alone {
		e.ended.Store(e.begun.Load())
	}
	return e, nil
}

// authEpochSize is the counters' file: two 8-byte counters, one page.
const authEpochSize = 4096

func (e *authEpoch) close() {
	if e == nil || e.closed.Swap(true) {
		return
	}
	unmapShared(e.mem)
	e.f.Close()
}

// current reports whether the counters are still those every process
// counts into: open, and the file mapped still the one at their path (not
// removed, nor replaced by another that a process opened since). One
// stat, against a statement's several microseconds; a row kept is used
// only while it holds.
func (e *authEpoch) current() bool {
	if e.closed.Load() {
		return false
	}
	dev, ino, ok := e.statKey()
	return ok && dev == e.dev && ino == e.ino
}

// errCountersReplaced is why a write to accounts, sessions, tokens,
// freezes or passkeys is refused by a process whose counters were removed
// or replaced: other processes would never learn of it.
func (e *authEpoch) errCountersReplaced() error {
	return fmt.Errorf("db: the shared counters file %s was removed or replaced while this process ran, so other processes would not see this write; restart every Countersign process using this database", e.path)
}

// quiet returns how many writes have begun, and whether as many have
// ended: a row read after quiet reported true may be kept with that count.
func (e *authEpoch) quiet() (uint64, bool) {
	if e.closed.Load() {
		return 0, false
	}
	b := e.begun.Load()
	return b, e.ended.Load() == b
}

// authCache keeps rows of one kind by key, each with the count of writes
// begun when it was read.
type authCache[T any] struct {
	mu   sync.Mutex
	rows map[string]authCached[T]
}

type authCached[T any] struct {
	v   T
	tag uint64
}

// get returns the row kept for key, if no write has begun since it was
// read.
func (c *authCache[T]) get(e *authEpoch, key string) (T, bool) {
	var zero T
	if e == nil {
		return zero, false
	}
	c.mu.Lock()
	r, ok := c.rows[key]
	c.mu.Unlock()
	if !ok || e.closed.Load() || e.begun.Load() != r.tag || !e.current() {
		return zero, false
	}
	return r.v, true
}

// through answers key from memory while what was kept holds, else reads
// it with read and keeps a copy when no write to the cached tables was
// under way as it was read; then kept, when given, is told of the row and
// its count, to keep what the row brings with it. clone copies what a
// caller could change in place, on the way in and on the way out.
func (c *authCache[T]) through(e *authEpoch, key string, clone func(T) T, read func() (T, error), kept func(v T, tag uint64)) (T, error) {
	if v, ok := c.get(e, key); ok {
		return clone(v), nil
	}
	var tag uint64
	keep := false
	if e != nil {
		tag, keep = e.quiet()
	}
	v, err := read()
	if err == nil && keep {
		c.put(key, clone(v), tag)
		if kept != nil {
			kept(v, tag)
		}
	}
	return v, err
}

// put keeps v for key with tag, the count quiet returned before v was
// read.
func (c *authCache[T]) put(key string, v T, tag uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rows == nil || len(c.rows) >= maxAuthCached {
		c.rows = make(map[string]authCached[T])
	}
	c.rows[key] = authCached[T]{v: v, tag: tag}
}

// authCaches are a DB's sessions (with their accounts), accounts by name,
// live tokens and the list of freezes in force (one entry, key "").
type authCaches struct {
	sessions authCache[account.Session]
	users    authCache[account.User]
	tokens   authCache[account.Token]
	freezes  authCache[[]queue.Freeze]
	passkeys authCache[[]account.Passkey]
}

// cloneSession, cloneUser and cloneToken copy what a caller could change
// in place.
func cloneSession(s account.Session) account.Session {
	s.User = cloneUser(s.User)
	return s
}

func cloneUser(u account.User) account.User {
	u.Groups = slices.Clone(u.Groups)
	u.Handle = slices.Clone(u.Handle)
	return u
}

func clonePasskeys(pks []account.Passkey) []account.Passkey {
	out := slices.Clone(pks)
	for i := range out {
		out[i].ID, out[i].PublicKey, out[i].Record = slices.Clone(out[i].ID), slices.Clone(out[i].PublicKey), slices.Clone(out[i].Record)
	}
	return out
}

func cloneToken(t account.Token) account.Token {
	t.Owners = slices.Clone(t.Owners)
	return t
}
