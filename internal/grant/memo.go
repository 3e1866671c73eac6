package grant

import (
	"crypto/sha256"
	"sync"
	"time"
)

// signedMemo remembers the grants a keyring signed, by the SHA-256 of
// their compact form, so that redeeming one does not check again, with
// Ed25519, a signature this process made moments before: a presented grant
// whose bytes hash to one it signed with key kid is those bytes, and their
// signature is valid. Only the signature's arithmetic is skipped: Verify
// still checks the shape, that the key id may verify at the time of
// redemption (a key retired since is refused as for any grant), and every
// claim. A grant signed by another process (another replica, or this one
// before a restart) is not remembered and is verified in full, as is one
// forgotten.
//
// Two generations of at most memoSize grants each: the older is dropped
// when the newer is full or older than a grant's longest life (MaxTTL),
// so the memo holds at most 2 × memoSize hashes (about 4 MiB).
type signedMemo struct {
	mu        sync.Mutex
	cur, prev map[[sha256.Size]byte]string // → key id
	since     time.Time                    // when cur was started
}

// memoSize bounds each generation of signedMemo (a variable for tests).
var memoSize = 1 << 15

// add remembers token, signed with kid.
func (m *signedMemo) add(token, kid string) {
	h := sha256.Sum256([]byte(token))
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur == nil || len(m.cur) >= memoSize || time.Since(m.since) > MaxTTL {
		m.prev, m.cur, m.since = m.cur, make(map[[sha256.Size]byte]string), time.Now()
	}
	m.cur[h] = kid
}

// signed reports whether token is one that was signed with kid and is
// still remembered.
func (m *signedMemo) signed(token, kid string) bool {
	h := sha256.Sum256([]byte(token))
	m.mu.Lock()
	defer m.mu.Unlock()
	if k, ok := m.cur[h]; ok {
		return k == kid
	}
	k, ok := m.prev[h]
	return ok && k == kid
}
