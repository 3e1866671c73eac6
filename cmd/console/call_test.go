package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// callBuffer is a bytes.Buffer safe for a writer and a reader at once.
type callBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *callBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *callBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// callConsole runs `console serve` in-process on 127.0.0.1:0 and returns its
// URL and data directory.
func callConsole(t *testing.T) (url, data string) {
	t.Helper()
	data = t.TempDir()
	url, _ = serveFor(t, data)
	return url, data
}

// callRun runs the console in-process with env as its environment.
func callRun(t *testing.T, env map[string]string, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, func(k string) string { return env[k] }, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

// callJSON decodes a command's stdout.
func callJSON(t *testing.T, stdout string) map[string]any {
	t.Helper()
	var v map[string]any
	d := json.NewDecoder(strings.NewReader(stdout))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		t.Fatalf("stdout is not JSON (%v): %q", err, stdout)
	}
	return v
}

func callErrorCode(v map[string]any) string {
	e, _ := v["error"].(map[string]any)
	s, _ := e["code"].(string)
	return s
}

func writeCallFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCallCommandsWholeLoop(t *testing.T) {
	url, data := callConsole(t)
	if code, _, stderr := callRun(t, nil, "alice-password-1\n", "user", "add", "alice", "--role", "operator", "--password-stdin", "--data", data); code != 0 {
		t.Fatalf("user add: exit %d: %s", code, stderr)
	}
	code, secret, stderr := callRun(t, nil, "", "token", "create", "--actor", "agent:billing-bot", "--audience", "payments-host", "--data", data)
	if code != 0 {
		t.Fatalf("token create exited %d: %s", code, stderr)
	}
	env := map[string]string{"COUNTERSIGN_URL": url, "COUNTERSIGN_TOKEN": strings.TrimSpace(secret)}

	// A token the console does not know: the message names the console
	// that refused it and says where a token comes from.
	stranger := map[string]string{"COUNTERSIGN_URL": url, "COUNTERSIGN_TOKEN": "cst_not_a_token_of_this_console"}
	code, _, stderr = callRun(t, stranger, "", "call", "get", "call_x")
	if code != 1 || !strings.Contains(stderr, "401") || !strings.Contains(stderr, "from "+url+":") || !strings.Contains(stderr, "console token create") {
		t.Fatalf("get with an unknown token: exit %d, stderr %q; want 1 naming %s", code, stderr, url)
	}

	// The body is sent byte for byte: a duplicate member reaches the strict
	// parser instead of being merged away by a re-encoding.
	dup := writeCallFile(t, "dup.json", `{"tool":"payments.refund","target":"invoice:INV-7","args":{"amount_minor":1,"amount_minor":100000,"currency":"USD","reason_code":"fraud"}}`)
	code, stdout, _ := callRun(t, env, "", "call", "submit", dup)
	if got := callErrorCode(callJSON(t, stdout)); code != 1 || got != "duplicate_key" {
		t.Fatalf("submit with a duplicate member: exit %d code %q, want 1 duplicate_key", code, got)
	}

	// redeem ID presents the args as the console returns them: HTML
	// characters escaped, the informational notes included.
	proposal := `{"tool":"payments.refund","target":"invoice:INV-7",
  "args":{"amount_minor":1299,"currency":"USD","reason_code":"duplicate","notes":"<b>&</b> \u2028 ✓"},
  "rationale":"charged twice"}`
	code, stdout, stderr = callRun(t, env, proposal, "call", "submit", "-")
	if code != 0 {
		t.Fatalf("submit: exit %d: %s %s", code, stdout, stderr)
	}
	call := callJSON(t, stdout)
	id, _ := call["id"].(string)
	digest, _ := call["digest"].(string)
	if call["status"] != "pending" || id == "" || len(digest) != 64 {
		t.Fatalf("submit: %s, want a pending call with an id and digest", stdout)
	}
	if args, _ := call["args"].(map[string]any); args["amount_minor"] != json.Number("1299") {
		t.Errorf("submit: args=%v, want amount_minor 1299", call["args"])
	}

	// Flags may follow the ID and override the environment.
	code, stdout, stderr = callRun(t, map[string]string{"COUNTERSIGN_TOKEN": "cst_wrong"}, "", "call", "get", id, "--url", url, "--token", env["COUNTERSIGN_TOKEN"])
	if code != 0 || callJSON(t, stdout)["id"] != id {
		t.Fatalf("get: exit %d: %s %s", code, stdout, stderr)
	}

	code, stdout, stderr = callRun(t, env, "", "call", "wait", id, "--timeout", "700ms", "--poll", "200ms")
	if code != 1 || !strings.Contains(stderr, "still pending") || callJSON(t, stdout)["status"] != "pending" {
		t.Errorf("wait on a pending call: exit %d, stdout %s, stderr %s; want 1, the pending call, a message", code, stdout, stderr)
	}

	if code, out, errOut := callRun(t, nil, "", "approve", "--as", "alice", "--digest", digest, "--accept-warnings", "--data", data, id); code != 0 {
		t.Fatalf("approve: exit %d: %s %s", code, out, errOut)
	}
	code, stdout, stderr = callRun(t, env, "", "call", "wait", id)
	approved := callJSON(t, stdout)
	grant, _ := approved["grant"].(string)
	if code != 0 || approved["status"] != "approved" || grant == "" {
		t.Fatalf("wait: exit %d: %s %s, want approved with a grant", code, stdout, stderr)
	}

	tampered := writeCallFile(t, "tampered.json", `{"tool":"payments.refund","target":"invoice:INV-7","args":{"amount_minor":999999,"currency":"USD","reason_code":"duplicate"}}`)
	code, stdout, _ = callRun(t, env, "", "call", "redeem", "--grant", grant, "--call", tampered)
	if r := callJSON(t, stdout); code != 3 || r["decision"] != "rejected" || r["reason"] != "digest_mismatch" {
		t.Errorf("redeem a tampered call: exit %d: %s, want 3 rejected digest_mismatch", code, stdout)
	}

	code, stdout, stderr = callRun(t, env, "", "call", "redeem", id)
	if r := callJSON(t, stdout); code != 0 || r["decision"] != "accepted" || r["call_id"] != id {
		t.Fatalf("redeem ID: exit %d: %s %s, want accepted", code, stdout, stderr)
	}

	exact := writeCallFile(t, "exact.json", `{"tool":"payments.refund","target":"invoice:INV-7","args":{"amount_minor":1299,"currency":"USD","reason_code":"duplicate"}}`)
	code, stdout, _ = callRun(t, env, "", "call", "redeem", "--grant", grant, "--call", exact)
	if r := callJSON(t, stdout); code != 3 || r["reason"] != "replayed" {
		t.Errorf("redeem again: exit %d: %s, want 3 replayed", code, stdout)
	}
	code, stdout, stderr = callRun(t, env, "", "call", "redeem", id)
	if code != 1 || !strings.Contains(stderr, "not approved") || callJSON(t, stdout)["status"] != "redeemed" {
		t.Errorf("redeem ID of a redeemed call: exit %d: %s %s, want 1 and a message", code, stdout, stderr)
	}

	code, stdout, stderr = callRun(t, env, "", "call", "heartbeat", id, "--extend", "90s")
	if l := callJSON(t, stdout); code != 0 || l["call_id"] != id || l["lease_until"] == nil || fmt.Sprint(l["extend_max"]) != "300" {
		t.Errorf("heartbeat: exit %d: %s %s", code, stdout, stderr)
	}
	code, stdout, stderr = callRun(t, env, "", "call", "outcome", id, "--status", "succeeded", "--detail", "refund re-7 issued")
	if o, _ := callJSON(t, stdout)["outcome"].(map[string]any); code != 0 || o["status"] != "succeeded" || o["detail"] != "refund re-7 issued" {
		t.Errorf("outcome: exit %d: %s %s", code, stdout, stderr)
	}
	code, stdout, _ = callRun(t, env, "", "call", "outcome", id, "--status", "failed")
	if got := callErrorCode(callJSON(t, stdout)); code != 1 || got != "outcome_already_reported" {
		t.Errorf("second outcome: exit %d code %q, want 1 outcome_already_reported", code, got)
	}
	code, stdout, _ = callRun(t, env, "", "call", "heartbeat", id)
	if got := callErrorCode(callJSON(t, stdout)); code != 1 || got != "outcome_already_reported" {
		t.Errorf("heartbeat after the outcome: exit %d code %q, want 1 outcome_already_reported", code, got)
	}
}

