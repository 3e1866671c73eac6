package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

// fakeConsoleEnv makes the test binary a fake console (fakeConsole)
// when loadgen --ab starts it.
const fakeConsoleEnv = "LOADGEN_TEST_FAKE_CONSOLE"

func TestMain(m *testing.M) {
	if os.Getenv(fakeConsoleEnv) == "1" {
		fakeConsole(os.Args[2:]) // after the test binary's name and "serve"
		return
	}
	os.Exit(m.Run())
}

// fakeConsole answers /healthz, the login pages and a submission as a
// console would, and exits abruptly, with status 3, on the first
// long-poll of a call: loadgen's agent is then waiting for a console that
// is gone.
func fakeConsole(args []string) {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	addr := fs.String("addr", "", "")
	data := fs.String("data", "", "")
	fs.String("tools", "", "")
	fs.String("log-level", "", "")
	fs.Parse(args)
	if err := os.MkdirAll(*data, 0o700); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	page := func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			w.Header().Set("Location", "/")
			w.WriteHeader(http.StatusSeeOther)
			return
		}
		fmt.Fprint(w, `<input type="hidden" name="csrf" value="token">`)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("/login", page)
	mux.HandleFunc("/", page)
	mux.HandleFunc("POST /api/v1/calls", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"id":"call_aaaaaaaaaaaaaaaaaaaaaaaa","status":"pending","tool":"weather.search","target":"weather:forecast","args":{},"digest":"00"}`)
	})
	mux.HandleFunc("GET /api/v1/calls/{id}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(os.Stderr, "fake console: exiting in the middle of a long-poll")
		os.Exit(3)
	})
	fmt.Fprintln(os.Stderr, http.ListenAndServe(*addr, mux))
	os.Exit(2)
}

// TestABConsoleExitsDuringTheRun: when the console loadgen --ab started
// exits in the middle of the flows, while agents long-poll (the client
// keeps retrying a console that does not answer, for minutes), the run
// stops and fails with an error naming the exit, its status and the tail
// of the console's log, instead of waiting for the run's duration or
// reporting what little it measured.
func TestABConsoleExitsDuringTheRun(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(fakeConsoleEnv, "1")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cfg := config{agents: 2, approvers: 1, sockets: 0, pending: 0, flows: 20, floorN: 5,
		duration: 10 * time.Minute, settle: 0}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		rep Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := serveAndMeasure(ctx, cfg, self, filepath.Join(t.TempDir(), "tools.yaml"), port)
		done <- result{rep, err}
	}()
	var res result
	select {
	case res = <-done:
	case <-time.After(60 * time.Second): // a failure bound, not a measurement
		cancel()
		t.Fatal("serveAndMeasure still running 60 s after its console exited")
	}
	if res.err == nil {
		t.Fatalf("serveAndMeasure returned no error, report %+v; want the console's exit", res.rep)
	}
	for _, want := range []string{"the console exited during the run", "exit status 3", "exiting in the middle of a long-poll"} {
		if !strings.Contains(res.err.Error(), want) {
			t.Errorf("error %q does not say %q", res.err, want)
		}
	}
	// Nothing of the run is left: no agent, approver or socket reader
	// (closures of measure), no watcher of the console's process.
	left := regexp.MustCompile(`main\.(measure|serveAndMeasure)`)
	var stacks string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		buf := make([]byte, 1<<20)
		stacks = string(buf[:runtime.Stack(buf, true)])
		if !left.MatchString(stacks) {
			return
		}
	}
	t.Errorf("goroutines of the run are left:\n%s", stacks)
}
