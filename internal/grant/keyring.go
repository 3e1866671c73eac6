package grant

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/countersign/countersign/internal/canonical"
)

// Key states, as Keys reports them.
const (
	// StateCurrent is the key that signs new grants.
	StateCurrent = "current"
	// StateVerifying is a rotated key that still verifies the grants it
	// signed, until RetiredAt.
	StateVerifying = "verifying"
	// StateRetired is a key that verifies nothing any more.
	StateRetired = "retired"
	// StateNext is a prepared key (Prepare): it verifies, so that it can
	// be published to the other replicas' trust files, and signs nothing
	// until it is activated (Activate).
	StateNext = "next"
)

// Errors of a rotation in two steps.
var (
	// ErrNoNextKey is Activate without a prepared key.
	ErrNoNextKey = errors.New("grant: no next key is prepared; prepare one first (console keys rotate --prepare)")
	// ErrNextKeyPrepared is a one-step Rotate while a next key is
	// prepared: its public key may be published already, so it is the
	// one to activate.
	ErrNextKeyPrepared = errors.New("grant: a next key is prepared; activate it (console keys rotate --activate)")
)

// Errors of opening a keyring that must, or must not, be there.
var (
	// ErrNoKeyring is OpenExistingKeyring on a directory that holds no
	// keyring (no key index).
	ErrNoKeyring = errors.New("grant: no keyring in the key directory")
	// ErrKeyringExists is CreateKeyring on a directory that holds one.
	ErrKeyringExists = errors.New("grant: the key directory holds a keyring already")
)

// Files in the key directory.
const (
	indexFile = "keys.json" // every key's id, public key and times
	lockFile  = ".lock"     // flock'd: shared by Mint and reloads, exclusive by Rotate
	seedExt   = ".pem"      // <kid>.pem: the current (and the next) key's PKCS #8 private key
)

// RefreshInterval is how often Verify, Keys and JWKS look for a rotation
// made by another process. Mint looks on every call.
const RefreshInterval = time.Second

// KeyInfo describes one signing key.
type KeyInfo struct {
	KID     string    `json:"kid"`
	State   string    `json:"state"`
	Created time.Time `json:"created"`
	// RotatedAt is when the key stopped signing; zero while it is current.
	RotatedAt time.Time `json:"rotated_at"`
	// RetiredAt is RotatedAt + MaxTTL, when the last grant the key could
	// have signed expires and the key stops verifying; zero while current.
	RetiredAt time.Time `json:"retired_at"`
	// PublicKey is the Ed25519 public key.
	PublicKey ed25519.PublicKey `json:"-"`
}

// key is one signing key in memory.
type key struct {
	kid       string
	pub       ed25519.PublicKey
	priv      ed25519.PrivateKey // the current key's only
	created   time.Time
	rotatedAt time.Time // zero while current or next
	next      bool      // prepared: verifies, signs nothing yet
}

// retiresAt is when the key stops verifying; zero while current.
func (k *key) retiresAt() time.Time {
	if k.rotatedAt.IsZero() {
		return time.Time{}
	}
	return k.rotatedAt.Add(MaxTTL)
}

// verifiesAt reports whether the key may verify a grant at t.
func (k *key) verifiesAt(t time.Time) bool {
	return k.rotatedAt.IsZero() || t.Before(k.retiresAt())
}

func (k *key) info(now time.Time) KeyInfo {
	state := StateCurrent
	switch {
	case k.next:
		state = StateNext
	case k.rotatedAt.IsZero():
	case k.verifiesAt(now):
		state = StateVerifying
	default:
		state = StateRetired
	}
	return KeyInfo{KID: k.kid, State: state, Created: k.created, RotatedAt: k.rotatedAt,
		RetiredAt: k.retiresAt(), PublicKey: k.pub}
}

