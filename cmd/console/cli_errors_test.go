package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/control"
)

// The mistakes a person makes at the shell are answered with what to do
// next.

// TestServeOnAUsedPortSaysWhatToDo: an --addr another process holds names
// the way out instead of a bare bind error.
func TestServeOnAUsedPortSaysWhatToDo(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	for _, cmd := range []string{"serve", "demo"} {
		code, _, errs := userRun(t, "", cmd, "--addr", addr, "--data", t.TempDir(), "--tools", "../../examples/tools.yaml")
		if code != 1 || !strings.Contains(errs, addr+" is already in use") || !strings.Contains(errs, "pass --addr with a free port") {
			t.Errorf("%s on a used port = %d: %s", cmd, code, errs)
		}
	}
}

// TestReadingCommandsRefuseAMissingDatabase: a mistyped --data must not
// make an empty database and list nothing, or revoke nothing.
func TestReadingCommandsRefuseAMissingDatabase(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "typo")
	for _, args := range [][]string{
		{"user", "list"},
		{"user", "disable", "alice"},
		{"token", "list"},
		{"token", "revoke", "tok_x"},
	} {
		code, _, errs := userRun(t, "", append(args, "--data", missing)...)
		if code != 1 || !strings.Contains(errs, "no database at") || !strings.Contains(errs, "pass --data DIR") {
			t.Errorf("%v on a missing data directory = %d: %s", args, code, errs)
		}
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("a command made the mistyped data directory (stat: %v)", err)
	}
}

// TestTokenFlagsAfterTheID: console token revoke ID --data DIR, as its
// usage writes it, reads the flag after the id.
func TestTokenFlagsAfterTheID(t *testing.T) {
	data := t.TempDir()
	code, _, errs := userRun(t, "", "token", "create", "--actor", "agent:a", "--audience", "h", "--data", data)
	if code != 0 {
		t.Fatalf("token create = %d: %s", code, errs)
	}
	code, out, errs := userRun(t, "", "token", "list", "--data", data)
	if code != 0 {
		t.Fatalf("token list = %d: %s", code, errs)
	}
	fields := strings.Fields(strings.Split(strings.TrimSpace(out), "\n")[1])
	id := fields[0]
	if code, out, errs := userRun(t, "", "token", "revoke", id, "--data", data); code != 0 || !strings.Contains(out, "revoked "+id) {
		t.Fatalf("token revoke ID --data DIR = %d %q: %s", code, out, errs)
	}
	if code, _, errs := userRun(t, "", "token", "revoke", "tok_none", "--data", data); code != 1 || !strings.Contains(errs, "console token list shows the ids") {
		t.Errorf("revoking an unknown token = %d: %s", code, errs)
	}
	if code, _, errs := userRun(t, "", "token", "revoke", "--data", data); code != 2 || !strings.Contains(errs, "console token revoke ID") {
		t.Errorf("token revoke without an id = %d: %s", code, errs)
	}
}

// TestHelpOfTokenAndUser: --help prints the usage and exits 0; an unknown
// subcommand prints it too.
func TestHelpOfTokenAndUser(t *testing.T) {
	for _, cmd := range []string{"token", "user"} {
		for _, h := range []string{"--help", "-h", "help"} {
			if code, _, errs := userRun(t, "", cmd, h); code != 0 || !strings.Contains(errs, "console "+cmd+" list") {
				t.Errorf("%s %s = %d: %s", cmd, h, code, errs)
			}
		}
		if code, _, errs := userRun(t, "", cmd, "frobnicate"); code != 2 || !strings.Contains(errs, "console "+cmd+" list") {
			t.Errorf("%s frobnicate = %d: %s", cmd, code, errs)
		}
	}
}

