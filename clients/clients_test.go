// Package clients holds the Python and TypeScript clients of the agent API
// (clients/python, clients/typescript). Its Go tests run their suites
// against a console binary built once from this repository: the suites
// start real `console serve` processes on 127.0.0.1.
//
// A suite whose runtime is missing (python3, node, or the TypeScript
// package's node_modules: run `npm ci` in clients/typescript) is skipped,
// and fails under CI=true.
package clients

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/testkit"
)

var consoleBin, mcpDemoBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "countersign-clients-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	consoleBin, mcpDemoBin = filepath.Join(dir, "console"), filepath.Join(dir, "mcp-demo")
	// The console, and the example MCP server whose tools it mirrors in the
	// suites' tests of numbers through the MCP gateway.
	for bin, pkg := range map[string]string{consoleBin: "../cmd/console", mcpDemoBin: "../examples/mcpdemo/cmd/mcp-demo"} {
		build := exec.Command("go", "build", "-o", bin, pkg)
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "clients: build", pkg+":", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// missing skips the test, or fails it where every test must run
// (testkit.Need).
func missing(t *testing.T, format string, args ...any) {
	t.Helper()
	testkit.Need(t, fmt.Sprintf(format, args...))
}

// suiteEnv is the environment of a client suite: the console to start and
// the example MCP server, no bytecode written into the source tree, no
// colours.
func suiteEnv() []string {
	return append(os.Environ(), "COUNTERSIGN_CONSOLE="+consoleBin, "COUNTERSIGN_MCP_DEMO="+mcpDemoBin, "PYTHONDONTWRITEBYTECODE=1", "NO_COLOR=1")
}

// runSuite runs a suite's command in dir, logs its output, and fails the
// test when it fails.
func runSuite(t *testing.T, dir string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = suiteEnv()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	t.Logf("%s %s:\n%s", name, strings.Join(args, " "), out.String())
	if err != nil {
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	return out.String()
}

// python3 returns a Python 3.10+ interpreter.
func python3(t *testing.T) string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		missing(t, "python3 is not installed")
	}
	out, err := exec.Command(py, "-c", "import sys; print(sys.version_info >= (3, 10))").Output()
	if err != nil || strings.TrimSpace(string(out)) != "True" {
		missing(t, "python3 is older than 3.10 (%v)", err)
	}
	return py
}

var ranTests = regexp.MustCompile(`(?m)^Ran (\d+) tests? in`)

// The two suites start their own consoles and share nothing: they run side
// by side (TestPythonInstall, which builds the package from the Python
// folder, runs before them).
func TestPython(t *testing.T) {
	t.Parallel()
	py := python3(t)
	out := runSuite(t, "python", py, "-m", "unittest", "discover", "-s", "tests", "-t", ".", "-v")
	m := ranTests.FindStringSubmatch(out)
	if m == nil {
		t.Fatal("unittest printed no count of tests run")
	}
	if n, _ := strconv.Atoi(m[1]); n < 60 || strings.Contains(out, "skipped") {
		t.Errorf("unittest ran %s tests (skips: %v), want at least 60 and none skipped", m[1], strings.Contains(out, "skipped"))
	}
	// Every test module ran (the async one included: gated on an async def,
	// cancelled while it waits, redeems and runs).
	modules, err := filepath.Glob(filepath.Join("python", "tests", "test_*.py"))
	if err != nil || len(modules) == 0 {
		t.Fatalf("no test modules in python/tests (%v)", err)
	}
	for _, f := range modules {
		mod := strings.TrimSuffix(filepath.Base(f), ".py")
		if !strings.Contains(out, "(tests."+mod+".") {
			t.Errorf("unittest ran no test of %s", f)
		}
	}
}

var nodeCounts = regexp.MustCompile(`(?m)^# (tests|pass|fail|skipped|todo|cancelled) (\d+)$`)

