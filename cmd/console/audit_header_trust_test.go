package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestAuditVerifyHeaderKeyNotTrusted: an export's signed header proves who
// wrote it only against a key that is trusted. An export rewritten from
// scratch and signed with a key made for it (here: another data directory's
// own keys) verifies on its own; verify --file then must not call its
// header signed as if that meant something, but say that nothing given
// trusts the key. Against the real data directory the same export is
// refused, and that directory's own export's header reads as signed.
func TestAuditVerifyHeaderKeyNotTrusted(t *testing.T) {
	real := auditData(t, 3)
	auditKeyed(t, real)
	forged := auditData(t, 3)
	auditKeyed(t, forged)
	file := filepath.Join(t.TempDir(), "forged.jsonl")
	if code, _, errOut := auditRun(t, "audit", "export", "--data", forged, "--format", "jsonl", "--out", file); code != 0 {
		t.Fatalf("export = %d %s", code, errOut)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	kid := regexp.MustCompile(`"kid":"([^"]+)"`).FindStringSubmatch(string(b))
	if kid == nil {
		t.Fatalf("no kid in the export's header: %.300s", b)
	}

	code, out, _ := auditRun(t, "audit", "verify", "--file", file)
	if code != 0 || !strings.Contains(out, "ok: 3 entries verified") {
		t.Fatalf("verify --file = %d\n%s", code, out)
	}
	if !strings.Contains(out, "header: range, head and count signed by audit key "+kid[1]+", which nothing given here trusts") {
		t.Errorf("verify --file of an export signed by a key nothing trusts reads as signed:\n%s", out)
	}

	if code, out, _ := auditRun(t, "audit", "verify", "--file", file, "--data", real); code != 1 ||
		!strings.Contains(out, "not a trusted audit key") {
		t.Errorf("verify --file --data REAL of the forged export = %d\n%s, want it refused", code, out)
	}
	own := filepath.Join(t.TempDir(), "own.jsonl")
	if code, _, errOut := auditRun(t, "audit", "export", "--data", real, "--format", "jsonl", "--out", own); code != 0 {
		t.Fatalf("export = %d %s", code, errOut)
	}
	code, out, _ = auditRun(t, "audit", "verify", "--file", own, "--data", real)
	if code != 0 || !strings.Contains(out, "header: range, head and count signed by audit key ") || strings.Contains(out, "nothing given here trusts") {
		t.Errorf("verify --file --data of the directory's own export = %d\n%s", code, out)
	}
}