// Keyring holds the Ed25519 keys that sign and verify grants. The keys live
// in one directory (mode 0700): an index of every key's id, public key and
// times, and the current key's private key in a file only the owner can
// read (0600). Several processes may share the directory; a rotation by
// one is seen by the others. A Keyring is safe for concurrent use.
type Keyring struct {
	dir    string
	issuer string
	now    func() time.Time

	mu    sync.RWMutex
	keys  []*key // oldest first; the last is current
	next  *key   // the prepared key, nil when none; its private key is not held
	stamp os.FileInfo

	lastCheck atomic.Int64 // monotonic nanoseconds of the last look at the index
	epoch     time.Time    // origin of lastCheck

	trust *trustFile // the other replicas' keys (Trust); guarded by mu

	signedHere signedMemo   // the grants Mint signed (see signedMemo)
	fullChecks atomic.Int64 // signatures checked with Ed25519 by Verify
}

// OpenKeyring opens the key directory dir for grants issued by issuer,
// creating the directory (0700) and a first key when there is none. now
// is the clock of minting, rotation and key states; nil means time.Now.
// A directory or private key file that group or others may read is
// refused.
func OpenKeyring(dir string, issuer string, now func() time.Time) (*Keyring, error) {
	return openKeyring(dir, issuer, now, openOrCreate)
}

// OpenExistingKeyring opens the keyring in dir as OpenKeyring does, but
// creates nothing and removes nothing: ErrNoKeyring when dir holds none.
// It is for commands that only read the keys.
func OpenExistingKeyring(dir string, issuer string, now func() time.Time) (*Keyring, error) {
	return openKeyring(dir, issuer, now, openOnly)
}

// CreateKeyring creates the keyring in dir (the directory, 0700, and a
// first key) and opens it: ErrKeyringExists, with nothing changed, when
// dir holds one already.
func CreateKeyring(dir string, issuer string, now func() time.Time) (*Keyring, error) {
	return openKeyring(dir, issuer, now, createOnly)
}

// openMode says whether openKeyring creates the keyring, and whether one
// may be there already.
type openMode int

const (
	openOrCreate openMode = iota
	openOnly
	createOnly
)

func openKeyring(dir string, issuer string, now func() time.Time, mode openMode) (*Keyring, error) {
	if issuer == "" {
		return nil, errors.New("grant: empty issuer")
	}
	if now == nil {
		now = time.Now
	}
	if mode != openOnly {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("grant: key directory: %w", err)
		}
	}
	fi, err := os.Stat(dir)
	if mode == openOnly && errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w (%s does not exist)", ErrNoKeyring, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("grant: key directory: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("grant: %s is not a directory", dir)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("grant: key directory %s has mode %04o; want 0700", dir, fi.Mode().Perm())
	}
	k := &Keyring{dir: dir, issuer: issuer, now: now, epoch: time.Now()}
	if mode == openOnly {
		// Not even the lock file is made in a directory without a keyring.
		if _, err := os.Stat(filepath.Join(dir, indexFile)); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w (%s has no %s)", ErrNoKeyring, dir, indexFile)
		}
	}
	lock := lockExclusive
	if mode == openOnly {
		lock = lockShared
	}
	unlock, err := k.lock(lock)
	if err != nil {
		return nil, err
	}
	defer unlock()
	keys, next, stamp, err := k.load(true)
	switch {
	case err == nil && mode == createOnly:
		return nil, fmt.Errorf("%w (%s)", ErrKeyringExists, dir)
	case errors.Is(err, fs.ErrNotExist) && mode == openOnly:
		return nil, fmt.Errorf("%w (%s has no %s)", ErrNoKeyring, dir, indexFile)
	case errors.Is(err, fs.ErrNotExist):
		keys, stamp, err = k.write(nil)
	}
	if err != nil {
		return nil, err
	}
	if mode != openOnly {
		if err := k.removeStaleSeeds(keys, next); err != nil {
			return nil, err
		}
	}
	k.keys, k.next, k.stamp = keys, next, stamp
	k.lastCheck.Store(int64(time.Since(k.epoch)))
	return k, nil
}

// Dir returns the key directory.
func (k *Keyring) Dir() string { return k.dir }

// Issuer returns the iss of the grants this keyring mints and accepts.
func (k *Keyring) Issuer() string { return k.issuer }

