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
)

// Files in the key directory.
const (
	indexFile = "keys.json" // every key's id, public key and times
	lockFile  = ".lock"     // flock'd: shared by Mint and reloads, exclusive by Rotate
	seedExt   = ".pem"      // <kid>.pem: the current key's PKCS #8 private key
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
	rotatedAt time.Time // zero while current
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
	stamp os.FileInfo

	lastCheck atomic.Int64 // monotonic nanoseconds of the last look at the index
	epoch     time.Time    // origin of lastCheck

	trust *trustFile // the other replicas' keys (Trust); guarded by mu
}

// OpenKeyring opens the key directory dir for grants issued by issuer,
// creating the directory (0700) and a first key when there is none. now
// is the clock of minting, rotation and key states; nil means time.Now.
// A directory or private key file that group or others may read is
// refused.
func OpenKeyring(dir string, issuer string, now func() time.Time) (*Keyring, error) {
	if issuer == "" {
		return nil, errors.New("grant: empty issuer")
	}
	if now == nil {
		now = time.Now
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("grant: key directory: %w", err)
	}
	fi, err := os.Stat(dir)
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
	unlock, err := k.lock(lockExclusive)
	if err != nil {
		return nil, err
	}
	defer unlock()
	keys, stamp, err := k.load(true)
	if errors.Is(err, fs.ErrNotExist) {
		keys, stamp, err = k.write(nil)
	}
	if err != nil {
		return nil, err
	}
	if err := k.removeStaleSeeds(keys); err != nil {
		return nil, err
	}
	k.keys, k.stamp = keys, stamp
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
// the directory while it runs.
func (k *Keyring) Rotate() (KeyInfo, error) {
	unlock, err := k.lock(lockExclusive)
	if err != nil {
		return KeyInfo{}, err
	}
	defer unlock()
	k.mu.Lock()
	defer k.mu.Unlock()
	keys, _, err := k.load(false)
	if err != nil {
		return KeyInfo{}, err
	}
	keys, stamp, err := k.write(keys)
	if err != nil {
		return KeyInfo{}, err
	}
	k.keys, k.stamp = keys, stamp
	k.lastCheck.Store(int64(time.Since(k.epoch)))
	if err := k.removeStaleSeeds(keys); err != nil {
		return KeyInfo{}, err
	}
	return k.current().info(k.now()), nil
}

// Keys describes every key, newest first, as of the keyring's clock.
func (k *Keyring) Keys() []KeyInfo {
	k.maybeRefresh()
	now := k.now()
	k.mu.RLock()
	defer k.mu.RUnlock()
	out := make([]KeyInfo, 0, len(k.keys))
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
	keys, stamp, err := k.load(true)
	if err != nil {
		return err
	}
	k.keys, k.stamp = keys, stamp
	return nil
}

func sameFile(a, b os.FileInfo) bool {
	return a != nil && b != nil && os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

// load reads the index and, withSeed, the current private key. A missing
// private key leaves the keyring unable to sign (Mint fails, a rotation
// mends it); one that others may read, or that does not match the index,
// is an error. The caller holds the directory lock, shared or exclusive.
func (k *Keyring) load(withSeed bool) ([]*key, os.FileInfo, error) {
	path := filepath.Join(k.dir, indexFile)
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("grant: key index: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("grant: key index: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, nil, fmt.Errorf("grant: %s has mode %04o; want 0600", path, fi.Mode().Perm())
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, nil, fmt.Errorf("grant: key index: %w", err)
	}
	keys, err := parseIndex(data)
	if err != nil {
		return nil, nil, fmt.Errorf("grant: %s: %w", path, err)
	}
	if !withSeed {
		return keys, fi, nil
	}
	cur := keys[len(keys)-1]
	cur.priv, err = k.readSeed(cur)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, err
	}
	return keys, fi, nil
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
	now := k.now()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("grant: generate key: %w", err)
	}
	nk := &key{kid: newKID(), pub: pub, priv: priv, created: now}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, nil, fmt.Errorf("grant: encode key: %w", err)
	}
	seed := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	if err := writeFileAtomic(k.dir, nk.kid+seedExt, seed); err != nil {
		return nil, nil, err
	}
	next := make([]*key, 0, len(keys)+1)
	for _, old := range keys {
		c := *old
		if c.rotatedAt.IsZero() {
			c.rotatedAt = now
		}
		c.priv = nil
		next = append(next, &c)
	}
	next = append(next, nk)
	data, err := encodeIndex(next)
	if err != nil {
		return nil, nil, err
	}
	if err := writeFileAtomic(k.dir, indexFile, data); err != nil {
		return nil, nil, err
	}
	fi, err := os.Stat(filepath.Join(k.dir, indexFile))
	if err != nil {
		return nil, nil, fmt.Errorf("grant: key index: %w", err)
	}
	return next, fi, nil
}

