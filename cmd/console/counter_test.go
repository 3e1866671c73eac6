package main

import (
	"strings"
	"testing"
)

// TestCounterCommand: `console counter` answers a pending call with an
// edit through the running server's control socket: the counter is the
// edited call with the operator's approval (method counter, unattested as
// any command's), the original reads countered and names it; an edit the
// tool does not list, or a value that is not JSON, changes nothing.
func TestCounterCommand(t *testing.T) {
	url, data := callConsole(t)
	if code, _, stderr := callRun(t, nil, "alice-password-1\n", "user", "add", "alice", "--role", "operator", "--password-stdin", "--data", data); code != 0 {
		t.Fatalf("user add: exit %d: %s", code, stderr)
	}
	code, secret, stderr := callRun(t, nil, "", "token", "create", "--actor", "agent:billing-bot", "--audience", "payments-host", "--data", data)
	if code != 0 {
		t.Fatalf("token create exited %d: %s", code, stderr)
	}
	env := map[string]string{"COUNTERSIGN_URL": url, "COUNTERSIGN_TOKEN": strings.TrimSpace(secret)}
	code, stdout, stderr := callRun(t, env, `{"tool":"payments.refund","target":"invoice:INV-7","args":{"amount_minor":40000,"currency":"USD","reason_code":"duplicate"}}`,
		"call", "submit", "-")
	if code != 0 {
		t.Fatalf("submit: exit %d: %s %s", code, stdout, stderr)
	}
	orig := callJSON(t, stdout)
	id, digest := orig["id"].(string), orig["digest"].(string)

	code, _, stderr = callRun(t, nil, "", "counter", id, "--as", "alice", "--digest", digest, "--set", "/amount_minor=abc", "--data", data)
	if code != 2 || !strings.Contains(stderr, "not JSON") {
		t.Errorf("a value that is not JSON: exit %d, stderr %q", code, stderr)
	}
	code, stdout, _ = callRun(t, nil, "", "counter", id, "--as", "alice", "--digest", digest, "--set", `/currency="EUR"`, "--data", data)
	if got := callErrorCode(callJSON(t, stdout)); code != 1 || got != "invalid_arguments" || !strings.Contains(stdout, "not_editable") {
		t.Errorf("an edit of a member not listed: exit %d: %s", code, stdout)
	}

	code, stdout, stderr = callRun(t, nil, "", "counter", id, "--as", "alice", "--digest", digest,
		"--set", "/amount_minor=4000", "--set", `/reason_code="requested"`, "--data", data)
	if code != 0 {
		t.Fatalf("counter: exit %d: %s %s", code, stdout, stderr)
	}
	counter := callJSON(t, stdout)
	args, _ := counter["args"].(map[string]any)
	approvals, _ := counter["approvals"].(map[string]any)
	given, _ := approvals["given"].([]any)
	if counter["countered_from"] != id || counter["status"] != "pending" || args["amount_minor"] == nil || args["reason_code"] != "requested" || len(given) != 1 {
		t.Fatalf("the counter: %s", stdout)
	}
	if a, _ := given[0].(map[string]any); a["by"] != "alice" || a["method"] != "counter" || a["channel"] != "cli" || a["human"] != "unattested" {
		t.Errorf("the editor's approval: %v", a)
	}
	code, stdout, _ = callRun(t, env, "", "call", "get", id)
	got := callJSON(t, stdout)
	by, _ := got["countered_by"].(map[string]any)
	if code != 0 || got["status"] != "countered" || by["id"] != counter["id"] {
		t.Errorf("the original after the counter: %s", stdout)
	}
}
