package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/client"
)

// demoExport reads the agent token the demo's banner gives the reader.
func demoExport(t *testing.T, s *server) (url, token string) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		for _, line := range strings.Split(s.logs.String(), "\n") {
			if _, rest, ok := strings.Cut(line, "export COUNTERSIGN_URL="); ok {
				u, tok, _ := strings.Cut(rest, " COUNTERSIGN_TOKEN=")
				return u, strings.TrimSpace(tok)
			}
		}
	}
	t.Fatalf("the demo printed no export line:\n%s", s.logs.String())
	return "", ""
}

// TestDemoWebhookSink: the demo posts every event to its own webhook sink,
// which checks each signature and writes a line per delivery to the log
// the banner names.
func TestDemoWebhookSink(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts the demo")
	}
	data := t.TempDir()
	s := startProcess(t, data, "demo", "--addr", "127.0.0.1:0", "--data", data, "--no-agent")
	url, token := demoExport(t, s)
	logPath := filepath.Join(data, "demo-webhooks.log")
	// The banner is printed a line at a time: the sink's line may come
	// after the export line.
	eventually(t, 30*time.Second, "the banner naming "+logPath, func() bool {
		return strings.Contains(s.logs.String(), "each delivery is a line in "+logPath)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	agent := client.New(url, token)
	call, err := agent.Submit(ctx, refund("INV-5555", 1299))
	if err != nil {
		t.Fatal(err)
	}
	var log string
	eventually(t, 30*time.Second, "a signed call.submitted delivery in the sink's log", func() bool {
		b, _ := os.ReadFile(logPath)
		log = string(b)
		return strings.Contains(log, "call.submitted "+call.ID)
	})
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		if strings.Contains(line, call.ID) && !strings.HasSuffix(line, "(signature ok)") {
			t.Errorf("a delivery the sink refused: %s", line)
		}
	}
	if fi, err := os.Stat(logPath); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the sink's log: %v %v, want mode 0600", fi.Mode(), err)
	}
}
