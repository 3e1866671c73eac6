package e2e

import (
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The demo cleans up after itself: Ctrl-C (SIGINT) stops it with exit
// status 0 and removes the temporary data directory it made, while a
// directory named with --data is kept.
func TestDemoStopsCleanly(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts the demo twice")
	}
	interrupt := func(t *testing.T, s *server) int {
		t.Helper()
		s.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-s.done:
		case <-time.After(30 * time.Second):
			s.kill()
			t.Fatalf("the demo did not stop within 30 s of SIGINT:\n%s", s.logs.String())
		}
		return s.cmd.ProcessState.ExitCode()
	}
	dataDir := func(t *testing.T, s *server) string {
		t.Helper()
		// The line follows the address, which startProcess waited for.
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			for _, line := range strings.Split(s.logs.String(), "\n") {
				if d, ok := strings.CutPrefix(line, "Data directory: "); ok {
					return strings.TrimSpace(d)
				}
			}
		}
		t.Fatalf("the demo printed no data directory:\n%s", s.logs.String())
		return ""
	}
	t.Run("a temporary directory is removed", func(t *testing.T) {
		s := startProcess(t, "", "demo", "--addr", "127.0.0.1:0", "--no-agent")
		dir := dataDir(t, s)
		if _, err := os.Stat(dir); err != nil {
			t.Fatalf("the data directory %s is not there while the demo runs: %v", dir, err)
		}
		resp, err := http.Get(s.url + "/login")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if code := interrupt(t, s); code != 0 {
			t.Errorf("exit status %d after Ctrl-C, want 0:\n%s", code, s.logs.String())
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the temporary data directory %s is still there after the demo stopped (%v)", dir, err)
		}
	})
	t.Run("a directory given with --data is kept", func(t *testing.T) {
		dir := t.TempDir()
		s := startProcess(t, dir, "demo", "--addr", "127.0.0.1:0", "--no-agent", "--data", dir)
		if got := dataDir(t, s); got != dir {
			t.Fatalf("data directory %q, want %q", got, dir)
		}
		checkReaderToken(t, s)
		if code := interrupt(t, s); code != 0 {
			t.Errorf("exit status %d after Ctrl-C, want 0:\n%s", code, s.logs.String())
		}
		if _, err := os.Stat(dir + "/tools.yaml"); err != nil {
			t.Errorf("the --data directory lost its files: %v", err)
		}
		fi, err := os.Stat(dir + "/demo-logins")
		if err != nil {
			t.Fatalf("the demo kept no logins file: %v", err)
		}
		if perm := fi.Mode().Perm(); perm != 0o600 {
			t.Errorf("demo-logins has mode %o, want 600", perm)
		}
		b, _ := os.ReadFile(dir + "/demo-logins")
		for _, name := range []string{"alice", "bob", "audrey", "admin"} {
			if !strings.Contains(string(b), name+" ") {
				t.Errorf("demo-logins lacks %s:\n%s", name, b)
			}
		}
		eventually(t, 30*time.Second, "the banner saying the logins are kept in "+dir+"/demo-logins", func() bool {
			return strings.Contains(s.logs.String(), dir+"/demo-logins")
		})
	})
}

// checkReaderToken pastes the demo's export line as docs/agents.md asks and
// proposes the guide's first call with it.
func checkReaderToken(t *testing.T, s *server) {
	t.Helper()
	var line string
	for end := time.Now().Add(10 * time.Second); line == "" && time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		for _, l := range strings.Split(s.logs.String(), "\n") {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(l), "export "); ok {
				line = rest
			}
		}
	}
	if line == "" {
		t.Fatalf("the demo printed no export line for an agent token:\n%s", s.logs.String())
	}
	vars := map[string]string{}
	for _, f := range strings.Fields(line) {
		k, v, _ := strings.Cut(f, "=")
		vars[k] = v
	}
	if vars["COUNTERSIGN_URL"] != s.url {
		t.Errorf("export line's COUNTERSIGN_URL %q, the demo listens at %q", vars["COUNTERSIGN_URL"], s.url)
	}
	body := `{"tool":"payments.refund","target":"invoice:INV-1042",
		"args":{"amount_minor":1299,"currency":"USD","reason_code":"duplicate"},
		"rationale":"Charged twice for order 7731."}`
	req, _ := http.NewRequest("POST", vars["COUNTERSIGN_URL"]+"/api/v1/calls", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+vars["COUNTERSIGN_TOKEN"])
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated || !strings.Contains(string(got), `"actor":"agent:billing-bot"`) {
		t.Errorf("the guide's first call with the printed token: %d %s", resp.StatusCode, got)
	}
}

// The demo agent lets about 20 calls wait undecided, then stops proposing,
// however fast it is told to propose.
func TestDemoKeepsQueueReadable(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts the demo")
	}
	s := startProcess(t, "", "demo", "--addr", "127.0.0.1:0", "--every", "10ms")
	proposed := func() int { return strings.Count(s.logs.String(), "agent  proposed ") }
	for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if strings.Contains(s.logs.String(), "calls wait for a decision") {
			break
		}
	}
	if !strings.Contains(s.logs.String(), "calls wait for a decision") {
		t.Fatalf("the demo agent never paused; %d proposed:\n%s", proposed(), s.logs.String())
	}
	// Fifty more ticks of the agent's clock: none proposes.
	time.Sleep(500 * time.Millisecond)
	// The demo's allowance approves some refunds as they come; they run
	// and do not wait. No person decides any.
	ran := strings.Count(s.logs.String(), "agent  ran ")
	if n := proposed() - ran; n != 20 {
		t.Errorf("%d calls proposed, %d run under the demo's allowance, so %d wait; want 20", proposed(), ran, n)
	}
}
