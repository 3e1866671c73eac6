package db

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/queue"
)

// Sessions and tokens kept in memory (authcache.go) must be refused by the
// first request after the commit that revokes them, whichever handle or
// process commits it; and they must be kept at all, or every request
// reads.

// authFixture is a token and a session of user olga in the database at
// path, written through d.
func authFixture(t testing.TB, d *DB) {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Millisecond)
	if err := d.Accounts().Update(context.Background(), func(tx account.Tx) error {
		if err := tx.InsertUser(account.User{Name: "olga", Role: account.RoleOperator, CreatedAt: now}); err != nil {
			return err
		}
		if _, err := tx.InsertSession(account.Session{IDHash: "sess-olga", User: account.User{Name: "olga"}, CSRF: "c",
			CreatedAt: now, LastSeen: now}); err != nil {
			return err
		}
		return tx.InsertToken(account.Token{ID: "tok_a", Actor: "agent:a", Audience: "payments-host", CreatedAt: now}, "hash-a")
	}); err != nil {
		t.Fatal(err)
	}
}

// readsOf reports what fn read from the database: how many statements d
// ran for it.
func readsOf(d *DB, fn func()) int64 {
	before := d.Statements()
	fn()
	return d.Statements() - before
}

func mustToken(t *testing.T, d *DB) {
	t.Helper()
	if _, err := d.Accounts().TokenByHash(context.Background(), "hash-a"); err != nil {
		t.Fatalf("token: %v", err)
	}
}

func mustSession(t *testing.T, d *DB) account.Session {
	t.Helper()
	s, err := d.Accounts().Session(context.Background(), "sess-olga")
	if err != nil {
		t.Fatalf("session: %v", err)
	}
	return s
}

// TestAuthCacheKeepsAndForgets: a token and a session read twice are read
// from the database once; a change written through another handle on the
// same file (another process, as the command line is) is seen by the next
// read, whatever it changes: the token revoked, the session revoked, the
// account disabled or its role changed.
func TestAuthCacheKeepsAndForgets(t *testing.T) {
	d, other := openTwo(t)
	authFixture(t, d)
	ctx := context.Background()

	mustToken(t, d)
	mustSession(t, d)
	if n := readsOf(d, func() { mustToken(t, d); mustSession(t, d) }); n != 0 {
		t.Fatalf("a token and a session read again ran %d statements, want 0 (kept in memory)", n)
	}

	changes := []struct {
		name   string
		change func(account.Tx) error
		check  func() error
	}{
		// A statement of any kind, not only the accounts' own methods.
		{"the account's role changed", nil, func() error {
			if s := mustSession(t, d); s.User.Role != account.RoleAuditor {
				return fmt.Errorf("role %q after it was changed", s.User.Role)
			}
			return nil
		}},
		{"the account disabled", func(tx account.Tx) error { return tx.DisableUser("olga", time.Now()) }, func() error {
			if s := mustSession(t, d); !s.User.Disabled() {
				return errors.New("the account is enabled after it was disabled")
			}
			return nil
		}},
		{"the session revoked", func(tx account.Tx) error { return tx.RevokeSession("sess-olga", "logout", time.Now()) }, func() error {
			if s := mustSession(t, d); !s.Revoked() {
				return errors.New("the session is live after it was revoked")
			}
			return nil
		}},
		{"the token revoked", func(tx account.Tx) error { return tx.RevokeToken("tok_a", time.Now()) }, func() error {
			if _, err := d.Accounts().TokenByHash(ctx, "hash-a"); !errors.Is(err, account.ErrTokenNotFound) {
				return fmt.Errorf("token after it was revoked: %v", err)
			}
			return nil
		}},
	}
	for _, c := range changes {
		// Both are kept before each change.
		d.Accounts().TokenByHash(ctx, "hash-a")
		d.Accounts().Session(ctx, "sess-olga")
		var err error
		if c.change == nil {
			_, err = other.SQL().Exec(`UPDATE users SET role = 'auditor' WHERE name = 'olga'`)
		} else {
			err = other.Accounts().Update(ctx, c.change)
		}
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if err := c.check(); err != nil {
			t.Errorf("%s by another handle: %v", c.name, err)
		}
	}
}

