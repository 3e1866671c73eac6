package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// freezeData is a data directory whose tools file is examples/tools.yaml
// with the MCP server hostile.
func freezeData(t *testing.T) string {
	t.Helper()
	data := t.TempDir()
	file, err := os.ReadFile("../../examples/tools.yaml")
	if err != nil {
		t.Fatal(err)
	}
	file = append(file, "\nmcp:\n  hostile:\n    command: [hostile-mcp]\n"...)
	if err := os.WriteFile(filepath.Join(data, "tools.yaml"), file, 0o600); err != nil {
		t.Fatal(err)
	}
	return data
}

// TestFreezeWhoMay: console freeze and unfreeze leave the rule of who may
// to the queue and say its refusal in the error table's code and words: an operator
// freezes, only an admin lifts; an unknown name does neither.
func TestFreezeWhoMay(t *testing.T) {
	data := freezeData(t)
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

// TestFreezeNames: console freeze refuses a name that matches nothing,
// with the close matches; freezes an MCP server by its name; and freezes
// a name not seen yet only with --allow-unknown, saying so.
func TestFreezeNames(t *testing.T) {
	data := freezeData(t)
	if code, _, errs := userRun(t, "a long enough password\n", "user", "add", "olive", "--role", "operator", "--password-stdin", "--data", data); code != 0 {
		t.Fatalf("user add = %d: %s", code, errs)
	}
	if code, _, errs := userRun(t, "", "token", "create", "--actor", "agent:billing-bot", "--audience", "payments-host", "--data", data); code != 0 {
		t.Fatalf("token create = %d: %s", code, errs)
	}
	steps := []struct {
		args []string
		code int
		says []string
	}{
		{[]string{"--tool", "Payments.Refund"}, 1, []string{"invalid_tool:", `"payments.refund"`, "nothing was frozen"}},
		{[]string{"--tool", "payments.refund "}, 1, []string{"invalid_tool:", `"payments.refund"`}},
		{[]string{"--tool", "payments.refnd"}, 1, []string{"unknown_tool:", `Did you mean "payments.refund"?`, "--allow-unknown"}},
		{[]string{"--actor", "Agent:Billing-Bot"}, 1, []string{"unknown_actor:", `Did you mean "agent:billing-bot"?`}},
		{[]string{"--actor", "agent:new"}, 1, []string{"unknown_actor:", "--allow-unknown"}},
		{[]string{"--tool", "hostile"}, 0, []string{"every tool of the MCP server hostile frozen", "--tool hostile/*"}},
		{[]string{"--actor", "agent:billing-bot"}, 0, []string{"every call by agent:billing-bot frozen"}},
		{[]string{"--actor", "agent:new", "--allow-unknown"}, 0, []string{"every call by agent:new frozen", "has not seen agent:new yet"}},
		{[]string{"--tool", "Payments.Refund", "--allow-unknown"}, 1, []string{"invalid_tool:"}},
	}
	for _, s := range steps {
		args := append([]string{"freeze", "--as", "olive", "--reason", "incident 4", "--data", data}, s.args...)
		code, out, errs := userRun(t, "", args...)
		ok := code == s.code
		for _, want := range s.says {
			ok = ok && strings.Contains(out+errs, want)
		}
		if !ok {
			t.Errorf("console freeze %q = %d %q %q, want %d saying %q", s.args, code, out, errs, s.code, s.says)
		}
	}
	_, out, _ := userRun(t, "", "freeze", "--list", "--data", data)
	if strings.Count(out, "frozen since") != 3 {
		t.Errorf("freezes in force:\n%s\nwant the 3 that were accepted", out)
	}
}
