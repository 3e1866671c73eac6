package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSetupCommandsRefuseAMistypedData: user add and token create set a
// console up in its data directory, but a directory named by --data or
// $COUNTERSIGN_DATA that is not there is a typo, not a new console: both
// refuse it, make nothing (not the directory, not its parent's entry), and
// say to check --data or to run serve (or keys init) there first; user add
// refuses before asking for the password. The rule is the directory's
// existence, so the documented first steps keep working: a directory that
// is there, as serve or keys init left it, or made empty on purpose (mkdir,
// a service manager's state directory), is set up as before; so is the
// default ./countersign-data, which nobody types.
func TestSetupCommandsRefuseAMistypedData(t *testing.T) {
	parent := t.TempDir()
	typo := filepath.Join(parent, "countersgn-data")
	commands := map[string][]string{
		"user add":     {"user", "add", "alice", "--role", "operator", "--password-stdin"},
		"token create": {"token", "create", "--actor", "agent:billing-bot", "--audience", "payments-host"},
	}
	for name, args := range commands {
		for _, how := range []struct {
			name string
			env  map[string]string
			args []string
		}{
			{"--data", map[string]string{"USER": "root"}, append(append([]string(nil), args...), "--data", typo)},
			{"$COUNTERSIGN_DATA", map[string]string{"USER": "root", "COUNTERSIGN_DATA": typo}, args},
		} {
			code, out, errs := runWith(t, how.env, "a long enough password\n", how.args...)
			if code != 1 || out != "" || !strings.Contains(errs, "console "+name+": no data directory at "+typo+"; nothing was created") ||
				!strings.Contains(errs, "Check that --data (or $COUNTERSIGN_DATA) names this console's data directory") ||
				!strings.Contains(errs, "console serve --data "+typo) || !strings.Contains(errs, "console keys init --data "+typo) {
				t.Errorf("%s with a mistyped %s = %d, stdout %q, stderr %q; want 1 and what to do", name, how.name, code, out, errs)
			}
			if strings.Contains(errs, "password") {
				t.Errorf("%s with a mistyped %s: %q, want the refusal before any password", name, how.name, errs)
			}
		}
	}
	if names, err := os.ReadDir(parent); err != nil || len(names) != 0 {
		t.Fatalf("the mistyped data directory's parent holds %v (%v), want nothing", names, err)
	}

	// A directory that is there, empty, is set up: the account and the
	// token are in it.
	empty := t.TempDir()
	if code, out, errs := runWith(t, map[string]string{"USER": "root"}, "a long enough password\n",
		append(commands["user add"], "--data", empty)...); code != 0 || !strings.Contains(out, "added alice (operator)") {
		t.Fatalf("user add in an empty directory = %d %q %s", code, out, errs)
	}
	if code, out, errs := runWith(t, map[string]string{"USER": "root"}, "",
		append(commands["token create"], "--data", empty)...); code != 0 || !strings.HasPrefix(out, "cst_") {
		t.Fatalf("token create in the same directory = %d %q %s", code, out, errs)
	}
	if _, err := os.Stat(dbPath(empty)); err != nil {
		t.Errorf("no database in the directory set up: %v", err)
	}
	// As does one that keys init made, before the first serve.
	keyed := t.TempDir()
	if code, _, errs := keysRun(t, nil, "keys", "init", "--data", keyed); code != 0 {
		t.Fatalf("keys init = %d %s", code, errs)
	}
	if code, _, errs := runWith(t, map[string]string{"USER": "root"}, "",
		append(commands["token create"], "--data", keyed)...); code != 0 {
		t.Errorf("token create after keys init = %d %s", code, errs)
	}

	// The default directory, named by nobody, is still made.
	t.Chdir(t.TempDir())
	if code, out, errs := runWith(t, map[string]string{"USER": "root"}, "a long enough password\n", commands["user add"]...); code != 0 ||
		!strings.Contains(out, "added alice (operator)") {
		t.Fatalf("user add with the default data directory = %d %q %s", code, out, errs)
	}
	if _, err := os.Stat(dbPath("countersign-data")); err != nil {
		t.Errorf("the default data directory was not set up: %v", err)
	}
}
