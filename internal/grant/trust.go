package grant

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"
)

// A trust file names the public keys of the other replicas of a console
// cluster, deployed with every replica's configuration (never read from
// the database, so that writing the database adds no trust). It is a JSON
// Web Key Set (RFC 7517): "keys" are grant keys, as GET /api/v1/keys lists
// them, and the extra member "audit_keys" holds the replicas' audit
// checkpoint keys in the same form (RFC 7517 §5: members a reader does not
// know are ignored, so any JOSE library still reads "keys"). `console keys
// jwks` prints one replica's part; `console keys trust` merges them.
type TrustSet struct {
	Keys      []JWK `json:"keys"`
	AuditKeys []JWK `json:"audit_keys"`
}

// AuditKID is the key id of an audit checkpoint key: the first 16 hex
// digits of SHA-256 of the raw public key (see internal/audit).
func AuditKID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// ParseTrust reads a trust file strictly: every key an Ed25519 OKP key
// with a kid (for audit keys, the kid its public key implies), no kid
// twice in one list.
func ParseTrust(data []byte) (*TrustSet, error) {
	var t TrustSet
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return nil, fmt.Errorf("grant: trust file: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("grant: trust file: text after the key set")
	}
	for _, list := range []struct {
		name  string
		keys  []JWK
		audit bool
	}{{"keys", t.Keys, false}, {"audit_keys", t.AuditKeys, true}} {
		seen := map[string]bool{}
		for i, k := range list.keys {
			pub, err := k.publicKey()
			if err != nil {
				return nil, fmt.Errorf("grant: trust file: %s[%d]: %w", list.name, i, err)
			}
			if !ValidKID(k.KID) || k.KID == "" {
				return nil, fmt.Errorf("grant: trust file: %s[%d]: bad kid %q", list.name, i, k.KID)
			}
			if list.audit && k.KID != AuditKID(pub) {
				return nil, fmt.Errorf("grant: trust file: audit_keys[%d]: kid %s is not the id of its key (%s)", i, k.KID, AuditKID(pub))
			}
			if seen[k.KID] {
				return nil, fmt.Errorf("grant: trust file: %s: kid %s twice", list.name, k.KID)
			}
			seen[k.KID] = true
		}
	}
	if t.Keys == nil {
		t.Keys = []JWK{}
	}
	if t.AuditKeys == nil {
		t.AuditKeys = []JWK{}
	}
	return &t, nil
}

func (k JWK) publicKey() (ed25519.PublicKey, error) {
	if k.KTY != "OKP" || k.CRV != "Ed25519" {
		return nil, fmt.Errorf("kty %q crv %q: want an OKP Ed25519 key", k.KTY, k.CRV)
	}
	if k.ALG != "" && k.ALG != Algorithm {
		return nil, fmt.Errorf("alg %q: want %s", k.ALG, Algorithm)
	}
	if k.USE != "" && k.USE != "sig" {
		return nil, fmt.Errorf("use %q: want sig", k.USE)
	}
	b, err := b64.DecodeString(k.X)
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("x is not a base64url Ed25519 public key")
	}
	return ed25519.PublicKey(b), nil
}

// Merge returns the union of several trust sets, each kid once (the first
// one seen wins), keys sorted by kid.
func Merge(sets ...*TrustSet) *TrustSet {
	out := &TrustSet{Keys: []JWK{}, AuditKeys: []JWK{}}
	seen := map[string]bool{}
	seenAudit := map[string]bool{}
	for _, s := range sets {
		for _, k := range s.Keys {
			if !seen[k.KID] {
				seen[k.KID] = true
				out.Keys = append(out.Keys, k)
			}
		}
		for _, k := range s.AuditKeys {
			if !seenAudit[k.KID] {
				seenAudit[k.KID] = true
				out.AuditKeys = append(out.AuditKeys, k)
			}
		}
	}
	sort.Slice(out.Keys, func(i, j int) bool { return out.Keys[i].KID < out.Keys[j].KID })
	sort.Slice(out.AuditKeys, func(i, j int) bool { return out.AuditKeys[i].KID < out.AuditKeys[j].KID })
	return out
}