// current returns the signing key. k.mu must be held.
func (k *Keyring) current() *key {
	if len(k.keys) == 0 {
		return nil
	}
	return k.keys[len(k.keys)-1]
}

// SigningKey describes the key that signs new grants, or says why there is
// none (its private key file is missing: rotating mends that).
func (k *Keyring) SigningKey() (KeyInfo, error) {
	unlock, err := k.lock(lockShared)
	if err != nil {
		return KeyInfo{}, err
	}
	defer unlock()
	if err := k.refresh(); err != nil {
		return KeyInfo{}, err
	}
	k.mu.RLock()
	defer k.mu.RUnlock()
	cur := k.current()
	if cur.priv == nil {
		return KeyInfo{}, fmt.Errorf("grant: %s: private key of %s is missing; rotate to make a new key", k.dir, cur.kid)
	}
	return cur.info(k.now()), nil
}

// Rotate makes a new key current. The old key stops signing now and keeps
// verifying until now + MaxTTL; its private key is deleted at once, since
// it will never sign again. Rotate excludes Mint in every process sharing
// the directory while it runs. It refuses with ErrNextKeyPrepared while a
// next key is prepared.
func (k *Keyring) Rotate() (KeyInfo, error) {
	unlock, err := k.lock(lockExclusive)
	if err != nil {
		return KeyInfo{}, err
	}
	defer unlock()
	k.mu.Lock()
	defer k.mu.Unlock()
	keys, next, _, err := k.load(false)
	if err != nil {
		return KeyInfo{}, err
	}
	if next != nil {
		return KeyInfo{}, ErrNextKeyPrepared
	}
	keys, stamp, err := k.write(keys)
	if err != nil {
		return KeyInfo{}, err
	}
	return k.installed(keys, nil, stamp)
}

// installed makes keys and next the keyring's after they were written,
// and removes the private keys nothing needs any more. The caller holds
// the exclusive directory lock and k.mu.
func (k *Keyring) installed(keys []*key, next *key, stamp os.FileInfo) (KeyInfo, error) {
	k.keys, k.next, k.stamp = keys, next, stamp
	k.lastCheck.Store(int64(time.Since(k.epoch)))
	if err := k.removeStaleSeeds(keys, next); err != nil {
		return KeyInfo{}, err
	}
	return k.current().info(k.now()), nil
}

// Prepare makes the next key: it verifies from now on (Keys, JWKS and the
// trust file part list it, state StateNext) and signs nothing until
// Activate. Publishing it to every replica's trust file before activating
// it means no replica ever sees a grant of a key it does not trust. A key
// prepared already is returned as it is, since it may be published
// already, unless its private key is missing: then a new one replaces it.
func (k *Keyring) Prepare() (KeyInfo, error) {
	unlock, err := k.lock(lockExclusive)
	if err != nil {
		return KeyInfo{}, err
	}
	defer unlock()
	k.mu.Lock()
	defer k.mu.Unlock()
	keys, next, _, err := k.load(false)
	if err != nil {
		return KeyInfo{}, err
	}
	if next != nil {
		if _, err := k.readSeed(next); err == nil {
			k.keys, k.next = keys, next
			return next.info(k.now()), nil
		}
		// Its private key is gone or unreadable: it could never sign, so a
		// new next key replaces it.
	}
	nk, err := k.generate()
	if err != nil {
		return KeyInfo{}, err
	}
	stamp, err := k.writeIndex(keys, nk)
	if err != nil {
		return KeyInfo{}, err
	}
	nk.priv = nil
	if _, err := k.installed(keys, nk, stamp); err != nil {
		return KeyInfo{}, err
	}
	return nk.info(k.now()), nil
}