// removeStaleSeeds deletes every private key file but the current key's,
// and temporary files that a crash left behind. The caller holds the
// exclusive directory lock.
func (k *Keyring) removeStaleSeeds(keys []*key) error {
	entries, err := os.ReadDir(k.dir)
	if err != nil {
		return fmt.Errorf("grant: key directory: %w", err)
	}
	keep := keys[len(keys)-1].kid + seedExt
	removed := false
	for _, e := range entries {
		name := e.Name()
		stale := strings.HasSuffix(name, seedExt) && name != keep || strings.HasPrefix(name, tempPrefix)
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
//	{"keys":[{"created":RFC3339,"kid":string,"rotated_at":RFC3339,"x":base64url}],"v":1}
//
// oldest key first; only the last key, the current one, has no rotated_at.
func encodeIndex(keys []*key) ([]byte, error) {
	list := make([]any, 0, len(keys))
	for _, k := range keys {
		ms := []canonical.Member{
			{Name: "kid", Value: k.kid},
			{Name: "x", Value: b64.EncodeToString(k.pub)},
			{Name: "created", Value: k.created.UTC().Format(time.RFC3339Nano)},
		}
		if !k.rotatedAt.IsZero() {
			ms = append(ms, canonical.Member{Name: "rotated_at", Value: k.rotatedAt.UTC().Format(time.RFC3339Nano)})
		}
		o, err := canonical.NewObject(ms...)
		if err != nil {
			return nil, err
		}
		list = append(list, o)
	}
	o, err := canonical.NewObject(canonical.Member{Name: "v", Value: int64(1)}, canonical.Member{Name: "keys", Value: list})
	if err != nil {
		return nil, err
	}
	b, err := canonical.Encode(o)
	if err != nil {
		return nil, fmt.Errorf("grant: encode key index: %w", err)
	}
	return append(b, '\n'), nil
}

func parseIndex(data []byte) ([]*key, error) {
	v, err := canonical.ParseWith(data, canonical.Options{MaxBytes: 16 << 20, MaxDepth: 3})
	if err != nil {
		return nil, err
	}
	top, ok := v.(canonical.Object)
	if !ok || len(top) != 2 || top[0].Name != "keys" || top[1].Name != "v" || top[1].Value != int64(1) {
		return nil, errors.New(`want {"keys":[...],"v":1}`)
	}
	list, ok := top[0].Value.([]any)
	if !ok || len(list) == 0 {
		return nil, errors.New("keys must be a non-empty array")
	}
	keys := make([]*key, 0, len(list))
	seen := map[string]bool{}
	for i, item := range list {
		o, ok := item.(canonical.Object)
		if !ok {
			return nil, fmt.Errorf("key %d is not an object", i)
		}
		var nk key
		var x, created, rotated string
		for _, m := range o {
			s, ok := m.Value.(string)
			if !ok {
				return nil, fmt.Errorf("key %d: %s is not a string", i, m.Name)
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
				return nil, fmt.Errorf("key %d: unknown member %q", i, m.Name)
			}
		}
		if !ValidKID(nk.kid) || seen[nk.kid] {
			return nil, fmt.Errorf("key %d: bad or repeated kid %q", i, nk.kid)
		}
		seen[nk.kid] = true
		pub, err := b64.DecodeString(x)
		if err != nil || len(pub) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("key %s: x is not an Ed25519 public key", nk.kid)
		}
		nk.pub = pub
		if nk.created, err = time.Parse(time.RFC3339Nano, created); err != nil {
			return nil, fmt.Errorf("key %s: created: %w", nk.kid, err)
		}
		last := i == len(list)-1
		switch {
		case last && rotated != "":
			return nil, fmt.Errorf("key %s: the newest key must not have rotated_at", nk.kid)
		case !last && rotated == "":
			return nil, fmt.Errorf("key %s: only the newest key may lack rotated_at", nk.kid)
		case !last:
			if nk.rotatedAt, err = time.Parse(time.RFC3339Nano, rotated); err != nil {
				return nil, fmt.Errorf("key %s: rotated_at: %w", nk.kid, err)
			}
		}
		keys = append(keys, &nk)
	}
	return keys, nil
}
