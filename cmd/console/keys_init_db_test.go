package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/pgtest"
)

// keys init --db binds a new replica's data directory to its PostgreSQL
// database as the first serve does, so the commands that must find their
// console there accept it before any serve; it refuses a directory bound
// to another database, changing nothing.
func TestKeysInitBindsTheDatabase(t *testing.T) {
	url := pgtest.Database(t)
	env := map[string]string{"USER": "root"}

	// A new directory, named by --db: keys made, identity recorded.
	a := filepath.Join(t.TempDir(), "replica-a")
	code, out, errs := runWith(t, env, "", "keys", "init", "--data", a, "--db", url)
	if code != 0 || !strings.Contains(out, "Bound "+a+" to the database") || !strings.Contains(out, "Made the keyring") ||
		!strings.Contains(out, "Made the audit checkpoint key") {
		t.Fatalf("keys init --db = %d %q %s", code, out, errs)
	}
	identity, err := os.ReadFile(identityPath(a))
	if err != nil || len(strings.TrimSpace(string(identity))) == 0 {
		t.Fatalf("%s after keys init --db: %q, %v", identityPath(a), identity, err)
	}
	// The commands with --db that must find their console accept it now.
	if code, _, errs := runWith(t, env, "a long enough password\n", "user", "add", "olivia", "--role", "operator",
		"--password-stdin", "--data", a, "--db", url); code != 0 {
		t.Fatalf("user add = %d %s", code, errs)
	}
	b := filepath.Join(t.TempDir(), "replica-b")
	// $COUNTERSIGN_DATABASE_URL does as --db.
	onB := map[string]string{"USER": "root", envDatabaseURL: url}
	if code, out, errs := runWith(t, onB, "", "keys", "init", "--data", b); code != 0 || !strings.Contains(out, "Bound "+b) {
		t.Fatalf("keys init with $%s = %d %q %s", envDatabaseURL, code, out, errs)
	}
	if got, _ := os.ReadFile(identityPath(b)); string(got) != string(identity) {
		t.Errorf("%s = %q, want the database's identity %q", identityPath(b), got, identity)
	}
	for _, args := range [][]string{
		{"freeze", "--as", "olivia", "--reason", "incident 9"},
		{"freeze", "--list"},
		{"user", "list"},
		{"token", "list"},
	} {
		if code, out, errs := runWith(t, onB, "", append(args, "--data", b)...); code != 0 {
			t.Errorf("%v on a directory bound by keys init = %d %q %s, want accepted", args, code, out, errs)
		}
	}

	// Again: nothing left to make, nothing changed.
	state := dirState(t, a)
	code, out, errs = runWith(t, env, "", "keys", "init", "--data", a, "--db", url)
	if code != 1 || out != "" || !strings.Contains(errs, "has its keys already") || !strings.Contains(errs, "bound to that database already") {
		t.Errorf("keys init --db again = %d %q %s, want refused", code, out, errs)
	}
	if got := dirState(t, a); got != state {
		t.Errorf("the refused keys init changed %s:\n%s\nwas\n%s", a, got, state)
	}

	// A directory whose keys were made without --db: bound now, keys kept.
	c := t.TempDir()
	if code, _, errs := runWith(t, env, "", "keys", "init", "--data", c); code != 0 {
		t.Fatalf("keys init = %d %s", code, errs)
	}
	code, out, errs = runWith(t, env, "", "keys", "init", "--data", c, "--db", url)
	if code != 0 || !strings.Contains(out, "Bound "+c) || !strings.Contains(out, "Kept the keyring") || !strings.Contains(out, "Kept the audit checkpoint key") {
		t.Errorf("keys init --db on a directory with keys = %d %q %s", code, out, errs)
	}

	// Bound to another database: refused before any key is made.
	other := pgtest.Database(t)
	bound := t.TempDir()
	if code, _, errs := runWith(t, env, "", "token", "create", "--actor", "agent:a", "--audience", "payments-host",
		"--data", bound, "--db", url); code != 0 {
		t.Fatalf("token create = %d %s", code, errs)
	}
	state = dirState(t, bound)
	code, out, errs = runWith(t, env, "", "keys", "init", "--data", bound, "--db", other)
	if code != 1 || out != "" || !strings.Contains(errs, "is not the one this data directory was created with") {
		t.Errorf("keys init --db with another database = %d %q %s, want refused", code, out, errs)
	}
	if got := dirState(t, bound); got != state {
		t.Errorf("the refused keys init changed %s:\n%s\nwas\n%s", bound, got, state)
	}

	// Not a PostgreSQL URL: refused, nothing made.
	d := filepath.Join(t.TempDir(), "d")
	if code, _, errs := runWith(t, env, "", "keys", "init", "--data", d, "--db", "mysql://x/y"); code != 1 ||
		!strings.Contains(errs, "--db must be a postgres://") {
		t.Errorf("keys init --db mysql:// = %d %s", code, errs)
	}
	if _, err := os.Stat(d); !os.IsNotExist(err) {
		t.Errorf("the refused keys init made %s: %v", d, err)
	}
}

// keys init --db refuses a SQLite console's data directory, even one that
// has not recorded its database's identity (its countersign.db restored
// into a new directory, say): bound to PostgreSQL, the console would refuse
// its own database from then on as if that had been replaced. Nothing is
// made: no identity, no keys.
func TestKeysInitDBRefusesASQLiteConsole(t *testing.T) {
	url := pgtest.Database(t)
	env := map[string]string{"USER": "root"}
	dir := auditData(t, 2)
	before := dirState(t, dir)
	code, out, errs := runWith(t, env, "", "keys", "init", "--data", dir, "--db", url)
	if code != 1 || !strings.Contains(errs, "holds a SQLite console's database") || !strings.Contains(errs, "nothing was created or changed") {
		t.Fatalf("keys init --db on a SQLite console's directory = %d %q %s, want it refused", code, out, errs)
	}
	if after := dirState(t, dir); after != before {
		t.Fatalf("the directory changed:\nbefore %s\nafter  %s", before, after)
	}
	if code, _, errs := runWith(t, env, "", "user", "list", "--data", dir); code != 0 {
		t.Fatalf("user list on the SQLite console afterwards = %d %s", code, errs)
	}
}
