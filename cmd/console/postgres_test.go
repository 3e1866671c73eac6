package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func runWith(t *testing.T, env map[string]string, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, func(k string) string { return env[k] }, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

// Every command that opens the store takes --db or COUNTERSIGN_DATABASE_URL,
// and two data directories (two replicas) on one database see the same
// accounts, tokens and audit trail.
func TestCommandsOnPostgres(t *testing.T) {
	url := pgtest.Database(t)
	a, b := t.TempDir(), t.TempDir()
	onA := map[string]string{"USER": "root"}
	onB := map[string]string{"USER": "root", envDatabaseURL: url}

	if code, out, errs := runWith(t, onA, "a long enough password\n", "user", "add", "alice", "--role", "operator",
		"--password-stdin", "--data", a, "--db", url); code != 0 {
		t.Fatalf("user add on A = %d %s %s", code, out, errs)
	}
	code, out, errs := runWith(t, onB, "", "user", "list", "--data", b)
	if code != 0 || !strings.Contains(out, "alice") {
		t.Fatalf("user list on B = %d %q %s", code, out, errs)
	}
	if code, _, errs := runWith(t, onB, "", "token", "create", "--actor", "agent:a", "--audience", "payments-host", "--data", b); code != 0 {
		t.Fatalf("token create on B = %d %s", code, errs)
	}
	if code, out, _ := runWith(t, onA, "", "token", "list", "--data", a, "--db", url); code != 0 || !strings.Contains(out, "agent:a") {
		t.Fatalf("token list on A = %d %q", code, out)
	}
	if code, out, errs := runWith(t, onA, "", "user", "disable", "alice", "--data", a, "--db", url); code != 0 {
		t.Fatalf("user disable on A = %d %s %s", code, out, errs)
	}
	code, out, errs = runWith(t, onB, "", "audit", "verify", "--data", b)
	if code != 0 || !strings.Contains(out, "3 entries") {
		t.Fatalf("audit verify on B = %d %q %s", code, out, errs)
	}
	if code, out, errs := runWith(t, onA, "", "audit", "checkpoint", "--data", a, "--db", url); code != 0 || !strings.Contains(out, `"seq":3`) {
		t.Fatalf("audit checkpoint on A = %d %q %s", code, out, errs)
	}
	code, out, errs = runWith(t, onB, "", "audit", "export", "--format", "jsonl", "--data", b)
	if code != 0 || strings.Count(out, "\n") != 5 {
		t.Fatalf("audit export on B = %d, %d lines %s:\n%s", code, strings.Count(out, "\n"), errs, out)
	}
	// Each replica signs checkpoints with its own audit key: a verifier
	// with one replica's data directory needs the cluster's trust file.
	if code, _, errs := runWith(t, onB, "", "token", "create", "--actor", "agent:b", "--audience", "payments-host", "--data", b); code != 0 {
		t.Fatalf("token create on B = %d %s", code, errs)
	}
	if code, out, errs := runWith(t, onB, "", "audit", "checkpoint", "--data", b); code != 0 || !strings.Contains(out, `"seq":4`) {
		t.Fatalf("audit checkpoint on B = %d %q %s", code, out, errs)
	}
	if code, out, _ := runWith(t, onA, "", "audit", "verify", "--data", a, "--db", url); code != 1 || !strings.Contains(out, "DAMAGED") {
		t.Fatalf("audit verify on A without the trust file = %d %q, want B's checkpoint refused", code, out)
	}
	parts := t.TempDir()
	for name, dir := range map[string]string{"a.json": a, "b.json": b} {
		// keys jwks only reads: each data directory's keyring is made first
		// (its audit key, made by audit checkpoint, is kept).
		if code, out, errs := runWith(t, onA, "", "keys", "init", "--data", dir); code != 0 || !strings.Contains(out, "Kept the audit checkpoint key") {
			t.Fatalf("keys init = %d %q %s", code, out, errs)
		}
		code, out, errs := runWith(t, onA, "", "keys", "jwks", "--data", dir)
		if code != 0 || !strings.Contains(out, `"audit_keys"`) {
			t.Fatalf("keys jwks = %d %q %s", code, out, errs)
		}
		if err := os.WriteFile(filepath.Join(parts, name), []byte(out), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	code, trust, errs := runWith(t, onA, "", "keys", "trust", filepath.Join(parts, "a.json"), filepath.Join(parts, "b.json"))
	if code != 0 || strings.Count(trust, `"kid"`) != 4 {
		t.Fatalf("keys trust = %d %s %s", code, trust, errs)
	}
	trustFile := filepath.Join(parts, "trusted-keys.json")
	if err := os.WriteFile(trustFile, []byte(trust), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs = runWith(t, onA, "", "audit", "verify", "--data", a, "--db", url, "--trusted-keys", trustFile)
	if code != 0 || !strings.Contains(out, "4 entries") || !strings.Contains(out, "2 checkpoints") && !strings.Contains(out, "checkpoints: 2") {
		t.Fatalf("audit verify on A with the trust file = %d %q %s", code, out, errs)
	}
	if code, _, errs := runWith(t, onA, "", "freeze", "--as", "nobody", "--reason", "x", "--data", a, "--db", url); code == 0 {
		t.Fatalf("freeze as an unknown user = 0, want a refusal: %s", errs)
	}

	// A data directory is bound to its database: another one is refused.
	other := pgtest.Database(t)
	code, _, errs = runWith(t, onA, "", "user", "list", "--data", a, "--db", other)
	if code != 1 || !strings.Contains(errs, "not the one this data directory was created with") {
		t.Fatalf("user list on another database = %d %s, want refused", code, errs)
	}
	if code, _, errs := runWith(t, onA, "", "user", "list", "--data", a, "--db", "mysql://x"); code != 1 || !strings.Contains(errs, "postgres://") {
		t.Fatalf("--db mysql:// = %d %s, want refused", code, errs)
	}
}