// AuditKIDs lists the audit key ids the set trusts.
func (t *TrustSet) AuditKIDs() []string {
	out := make([]string, len(t.AuditKeys))
	for i, k := range t.AuditKeys {
		out[i] = k.KID
	}
	return out
}

// AuditJWK is an audit checkpoint public key (raw, base64url) as a trust
// file lists it.
func AuditJWK(publicKey string) (JWK, error) {
	b, err := b64.DecodeString(publicKey)
	if err != nil || len(b) != ed25519.PublicKeySize {
		return JWK{}, fmt.Errorf("grant: not a base64url Ed25519 public key")
	}
	return JWK{KTY: "OKP", CRV: "Ed25519", X: publicKey, KID: AuditKID(b), ALG: Algorithm, USE: "sig"}, nil
}

// trustFile is a trust file a keyring verifies with, re-read when it
// changes on disk.
type trustFile struct {
	path string

	mu    sync.RWMutex
	keys  map[string]ed25519.PublicKey
	set   *TrustSet
	stamp os.FileInfo
	err   error // the last reload's failure; the keys read before stay
	seen  time.Time
}

// Trust makes the keyring verify grants also with the grant keys of the
// trust file at path: the other replicas' keys. A key the keyring holds
// itself is judged by its own state (a retired own key stays retired
// whatever the file says). The file is read now, and again when it has
// changed, at most every RefreshInterval; a file that no longer parses
// leaves the keys read before in force (TrustError reports it).
func (k *Keyring) Trust(path string) error {
	t := &trustFile{path: path}
	if err := t.reload(); err != nil {
		return err
	}
	k.mu.Lock()
	k.trust = t
	k.mu.Unlock()
	return nil
}

// TrustSet returns the trust file's keys as last read, nil without one.
func (k *Keyring) TrustSet() *TrustSet {
	t := k.trustFile()
	if t == nil {
		return nil
	}
	t.maybeReload()
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.set
}

// TrustError is the last failure to re-read the trust file, nil when it
// read cleanly.
func (k *Keyring) TrustError() error {
	t := k.trustFile()
	if t == nil {
		return nil
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.err
}

func (k *Keyring) trustFile() *trustFile {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.trust
}

func (t *trustFile) reload() error {
	fi, err := os.Stat(t.path)
	if err == nil {
		t.mu.RLock()
		same := t.stamp != nil && sameFile(t.stamp, fi) && t.stamp.ModTime().Equal(fi.ModTime()) && t.stamp.Size() == fi.Size()
		t.mu.RUnlock()
		if same {
			return nil
		}
	}
	var set *TrustSet
	if err == nil {
		var data []byte
		if data, err = os.ReadFile(t.path); err == nil {
			set, err = ParseTrust(data)
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		t.err = fmt.Errorf("grant: trust file %s: %w", t.path, err)
		return t.err
	}
	keys := make(map[string]ed25519.PublicKey, len(set.Keys))
	for _, j := range set.Keys {
		pub, _ := j.publicKey()
		keys[j.KID] = pub
	}
	t.keys, t.set, t.stamp, t.err = keys, set, fi, nil
	return nil
}

func (t *trustFile) maybeReload() {
	t.mu.Lock()
	due := time.Since(t.seen) >= RefreshInterval
	if due {
		t.seen = time.Now()
	}
	t.mu.Unlock()
	if due {
		_ = t.reload()
	}
}

func (t *trustFile) lookup(kid string) (ed25519.PublicKey, bool) {
	t.maybeReload()
	t.mu.RLock()
	defer t.mu.RUnlock()
	pub, ok := t.keys[kid]
	return pub, ok
}
