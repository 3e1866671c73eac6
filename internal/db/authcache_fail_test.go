package db

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
)

// Every write to accounts, sessions, tokens, freezes or passkeys must reach
// the shared counters every process's caches trust, or be refused; and a
// process whose counters are no longer those others count into must read.

func revokeTokenA(by *DB) error {
	return by.Accounts().Update(context.Background(), func(tx account.Tx) error {
		return tx.RevokeToken("tok_a", time.Now())
	})
}

func wantTokenARevoked(t *testing.T, d *DB, how string) {
	t.Helper()
	if _, err := d.Accounts().TokenByHash(context.Background(), "hash-a"); !errors.Is(err, account.ErrTokenNotFound) {
		t.Fatalf("%s: the serving handle still accepts the revoked token (err %v)", how, err)
	}
}

// openWithToken opens a database at path, writes the fixture and reads
// the token once, so that it is kept.
func openWithToken(t *testing.T, path string) *DB {
	t.Helper()
	d, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	authFixture(t, d)
	mustToken(t, d)
	if n := readsOf(d, func() { mustToken(t, d) }); n != 0 {
		t.Fatalf("a token read again ran %d statements, want 0", n)
	}
	return d
}

// TestAuthCacheCountersFileRecreated: the counters file removed while a
// handle serves (a cleanup, a restore of the data directory); the next
// process creates another, finds itself alone and revokes. The serving
// handle reads the database from then on, refuses to write what others
// could not see, and fails its health check.
func TestAuthCacheCountersFileRecreated(t *testing.T) {
	for _, how := range []string{"removed", "replaced"} {
		t.Run(how, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "countersign.db")
			d := openWithToken(t, path)
			if err := os.Remove(path + authEpochSuffix); err != nil {
				t.Fatal(err)
			}
			if how == "replaced" {
				if err := os.WriteFile(path+authEpochSuffix, make([]byte, authEpochSize), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			cli, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := revokeTokenA(cli); err != nil {
				t.Fatal(err)
			}
			cli.Close()
			wantTokenARevoked(t, d, "counters file "+how+" and made again by another process")
			if n := readsOf(d, func() { d.Accounts().TokenByHash(context.Background(), "hash-a") }); n == 0 {
				t.Fatal("a handle whose counters were replaced answered from memory")
			}
			err = d.Accounts().Update(context.Background(), func(tx account.Tx) error {
				return tx.InsertUser(account.User{Name: "petra", Role: account.RoleOperator, CreatedAt: time.Now()})
			})
			if err == nil || !strings.Contains(err.Error(), "restart every Countersign process") {
				t.Fatalf("a write to the accounts by a handle whose counters were replaced: %v, want refused", err)
			}
			if err := d.Ping(context.Background()); err == nil || !strings.Contains(err.Error(), "shared counters") {
				t.Fatalf("Ping with the counters replaced: %v, want an error naming them", err)
			}
		})
	}
}

// TestOpenFailsWithoutCounters: a process that cannot map the counters
// does not open the database (it would write without counting).
func TestOpenFailsWithoutCounters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "countersign.db")
	d := openWithToken(t, path)
	os.Remove(path + authEpochSuffix)
	if err := os.Mkdir(path+authEpochSuffix, 0o700); err != nil {
		t.Fatal(err)
	}
	cli, err := Open(path)
	if err == nil {
		revokeTokenA(cli)
		cli.Close()
		t.Fatal("Open without its counters succeeded")
	}
	if !strings.Contains(err.Error(), path+authEpochSuffix) {
		t.Fatalf("Open's error does not name the counters file: %v", err)
	}
	mustToken(t, d)
}

// TestAuthCacheSymlinkedPath: a database opened through a symbolic link,
// to the file or to its directory, counts into the counters of the file
// the link names.
func TestAuthCacheSymlinkedPath(t *testing.T) {
	for _, to := range []string{"file", "directory"} {
		t.Run(to, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "countersign.db")
			d := openWithToken(t, path)
			link := filepath.Join(t.TempDir(), "countersign.db")
			if to == "file" {
				if err := os.Symlink(path, link); err != nil {
					t.Fatal(err)
				}
			} else {
				linkDir := filepath.Join(t.TempDir(), "data")
				if err := os.Symlink(dir, linkDir); err != nil {
					t.Fatal(err)
				}
				link = filepath.Join(linkDir, "countersign.db")
			}
			cli, err := Open(link)
			if err != nil {
				t.Fatal(err)
			}
			if err := revokeTokenA(cli); err != nil {
				t.Fatal(err)
			}
			cli.Close()
			wantTokenARevoked(t, d, "revoked through a symbolic link to the database's "+to)
			if to == "file" {
				if _, err := os.Lstat(link + authEpochSuffix); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("counters made beside the link: %v", err)
				}
			}
		})
	}
}