// TestAuthCacheNotKeptDuringAWrite: a token read while another handle's
// transaction has revoked it but not yet committed is read as it was, and
// not kept: the read after the commit finds it revoked.
func TestAuthCacheNotKeptDuringAWrite(t *testing.T) {
	d, other := openTwo(t)
	authFixture(t, d)
	ctx := context.Background()
	mustToken(t, d)

	tx, err := other.SQL().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`UPDATE tokens SET revoked_at = 1 WHERE id = 'tok_a'`); err != nil {
		t.Fatal(err)
	}
	mustToken(t, d) // not committed yet: still live, and read
	if n := readsOf(d, func() { mustToken(t, d) }); n != 1 {
		t.Fatalf("a token read during a write to the tokens ran %d statements, want 1 (nothing kept)", n)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Accounts().TokenByHash(ctx, "hash-a"); !errors.Is(err, account.ErrTokenNotFound) {
		t.Fatalf("token after the revocation committed: %v, want ErrTokenNotFound", err)
	}
}

// TestAuthCacheAcrossProcesses: a token revoked by another process is
// refused by this one's next read; a process killed inside a write to the
// tokens leaves nothing kept (its write never ends) until the database is
// opened again by one process alone.
func TestAuthCacheAcrossProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "countersign.db")
	d, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { d.Close() }()
	authFixture(t, d)
	ctx := context.Background()
	mustToken(t, d)
	if n := readsOf(d, func() { mustToken(t, d) }); n != 0 {
		t.Fatalf("a token read again ran %d statements, want 0", n)
	}

	child := func(role string) (*exec.Cmd, *bufio.Reader) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), roleEnv+"="+role, dbEnv+"="+path)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, bufio.NewReader(out)
	}
	line := func(r *bufio.Reader) string {
		s, _ := r.ReadString('\n')
		return strings.TrimSpace(s)
	}

	// A write begun and killed: nothing is kept while its count stays.
	cmd, out := child("auth-write-killed")
	if got := line(out); got != "writing" {
		t.Fatalf("child: %q", got)
	}
	cmd.Process.Kill()
	cmd.Wait()
	mustToken(t, d)
	if n := readsOf(d, func() { mustToken(t, d) }); n != 1 {
		t.Fatalf("after a process died inside a write to the tokens, a token read ran %d statements, want 1", n)
	}
	// Opened again alone, the counters are level and tokens are kept.
	d.Close()
	if d, err = Open(path); err != nil {
		t.Fatal(err)
	}
	mustToken(t, d)
	if n := readsOf(d, func() { mustToken(t, d) }); n != 0 {
		t.Fatalf("after opening alone, a token read again ran %d statements, want 0", n)
	}

	// Another process revokes the token: refused here at once.
	cmd, out = child("auth-revoke")
	if got := line(out); got != "revoked" {
		t.Fatalf("child: %q", got)
	}
	cmd.Wait()
	if _, err := d.Accounts().TokenByHash(ctx, "hash-a"); !errors.Is(err, account.ErrTokenNotFound) {
		t.Fatalf("token after another process revoked it: %v, want ErrTokenNotFound", err)
	}
}

// childAuthWrite is a process that writes to the tokens of the parent's
// database: "auth-revoke" revokes tok_a and prints "revoked";
// "auth-write-killed" changes it inside a transaction, prints "writing"
// and waits to be killed.
func childAuthWrite(role string) int {
	d, err := Open(os.Getenv(dbEnv))
	if err != nil {
		fmt.Printf("error %v\n", err)
		return 1
	}
	defer d.Close()
	ctx := context.Background()
	if role == "auth-revoke" {
		if err := d.Accounts().Update(ctx, func(tx account.Tx) error { return tx.RevokeToken("tok_a", time.Now()) }); err != nil {
			fmt.Printf("error %v\n", err)
			return 1
		}
		fmt.Println("revoked")
		return 0
	}
	tx, err := d.SQL().BeginTx(ctx, nil)
	if err == nil {
		_, err = tx.Exec(`UPDATE tokens SET note = 'changing' WHERE id = 'tok_a'`)
	}
	if err != nil {
		fmt.Printf("error %v\n", err)
		return 1
	}
	fmt.Println("writing")
	time.Sleep(time.Minute)
	return 1
}

