package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The demo writes its notifications file again at each start, but never
// over one that is not its own: then it starts no sink.
func TestDemoSinkKeepsAnotherNotifyFile(t *testing.T) {
	data := t.TempDir()
	mine := "channels: {}\n"
	if err := os.WriteFile(filepath.Join(data, "notify.yaml"), []byte(mine), 0o600); err != nil {
		t.Fatal(err)
	}
	logPath, stop, err := startDemoSink(context.Background(), data)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	if b, _ := os.ReadFile(filepath.Join(data, "notify.yaml")); string(b) != mine || logPath != "" {
		t.Errorf("another notify.yaml became %q (sink log %q)", b, logPath)
	}
	// Its own file is written again, for the new port.
	os.Remove(filepath.Join(data, "notify.yaml"))
	for range 2 {
		logPath, stop, err = startDemoSink(context.Background(), data)
		if err != nil {
			t.Fatal(err)
		}
		stop()
		b, _ := os.ReadFile(filepath.Join(data, "notify.yaml"))
		if !strings.HasPrefix(string(b), demoNotifyMarker) || !strings.Contains(string(b), "url: http://127.0.0.1:") || logPath != filepath.Join(data, demoSinkLog) {
			t.Errorf("the demo's notify.yaml: %q, log %q", b, logPath)
		}
	}
}
