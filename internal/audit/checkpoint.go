package audit

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/countersign/countersign/internal/canonical"
)

// CheckpointPrefix is the domain separation prefix of a checkpoint
// signature: the signed message is the prefix followed by the canonical
// (RFC 8785) bytes of {"head","seq","time"}.
const CheckpointPrefix = "countersign/v1/checkpoint:"

// Checkpoint is a signed statement that the chain's entry Seq had hash
// Head at Time. Anyone who keeps a checkpoint can later prove that the
// entries up to Seq were not rewritten or removed.
//
// PublicKey is the raw Ed25519 public key and Signature the raw signature,
// both base64url without padding (as in a JWK); KID is the first 16 hex
// digits of SHA-256 of the raw public key.
type Checkpoint struct {
	Seq       int64  `json:"seq"`
	Head      string `json:"head"`
	Time      string `json:"time"`
	KID       string `json:"kid"`
	PublicKey string `json:"public_key"`
	Signature string `json:"signature"`
}

var hexHash = regexp.MustCompile(`^[0-9a-f]{64}$`)

// SignedMessage returns the bytes the signature covers:
// CheckpointPrefix || JCS({"head":Head,"seq":Seq,"time":Time}).
func (c Checkpoint) SignedMessage() ([]byte, error) {
	body, err := canonical.Encode(map[string]any{"head": c.Head, "seq": c.Seq, "time": c.Time})
	if err != nil {
		return nil, fmt.Errorf("audit: encode checkpoint: %w", err)
	}
	return append([]byte(CheckpointPrefix), body...), nil
}

// Verify checks the checkpoint's form, that KID names PublicKey, and that
// Signature is PublicKey's signature of SignedMessage. It does not say
// whether the key is one to trust.
func (c Checkpoint) Verify() error {
	if c.Seq < 1 {
		return fault("checkpoint seq %d is not a positive entry number", c.Seq)
	}
	if !hexHash.MatchString(c.Head) {
		return fault("checkpoint head is not 64 lowercase hex digits")
	}
	if _, err := time.Parse(time.RFC3339Nano, c.Time); err != nil {
		return fault("checkpoint time %q is not an RFC 3339 time", c.Time)
	}
	pub, err := base64.RawURLEncoding.DecodeString(c.PublicKey)
	if err != nil || len(pub) != ed25519.PublicKeySize {
		return fault("checkpoint public_key is not a base64url Ed25519 public key")
	}
	if KeyID(pub) != c.KID {
		return fault("checkpoint kid %q does not name its public key (%s)", c.KID, KeyID(pub))
	}
	sig, err := base64.RawURLEncoding.DecodeString(c.Signature)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return fault("checkpoint signature is not a base64url Ed25519 signature")
	}
	msg, err := c.SignedMessage()
	if err != nil {
		return err
	}
	if !ed25519.Verify(pub, msg, sig) {
		return fault("checkpoint signature does not verify (the checkpoint was altered or forged)")
	}
	return nil
}

// KeyID is the id of an audit public key: the first 16 hex digits of the
// SHA-256 of its 32 raw bytes.
func KeyID(pub []byte) string {
	h := sha256.Sum256(pub)
	return hex.EncodeToString(h[:8])
}

// Signer signs checkpoints with the audit key, which is separate from the
// grant keys.
type Signer struct {
	priv ed25519.PrivateKey
	pub  ed25519.PublicKey
	kid  string
}

// NewSigner returns a signer for priv.
func NewSigner(priv ed25519.PrivateKey) *Signer {
	pub := priv.Public().(ed25519.PublicKey)
	return &Signer{priv: priv, pub: pub, kid: KeyID(pub)}
}

// KID returns the key's id.
func (s *Signer) KID() string { return s.kid }

// PublicKey returns the key's public half, base64url without padding.
func (s *Signer) PublicKey() string { return base64.RawURLEncoding.EncodeToString(s.pub) }

// Sign returns the signed checkpoint of (seq, head) at time at.
func (s *Signer) Sign(seq int64, head string, at time.Time) (Checkpoint, error) {
	c := Checkpoint{Seq: seq, Head: head, Time: FormatTime(at), KID: s.kid, PublicKey: s.PublicKey()}
	if seq < 1 || !hexHash.MatchString(head) {
		return Checkpoint{}, fmt.Errorf("audit: cannot sign checkpoint of entry %d with head %q", seq, head)
	}
	msg, err := c.SignedMessage()
	if err != nil {
		return Checkpoint{}, err
	}
	c.Signature = base64.RawURLEncoding.EncodeToString(ed25519.Sign(s.priv, msg))
	return c, nil
}

// EvidenceManifestPrefix is the domain separation prefix of an evidence
// pack's manifest signature: the signed message is the prefix followed by
// the manifest's bytes exactly as the pack holds them.
const EvidenceManifestPrefix = "countersign/v1/evidence-manifest:"

// SignEvidenceManifest returns the signature (base64url, no padding) of an
// evidence pack's manifest bytes.
func (s *Signer) SignEvidenceManifest(manifest []byte) string {
	msg := append([]byte(EvidenceManifestPrefix), manifest...)
	return base64.RawURLEncoding.EncodeToString(ed25519.Sign(s.priv, msg))
}

const pemType = "PRIVATE KEY"

// LoadKey reads the audit key at path: a PKCS #8 Ed25519 private key in
// PEM. A key file that group or others may read is refused.
func LoadKey(path string) (*Signer, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("audit: key: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("audit: key file %s has mode %04o; want 0600", path, fi.Mode().Perm())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("audit: key: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != pemType {
		return nil, fmt.Errorf("audit: key file %s does not hold a PEM %q block", path, pemType)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("audit: key file %s: %w", path, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("audit: key file %s holds a %T, not an Ed25519 key", path, k)
	}
	return NewSigner(priv), nil
}

// LoadOrCreateKey reads the audit key at path, creating it (mode 0600) when
// there is none. Creation is atomic: the key is written to a temporary file
// that is then linked into place, so a concurrent creator either wins or
// reads the winner's key, and no reader sees a partial file.
func LoadOrCreateKey(path string) (*Signer, error) {
	s, err := LoadKey(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return s, err
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("audit: generate key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, fmt.Errorf("audit: encode key: %w", err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("audit: key directory: %w", err)
	}
	f, err := os.CreateTemp(dir, ".tmp-audit-key-*")
	if err != nil {
		return nil, fmt.Errorf("audit: write key: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	werr := f.Chmod(0o600)
	if werr == nil {
		werr = pem.Encode(f, &pem.Block{Type: pemType, Bytes: der})
	}
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return nil, fmt.Errorf("audit: write key: %w", werr)
	}
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return LoadKey(path)
		}
		return nil, fmt.Errorf("audit: install key: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return NewSigner(priv), nil
}