// TestTokenOwnerNoAccountIsNoted: an owner no account goes by is kept (it
// may be someone who has not signed in yet) but noted, since a mistyped
// owner would be free to approve the agent's calls.
func TestTokenOwnerNoAccountIsNoted(t *testing.T) {
	data := t.TempDir()
	if code, _, errs := userRun(t, "a long enough password\n", "user", "add", "alice", "--role", "operator", "--password-stdin", "--data", data); code != 0 {
		t.Fatalf("user add = %d: %s", code, errs)
	}
	code, out, errs := userRun(t, "", "token", "create", "--actor", "agent:a", "--audience", "h",
		"--owner", "alice", "--owner", "alcie", "--owner", "team:payments", "--data", data)
	if code != 0 || !strings.HasPrefix(out, "cst_") {
		t.Fatalf("token create = %d %q: %s", code, out, errs)
	}
	if !strings.Contains(errs, "no account is named alcie yet") || !strings.Contains(errs, "revoke this token") {
		t.Errorf("an unknown owner is not noted: %s", errs)
	}
	if strings.Contains(errs, "named alice") || strings.Contains(errs, "named team:payments") {
		t.Errorf("a known owner or a group is noted: %s", errs)
	}
}

// TestKeysTrustHelp: keys trust --help is the usage, not a file named
// "--help".
func TestKeysTrustHelp(t *testing.T) {
	if code, _, errs := userRun(t, "", "keys", "trust", "--help"); code != 0 || !strings.Contains(errs, "console keys trust FILE") {
		t.Errorf("keys trust --help = %d: %s", code, errs)
	}
}

// TestCallWithNoConsoleThere: a console that is not running at --url is
// named as the likely cause, with the flag that points elsewhere.
func TestCallWithNoConsoleThere(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	code, _, errs := userRun(t, "", "call", "get", "call_x", "--url", url, "--token", "cst_x")
	if code != 1 || !strings.Contains(errs, "is the console running at that address? pass --url URL or set COUNTERSIGN_URL") {
		t.Errorf("call get with no console there = %d: %s", code, errs)
	}
}

// TestServeFlagMistakes: a flag whose mistake would show only later, or
// never, is refused before anything opens, with the form it wants.
func TestServeFlagMistakes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"serve", "--log-level", "verbose"}, 2, `--log-level "verbose": use debug, info, warn or error`},
		{[]string{"demo", "--log-level", "loud"}, 2, `--log-level "loud": use debug, info, warn or error`},
		{[]string{"mcp-bridge", "--url", "http://127.0.0.1:1/mcp/x", "--log-level", "all"}, 2, `--log-level "all"`},
		{[]string{"serve", "--public-url", "approvals.example.com"}, 2, "with its scheme, e.g. https://approvals.example.com"},
		{[]string{"serve", "--allowed-host", "http://health.internal"}, 2, `--allowed-host "http://health.internal": give a name as requests carry it in Host`},
		{[]string{"serve", "--hold", "70s"}, 2, "--hold 1m10s is longer than MCP clients wait: at most 55s"},
		{[]string{"serve", "--max-mcp-sessions-per-token", "0"}, 2, "--max-mcp-sessions-per-token 0: give at least 1"},
		{[]string{"serve", "--max-waits-per-token", "0"}, 2, "--max-waits-per-token 0: give at least 1 (the default is 100)"},
		{[]string{"serve", "--session-idle", "0s"}, 2, "--session-idle 0s, --session-max 12h0m0s: give durations above zero"},
		{[]string{"serve", "--session-max", "-1h"}, 2, "--session-max -1h0m0s: give durations above zero"},
		{[]string{"serve", "--addr", "8080"}, 1, `--addr "8080": give HOST:PORT, e.g. 127.0.0.1:8080`},
	} {
		data := filepath.Join(t.TempDir(), "data")
		code, _, errs := userRun(t, "", append(tc.args, "--data", data, "--tools", "../../examples/tools.yaml")...)
		if tc.args[0] == "mcp-bridge" {
			code, _, errs = userRun(t, "", tc.args...)
		}
		if code != tc.code || !strings.Contains(errs, tc.want) {
			t.Errorf("%v = %d: %s; want %d and %q", tc.args, code, errs, tc.code, tc.want)
		}
		if _, err := os.Stat(data); !os.IsNotExist(err) {
			t.Errorf("%v made the data directory before refusing its flags", tc.args)
		}
	}
}

