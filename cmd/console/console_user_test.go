package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/db"
	"github.com/countersign/countersign/internal/queue"
)

func userRun(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	env := map[string]string{"USER": "root"}
	code := run(context.Background(), args, func(k string) string { return env[k] }, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func TestUserAddListDisable(t *testing.T) {
	data := t.TempDir()
	code, out, errs := userRun(t, "a long enough password\n", "user", "add", "alice", "--role", "operator", "--password-stdin", "--data", data)
	if code != 0 || !strings.Contains(out, "added alice (operator)") {
		t.Fatalf("user add = %d, %q, %q", code, out, errs)
	}
	code, _, _ = userRun(t, "another password!\r\n", "user", "add", "--data", data, "--role", "auditor", "bob", "--password-stdin")
	if code != 0 {
		t.Fatalf("user add with flags first = %d", code)
	}
	for _, tc := range []struct {
		stdin string
		args  []string
		want  int
	}{
		{"a long enough password\n", []string{"user", "add", "alice", "--role", "admin", "--password-stdin"}, 1},
		{"short\n", []string{"user", "add", "carol", "--role", "admin", "--password-stdin"}, 2},
		{"a long enough password\n", []string{"user", "add", "carol", "--role", "root", "--password-stdin"}, 2},
		{"a long enough password\n", []string{"user", "add", "bad name", "--role", "admin", "--password-stdin"}, 2},
		{"a long enough password\n", []string{"user", "add", "carol", "--role", "admin"}, 2},
		{"", []string{"user", "add", "carol", "--role", "admin", "--password-stdin"}, 2},
		{"", []string{"user", "add", "carol"}, 2},
		{"", []string{"user", "frobnicate"}, 2},
	} {
		if code, _, errs := userRun(t, tc.stdin, append(tc.args, "--data", data)...); code != tc.want {
			t.Errorf("%v = %d (%s), want %d", tc.args, code, errs, tc.want)
		}
	}
	code, out, _ = userRun(t, "", "user", "list", "--data", data)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[1], "alice") || !strings.Contains(lines[2], "auditor") {
		t.Fatalf("user list = %d:\n%s", code, out)
	}
	if code, _, errs := userRun(t, "", "user", "disable", "alice", "--data", data); code != 0 {
		t.Fatalf("user disable = %d: %s", code, errs)
	}
	if code, _, _ := userRun(t, "", "user", "disable", "alice", "--data", data); code != 1 {
		t.Errorf("disabling twice = %d, want 1", code)
	}
	if code, _, _ := userRun(t, "", "user", "disable", "nobody", "--data", data); code != 1 {
		t.Errorf("disabling an unknown user = %d, want 1", code)
	}

	d, err := db.Open(filepath.Join(data, "countersign.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	alice, err := account.NewService(d.Accounts(), nil).UserByName(context.Background(), "alice")
	if err != nil || !alice.Disabled() {
		t.Fatalf("alice = %+v, %v; want disabled", alice, err)
	}
	if err := account.Verify(alice.PasswordHash, "a long enough password"); err != nil {
		t.Errorf("stored hash does not verify the password: %v", err)
	}
	p, _, _, _ := account.ParseHash(alice.PasswordHash)
	if !p.AtLeast(account.MinParams) {
		t.Errorf("hash parameters %+v below %+v", p, account.MinParams)
	}
	bob, _ := account.NewService(d.Accounts(), nil).UserByName(context.Background(), "bob")
	if err := account.Verify(bob.PasswordHash, "another password!"); err != nil {
		t.Errorf("a CRLF line ending became part of the password: %v", err)
	}
	var kinds []string
	rows, _ := d.SQL().Query(`SELECT kind || ':' || principal || ':' || channel FROM audit ORDER BY seq`)
	for rows.Next() {
		var k string
		rows.Scan(&k)
		kinds = append(kinds, k)
	}
	rows.Close()
	want := []string{"user_added:cli:root:cli", "user_added:cli:root:cli", "user_disabled:cli:root:cli"}
	if strings.Join(kinds, " ") != strings.Join(want, " ") {
		t.Errorf("audit = %v, want %v", kinds, want)
	}
}

// TestUserDisableEndsDelegations: disabling an account on the command line
// records the delegations it gave or received ended, as the admin page
// does, and leaves others' delegations live.
func TestUserDisableEndsDelegations(t *testing.T) {
	data := t.TempDir()
	for _, name := range []string{"alice", "carol", "dave", "erin"} {
		if code, _, errs := userRun(t, "a long enough password\n", "user", "add", name, "--role", "operator", "--password-stdin", "--data", data); code != 0 {
			t.Fatalf("user add %s = %d: %s", name, code, errs)
		}
	}
	ctx := context.Background()
	d, err := db.Open(filepath.Join(data, "countersign.db"))
	if err != nil {
		t.Fatal(err)
	}
	q := queue.NewService(queue.Config{Store: d.Store()})
	until := time.Now().Add(time.Hour)
	for _, g := range [][2]string{{"alice", "carol"}, {"dave", "alice"}, {"dave", "erin"}} {
		if _, err := q.GiveDelegation(ctx, queue.DelegationInput{By: g[0], Channel: audit.ChannelCLI, Delegator: g[0], Delegate: g[1], Until: until}); err != nil {
			t.Fatalf("give %s → %s: %v", g[0], g[1], err)
		}
	}
	d.Close()

	code, out, errs := userRun(t, "", "user", "disable", "alice", "--data", data)
	if code != 0 || !strings.Contains(out, "; 2 delegations they gave or received are recorded ended") {
		t.Fatalf("user disable = %d, %q, %q", code, out, errs)
	}
	if d, err = db.Open(filepath.Join(data, "countersign.db")); err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	all, err := queue.NewService(queue.Config{Store: d.Store()}).Delegations(ctx, queue.DelegationFilter{Limit: 10})
	if err != nil || len(all) != 3 {
		t.Fatalf("delegations: %d, %v", len(all), err)
	}
	for _, g := range all {
		involved := g.Delegator == "alice" || g.Delegate == "alice"
		if ended := g.EndReason == queue.DelegationEndedDisabled && g.EndedBy == "cli:root" && !g.EndedAt.IsZero(); ended != involved {
			t.Errorf("%s → %s: ended %q by %q at %v; want ended for being disabled only where alice is one of them",
				g.Delegator, g.Delegate, g.EndReason, g.EndedBy, g.EndedAt)
		}
	}
	var n int
	if err := d.SQL().QueryRow(`SELECT count(*) FROM audit WHERE kind = 'delegation_ended' AND principal = 'cli:root' AND channel = 'cli'`).Scan(&n); err != nil || n != 2 {
		t.Errorf("delegation_ended entries = %d, %v; want 2", n, err)
	}
}