// Activate makes the prepared key current, as Rotate makes a new one: the
// old key stops signing now, verifies until now + MaxTTL, and its private
// key is deleted. ErrNoNextKey when none is prepared.
func (k *Keyring) Activate() (KeyInfo, error) {
	unlock, err := k.lock(lockExclusive)
	if err != nil {
		return KeyInfo{}, err
	}
	defer unlock()
	k.mu.Lock()
	defer k.mu.Unlock()
	keys, next, _, err := k.load(false)
	if err != nil {
		return KeyInfo{}, err
	}
	if next == nil {
		return KeyInfo{}, ErrNoNextKey
	}
	if next.priv, err = k.readSeed(next); err != nil {
		return KeyInfo{}, fmt.Errorf("%w; prepare again to replace the next key, and publish that one", err)
	}
	keys = append(rotated(keys, k.now()), next)
	stamp, err := k.writeIndex(keys, nil)
	if err != nil {
		return KeyInfo{}, err
	}
	return k.installed(keys, nil, stamp)
}

// NextKey describes the prepared key, if there is one.
func (k *Keyring) NextKey() (KeyInfo, bool) {
	k.maybeRefresh()
	k.mu.RLock()
	defer k.mu.RUnlock()
	if k.next == nil {
		return KeyInfo{}, false
	}
	return k.next.info(k.now()), true
}

// Keys describes every key, newest first (a prepared next key before the
// current one), as of the keyring's clock.
func (k *Keyring) Keys() []KeyInfo {
	k.maybeRefresh()
	now := k.now()
	k.mu.RLock()
	defer k.mu.RUnlock()
	out := make([]KeyInfo, 0, len(k.keys)+1)
	if k.next != nil {
		out = append(out, k.next.info(now))
	}
	for i := len(k.keys) - 1; i >= 0; i-- {
		out = append(out, k.keys[i].info(now))
	}
	return out
}

// JWK is one public key as RFC 7517 and RFC 8037 spell it.
type JWK struct {
	KTY string `json:"kty"`
	CRV string `json:"crv"`
	X   string `json:"x"`
	KID string `json:"kid"`
	ALG string `json:"alg"`
	USE string `json:"use"`
}

// JWKS returns the JSON Web Key Set (RFC 7517) of the keys that may still
// verify a live grant, as of the keyring's clock: its own, newest first,
// then the trust file's (Trust) that are not its own.
func (k *Keyring) JWKS() []byte {
	var set struct {
		Keys []JWK `json:"keys"`
	}
	set.Keys = k.OwnJWKs()
	own := map[string]bool{}
	for _, ki := range k.Keys() {
		own[ki.KID] = true
	}
	if t := k.TrustSet(); t != nil {
		for _, j := range t.Keys {
			if !own[j.KID] {
				set.Keys = append(set.Keys, j)
			}
		}
	}
	b, err := json.Marshal(set)
	if err != nil {
		panic("grant: marshal JWKS: " + err.Error()) // plain strings only
	}
	return b
}

// OwnJWKs lists the keyring's own keys that may still verify a live grant,
// newest first: what this replica adds to a cluster's trust file.
func (k *Keyring) OwnJWKs() []JWK {
	out := []JWK{}
	for _, ki := range k.Keys() {
		if ki.State == StateRetired {
			continue
		}
		out = append(out, JWK{KTY: "OKP", CRV: "Ed25519", X: b64.EncodeToString(ki.PublicKey),
			KID: ki.KID, ALG: Algorithm, USE: "sig"})
	}
	return out
}

// verifyingKey returns the public key kid names if it may verify at now.
// An id not known here makes the keyring look at the directory at once
// (waiting for a rotation in progress), since another process may have
// just rotated.
func (k *Keyring) verifyingKey(kid string, now time.Time) (ed25519.PublicKey, bool) {
	k.maybeRefresh()
	pub, found, ok := k.lookup(kid, now)
	if found {
		return pub, ok
	}
	// Another replica's key, from the trust file, before looking at the
	// directory again: the common case with several replicas.
	if t := k.trustFile(); t != nil {
		if pub, ok := t.lookup(kid); ok {
			return pub, true
		}
	}
	if unlock, err := k.lock(lockShared); err == nil {
		k.refresh() // on error the keys in memory stay as they were
		unlock()
	}
	pub, _, ok = k.lookup(kid, now)
	return pub, ok
}