// TestEveryHelpExitsZero: asking any command for its usage succeeds, and
// prints something.
func TestEveryHelpExitsZero(t *testing.T) {
	subs := map[string][]string{
		"tools": {"lint"}, "policy": {"test", "replay"}, "keys": {"init", "list", "rotate", "jwks", "trust"},
		"token": {"create", "list", "revoke"}, "user": {"add", "list", "disable", "passwd"},
		"call":  {"submit", "get", "wait", "redeem", "outcome", "heartbeat", "cancel"},
		"audit": {"verify", "export", "checkpoint", "accept-rollback"}, "allowance": {"list", "revoke"},
		"mcp": {"list", "show", "approve", "reject"},
	}
	for name := range commands() {
		lines := [][]string{{name}}
		for _, s := range subs[name] {
			lines = append(lines, []string{name, s})
		}
		for _, args := range lines {
			for _, h := range []string{"-h", "--help"} {
				code, _, errs := userRun(t, "", append(args, h)...)
				if code != 0 || !strings.Contains(strings.ToLower(errs), "usage") {
					t.Errorf("%v %s = %d, stderr %q", args, h, code, errs)
				}
			}
		}
	}
}

// TestTokenAndUserFlagsBelongToTheirSubcommand: token list --actor would
// look filtered and is refused instead.
func TestTokenAndUserFlagsBelongToTheirSubcommand(t *testing.T) {
	data := t.TempDir()
	for _, args := range [][]string{
		{"token", "list", "--actor", "agent:a"},
		{"token", "revoke", "tok_x", "--owner", "alice"},
		{"user", "list", "--role", "admin"},
		{"user", "disable", "alice", "--password-stdin"},
	} {
		if code, _, errs := userRun(t, "", append(args, "--data", data)...); code != 2 || !strings.Contains(errs, "flag provided but not defined") {
			t.Errorf("%v = %d: %s", args, code, errs)
		}
	}
}

// TestDataAndToolsOfTheWrongKind: a file given as --data, or a directory as
// --tools, is named for what it is.
func TestDataAndToolsOfTheWrongKind(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "afile")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errs := userRun(t, "", "serve", "--addr", "127.0.0.1:0", "--data", file, "--tools", "../../examples/tools.yaml")
	if code != 1 || !strings.Contains(errs, "--data "+file+" is a file, not a directory") {
		t.Errorf("serve --data FILE = %d: %s", code, errs)
	}
	code, _, errs = userRun(t, "", "user", "list", "--data", file)
	if code != 1 || !strings.Contains(errs, "is a file, not a directory") {
		t.Errorf("user list --data FILE = %d: %s", code, errs)
	}
	code, _, errs = userRun(t, "", "serve", "--addr", "127.0.0.1:0", "--data", filepath.Join(dir, "data"), "--tools", dir)
	if code != 1 || !strings.Contains(errs, "--tools "+dir+" is a directory: pass the tools file itself") {
		t.Errorf("serve --tools DIR = %d: %s", code, errs)
	}
}

// TestServeSaysListeningOnlyWhenItIs: a setting refused while starting is
// not preceded by "listening", nor by the demo's logins.
func TestServeSaysListeningOnlyWhenItIs(t *testing.T) {
	for _, cmd := range []string{"serve", "demo"} {
		code, out, errs := userRun(t, "", cmd, "--addr", "127.0.0.1:0", "--data", t.TempDir(), "--tools", "../../examples/tools.yaml",
			"--local-login", "none")
		if code != 1 || !strings.Contains(errs, "local login") {
			t.Fatalf("%s --local-login none = %d: %s", cmd, code, errs)
		}
		if strings.Contains(out, "listening") || strings.Contains(out, "running at") || strings.Contains(out, "Logins") {
			t.Errorf("%s spoke of a running console before refusing a setting: %q", cmd, out)
		}
	}
}

// TestApproveWantsTheWholeDigest: a prefix or a mistyped digest is refused
// at the shell, saying what a digest is, before any database is opened.
func TestApproveWantsTheWholeDigest(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	for _, d := range []string{"8640d589", strings.Repeat("G", 64), strings.Repeat("A", 64)} {
		code, _, errs := userRun(t, "", "approve", "call_x", "--as", "alice", "--digest", d, "--data", data)
		if code != 2 || !strings.Contains(errs, "give all 64 hex digits the call's page shows") {
			t.Errorf("approve --digest %s = %d: %s", d, code, errs)
		}
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Errorf("approve with a bad digest touched the data directory (stat: %v)", err)
	}
}

