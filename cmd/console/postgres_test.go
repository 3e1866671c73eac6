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
	// Each replica's keys first, as docs/deploy.md has them made: audit
	// checkpoint signs only with a key that is there.
	for _, dir := range []string{a, b} {
		if code, out, errs := runWith(t, onA, "", "keys", "init", "--data", dir); code != 0 || !strings.Contains(out, "Made the audit checkpoint key") {
			t.Fatalf("keys init = %d %q %s", code, out, errs)
		}
	}

	if code, out, errs := runWith(t, onA, "a long enough password\n", "user", "add", "alice", "--role", "operator",
		"--password-stdin", "--data", a, "--db", url); code != 0 {
		t.Fatalf("user add on A = %d %s %s", code, out, errs)
	}
	// B has its keys but has not been used with the database: a command
	// that must find its console there refuses, and records nothing.
	code, out, errs := runWith(t, onB, "", "user", "list", "--data", b)
	if code != 1 || !strings.Contains(errs, b+" has no database-identity") {
		t.Fatalf("user list on B before B used the database = %d %q %s, want refused", code, out, errs)
	}
	if _, err := os.Stat(identityPath(b)); !os.IsNotExist(err) {
		t.Fatalf("the refused user list wrote %s: %v", identityPath(b), err)
	}
	if code, _, errs := runWith(t, onB, "", "token", "create", "--actor", "agent:a", "--audience", "payments-host", "--data", b); code != 0 {
		t.Fatalf("token create on B = %d %s", code, errs)
	}
	code, out, errs = runWith(t, onB, "", "user", "list", "--data", b)
	if code != 0 || !strings.Contains(out, "alice") {
		t.Fatalf("user list on B = %d %q %s", code, out, errs)
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

// TestMistypedDataOnPostgres: the shared database opens from any
// directory, so with --db a command that must find its console refuses a
// data directory that is missing, or that has not recorded its database
// (database-identity), and creates nothing: not the directory, not the
// identity file, nothing in the database. audit checkpoint also refuses a
// directory without its audit key rather than store a checkpoint signed
// by a key nobody trusts.
func TestMistypedDataOnPostgres(t *testing.T) {
	url := pgtest.Database(t)
	env := map[string]string{"USER": "root"}
	real := t.TempDir()
	if code, out, errs := runWith(t, env, "", "keys", "init", "--data", real); code != 0 {
		t.Fatalf("keys init = %d %q %s", code, out, errs)
	}
	if code, out, errs := runWith(t, env, "a long enough password\n", "user", "add", "olivia", "--role", "operator",
		"--password-stdin", "--data", real, "--db", url); code != 0 {
		t.Fatalf("user add = %d %s %s", code, out, errs)
	}
	if code, out, errs := runWith(t, env, "", "audit", "checkpoint", "--data", real, "--db", url); code != 0 {
		t.Fatalf("audit checkpoint = %d %s %s", code, out, errs)
	}
	trail := func() string {
		t.Helper()
		code, out, errs := runWith(t, env, "", "audit", "verify", "--data", real, "--db", url)
		if code != 0 {
			t.Fatalf("audit verify = %d %q %s", code, out, errs)
		}
		return out
	}
	before := trail()

	commands := [][]string{
		{"deny", "call_x", "--as", "olivia", "--reason", "no"},
		{"approve", "call_x", "--as", "olivia", "--digest", strings.Repeat("ab", 32)},
		{"unblock", "agent:a", "payments.refund", "--as", "olivia"},
		{"freeze", "--as", "olivia", "--reason", "incident"},
		{"user", "disable", "olivia"},
		{"user", "list"},
		{"token", "list"},
		{"audit", "checkpoint"},
		{"audit", "accept-rollback", "--as", "olivia"},
	}
	// A mistyped --data: refused, the directory not made.
	typo := filepath.Join(t.TempDir(), "typo")
	for _, args := range commands {
		code, _, errs := runWith(t, env, "", append(args, "--data", typo, "--db", url)...)
		if code != 1 || !strings.Contains(errs, "no data directory at "+typo+"; nothing was created or changed") ||
			!strings.Contains(errs, "Check that --data (or $COUNTERSIGN_DATA) names this console's data directory") ||
			!strings.Contains(errs, "console keys init") {
			t.Errorf("%v with a mistyped --data = %d %s", args, code, errs)
		}
		if _, err := os.Stat(typo); !os.IsNotExist(err) {
			t.Fatalf("%v made the mistyped data directory: %v", args, err)
		}
	}
	// The reading commands open nothing there either, but a mistyped
	// --data is named rather than its audit key silently not trusted (or
	// the export's header silently not signed).
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"audit", "verify"}, "no data directory at " + typo + "; nothing was verified"},
		{[]string{"audit", "export", "--format", "jsonl"}, "no data directory at " + typo + "; nothing was exported"},
	} {
		code, out, errs := runWith(t, env, "", append(tt.args, "--data", typo, "--db", url)...)
		if code != 1 || out != "" || !strings.Contains(errs, tt.want) || !strings.Contains(errs, "Check that --data (or $COUNTERSIGN_DATA)") {
			t.Errorf("%v with a mistyped --data = %d %q %s", tt.args, code, out, errs)
		}
		if _, err := os.Stat(typo); !os.IsNotExist(err) {
			t.Fatalf("%v made the mistyped data directory: %v", tt.args, err)
		}
	}
	// Without --data, the export still works, unsigned, as for an auditor
	// who holds no data directory.
	if code, _, errs := runWith(t, env, "", "audit", "export", "--format", "jsonl", "--db", url); code != 0 || !strings.Contains(errs, "header is not signed") {
		t.Errorf("audit export --db without --data = %d %s", code, errs)
	}
	// A directory that is there (its keys made) but was never used with
	// the database: refused, no database-identity written.
	fresh := t.TempDir()
	if code, out, errs := runWith(t, env, "", "keys", "init", "--data", fresh); code != 0 {
		t.Fatalf("keys init = %d %q %s", code, out, errs)
	}
	state := dirState(t, fresh)
	for _, args := range commands {
		code, _, errs := runWith(t, env, "", append(args, "--data", fresh, "--db", url)...)
		if code != 1 || !strings.Contains(errs, fresh+" has no database-identity") ||
			!strings.Contains(errs, "is bound to its database by its first console serve --data "+fresh+" --db URL") {
			t.Errorf("%v on a directory never used with the database = %d %s", args, code, errs)
		}
		if got := dirState(t, fresh); got != state {
			t.Fatalf("%v changed %s:\n%s\nwas\n%s", args, fresh, got, state)
		}
	}
	if after := trail(); after != before {
		t.Errorf("the refused commands changed the database's trail:\n%s\nwas\n%s", after, before)
	}
	// A directory bound to the database but without an audit key: the
	// checkpoint is refused and nothing is stored.
	keyless := t.TempDir()
	if code, _, errs := runWith(t, env, "", "token", "create", "--actor", "agent:a", "--audience", "payments-host",
		"--data", keyless, "--db", url); code != 0 {
		t.Fatalf("token create = %d %s", code, errs)
	}
	before = trail()
	state = dirState(t, keyless)
	code, out, errs := runWith(t, env, "", "audit", "checkpoint", "--data", keyless, "--db", url)
	if code != 1 || out != "" || !strings.Contains(errs, "no audit key at "+auditKeyPath(keyless)+" to sign the checkpoint with; nothing was created or stored") ||
		!strings.Contains(errs, "run console keys init --data "+keyless) {
		t.Errorf("audit checkpoint without an audit key = %d %q %s", code, out, errs)
	}
	if got := dirState(t, keyless); got != state {
		t.Errorf("the refused checkpoint changed %s:\n%s\nwas\n%s", keyless, got, state)
	}
	if after := trail(); after != before {
		t.Errorf("the refused checkpoint changed the database's trail:\n%s\nwas\n%s", after, before)
	}
}