func (k *Keyring) lookup(kid string, now time.Time) (pub ed25519.PublicKey, found, ok bool) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	if k.next != nil && k.next.kid == kid {
		return k.next.pub, true, true
	}
	for _, key := range k.keys {
		if key.kid == kid {
			return key.pub, true, key.verifiesAt(now)
		}
	}
	return nil, false, false
}

// maybeRefresh looks at the index if it has not done so for
// RefreshInterval. It never waits for a rotation in progress.
func (k *Keyring) maybeRefresh() {
	last := k.lastCheck.Load()
	now := int64(time.Since(k.epoch))
	if now-last < int64(RefreshInterval) || !k.lastCheck.CompareAndSwap(last, now) {
		return
	}
	unlock, err := k.lock(lockSharedNoWait)
	if err != nil {
		return
	}
	defer unlock()
	k.refresh() // on error the keys in memory stay as they were
}

// refresh reloads the index when it changed since it was loaded, or when
// the current private key is missing. The caller holds the directory lock.
func (k *Keyring) refresh() error {
	k.lastCheck.Store(int64(time.Since(k.epoch)))
	fi, err := os.Stat(filepath.Join(k.dir, indexFile))
	if err != nil {
		return fmt.Errorf("grant: key index: %w", err)
	}
	k.mu.RLock()
	same := sameFile(fi, k.stamp) && k.current() != nil && k.current().priv != nil
	k.mu.RUnlock()
	if same {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	keys, next, stamp, err := k.load(true)
	if err != nil {
		return err
	}
	k.keys, k.next, k.stamp = keys, next, stamp
	return nil
}

func sameFile(a, b os.FileInfo) bool {
	return a != nil && b != nil && os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

// load reads the index (the keys and the prepared next key, nil when
// none) and, withSeed, the current private key. A missing private key
// leaves the keyring unable to sign (Mint fails, a rotation mends it); one
// that others may read, or that does not match the index, is an error. The
// caller holds the directory lock, shared or exclusive.
func (k *Keyring) load(withSeed bool) ([]*key, *key, os.FileInfo, error) {
	path := filepath.Join(k.dir, indexFile)
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("grant: key index: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("grant: key index: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, nil, nil, fmt.Errorf("grant: %s has mode %04o; want 0600", path, fi.Mode().Perm())
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("grant: key index: %w", err)
	}
	keys, next, err := parseIndex(data)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("grant: %s: %w", path, err)
	}
	if !withSeed {
		return keys, next, fi, nil
	}
	cur := keys[len(keys)-1]
	cur.priv, err = k.readSeed(cur)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil, err
	}
	return keys, next, fi, nil
}

// readSeed reads and checks the private key of k.
func (k *Keyring) readSeed(cur *key) (ed25519.PrivateKey, error) {
	path := filepath.Join(k.dir, cur.kid+seedExt)
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("grant: private key of %s: %w", cur.kid, err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("grant: %s has mode %04o; want 0600", path, fi.Mode().Perm())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("grant: private key of %s: %w", cur.kid, err)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("grant: %s: not a PEM private key", path)
	}
	pk, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("grant: %s: %w", path, err)
	}
	priv, ok := pk.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("grant: %s: not an Ed25519 key", path)
	}
	if !priv.Public().(ed25519.PublicKey).Equal(cur.pub) {
		return nil, fmt.Errorf("grant: %s does not match the public key of %s in the index", path, cur.kid)
	}
	return priv, nil
}

// write adds a new current key to keys (rotating the one before it) and
// writes its private key and then the index, each atomically. The caller
// holds the exclusive directory lock.
func (k *Keyring) write(keys []*key) ([]*key, os.FileInfo, error) {
	nk, err := k.generate()
	if err != nil {
		return nil, nil, err
	}
	nk.next = false
	keys = append(rotated(keys, nk.created), nk)
	fi, err := k.writeIndex(keys, nil)
	if err != nil {
		return nil, nil, err
	}
	return keys, fi, nil
}

