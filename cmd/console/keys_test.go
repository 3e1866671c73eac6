package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/grant"
)

// keysRun runs the console in-process with env as its environment.
func keysRun(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	getenv := func(k string) string { return env[k] }
	code = run(context.Background(), args, getenv, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

// keysTable parses `keys list` output into rows of fields.
func keysTable(t *testing.T, out string) [][]string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if got, want := strings.Join(strings.Fields(lines[0]), " "), "KID STATE CREATED RETIRES AT"; got != want {
		t.Fatalf("header = %q, want %q", got, want)
	}
	var rows [][]string
	for _, l := range lines[1:] {
		rows = append(rows, strings.Fields(l))
	}
	return rows
}

func TestKeysListAndRotate(t *testing.T) {
	data := t.TempDir()
	start := time.Now()

	if code, out, errs := keysRun(t, nil, "keys", "init", "--data", data); code != 0 || !strings.Contains(out, "Made the keyring in ") {
		t.Fatalf("keys init = %d, %q, stderr %s", code, out, errs)
	}
	code, out, errs := keysRun(t, nil, "keys", "list", "--data", data)
	if code != 0 {
		t.Fatalf("keys list = %d, stderr %s", code, errs)
	}
	rows := keysTable(t, out)
	if len(rows) != 1 || rows[0][1] != grant.StateCurrent || rows[0][3] != "-" {
		t.Fatalf("first list = %v, want one current key that never retires", rows)
	}
	first := rows[0][0]
	created, err := time.Parse(time.RFC3339, rows[0][2])
	if err != nil || created.Before(start.Truncate(time.Second)) || created.After(time.Now()) {
		t.Errorf("created = %q (%v), want about now", rows[0][2], err)
	}
	keys := filepath.Join(data, "keys")
	for path, want := range map[string]os.FileMode{keys: 0o700 | os.ModeDir, filepath.Join(keys, first+".pem"): 0o600} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode() & (os.ModeDir | os.ModePerm); got != want {
			t.Errorf("%s mode %v, want %v", path, got, want)
		}
	}

	code, out, errs = keysRun(t, nil, "keys", "rotate", "--data", data)
	if code != 0 {
		t.Fatalf("keys rotate = %d, stderr %s", code, errs)
	}
	if !strings.Contains(out, first+" stopped signing; it verifies until ") {
		t.Errorf("rotate output %q does not say when %s retires", out, first)
	}

	// COUNTERSIGN_DATA stands in for --data.
	code, out, errs = keysRun(t, map[string]string{"COUNTERSIGN_DATA": data}, "keys", "list")
	if code != 0 {
		t.Fatalf("keys list = %d, stderr %s", code, errs)
	}
	rows = keysTable(t, out)
	if len(rows) != 2 {
		t.Fatalf("after rotate list = %v, want two keys", rows)
	}
	if rows[0][0] == first || rows[0][1] != grant.StateCurrent || rows[0][3] != "-" {
		t.Errorf("newest row = %v, want a new current key", rows[0])
	}
	if rows[1][0] != first || rows[1][1] != grant.StateVerifying {
		t.Errorf("older row = %v, want %s verifying", rows[1], first)
	}
	retires, err := time.Parse(time.RFC3339, rows[1][3])
	if err != nil {
		t.Fatalf("retires at %q: %v", rows[1][3], err)
	}
	if lo, hi := start.Add(grant.MaxTTL).Truncate(time.Second), time.Now().Add(grant.MaxTTL); retires.Before(lo) || retires.After(hi) {
		t.Errorf("retires at %v, want rotation time + %v (between %v and %v)", retires, grant.MaxTTL, lo, hi)
	}
	if !strings.Contains(out, rows[0][0]) || strings.Contains(out, "PRIVATE") {
		t.Errorf("list output %q", out)
	}
	if _, err := os.Stat(filepath.Join(keys, first+".pem")); !os.IsNotExist(err) {
		t.Errorf("private key of the rotated key still present: %v", err)
	}
}

