package audit

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"regexp"
	"testing"
)

// The bytes an export header's signature covers are, as docs/audit.md §5
// says, the prefix and the header line's inner object with its signature
// member taken out, every other member present (since and until empty
// when no range was asked for).
func TestHeaderSignatureCoversTheLineWithoutSignature(t *testing.T) {
	s := testSigner(t)
	h := &ExportHeader{Database: "d1", FromSeq: 1, ToSeq: 3, Count: 3, PrevHash: GenesisHash,
		Head: "3fa9", ExportedAt: "2025-03-01T12:00:00.000000000Z"}
	if err := s.SignHeader(h); err != nil {
		t.Fatal(err)
	}
	line, err := AppendHeaderLine(nil, h)
	if err != nil {
		t.Fatal(err)
	}
	inner := bytes.TrimSuffix(bytes.TrimPrefix(line, []byte(`{"export":`)), []byte("}\n"))
	without := regexp.MustCompile(`,"signature":"[A-Za-z0-9_-]+"`).ReplaceAll(inner, nil)
	want := append([]byte("countersign/v1/export-header:"), without...)
	got, err := h.SignedMessage()
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("SignedMessage = %s, %v\nwant %s", got, err, want)
	}
	for _, m := range []string{`"count":3`, `"from_seq":1`, `"since":""`, `"until":""`, `"format":"countersign-audit-export/v2"`} {
		if !bytes.Contains(got, []byte(m)) {
			t.Errorf("the signed bytes lack %s: %s", m, got)
		}
	}
	pub, _ := base64.RawURLEncoding.DecodeString(h.PublicKey)
	sig, _ := base64.RawURLEncoding.DecodeString(h.Signature)
	if !ed25519.Verify(pub, want, sig) {
		t.Error("the signature does not verify over the documented bytes")
	}
}