// generate makes a new key and writes its private key atomically; it is
// marked next until it is made current. The caller holds the exclusive
// directory lock.
func (k *Keyring) generate() (*key, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("grant: generate key: %w", err)
	}
	nk := &key{kid: newKID(), pub: pub, priv: priv, created: k.now(), next: true}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, fmt.Errorf("grant: encode key: %w", err)
	}
	seed := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	if err := writeFileAtomic(k.dir, nk.kid+seedExt, seed); err != nil {
		return nil, err
	}
	return nk, nil
}

// rotated copies keys with every key not rotated yet rotated at now, and
// no private keys.
func rotated(keys []*key, now time.Time) []*key {
	out := make([]*key, 0, len(keys)+1)
	for _, old := range keys {
		c := *old
		if c.rotatedAt.IsZero() {
			c.rotatedAt = now
		}
		c.priv = nil
		out = append(out, &c)
	}
	return out
}

// writeIndex writes the index of keys and the next key (nil for none)
// atomically. The caller holds the exclusive directory lock.
func (k *Keyring) writeIndex(keys []*key, next *key) (os.FileInfo, error) {
	if next != nil {
		next.next = true
	}
	if cur := keys[len(keys)-1]; cur.next {
		c := *cur
		c.next = false
		keys[len(keys)-1] = &c
	}
	data, err := encodeIndex(keys, next)
	if err != nil {
		return nil, err
	}
	if err := writeFileAtomic(k.dir, indexFile, data); err != nil {
		return nil, err
	}
	fi, err := os.Stat(filepath.Join(k.dir, indexFile))
	if err != nil {
		return nil, fmt.Errorf("grant: key index: %w", err)
	}
	return fi, nil
}

// removeStaleSeeds deletes every private key file but the current key's
// and the next key's, and temporary files that a crash left behind. The
// caller holds the exclusive directory lock.
func (k *Keyring) removeStaleSeeds(keys []*key, next *key) error {
	entries, err := os.ReadDir(k.dir)
	if err != nil {
		return fmt.Errorf("grant: key directory: %w", err)
	}
	keep := map[string]bool{keys[len(keys)-1].kid + seedExt: true}
	if next != nil {
		keep[next.kid+seedExt] = true
	}
	removed := false
	for _, e := range entries {
		name := e.Name()
		stale := strings.HasSuffix(name, seedExt) && !keep[name] || strings.HasPrefix(name, tempPrefix)
		if !stale {
			continue
		}
		if err := os.Remove(filepath.Join(k.dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("grant: remove %s: %w", name, err)
		}
		removed = true
	}
	if removed {
		return syncDir(k.dir)
	}
	return nil
}

// newKID returns a random key id: 96 bits as 16 base64url characters, not
// starting with '-' so that it never reads as a command-line flag.
func newKID() string {
	var b [12]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			panic("grant: crypto/rand failed: " + err.Error())
		}
		if s := b64.EncodeToString(b[:]); s[0] != '-' {
			return s
		}
	}
}

// The index, keys.json, is one JSON object:
//
//	{"keys":[{"created":RFC3339,"kid":string,"rotated_at":RFC3339,"x":base64url}],"next":{...},"v":1}
//
// oldest key first; only the last key, the current one, has no rotated_at.
// "next", present only while a next key is prepared, is that key
// (created, kid, x).
func encodeIndex(keys []*key, next *key) ([]byte, error) {
	entry := func(k *key) (canonical.Object, error) {
		ms := []canonical.Member{
			{Name: "kid", Value: k.kid},
			{Name: "x", Value: b64.EncodeToString(k.pub)},
			{Name: "created", Value: k.created.UTC().Format(time.RFC3339Nano)},
		}
		if !k.rotatedAt.IsZero() {
			ms = append(ms, canonical.Member{Name: "rotated_at", Value: k.rotatedAt.UTC().Format(time.RFC3339Nano)})
		}
		return canonical.NewObject(ms...)
	}
	list := make([]any, 0, len(keys))
	for _, k := range keys {
		o, err := entry(k)
		if err != nil {
			return nil, err
		}
		list = append(list, o)
	}
	top := []canonical.Member{{Name: "v", Value: int64(1)}, {Name: "keys", Value: list}}
	if next != nil {
		o, err := entry(next)
		if err != nil {
			return nil, err
		}
		top = append(top, canonical.Member{Name: "next", Value: o})
	}
	o, err := canonical.NewObject(top...)
	if err != nil {
		return nil, err
	}
	b, err := canonical.Encode(o)
	if err != nil {
		return nil, fmt.Errorf("grant: encode key index: %w", err)
	}
	return append(b, '\n'), nil
}