// TestTypeScript builds the TypeScript package and its tests with tsc and
// runs them with node's test runner: the client, and the adapters driven by
// the Vercel AI SDK and the OpenAI Agents SDK from npm (installed by
// `npm ci` from the committed lock file).
func TestTypeScript(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		missing(t, "node is not installed")
	}
	out, err := exec.Command(node, "-p", "process.versions.node.split('.')[0] >= 20").Output()
	if err != nil || strings.TrimSpace(string(out)) != "true" {
		missing(t, "node is older than 20 (%v)", err)
	}
	tsc := filepath.Join("typescript", "node_modules", "typescript", "bin", "tsc")
	if _, err := os.Stat(tsc); err != nil {
		missing(t, "clients/typescript/node_modules is missing: run npm ci in clients/typescript")
	}
	if err := os.RemoveAll(filepath.Join("typescript", "build")); err != nil {
		t.Fatal(err)
	}
	runSuite(t, "typescript", node, "node_modules/typescript/bin/tsc", "-p", "tsconfig.json", "--noEmit")
	runSuite(t, "typescript", node, "node_modules/typescript/bin/tsc", "-p", "tsconfig.test.json")
	files, err := filepath.Glob(filepath.Join("typescript", "build", "test", "*.test.js"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no compiled tests in typescript/build/test (%v)", err)
	}
	args := []string{"--test", "--test-reporter=tap"}
	for _, f := range files {
		args = append(args, strings.TrimPrefix(f, "typescript"+string(filepath.Separator)))
	}
	out2 := runSuite(t, "typescript", node, args...)
	counts := map[string]int{}
	for _, m := range nodeCounts.FindAllStringSubmatch(out2, -1) {
		counts[m[1]], _ = strconv.Atoi(m[2])
	}
	if counts["tests"] < 20 || counts["pass"] != counts["tests"] || counts["skipped"]+counts["todo"]+counts["cancelled"] > 0 {
		t.Errorf("node --test: %v, want at least 20 tests, every one passed", counts)
	}
}

// TestPythonInstall installs the package with pip into a fresh virtual
// environment, with no package index, and uses it from outside the tree.
func TestPythonInstall(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: creating a virtual environment takes a while")
	}
	py := python3(t)
	venv := filepath.Join(t.TempDir(), "venv")
	if out, err := exec.Command(py, "-m", "venv", venv).CombinedOutput(); err != nil {
		missing(t, "python3 -m venv: %v: %s", err, out)
	}
	src, err := filepath.Abs("python")
	if err != nil {
		t.Fatal(err)
	}
	pip := exec.Command(filepath.Join(venv, "bin", "pip"), "install", "--no-index", "--disable-pip-version-check", src)
	pip.Env = append(os.Environ(), "PIP_NO_INDEX=1")
	if out, err := pip.CombinedOutput(); err != nil {
		t.Fatalf("pip install %s: %v\n%s", src, err, out)
	}
	use := exec.Command(filepath.Join(venv, "bin", "python"), "-c",
		`import countersign, sys; assert "site-packages" in countersign.__file__, countersign.__file__; `+
			`print(countersign.digest_of(countersign.envelope("agent:billing-bot", "payments-host", "payments.refund", "invoice:INV-2041", `+
			`{"amount_minor": 1250, "currency": "EUR", "lines": [2, 0, 1], "note": "café crème 😀 / 2×", "reason": "duplicate charge \"#4411\""})))`)
	use.Dir = t.TempDir()
	out, err := use.CombinedOutput()
	if err != nil {
		t.Fatalf("use the installed package: %v\n%s", err, out)
	}
	// The worked example of docs/canonical.md.
	if got, want := strings.TrimSpace(string(out)), "0f4bd693ac92e67ba7f4d7a8ce46c8d1430a06ca03bfc4f0dc5f5ebdb2049b77"; got != want {
		t.Errorf("digest from the installed package = %s, want %s", got, want)
	}
}
