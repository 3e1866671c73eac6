package main

import (
	"strings"
	"testing"
)

// TestFreezeWhoMay: console freeze and unfreeze leave the rule of who may
// to the queue and say its refusal in the error table's code and words: an operator
// freezes, only an admin lifts; an unknown name does neither.
func TestFreezeWhoMay(t *testing.T) {
	data := t.TempDir()
	for _, u := range [][]string{{"olive", "operator"}, {"root", "admin"}} {
		if code, _, errs := userRun(t, "a long enough password\n", "user", "add", u[0], "--role", u[1], "--password-stdin", "--data", data); code != 0 {
			t.Fatalf("user add %s = %d: %s", u[0], code, errs)
		}
	}
	steps := []struct {
		args []string
		code int
		says string
	}{
		{[]string{"freeze", "--as", "nobody", "--reason", "incident 3"}, 1, `not_a_decider: not an enabled operator or admin: "nobody"`},
		{[]string{"freeze", "--as", "olive", "--tool", "payments.refund", "--reason", "incident 3"}, 0, "payments.refund"},
		{[]string{"unfreeze", "--as", "olive", "--tool", "payments.refund"}, 1, `not_an_admin: only an enabled admin lifts a freeze, and "olive" is not one`},
		{[]string{"unfreeze", "--as", "root", "--tool", "releases.deploy"}, 1, "no_freeze: no freeze in force has that scope"},
		{[]string{"unfreeze", "--as", "root", "--tool", "payments.refund"}, 0, "unfrozen"},
	}
	for _, s := range steps {
		code, out, errs := userRun(t, "", append(s.args, "--data", data)...)
		if code != s.code || !strings.Contains(out+errs, s.says) || strings.Contains(errs, "queue:") {
			t.Errorf("console %v = %d %q %q, want %d saying %q", s.args, code, out, errs, s.code, s.says)
		}
	}
}
