package main

import (
	"context"
	"net"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestFlowsAgainstARealConsole runs the workload against a real console
// (built from cmd/console, on a fresh data directory): every flow's
// submission, approval through the web endpoints (the call's page and its
// form, with the session's cookie and CSRF token), long-poll and
// redemption succeeds over loadgen's own connections, the operator
// sockets see the cards, and nothing is counted as an error.
func TestFlowsAgainstARealConsole(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: building the console takes a while")
	}
	bin := filepath.Join(t.TempDir(), "console")
	if out, err := exec.Command("go", "build", "-o", bin, "../console").CombinedOutput(); err != nil {
		t.Fatalf("build the console: %v\n%s", err, out)
	}
	tools, err := filepath.Abs("../../examples/tools.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	const flows = 40
	cfg := config{agents: 3, approvers: 2, sockets: 2, pending: 3, flows: flows, floorN: 5,
		duration: 45 * time.Second}
	rep, err := serveAndMeasure(context.Background(), cfg, bin, tools, port)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Flows != flows || len(rep.Errors) != 0 {
		t.Fatalf("%d flows of %d, errors %v", rep.Flows, flows, rep.Errors)
	}
	if rep.Submit.N != flows || rep.ApproveToWake.N != flows || rep.Redemption.N != flows {
		t.Errorf("latency samples: submit %d, approve-to-wake %d, redemption %d; want %d each",
			rep.Submit.N, rep.ApproveToWake.N, rep.Redemption.N, flows)
	}
	// Each socket sees each flow's card.
	if rep.SubmitToCard.N < flows {
		t.Errorf("%d cards seen on the sockets, want at least %d", rep.SubmitToCard.N, flows)
	}
	if rep.Commits < flows {
		t.Errorf("%.0f commits for %d flows", rep.Commits, flows)
	}
}