func TestCallCommandsDenyAndCancel(t *testing.T) {
	url, data := callConsole(t)
	if code, _, stderr := callRun(t, nil, "alice-password-1\n", "user", "add", "alice", "--role", "operator", "--password-stdin", "--data", data); code != 0 {
		t.Fatalf("user add: exit %d: %s", code, stderr)
	}
	_, secret, _ := callRun(t, nil, "", "token", "create", "--actor", "agent:ops", "--audience", "files-host", "--data", data)
	env := map[string]string{"COUNTERSIGN_URL": url, "COUNTERSIGN_TOKEN": strings.TrimSpace(secret)}
	submit := func(target string) string {
		t.Helper()
		body := `{"tool":"files.delete","target":"` + target + `","args":{"reason":"stale export"}}`
		code, stdout, stderr := callRun(t, env, body, "call", "submit")
		if code != 0 {
			t.Fatalf("submit: exit %d: %s %s", code, stdout, stderr)
		}
		return callJSON(t, stdout)["id"].(string)
	}

	denied := submit("file:/srv/shared/a.csv")
	if code, out, errOut := callRun(t, nil, "", "deny", "--as", "alice", "--reason", "keep it for the audit", "--data", data, denied); code != 0 {
		t.Fatalf("deny: exit %d: %s %s", code, out, errOut)
	}
	code, stdout, stderr := callRun(t, env, "", "call", "wait", denied)
	v := callJSON(t, stdout)
	d, _ := v["decision"].(map[string]any)
	if code != 0 || v["status"] != "denied" || d["reason"] != "keep it for the audit" {
		t.Errorf("wait on a denied call: exit %d: %s %s, want 0, denied, the reason", code, stdout, stderr)
	}

	cancelled := submit("file:/srv/shared/b.csv")
	code, stdout, _ = callRun(t, env, "", "call", "cancel", cancelled)
	if code != 0 || callJSON(t, stdout)["status"] != "cancelled" {
		t.Errorf("cancel: exit %d: %s, want cancelled", code, stdout)
	}
	code, stdout, _ = callRun(t, env, "", "call", "cancel", cancelled)
	if got := callErrorCode(callJSON(t, stdout)); code != 1 || got != "not_pending" {
		t.Errorf("cancel again: exit %d code %q, want 1 not_pending", code, got)
	}

	code, stdout, _ = callRun(t, env, `{"tool":"files.delete","target":"file:/srv/shared/c.csv","args":{"reason":"x","sql":"1"}}`, "call", "submit")
	v = callJSON(t, stdout)
	e, _ := v["error"].(map[string]any)
	ps, _ := e["problems"].([]any)
	p0, _ := func() (map[string]any, bool) {
		if len(ps) == 0 {
			return nil, false
		}
		m, ok := ps[0].(map[string]any)
		return m, ok
	}()
	if code != 1 || e["code"] != "invalid_arguments" || p0["code"] != "unknown_field" || p0["path"] != "/args/sql" {
		t.Errorf("submit with an unknown argument: exit %d: %s, want 1 invalid_arguments with unknown_field /args/sql", code, stdout)
	}

	code, stdout, stderr = callRun(t, map[string]string{"COUNTERSIGN_TOKEN": "cst_x"}, "", "call", "get", denied, "--url", "http://127.0.0.1:1")
	if code != 1 || stdout != "" || !strings.Contains(stderr, "console call get") {
		t.Errorf("unreachable console: exit %d, stdout %q, stderr %q; want 1, nothing on stdout, a message", code, stdout, stderr)
	}
}

