// Package e2e runs the real console binary: its command line, its HTTP
// server on a free port with a temporary data directory, and, in the browser
// tests, Debian's Chromium driven through chromedp.
package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/pgtest"
)

// consoleBin is the console binary built once for the whole suite, without
// the race detector so that memory and speed are the real thing's.
var consoleBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "countersign-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	consoleBin = filepath.Join(dir, "console")
	build := exec.Command("go", "build", "-o", consoleBin, "../cmd/console")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: build console:", err)
		os.Exit(1)
	}
	// The replica tests start PostgreSQL; pgtest.Main stops it afterwards.
	code := pgtest.Main(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

// toolsFile is the example tools file the suite runs against.
func toolsFile(tb testing.TB) string {
	tb.Helper()
	p, err := filepath.Abs("../examples/tools.yaml")
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// toolsWith is the example catalogue with more tools appended (YAML
// indented as entries under its "tools:" map).
func toolsWith(tb testing.TB, more string) string {
	tb.Helper()
	base, err := os.ReadFile(toolsFile(tb))
	if err != nil {
		tb.Fatal(err)
	}
	p := filepath.Join(tb.TempDir(), "tools.yaml")
	if err := os.WriteFile(p, append(append(base, '\n'), more...), 0o600); err != nil {
		tb.Fatal(err)
	}
	return p
}

// runConsole runs one console command to completion and returns its stdout.
func runConsole(tb testing.TB, stdin string, args ...string) (string, int) {
	tb.Helper()
	cmd := exec.Command(consoleBin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		tb.Fatalf("console %v: %v", args, err)
	}
	if code != 0 {
		tb.Logf("console %v exited %d: %s", args, code, errb.String())
	}
	return out.String(), code
}

// server is a running `console serve` (or `console demo`) process.
type server struct {
	tb   testing.TB
	cmd  *exec.Cmd
	data string
	url  string
	logs *lockedBuffer
	done chan struct{}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startServer starts `console serve` on a free port over data (a new
// temporary directory when empty) and waits until it answers.
func startServer(tb testing.TB, data string, extra ...string) *server {
	tb.Helper()
	if data == "" {
		data = tb.TempDir()
	}
	args := append([]string{"serve", "--addr", "127.0.0.1:0", "--data", data, "--tools", toolsFile(tb), "--log-level", "warn"}, extra...)
	return startProcess(tb, data, args...)
}

func startProcess(tb testing.TB, data string, args ...string) *server {
	tb.Helper()
	cmd := exec.Command(consoleBin, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	s := &server{tb: tb, cmd: cmd, data: data, logs: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stderr = s.logs
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			s.logs.Write([]byte(line + "\n"))
			if i := strings.Index(line, "http://"); i >= 0 && !sent {
				urls <- strings.Fields(line[i:])[0]
				sent = true
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	go func() { cmd.Wait(); close(s.done) }()
	select {
	case s.url = <-urls:
	case <-s.done:
		tb.Fatalf("console exited before listening:\n%s", s.logs.String())
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		tb.Fatalf("console did not report its address:\n%s", s.logs.String())
	}
	tb.Cleanup(func() { s.stop() })
	return s
}

// stop sends SIGTERM and waits for a clean exit.
func (s *server) stop() {
	if s.cmd.ProcessState != nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
		s.tb.Errorf("console did not stop within 30s of SIGTERM:\n%s", s.logs.String())
	}
}

// kill ends the process with SIGKILL.
func (s *server) kill() {
	s.cmd.Process.Kill()
	<-s.done
}

func (s *server) pid() int { return s.cmd.Process.Pid }

// token creates an agent token on the server's data directory.
func (s *server) token(actor, audience string) string {
	s.tb.Helper()
	out, code := runConsole(s.tb, "", "token", "create", "--data", s.data, "--actor", actor, "--audience", audience)
	if code != 0 {
		s.tb.Fatalf("token create exited %d", code)
	}
	return strings.TrimSpace(out)
}

// rssKiB reads a process's resident set size.
func rssKiB(tb testing.TB, pid int) int64 {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, err := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			if err != nil {
				tb.Fatal(err)
			}
			return n
		}
	}
	tb.Fatal("no VmRSS in /proc status")
	return 0
}
