package evidence

import (
	"archive/tar"
	"bytes"
	"crypto/ed25519"
	"testing"

	"github.com/countersign/countersign/internal/audit"
)

// FuzzVerify: whatever bytes a pack holds, Verify answers without
// panicking, and accepts nothing that is not signed by the key trusted.
func FuzzVerify(f *testing.F) {
	seed := make([]byte, ed25519.SeedSize)
	signer := audit.NewSigner(ed25519.NewKeyFromSeed(seed))
	manifest := []byte(`{"format":"` + Format + `","files":[]}` + "\n")
	sig, err := jsonFile(Sign(signer, manifest))
	if err != nil {
		f.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, file := range []struct {
		name string
		body []byte
	}{{FileManifest, manifest}, {FileSignature, sig}, {FileChain, []byte("{}\n")}} {
		tw.WriteHeader(&tar.Header{Name: file.name, Mode: 0o644, Size: int64(len(file.body)), Typeflag: tar.TypeReg})
		tw.Write(file.body)
	}
	tw.Close()
	f.Add(buf.Bytes())
	f.Add([]byte{})
	f.Add([]byte("not a tar archive"))
	trust := Trust{Fingerprints: []string{Fingerprint(signer.PublicKey())}}
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := Verify(bytes.NewReader(b), int64(len(b)), trust); err == nil {
			t.Fatalf("a pack of %d fuzzed bytes verified", len(b))
		}
	})
}
