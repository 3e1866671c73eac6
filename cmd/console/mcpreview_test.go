package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/control"
	"github.com/countersign/countersign/internal/db"
	"github.com/countersign/countersign/internal/mcp/catalog"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/testkit"
	"github.com/countersign/countersign/internal/tools"
	"github.com/countersign/countersign/internal/wire"
)

// TestMCPReviewFromTheShell: console mcp lists, shows and reviews the MCP
// servers' definitions through the running server's control socket; a
// review is an enabled admin's, audited through the cli channel; without
// a running server it says to start one.
func TestMCPReviewFromTheShell(t *testing.T) {
	data := t.TempDir()
	if code, _, errs := userRun(t, "", "mcp", "list", "--data", data); code != 1 || !strings.Contains(errs, "start it (console serve)") {
		t.Errorf("console mcp list without a server = %d %q", code, errs)
	}
	d, err := db.Open(dbPath(data))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	reg, err := tools.Parse([]byte("mcp:\n  demo:\n    command: [mcp-demo]\n"))
	if err != nil {
		t.Fatal(err)
	}
	testkit.SeedUsers(t, d.Accounts(), account.RoleAdmin, "root")
	testkit.SeedUsers(t, d.Accounts(), account.RoleOperator, "alice")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cat := catalog.New(catalog.Config{Store: d.Catalog(), Registry: reg, Logger: log})
	ctx := context.Background()
	if err := cat.Apply(ctx, "demo", []catalog.Listed{{Name: "add", Description: "Adds.\u202e",
		InputSchema: []byte(`{"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":false}`)}}); err != nil {
		t.Fatal(err)
	}
	ln, err := control.Listen(controlPath(data))
	if err != nil {
		t.Fatal(err)
	}
	q := queue.NewService(queue.Config{Store: d.Store(), Tools: reg, Logger: log})
	sctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		control.ServeServices(sctx, ln, control.Services{Queue: q, Catalog: cat, Accounts: account.NewService(d.Accounts(), nil)}, log)
	}()
	defer func() { stop(); <-done }()

	code, out, errs := userRun(t, "", "mcp", "list", "--json", "--data", data)
	var def wire.MCPDefinition
	if code != 0 || json.Unmarshal([]byte(out), &def) != nil || def.Status != "pending" || def.Tool != "add" {
		t.Fatalf("console mcp list --json = %d %q %q", code, out, errs)
	}
	for _, s := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"mcp", "list"}, 0, "demo/add  pending"},
		{[]string{"mcp", "show", "demo", "add", def.Digest}, 0, "  definition\n  {\n    \"annotations\": null,\n    \"description\": \"Adds.\\u202e\","},
		{[]string{"mcp", "show", "demo", "add", strings.Repeat("0", 64)}, 1, "definition_not_found"},
		{[]string{"mcp", "approve", "demo", "add", def.Digest}, 2, "usage: console mcp list"},
		{[]string{"mcp", "approve", "demo", "add", def.Digest, "--as", "alice"}, 1, `not_an_admin: only an enabled admin reviews MCP definitions, and "alice" is not one`},
		{[]string{"mcp", "approve", "demo", "add", def.Digest, "--as", "root"}, 0, "approve: demo/add " + def.Digest + " is approved."},
		{[]string{"mcp", "reject", "demo", "add", def.Digest, "--as", "root"}, 1, "already_reviewed"},
		{[]string{"mcp", "list"}, 0, "reviewed by root"},
	} {
		code, out, errs := userRun(t, "", append(s.args, "--data", data)...)
		if code != s.code || !strings.Contains(out+errs, s.says) {
			t.Errorf("console %v = %d %q %q, want %d saying %q", s.args, code, out, errs, s.code, s.says)
		}
		if strings.Contains(out, "\u202e") {
			t.Errorf("console %v printed a bidi control itself", s.args)
		}
	}
	var trail bytes.Buffer
	if _, err := d.ExportAudit(ctx, &trail, audit.ExportOptions{Format: "jsonl"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(trail.String(), `"channel":"cli","details":{"digest":"`+def.Digest) {
		t.Error("the review's audit entry does not record the cli channel")
	}
	if e := cat.Entries("demo"); len(e) != 1 || e[0].Status != catalog.Approved || e[0].DecidedBy != "root" {
		t.Errorf("the entry after the review: %+v", e)
	}
}