func parseIndex(data []byte) ([]*key, *key, error) {
	v, err := canonical.ParseWith(data, canonical.Options{MaxBytes: 16 << 20, MaxDepth: 3})
	if err != nil {
		return nil, nil, err
	}
	top, ok := v.(canonical.Object)
	if !ok || (len(top) != 2 && len(top) != 3) || top[0].Name != "keys" || top[len(top)-1].Name != "v" ||
		top[len(top)-1].Value != int64(1) || (len(top) == 3 && top[1].Name != "next") {
		return nil, nil, errors.New(`want {"keys":[...],"v":1}, with "next":{...} while a next key is prepared`)
	}
	list, ok := top[0].Value.([]any)
	if !ok || len(list) == 0 {
		return nil, nil, errors.New("keys must be a non-empty array")
	}
	keys := make([]*key, 0, len(list))
	seen := map[string]bool{}
	for i, item := range list {
		nk, rotated, err := parseIndexEntry(item, seen)
		if err != nil {
			return nil, nil, fmt.Errorf("key %d: %w", i, err)
		}
		last := i == len(list)-1
		switch {
		case last && !rotated.IsZero():
			return nil, nil, fmt.Errorf("key %s: the newest key must not have rotated_at", nk.kid)
		case !last && rotated.IsZero():
			return nil, nil, fmt.Errorf("key %s: only the newest key may lack rotated_at", nk.kid)
		}
		nk.rotatedAt = rotated
		keys = append(keys, nk)
	}
	if len(top) == 2 {
		return keys, nil, nil
	}
	next, rotated, err := parseIndexEntry(top[1].Value, seen)
	if err != nil {
		return nil, nil, fmt.Errorf("next key: %w", err)
	}
	if !rotated.IsZero() {
		return nil, nil, fmt.Errorf("next key %s: must not have rotated_at", next.kid)
	}
	next.next = true
	return keys, next, nil
}

// parseIndexEntry reads one key of the index; seen holds the kids read
// before, which it must not repeat.
func parseIndexEntry(item any, seen map[string]bool) (*key, time.Time, error) {
	o, ok := item.(canonical.Object)
	if !ok {
		return nil, time.Time{}, errors.New("not an object")
	}
	var nk key
	var x, created, rotated string
	for _, m := range o {
		s, ok := m.Value.(string)
		if !ok {
			return nil, time.Time{}, fmt.Errorf("%s is not a string", m.Name)
		}
		switch m.Name {
		case "kid":
			nk.kid = s
		case "x":
			x = s
		case "created":
			created = s
		case "rotated_at":
			rotated = s
		default:
			return nil, time.Time{}, fmt.Errorf("unknown member %q", m.Name)
		}
	}
	if !ValidKID(nk.kid) || seen[nk.kid] {
		return nil, time.Time{}, fmt.Errorf("bad or repeated kid %q", nk.kid)
	}
	seen[nk.kid] = true
	pub, err := b64.DecodeString(x)
	if err != nil || len(pub) != ed25519.PublicKeySize {
		return nil, time.Time{}, fmt.Errorf("key %s: x is not an Ed25519 public key", nk.kid)
	}
	nk.pub = pub
	if nk.created, err = time.Parse(time.RFC3339Nano, created); err != nil {
		return nil, time.Time{}, fmt.Errorf("key %s: created: %w", nk.kid, err)
	}
	var at time.Time
	if rotated != "" {
		if at, err = time.Parse(time.RFC3339Nano, rotated); err != nil {
			return nil, time.Time{}, fmt.Errorf("key %s: rotated_at: %w", nk.kid, err)
		}
	}
	return &nk, at, nil
}