// TestAuthCacheUserInTransaction: the account a write reads (the rule of
// who may decide) comes from memory when nothing was written since, and
// is read as the transaction sees it otherwise: disabled by another
// handle, or by the transaction itself a statement before.
func TestAuthCacheUserInTransaction(t *testing.T) {
	d, other := openTwo(t)
	authFixture(t, d)
	ctx := context.Background()
	userIn := func(change func(account.Tx) error) (u account.User, reads int64) {
		t.Helper()
		if err := d.Accounts().Update(ctx, func(tx account.Tx) error {
			if change != nil {
				if err := change(tx); err != nil {
					return err
				}
			}
			before := d.Statements()
			var err error
			u, err = tx.(*storeTx).User("olga")
			reads = d.Statements() - before
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return u, reads
	}
	mustSession(t, d) // keeps olga's account
	if u, n := userIn(nil); n != 0 || u.Disabled() {
		t.Fatalf("the account read in a write after its session: %d statements, disabled %t; want 0, false", n, u.Disabled())
	}
	if err := other.Accounts().Update(ctx, func(tx account.Tx) error { return tx.DisableUser("olga", time.Now()) }); err != nil {
		t.Fatal(err)
	}
	if u, _ := userIn(nil); !u.Disabled() {
		t.Fatal("the account read in a write is enabled after another handle disabled it")
	}
	if _, err := other.SQL().Exec(`UPDATE users SET disabled_at = NULL WHERE name = 'olga'`); err != nil {
		t.Fatal(err)
	}
	userIn(nil) // kept again, enabled
	if u, _ := userIn(func(tx account.Tx) error { return tx.DisableUser("olga", time.Now()) }); !u.Disabled() {
		t.Fatal("the account read after its own transaction disabled it is enabled")
	}
}

// TestFreezesKeptUntilOneChanges: the freezes in force, listed by every
// call's page, are read once while none changes; a freeze made or lifted
// by another handle is listed by the next read.
func TestFreezesKeptUntilOneChanges(t *testing.T) {
	d, other := openTwo(t)
	ctx := context.Background()
	list := func() []queue.Freeze {
		t.Helper()
		fs, err := d.Store().Freezes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return fs
	}
	if fs := list(); len(fs) != 0 {
		t.Fatalf("freezes of a new database: %v", fs)
	}
	if n := readsOf(d, func() { list() }); n != 0 {
		t.Fatalf("the freezes listed again ran %d statements, want 0", n)
	}
	if err := other.Store().Update(ctx, func(tx queue.Tx) error {
		return tx.InsertFreeze(&queue.Freeze{Tool: "payments.refund", Reason: "incident", By: "olga", At: time.Now()})
	}); err != nil {
		t.Fatal(err)
	}
	if fs := list(); len(fs) != 1 || fs[0].Tool != "payments.refund" {
		t.Fatalf("freezes after another handle froze a tool: %+v", fs)
	}
	if err := other.Store().Update(ctx, func(tx queue.Tx) error {
		_, err := tx.LiftFreezes("payments.refund", "", "olga", time.Now())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if fs := list(); len(fs) != 0 {
		t.Fatalf("freezes after another handle lifted the freeze: %+v", fs)
	}
}

// TestPasskeysKeptUntilOneChanges: an account's passkeys, counted by every
// call's page, are read once while none changes; a passkey registered by
// another handle is listed by the next read.
func TestPasskeysKeptUntilOneChanges(t *testing.T) {
	d, other := openTwo(t)
	authFixture(t, d)
	ctx := context.Background()
	count := func() int {
		t.Helper()
		pks, err := d.Accounts().Passkeys(ctx, "olga")
		if err != nil {
			t.Fatal(err)
		}
		return len(pks)
	}
	if n := count(); n != 0 {
		t.Fatalf("passkeys of a new account: %d", n)
	}
	if n := readsOf(d, func() { count() }); n != 0 {
		t.Fatalf("the passkeys listed again ran %d statements, want 0", n)
	}
	if err := other.Accounts().Update(ctx, func(tx account.Tx) error {
		return tx.InsertPasskey(account.Passkey{ID: []byte{1, 2, 3}, User: "olga", Name: "key", PublicKey: []byte{4},
			Record: []byte(`{}`), CreatedAt: time.Now()})
	}); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 1 {
		t.Fatalf("passkeys after another handle registered one: %d, want 1", n)
	}
}
