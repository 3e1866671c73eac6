package audit

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func testSigner(tb testing.TB) *Signer {
	tb.Helper()
	seed := sha256.Sum256([]byte(tb.Name()))
	return NewSigner(ed25519.NewKeyFromSeed(seed[:]))
}

// TestCheckpointContract checks the signed message and the encodings
// against the documented rule, built by hand.
func TestCheckpointContract(t *testing.T) {
	s := testSigner(t)
	head := strings.Repeat("ab", 32)
	at := time.Date(2025, 3, 1, 12, 0, 0, 5, time.UTC)
	c, err := s.Sign(42, head, at)
	if err != nil {
		t.Fatal(err)
	}
	want := `countersign/v1/checkpoint:{"head":"` + head + `","seq":42,"time":"2025-03-01T12:00:00.000000005Z"}`
	msg, err := c.SignedMessage()
	if err != nil {
		t.Fatal(err)
	}
	if string(msg) != want {
		t.Fatalf("SignedMessage = %s\nwant %s", msg, want)
	}
	pub, _ := base64.RawURLEncoding.DecodeString(c.PublicKey)
	sig, _ := base64.RawURLEncoding.DecodeString(c.Signature)
	if !ed25519.Verify(pub, []byte(want), sig) {
		t.Error("the signature does not verify over the documented message with the standard library")
	}
	sum := sha256.Sum256(pub)
	if c.KID != hex.EncodeToString(sum[:8]) || c.KID != s.KID() {
		t.Errorf("KID = %s, want first 16 hex digits of SHA-256(public key) %x", c.KID, sum[:8])
	}
	if err := c.Verify(); err != nil {
		t.Errorf("Verify: %v", err)
	}
}

func TestCheckpointVerifyRefusesChanges(t *testing.T) {
	s := testSigner(t)
	other := NewSigner(ed25519.NewKeyFromSeed(make([]byte, 32)))
	good, err := s.Sign(7, strings.Repeat("0f", 32), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	forged, _ := other.Sign(7, strings.Repeat("0f", 32), time.Now())
	tests := []struct {
		name   string
		change func(c *Checkpoint)
	}{
		{"seq", func(c *Checkpoint) { c.Seq = 8 }},
		{"zero seq", func(c *Checkpoint) { c.Seq = 0 }},
		{"head", func(c *Checkpoint) { c.Head = strings.Repeat("0e", 32) }},
		{"upper-case head", func(c *Checkpoint) { c.Head = strings.ToUpper(c.Head) }},
		{"time", func(c *Checkpoint) { c.Time = FormatTime(time.Now().Add(time.Hour)) }},
		{"bad time", func(c *Checkpoint) { c.Time = "yesterday" }},
		{"kid", func(c *Checkpoint) { c.KID = other.KID() }},
		{"key swapped", func(c *Checkpoint) { c.PublicKey, c.KID = other.PublicKey(), other.KID() }},
		{"signature from another key", func(c *Checkpoint) { c.Signature = forged.Signature }},
		{"signature bit", func(c *Checkpoint) {
			b, _ := base64.RawURLEncoding.DecodeString(c.Signature)
			b[10] ^= 1
			c.Signature = base64.RawURLEncoding.EncodeToString(b)
		}},
		{"short key", func(c *Checkpoint) { c.PublicKey = c.PublicKey[:20] }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := good
			tt.change(&c)
			if err := c.Verify(); err == nil {
				t.Error("Verify accepted a changed checkpoint")
			}
		})
	}
}

func TestVerifierTrust(t *testing.T) {
	es := chain(t, 5)
	s := testSigner(t)
	other := NewSigner(ed25519.NewKeyFromSeed(make([]byte, 32)))
	c, _ := other.Sign(3, es[2].Hash, time.Now())
	v := NewVerifier()
	v.Trust(s.PublicKey())
	if got := breakSeq(t, v.AddCheckpoint(c)); got != 3 {
		t.Errorf("untrusted key: bad entry = %d, want 3", got)
	}
	v = NewVerifier()
	if err := v.AddCheckpoint(c); err != nil {
		t.Fatalf("without pinned keys: %v", err)
	}
	if got := v.KeyIDs(); len(got) != 1 || got[0] != other.KID() {
		t.Errorf("KeyIDs = %v, want [%s]", got, other.KID())
	}
	// Two valid checkpoints that disagree prove a rewrite.
	c2, _ := s.Sign(3, es[3].Hash, time.Now())
	if got := breakSeq(t, v.AddCheckpoint(c2)); got != 3 {
		t.Errorf("conflicting checkpoints: bad entry = %d, want 3", got)
	}
}

func TestLoadOrCreateKey(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit-key")
	if _, err := LoadKey(path); err == nil {
		t.Fatal("LoadKey of a missing file succeeded")
	}
	// Concurrent first uses agree on one key.
	var wg sync.WaitGroup
	kids := make([]string, 8)
	errs := make([]error, 8)
	for i := range kids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := LoadOrCreateKey(path)
			errs[i] = err
			if err == nil {
				kids[i] = s.KID()
			}
		}()
	}
	wg.Wait()
	for i := range kids {
		if errs[i] != nil {
			t.Fatalf("LoadOrCreateKey: %v", errs[i])
		}
		if kids[i] != kids[0] {
			t.Fatalf("concurrent creators got keys %s and %s", kids[0], kids[i])
		}
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode = %04o, want 0600", fi.Mode().Perm())
	}
	again, err := LoadKey(path)
	if err != nil || again.KID() != kids[0] {
		t.Fatalf("LoadKey = %v, %v; want kid %s", again, err, kids[0])
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".tmp-*"))
	if len(left) != 0 {
		t.Errorf("temporary files left behind: %v", left)
	}
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKey(path); err == nil {
		t.Error("LoadKey accepted a key file readable by its group")
	}
	if err := os.WriteFile(filepath.Join(dir, "junk"), []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKey(filepath.Join(dir, "junk")); err == nil {
		t.Error("LoadKey accepted a file that is not a PEM key")
	}
}

// A checkpoint is trusted by its signer's whole public key. A key id is
// the first 64 bits of the key's SHA-256: a database writer could find a
// key of their own with a trusted id (a 2^64 search), re-sign a rewritten
// chain, and pass a verifier that trusted ids. So an id names no key.
func TestVerifierTrustsWholePublicKeys(t *testing.T) {
	es := chain(t, 5)
	s := testSigner(t)
	c, _ := s.Sign(3, es[2].Hash, time.Now())
	v := NewVerifier()
	v.Trust(s.KID())
	if got := breakSeq(t, v.AddCheckpoint(c)); got != 3 {
		t.Errorf("trusted by its key id only: bad entry = %d, want 3 (an id is not a key)", got)
	}
	v = NewVerifier()
	v.Trust(s.PublicKey())
	if err := v.AddCheckpoint(c); err != nil {
		t.Errorf("trusted by its public key: %v", err)
	}
	// A signed export's header likewise.
	h := &ExportHeader{FromSeq: 1, ToSeq: 5, Count: 5, PrevHash: GenesisHash, Head: es[4].Hash, ExportedAt: FormatTime(time.Now())}
	if err := s.SignHeader(h); err != nil {
		t.Fatal(err)
	}
	if err := checkHeaderKey(h, VerifyOptions{TrustedKeys: []string{s.KID()}}); err == nil {
		t.Error("a header trusted by its key id only passed")
	}
	if err := checkHeaderKey(h, VerifyOptions{TrustedKeys: []string{s.PublicKey()}}); err != nil {
		t.Errorf("a header trusted by its public key: %v", err)
	}
}