// TestCountersFileOwnerOnly: the counters file is made owner-only, one
// others may write is made owner-only again, one another user owns is
// refused, and so is a symbolic link in its place.
func TestCountersFileOwnerOnly(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "countersign.db")
	d, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path + authEpochSuffix)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("counters file mode %v, want 0600", fi.Mode().Perm())
	}
	d.Close()
	if err := os.Chmod(path+authEpochSuffix, 0o666); err != nil {
		t.Fatal(err)
	}
	if d, err = Open(path); err != nil {
		t.Fatal(err)
	}
	d.Close()
	if fi, err = os.Stat(path + authEpochSuffix); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("a world-writable counters file after Open: %v %v, want 0600", fi.Mode().Perm(), err)
	}
	// A file of another user's is refused (seen as that user would).
	f, err := openCounters(path+authEpochSuffix, os.Getuid()+1)
	if err == nil {
		f.Close()
		t.Fatal("a counters file of another user's was taken")
	} else if !strings.Contains(err.Error(), "belongs to user") {
		t.Fatalf("a counters file of another user's: %v", err)
	}
	os.Remove(path + authEpochSuffix)
	other := filepath.Join(dir, "elsewhere")
	if err := os.WriteFile(other, make([]byte, authEpochSize), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, path+authEpochSuffix); err != nil {
		t.Fatal(err)
	}
	if d, err = Open(path); err == nil {
		d.Close()
		t.Fatal("Open followed a symbolic link in the counters' place")
	}
}

// TestAuthWriteWithoutCountersRefused: a connection that does not count
// (the sqlite3 shell, a script, an older binary) cannot change the rows
// the caches keep or depend on; Countersign's own connections can.
func TestAuthWriteWithoutCountersRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "countersign.db")
	d := openWithToken(t, path)
	raw, err := sql.Open("sqlite3", DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	for _, q := range []string{
		`UPDATE tokens SET revoked_at = 1 WHERE id = 'tok_a'`,
		`DELETE FROM tokens`,
		`UPDATE users SET disabled_at = 1 WHERE name = 'olga'`,
		`UPDATE sessions SET revoked_at = 1`,
		`DELETE FROM sessions`,
		`DELETE FROM users WHERE name = 'olga'`,
		`INSERT INTO freezes (reason, created_by, created_at) VALUES ('r', 'x', 1)`,
		`INSERT INTO passkeys (id, user_name, name, public_key, sign_count, record, created_at) VALUES (x'01', 'olga', 'k', x'02', 0, '{}', 1)`,
	} {
		if _, err := raw.Exec(q); err == nil || !strings.Contains(err.Error(), "no such function: "+authWriteFunc) {
			t.Errorf("%s from a connection that does not count: %v, want refused", q, err)
		}
	}
	mustToken(t, d)
	if _, err := d.SQL().Exec(`UPDATE tokens SET revoked_at = 1 WHERE id = 'tok_a'`); err != nil {
		t.Fatalf("the same write through the handle: %v", err)
	}
	wantTokenARevoked(t, d, "revoked through the handle's own connection")
}

// TestAuthCacheReadAfterClose: a read through a closed handle fails; it
// does not answer from memory nor touch the counters let go of.
func TestAuthCacheReadAfterClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "countersign.db")
	d := openWithToken(t, path)
	mustSession(t, d)
	d.Close()
	if _, err := d.Accounts().TokenByHash(context.Background(), "hash-a"); err == nil {
		t.Fatal("a closed handle answered a token from memory")
	}
	if _, err := d.Accounts().Session(context.Background(), "sess-olga"); err == nil {
		t.Fatal("a closed handle answered a session from memory")
	}
	// What a reader that loaded the counters before the close reads.
	if b := d.auth.begun.Load(); b != 0 {
		t.Fatalf("counters after close read %d, want the zero page", b)
	}
}

// TestAuthTablesHaveTheirTriggers: every table the caches depend on has
// its three triggers in the schema the migrations leave. A migration that
// rebuilds one of these tables (a new table copied and renamed) drops its
// triggers: it must create them again.
func TestAuthTablesHaveTheirTriggers(t *testing.T) {
	d, err := Open(filepath.Join(t.TempDir(), "countersign.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for table := range authTables {
		for _, op := range []string{"INSERT", "UPDATE", "DELETE"} {
			var n int
			if err := d.SQL().QueryRow(`SELECT COUNT(*) FROM sqlite_schema WHERE type = 'trigger' AND tbl_name = ?
				AND sql LIKE '%AFTER ' || ? || ' ON%' AND sql LIKE '%`+authWriteFunc+`()%'`, table, op).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 1 {
				t.Errorf("table %s has %d %s triggers calling %s, want 1", table, n, op, authWriteFunc)
			}
		}
	}
}