// TestServeTwiceOnOneDataDirectory: a second console on a data directory
// another one serves says how to run both.
func TestServeTwiceOnOneDataDirectory(t *testing.T) {
	data := t.TempDir()
	ln, err := control.Listen(controlPath(data))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	code, out, errs := userRun(t, "", "serve", "--addr", "127.0.0.1:0", "--data", data, "--tools", "../../examples/tools.yaml")
	if code != 1 || !strings.Contains(errs, "another console is already serving this data directory") ||
		!strings.Contains(errs, "stop it first, or give this one a data directory of its own") {
		t.Errorf("a second serve on one data directory = %d: %s", code, errs)
	}
	if strings.Contains(out, "listening") {
		t.Errorf("the second serve said it was listening: %q", out)
	}
}

// TestUserMistakesSayWhatToDo: a taken name or a missing account points at
// console user list.
func TestUserMistakesSayWhatToDo(t *testing.T) {
	data := t.TempDir()
	for i := 0; i < 2; i++ {
		userRun(t, "a long enough password\n", "user", "add", "alice", "--role", "operator", "--password-stdin", "--data", data)
	}
	code, _, errs := userRun(t, "a long enough password\n", "user", "add", "alice", "--role", "operator", "--password-stdin", "--data", data)
	if code != 1 || !strings.Contains(errs, "already exists") || !strings.Contains(errs, "choose another") {
		t.Errorf("user add of a taken name = %d: %s", code, errs)
	}
	code, _, errs = userRun(t, "", "user", "disable", "bob", "--data", data)
	if code != 1 || !strings.Contains(errs, "no such user") || !strings.Contains(errs, "console user list shows the accounts") {
		t.Errorf("user disable of no account = %d: %s", code, errs)
	}
}

// syncBuffer is a bytes.Buffer that a running command and its test may
// share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestDemoWithoutAgentSaysSo: demo --no-agent does not announce an agent.
func TestDemoWithoutAgentSaysSo(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"demo", "--no-agent", "--addr", "127.0.0.1:0", "--data", t.TempDir(), "--log-level", "error"},
			func(string) string { return "" }, strings.NewReader(""), &out, &errb)
	}()
	for !strings.Contains(out.String(), "Press Ctrl-C") {
		select {
		case code := <-done:
			t.Fatalf("demo exited %d before it was up: %s %s", code, out.String(), errb.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("demo stopped with %d: %s", code, errb.String())
	}
	if strings.Contains(out.String(), "A demo agent proposes") || !strings.Contains(out.String(), "No demo agent (--no-agent)") {
		t.Errorf("demo --no-agent announced:\n%s", out.String())
	}
}

// TestDemoDataHelpIsTheDemos: demo's --data help says what demo does
// without it, not what serve does.
func TestDemoDataHelpIsTheDemos(t *testing.T) {
	_, _, errs := userRun(t, "", "demo", "-h")
	if !strings.Contains(errs, "a fresh temporary one") || strings.Contains(errs, "default $COUNTERSIGN_DATA or ./countersign-data") {
		t.Errorf("demo -h describes --data as:\n%s", errs)
	}
}

// TestHelpSaysWhatTheCommandDoes: the commands people start from open
// their -h with a usage line and what they do, not Go's "Usage of".
func TestHelpSaysWhatTheCommandDoes(t *testing.T) {
	for _, cmd := range []string{"serve", "demo", "approve", "deny", "mcp-bridge"} {
		_, _, errs := userRun(t, "", cmd, "-h")
		if !strings.HasPrefix(errs, "usage: console "+cmd+" ") || !strings.Contains(errs, "\nflags:\n") || strings.Contains(errs, "Usage of") {
			t.Errorf("%s -h:\n%s", cmd, errs)
		}
	}
	for _, args := range [][]string{{"token", "create"}, {"user", "add"}, {"keys", "rotate"}, {"audit", "export"}, {"audit", "accept-rollback"}} {
		_, _, errs := userRun(t, "", append(args, "-h")...)
		if !strings.Contains(errs, "console "+args[0]+" "+args[1]+" ") || strings.Contains(errs, "Usage of") {
			t.Errorf("%v -h:\n%s", args, errs)
		}
	}
}
