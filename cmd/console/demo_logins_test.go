package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/account"
)

// The demo's logins go to DATA/demo-logins, readable only by the owner;
// a rerun on the same data directory, which makes no account, keeps the
// file of the run that made them.
func TestDemoLoginsFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, demoLoginsFile)
	// A file an earlier hand left readable by others is closed to them.
	if err := os.WriteFile(path, []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	made := []demoLogin{{"alice", account.RoleOperator, "pw-alice"}, {"admin", account.RoleAdmin, "pw-admin"}}
	got, err := writeDemoLogins(dir, made)
	if err != nil {
		t.Fatal(err)
	}
	if got != path {
		t.Fatalf("written to %q, want %q", got, path)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("demo-logins has mode %o, want 600", perm)
	}
	b, _ := os.ReadFile(path)
	want := "alice operator pw-alice\nadmin admin pw-admin\n"
	if string(b) != want {
		t.Errorf("demo-logins reads %q, want %q", b, want)
	}

	kept := []demoLogin{{"alice", account.RoleOperator, "(unchanged: the account already existed)"}}
	got, err = writeDemoLogins(dir, kept)
	if err != nil || got != path {
		t.Fatalf("rerun: %q, %v; want %q and no error", got, err, path)
	}
	if b, _ := os.ReadFile(path); string(b) != want || strings.Contains(string(b), "unchanged") {
		t.Errorf("a rerun that made no account rewrote demo-logins: %q", b)
	}

	empty := t.TempDir()
	if got, err := writeDemoLogins(empty, kept); err != nil || got != "" {
		t.Errorf("no new account and no file: got %q, %v; want nothing written", got, err)
	}
	if _, err := os.Stat(filepath.Join(empty, demoLoginsFile)); !os.IsNotExist(err) {
		t.Errorf("demo-logins written with no new account: %v", err)
	}
}
