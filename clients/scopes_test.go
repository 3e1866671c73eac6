package clients

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/scope"
)

var scopeHeader = regexp.MustCompile(`^-- ([a-z0-9-]+) digest=([0-9a-f]*) --$`)

type scopeVector struct{ name, json, digest string }

// readScopeVectors reads testdata/scopes.txt: sections of a header and one
// line of canonical scope JSON.
func readScopeVectors(t *testing.T) (header string, vs []scopeVector) {
	t.Helper()
	data, err := os.ReadFile("testdata/scopes.txt")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		if strings.HasPrefix(lines[i], "#") {
			header += lines[i] + "\n"
			continue
		}
		m := scopeHeader.FindStringSubmatch(lines[i])
		if m == nil || i+1 >= len(lines) {
			t.Fatalf("line %d: bad section %q", i+1, lines[i])
		}
		vs = append(vs, scopeVector{m[1], lines[i+1], m[2]})
		i++
	}
	if len(vs) < 6 {
		t.Fatalf("%d scope vectors, want at least 6", len(vs))
	}
	return header, vs
}

// TestScopeVectors: every vector is a scope the console parses strictly
// (so it is canonical), and its digest is the console's.
func TestScopeVectors(t *testing.T) {
	header, vs := readScopeVectors(t)
	var out strings.Builder
	out.WriteString(header)
	for _, v := range vs {
		s, err := scope.Parse([]byte(v.json))
		if err != nil {
			t.Errorf("%s: %v", v.name, err)
			continue
		}
		if *update {
			v.digest = s.Digest()
		} else if got := s.Digest(); got != v.digest {
			t.Errorf("%s: the console gives %s, the file says %s (run with -update after a deliberate change)", v.name, got, v.digest)
		}
		out.WriteString("-- " + v.name + " digest=" + v.digest + " --\n" + v.json + "\n")
	}
	if *update {
		if err := os.WriteFile("testdata/scopes.txt", []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestScopeDigestPython: the Python client's scope_digest reproduces every
// vector's digest from the parsed scope.
func TestScopeDigestPython(t *testing.T) {
	py := python3(t)
	_, vs := readScopeVectors(t)
	// Every object's members reversed, so the client must sort them.
	script := `import json, sys
from countersign import scope_digest
def rev(v):
    if isinstance(v, dict):
        return {k: rev(v[k]) for k in reversed(list(v))}
    if isinstance(v, list):
        return [rev(x) for x in v]
    return v
for line in open(sys.argv[1], encoding="utf-8").read().splitlines():
    if line.startswith("{"):
        print(scope_digest(rev(json.loads(line))))
`
	cmd := exec.Command(py, "-c", script, filepath.Join("testdata", "scopes.txt"))
	cmd.Dir = "."
	cmd.Env = append(os.Environ(), "PYTHONPATH=python", "PYTHONDONTWRITEBYTECODE=1")
	checkDigests(t, "python", cmd, vs)
}

// TestScopeDigestTypeScript: the TypeScript client's scopeDigest, compiled
// from src with the package's own tsc, reproduces every vector's digest.
func TestScopeDigestTypeScript(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		missing(t, "node is not installed")
	}
	tsc := filepath.Join("typescript", "node_modules", "typescript", "bin", "tsc")
	if _, err := os.Stat(tsc); err != nil {
		missing(t, "clients/typescript/node_modules is missing: run npm ci in clients/typescript")
	}
	_, vs := readScopeVectors(t)
	out := t.TempDir()
	build := exec.Command(node, "node_modules/typescript/bin/tsc", "-p", "tsconfig.json", "--outDir", out, "--declaration", "false", "--sourceMap", "false")
	build.Dir = "typescript"
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("tsc: %v\n%s", err, b)
	}
	// The compiled package is ESM (package.json "type": "module").
	if err := os.WriteFile(filepath.Join(out, "package.json"), []byte(`{"type":"module"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	vectors, err := filepath.Abs(filepath.Join("testdata", "scopes.txt"))
	if err != nil {
		t.Fatal(err)
	}
	// Every object's members reversed, so the client must sort them.
	script := `import { readFileSync } from 'node:fs';
const { scopeDigest } = await import(process.argv[1]);
const rev = (v) => Array.isArray(v) ? v.map(rev)
  : v !== null && typeof v === 'object' ? Object.fromEntries(Object.entries(v).reverse().map(([k, x]) => [k, rev(x)])) : v;
for (const line of readFileSync(process.argv[2], 'utf8').split('\n')) {
  if (line.startsWith('{')) console.log(scopeDigest(rev(JSON.parse(line))));
}
`
	cmd := exec.Command(node, "--input-type=module", "-e", script, filepath.Join(out, "index.js"), vectors)
	checkDigests(t, "typescript", cmd, vs)
}

func checkDigests(t *testing.T, client string, cmd *exec.Cmd, vs []scopeVector) {
	t.Helper()
	b, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("%s: %v\n%s", client, err, ee.Stderr)
		}
		t.Fatalf("%s: %v", client, err)
	}
	got := strings.Fields(string(b))
	if len(got) != len(vs) {
		t.Fatalf("%s printed %d digests for %d vectors: %q", client, len(got), len(vs), got)
	}
	for i, v := range vs {
		if got[i] != v.digest {
			t.Errorf("%s: %s: the client gives %s, the console %s", client, v.name, got[i], v.digest)
		}
	}
}
