package passkey

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/testkit"
)

// requirePythonCryptography skips without python3 and its cryptography
// package, or fails under CI=true, where .ci/run installs them.
func requirePythonCryptography(tb testing.TB) {
	tb.Helper()
	if exec.Command("python3", "-c", "import cryptography").Run() == nil {
		return
	}
	testkit.Need(tb, "the independent verifier needs python3 with cryptography: apt-get install -y python3-cryptography")
}

// An auditor checks the evidence without Countersign: the standalone
// script (Python's cryptography package, no WebAuthn library of ours)
// accepts the worked example and refuses it altered.
func TestIndependentVerifier(t *testing.T) {
	requirePythonCryptography(t)
	script := filepath.Join("..", "..", "scripts", "verify_passkey_evidence.py")
	run := func(e Evidence, extra ...string) (string, bool) {
		t.Helper()
		b, _ := json.Marshal(e)
		path := filepath.Join(t.TempDir(), "evidence.json")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("python3", append([]string{script, path}, extra...)...).CombinedOutput()
		return string(out), err == nil
	}
	raw, err := os.ReadFile(filepath.Join("testdata", "evidence.json"))
	if err != nil {
		t.Fatal(err)
	}
	var good Evidence
	if err := json.Unmarshal(raw, &good); err != nil {
		t.Fatal(err)
	}
	if out, ok := run(good, "--call-id", good.CallID, "--digest", good.Digest, "--operator", good.Operator); !ok || !strings.HasPrefix(out, "verified") {
		t.Fatalf("the worked example: %s", out)
	}
	if out, ok := run(good, "--digest", strings.Repeat("cd", 32)); ok {
		t.Errorf("another entry's digest verified: %s", out)
	}
	tampered := []func(*Evidence){
		func(e *Evidence) { e.Signature = append(B64(nil), e.Signature...); e.Signature[10] ^= 1 },
		func(e *Evidence) {
			e.AuthenticatorData = append(B64(nil), e.AuthenticatorData...)
			e.AuthenticatorData[32] &^= 0x04
		},
		func(e *Evidence) { e.SignCount++ },
		func(e *Evidence) { e.RPID = "example.com" },
		func(e *Evidence) { e.Digest = strings.Repeat("cd", 32) },
	}
	for i, edit := range tampered {
		e := good
		edit(&e)
		if out, ok := run(e); ok {
			t.Errorf("tampering %d verified: %s", i, out)
		}
	}
}

// docs/passkeys.md shows testdata/evidence.json as its worked example.
func TestDocsShowTheExample(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "passkeys.md"))
	if err != nil {
		t.Fatal(err)
	}
	ex, err := os.ReadFile(filepath.Join("testdata", "evidence.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "```json\n"+string(ex)+"```") {
		t.Error("docs/passkeys.md does not show testdata/evidence.json as its worked example")
	}
}