func TestCallCommandsUsage(t *testing.T) {
	env := map[string]string{"COUNTERSIGN_TOKEN": "cst_x", "COUNTERSIGN_URL": "http://127.0.0.1:1"}
	file := writeCallFile(t, "call.json", `{}`)
	tests := []struct {
		name string
		env  map[string]string
		args []string
		code int
	}{
		{"no command", env, []string{"call"}, 2},
		{"help", env, []string{"call", "-h"}, 0},
		{"unknown command", env, []string{"call", "launch"}, 2},
		{"no token", map[string]string{}, []string{"call", "get", "call_x"}, 2},
		{"get without id", env, []string{"call", "get"}, 2},
		{"get with two ids", env, []string{"call", "get", "a", "b"}, 2},
		{"unknown flag", env, []string{"call", "get", "call_x", "--nope"}, 2},
		{"submit two files", env, []string{"call", "submit", file, file}, 2},
		{"submit missing file", env, []string{"call", "submit", filepath.Join(t.TempDir(), "none.json")}, 2},
		{"wait without id", env, []string{"call", "wait"}, 2},
		{"wait with a bad timeout", env, []string{"call", "wait", "call_x", "--timeout", "0s"}, 2},
		{"redeem with nothing", env, []string{"call", "redeem"}, 2},
		{"redeem id and grant", env, []string{"call", "redeem", "call_x", "--grant", "g", "--call", file}, 2},
		{"redeem grant without call", env, []string{"call", "redeem", "--grant", "g"}, 2},
		{"outcome without status", env, []string{"call", "outcome", "call_x"}, 2},
		{"cancel without id", env, []string{"call", "cancel"}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := callRun(t, tt.env, "", tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d (stderr %s)", code, tt.code, stderr)
			}
			if stdout != "" {
				t.Errorf("stdout %q, want nothing", stdout)
			}
			if tt.code == 2 && !strings.Contains(stderr, "usage") {
				t.Errorf("stderr %q, want a usage line", stderr)
			}
		})
	}
}

func TestParseInterleaved(t *testing.T) {
	tests := []struct {
		args    []string
		wantPos []string
		wantURL string
	}{
		{[]string{"a", "--url", "u"}, []string{"a"}, "u"},
		{[]string{"--url", "u", "a"}, []string{"a"}, "u"},
		{[]string{"a", "b", "--url=u"}, []string{"a", "b"}, "u"},
		{[]string{"-", "--url", "u"}, []string{"-"}, "u"},
		{[]string{"--", "--url", "u"}, []string{"--url", "u"}, "d"},
		{[]string{"a", "--", "-x"}, []string{"a", "-x"}, "d"},
	}
	for _, tt := range tests {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		url := fs.String("url", "d", "")
		pos, err := parseInterleaved(fs, tt.args)
		if err != nil {
			t.Errorf("%q: %v", tt.args, err)
			continue
		}
		if strings.Join(pos, "|") != strings.Join(tt.wantPos, "|") || *url != tt.wantURL {
			t.Errorf("%q: positionals %q url %q, want %q %q", tt.args, pos, *url, tt.wantPos, tt.wantURL)
		}
	}
}
