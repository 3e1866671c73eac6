package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/control"
	"github.com/countersign/countersign/internal/db"
	"github.com/countersign/countersign/internal/grant"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/testkit"
	"github.com/countersign/countersign/internal/tools"
	"github.com/countersign/countersign/internal/wire"
)

const queueToolsFile = `tools:
  ops.restart:
    audience: ops-host
    target: '^svc:[a-z]+$'
    args: {type: object, additionalProperties: false, properties: {note: {type: string}}}
  ops.drop:
    audience: ops-host
    target: '^svc:[a-z]+$'
    args: {type: object, additionalProperties: false, properties: {}}
`

// TestQueueLists: console queue lists the pending calls with their
// digests, from the database and through a running server's control
// socket, with --tool and --json; a hidden character in the arguments is
// printed as an escape; the listed digest approves the call with console
// approve.
func TestQueueLists(t *testing.T) {
	data := t.TempDir()
	if err := os.WriteFile(filepath.Join(data, "tools.yaml"), []byte(queueToolsFile), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := db.Open(dbPath(data))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	keys, err := grant.OpenKeyring(keysDir(data), Issuer, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.Load(filepath.Join(data, "tools.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	testkit.SeedUsers(t, d.Accounts(), account.RoleOperator, "alice")
	q := queue.NewService(queue.Config{Store: d.Store(), Tools: reg, Signer: keys, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx := context.Background()
	bot := queue.Principal{Actor: "agent:ops", Audience: "ops-host", TokenID: "tok_ops"}
	restart, _, err := q.Submit(ctx, bot, []byte(`{"tool":"ops.restart","target":"svc:web","args":{"note":"ok\u202eevil"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := q.Submit(ctx, bot, []byte(`{"tool":"ops.drop","target":"svc:db","args":{}}`)); err != nil {
		t.Fatal(err)
	}

	check := func(how, data string) {
		t.Helper()
		code, out, errs := userRun(t, "", "queue", "--data", data)
		for _, want := range []string{restart.ID + "  ops.restart by agent:ops for ops-host", "digest " + restart.Digest,
			`args   {"note":"ok\u202eevil"}`, "approvals 0 of 1", "ops.drop"} {
			if code != 0 || !strings.Contains(out, want) {
				t.Errorf("%s: console queue = %d %q %q, want %q", how, code, out, errs, want)
			}
		}
		if strings.Contains(out, "\u202e") {
			t.Errorf("%s: console queue printed a bidi control itself", how)
		}
		code, out, _ = userRun(t, "", "queue", "--tool", "ops.restart", "--json", "--data", data)
		found := false
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var c wire.Call
			if err := json.Unmarshal([]byte(line), &c); err != nil || c.Tool != "ops.restart" {
				t.Errorf("%s: console queue --tool ops.restart --json printed %q (%v)", how, line, err)
			}
			found = found || c.ID == restart.ID && c.Digest == restart.Digest
		}
		if code != 0 || !found {
			t.Errorf("%s: console queue --tool --json = %d %q", how, code, out)
		}
	}
	check("without a server", data)

	// The server's control socket in a directory that holds no database:
	// only the socket can answer there.
	served := t.TempDir()
	ln, err := control.Listen(controlPath(served))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	sctx, stop := context.WithCancel(ctx)
	go func() { defer close(done); control.Serve(sctx, ln, q, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	defer func() { stop(); <-done }()
	check("through the control socket", served)
	code, out, errs := userRun(t, "", "approve", restart.ID, "--as", "alice", "--digest", restart.Digest, "--accept-warnings", "--data", served)
	if code != 0 || !strings.Contains(out, `"status": "approved"`) {
		t.Errorf("approve with the listed digest = %d %q %q", code, out, errs)
	}
	if code, out, _ := userRun(t, "", "queue", "--tool", "ops.restart", "--data", served); code != 0 || !strings.Contains(out, "no call is waiting") {
		t.Errorf("the approved call is still listed: %q", out)
	}
	if code, _, errs := userRun(t, "", "queue", "extra", "--data", data); code != 2 || !strings.Contains(errs, "usage: console queue") {
		t.Errorf("console queue extra = %d %q", code, errs)
	}
}
