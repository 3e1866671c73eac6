package canonical

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestFuzzScriptRetriesOnlyTheCoordinatorRace: scripts/fuzz.sh runs a
// target again only when Go's fuzzing coordinator failed it by its own
// deadline with nothing found (go.dev/issue/75804); a failing input, a
// panic or a failed check fails the script at once.
func TestFuzzScriptRetriesOnlyTheCoordinatorRace(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not installed")
	}
	race := "fuzz: elapsed: 10s, execs: 243329 (25034/sec), new interesting: 13 (total: 113)\n" +
		"--- FAIL: FuzzVerify (10.05s)\n    context deadline exceeded\nFAIL\nexit status 1\n"
	logs := map[string]struct {
		text  string
		retry bool
	}{
		"the coordinator's race": {race, true},
		"a failing input": {"--- FAIL: FuzzParse (3.20s)\n    --- FAIL: FuzzParse (0.00s)\n        fuzz_test.go:37: error x\n" +
			"    Failing input written to testdata/fuzz/FuzzParse/abc\n    context deadline exceeded\n", false},
		"a failed check": {"--- FAIL: FuzzParse (10.01s)\n    fuzz_test.go:40: problem: unknown code\n    context deadline exceeded\n", false},
		"a panic":        {"panic: runtime error: index out of range\n    context deadline exceeded\n", false},
		"a build error":  {"# github.com/countersign/countersign/internal/canonical\n./x.go:1:1: syntax error\nFAIL\n", false},
	}
	script := filepath.Join("..", "..", "scripts", "fuzz.sh")
	for name, l := range logs {
		path := filepath.Join(t.TempDir(), "log")
		if err := os.WriteFile(path, []byte(l.text), 0o600); err != nil {
			t.Fatal(err)
		}
		err := exec.Command(bash, script, "--classify", path).Run()
		if retry := err == nil; retry != l.retry {
			t.Errorf("%s: retried = %v, want %v (%v)", name, retry, l.retry, err)
		}
	}
}
