package main

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"net"
	"testing"
)

// TestStopWhileStartingIsClean: a stop signal that arrives while serve is
// still starting (its first writes see a cancelled context) ends serve
// without an error, so `console serve` and `console demo` exit 0.
func TestStopWhileStartingIsClean(t *testing.T) {
	data := t.TempDir()
	a, err := openApp(data, "", "../../examples/tools.yaml", nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var f serveFlags
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	f.register(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.serve(ctx, ln, f); err != nil {
		t.Fatalf("serve stopped before it started = %v, want a clean stop", err)
	}
	// A failure that is not the stop is still one.
	if err := a.serve(context.Background(), ln, serveFlags{trustedProxies: listFlag{"not a cidr"}}); err == nil {
		t.Fatal("serve with a bad --trusted-proxy returned no error")
	}
}