func TestKeysSeenByARunningKeyring(t *testing.T) {
	data := t.TempDir()
	server, err := grant.OpenKeyring(keysDir(data), Issuer, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	if code, _, errs := keysRun(t, nil, "keys", "rotate", "--data", data); code != 0 {
		t.Fatalf("keys rotate = %d: %s", code, errs)
	}
	_, out, _ := keysRun(t, nil, "keys", "list", "--data", data)
	current := keysTable(t, out)[0][0]
	_, kid, err := server.Mint(grant.Claims{Subject: "agent:a", Audience: "host", CallID: "c1", Tool: "t.x",
		Target: "x", Digest: strings.Repeat("0", 64)})
	if err != nil {
		t.Fatal(err)
	}
	if kid != current {
		t.Errorf("server minted with %s after `keys rotate`, want %s", kid, current)
	}
}

func TestKeysRefusals(t *testing.T) {
	open := t.TempDir()
	if err := os.Mkdir(filepath.Join(open, "keys"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(open, "keys"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		code int
		err  string
	}{
		{"no subcommand", []string{"keys"}, 2, "usage: console keys"},
		{"unknown subcommand", []string{"keys", "delete"}, 2, `unknown subcommand "delete"`},
		{"extra argument", []string{"keys", "list", "--data", t.TempDir(), "extra"}, 2, `unexpected argument "extra"`},
		{"unknown flag", []string{"keys", "rotate", "--force"}, 2, "flag provided but not defined"},
		{"open key directory", []string{"keys", "list", "--data", open}, 1, "want 0700"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errs := keysRun(t, nil, tt.args...)
			if code != tt.code || !strings.Contains(errs, tt.err) {
				t.Errorf("%v = %d, stderr %q; want %d and %q", tt.args, code, errs, tt.code, tt.err)
			}
		})
	}
}

// TestKeysRotateInTwoSteps: --prepare makes a next key that keys list and
// keys jwks show and that signs nothing; preparing again keeps it; a
// one-step rotate is refused meanwhile; --activate makes it current and
// audits both steps.
func TestKeysRotateInTwoSteps(t *testing.T) {
	data := t.TempDir()
	if code, _, errs := keysRun(t, nil, "keys", "init", "--data", data); code != 0 {
		t.Fatalf("keys init = %d, stderr %s", code, errs)
	}
	if code, _, errs := keysRun(t, nil, "keys", "rotate", "--activate", "--data", data); code != 1 || !strings.Contains(errs, "no next key") {
		t.Fatalf("--activate with nothing prepared = %d, stderr %s", code, errs)
	}
	for _, args := range [][]string{{"--prepare", "--activate"}, {"--check-replica", "http://127.0.0.1:1"}, {"--prepare", "--check-replica", "http://127.0.0.1:1"}} {
		if code, _, _ := keysRun(t, nil, append([]string{"keys", "rotate", "--data", data}, args...)...); code != 2 {
			t.Errorf("keys rotate %v = %d, want 2", args, code)
		}
	}
	_, out, _ := keysRun(t, nil, "keys", "list", "--data", data)
	current := keysTable(t, out)[0][0]
	code, out, errs := keysRun(t, nil, "keys", "rotate", "--prepare", "--data", data)
	if code != 0 || !strings.HasPrefix(out, "Prepared ") {
		t.Fatalf("--prepare = %d, %s %s", code, out, errs)
	}
	next := strings.TrimSuffix(strings.Fields(out)[1], ":")
	if code, out, _ := keysRun(t, nil, "keys", "rotate", "--prepare", "--data", data); code != 0 || !strings.Contains(out, next+" is prepared already") {
		t.Errorf("--prepare again = %d, %s", code, out)
	}
	_, out, _ = keysRun(t, nil, "keys", "list", "--data", data)
	rows := keysTable(t, out)
	if len(rows) != 2 || rows[0][0] != next || rows[0][1] != grant.StateNext || rows[1][0] != current || rows[1][1] != grant.StateCurrent {
		t.Fatalf("list while prepared = %v", rows)
	}
	if _, out, _ := keysRun(t, nil, "keys", "jwks", "--data", data); !strings.Contains(out, next) || !strings.Contains(out, current) {
		t.Errorf("jwks while prepared lacks a key: %s", out)
	}
	if code, _, errs := keysRun(t, nil, "keys", "rotate", "--data", data); code != 1 || !strings.Contains(errs, "--activate") {
		t.Errorf("one-step rotate while prepared = %d, stderr %s", code, errs)
	}
	code, out, errs = keysRun(t, nil, "keys", "rotate", "--activate", "--data", data)
	if code != 0 || !strings.Contains(out, "New grants are signed with "+next) || !strings.Contains(out, current+" stopped signing") {
		t.Fatalf("--activate = %d, %s %s", code, out, errs)
	}
	_, out, _ = keysRun(t, nil, "keys", "list", "--data", data)
	if rows := keysTable(t, out); rows[0][0] != next || rows[0][1] != grant.StateCurrent || rows[1][1] != grant.StateVerifying {
		t.Fatalf("list after activating = %v", rows)
	}
	_, out, _ = keysRun(t, nil, "audit", "export", "--data", data, "--format", "jsonl")
	if !strings.Contains(out, `"kind":"key_prepared"`) || !strings.Contains(out, `"next_kid":"`+next+`"`) || !strings.Contains(out, `"new_kid":"`+next+`"`) {
		t.Errorf("the audit lacks the two steps:\n%s", out)
	}
}

// TestKeysReadingCommandsCreateNothing: keys list and keys jwks on a data
// directory without a keyring (a mistyped --data, or a new directory)
// refuse, say what to do, and leave no file behind.
func TestKeysReadingCommandsCreateNothing(t *testing.T) {
	empty := t.TempDir()
	for _, data := range []string{filepath.Join(t.TempDir(), "typo"), empty} {
		for _, sub := range []string{"list", "jwks"} {
			code, out, errs := keysRun(t, nil, "keys", sub, "--data", data)
			if code != 1 || out != "" || !strings.Contains(errs, "no keyring in "+filepath.Join(data, "keys")) ||
				!strings.Contains(errs, "nothing was created") || !strings.Contains(errs, "Check that --data") ||
				!strings.Contains(errs, "console keys init --data "+data) {
				t.Errorf("keys %s --data %s = %d, stdout %q, stderr %q; want 1 and what to do", sub, data, code, out, errs)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(empty), "typo")); !os.IsNotExist(err) {
		t.Errorf("a mistyped --data was created: %v", err)
	}
	if names, err := os.ReadDir(empty); err != nil || len(names) != 0 {
		t.Errorf("the empty data directory holds %v (%v), want nothing", names, err)
	}
	// COUNTERSIGN_DATA is read the same way.
	env := map[string]string{"COUNTERSIGN_DATA": empty}
	if code, _, errs := keysRun(t, env, "keys", "list"); code != 1 || !strings.Contains(errs, "no keyring in "+filepath.Join(empty, "keys")) {
		t.Errorf("keys list with $COUNTERSIGN_DATA = %d, stderr %q", code, errs)
	}
}

// TestKeysRotateWithoutAKeyring: keys rotate, in one step or two, turns
// the keys of a keyring that is there: on a data directory without one (a
// mistyped --data, or one whose keys are missing) it refuses, says what to
// do, and makes nothing, not even the database it audits rotations in.
func TestKeysRotateWithoutAKeyring(t *testing.T) {
	typo := filepath.Join(t.TempDir(), "typo")
	existing := t.TempDir()
	if code, _, errs := userRun(t, "a long enough password\n", "user", "add", "alice", "--role", "operator", "--password-stdin", "--data", existing); code != 0 {
		t.Fatalf("user add = %d: %s", code, errs)
	}
	before := dirState(t, existing)
	for _, data := range []string{typo, existing} {
		for _, args := range [][]string{nil, {"--prepare"}, {"--activate"}} {
			code, out, errs := keysRun(t, nil, append([]string{"keys", "rotate", "--data", data}, args...)...)
			if code != 1 || out != "" || !strings.Contains(errs, "console keys rotate: no keyring in "+keysDir(data)) ||
				!strings.Contains(errs, "nothing was created") || !strings.Contains(errs, "rotate replaces the signing key of a keyring that is there") ||
				!strings.Contains(errs, "console keys init --data "+data) {
				t.Errorf("keys rotate %v --data %s = %d, stdout %q, stderr %q; want 1 and what to do", args, data, code, out, errs)
			}
		}
	}
	if _, err := os.Stat(typo); !os.IsNotExist(err) {
		t.Errorf("rotate made the mistyped data directory: %v", err)
	}
	if after := dirState(t, existing); after != before {
		t.Errorf("a refused rotate changed the data directory:\n%s\nwas\n%s", after, before)
	}
	// Once keys init made the keyring, rotate turns it.
	if code, _, errs := keysRun(t, nil, "keys", "init", "--data", existing); code != 0 {
		t.Fatalf("keys init = %d: %s", code, errs)
	}
	if code, out, errs := keysRun(t, nil, "keys", "rotate", "--data", existing); code != 0 || !strings.HasPrefix(out, "New grants are signed with ") {
		t.Errorf("keys rotate after init = %d, %q, stderr %s", code, out, errs)
	}
}

// TestKeysInit: keys init makes a data directory's keyring and audit key,
// which list and jwks then read; run again it refuses and changes
// nothing; on a directory with a keyring and no audit key it makes only
// the audit key, keeping the keyring.
func TestKeysInit(t *testing.T) {
	data := filepath.Join(t.TempDir(), "new")
	code, out, errs := keysRun(t, nil, "keys", "init", "--data", data)
	if code != 0 || !strings.Contains(out, "Made the keyring in "+filepath.Join(data, "keys")) ||
		!strings.Contains(out, "Made the audit checkpoint key "+filepath.Join(data, "audit-key")) ||
		!strings.Contains(out, "console keys jwks --data "+data) {
		t.Fatalf("keys init = %d, %q, stderr %s", code, out, errs)
	}
	_, out, _ = keysRun(t, nil, "keys", "list", "--data", data)
	rows := keysTable(t, out)
	if len(rows) != 1 || rows[0][1] != grant.StateCurrent {
		t.Fatalf("list after init = %v, want one current key", rows)
	}
	kid := rows[0][0]
	code, jwks, errs := keysRun(t, nil, "keys", "jwks", "--data", data)
	if code != 0 || !strings.Contains(jwks, kid) || !strings.Contains(jwks, `"audit_keys"`) {
		t.Fatalf("jwks after init = %d, %q, stderr %s", code, jwks, errs)
	}
	auditKey, err := os.ReadFile(filepath.Join(data, "audit-key"))
	if err != nil {
		t.Fatal(err)
	}

	code, out, errs = keysRun(t, nil, "keys", "init", "--data", data)
	if code != 1 || out != "" || !strings.Contains(errs, "has its keys already") || !strings.Contains(errs, "nothing was changed") ||
		!strings.Contains(errs, kid) {
		t.Errorf("keys init again = %d, %q, stderr %q; want 1, nothing changed", code, out, errs)
	}
	if _, again, _ := keysRun(t, nil, "keys", "jwks", "--data", data); again != jwks {
		t.Errorf("a refused init changed the keys:\n%s\nwas\n%s", again, jwks)
	}
	if b, err := os.ReadFile(filepath.Join(data, "audit-key")); err != nil || string(b) != string(auditKey) {
		t.Errorf("a refused init changed the audit key (%v)", err)
	}

	// A keyring without an audit key (one made before keys init made
	// both): jwks refuses, init makes the audit key only.
	old := t.TempDir()
	if _, err := grant.CreateKeyring(keysDir(old), Issuer, time.Now); err != nil {
		t.Fatal(err)
	}
	_, before, _ := keysRun(t, nil, "keys", "list", "--data", old)
	if code, out, errs := keysRun(t, nil, "keys", "jwks", "--data", old); code != 1 || out != "" ||
		!strings.Contains(errs, "no audit key at "+filepath.Join(old, "audit-key")) || !strings.Contains(errs, "console keys init --data "+old) {
		t.Errorf("jwks without an audit key = %d, %q, stderr %q", code, out, errs)
	}
	if _, err := os.Stat(filepath.Join(old, "audit-key")); !os.IsNotExist(err) {
		t.Errorf("jwks made the audit key: %v", err)
	}
	if code, out, errs := keysRun(t, nil, "keys", "init", "--data", old); code != 0 || !strings.Contains(out, "Kept the keyring in ") ||
		!strings.Contains(out, "Made the audit checkpoint key ") {
		t.Errorf("init beside a keyring = %d, %q, stderr %s", code, out, errs)
	}
	if _, after, _ := keysRun(t, nil, "keys", "list", "--data", old); after != before {
		t.Errorf("init changed the keyring:\n%s\nwas\n%s", after, before)
	}
	if code, _, errs := keysRun(t, nil, "keys", "jwks", "--data", old); code != 0 {
		t.Errorf("jwks after init = %d, stderr %s", code, errs)
	}
}
