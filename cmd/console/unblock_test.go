package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// serveFor runs `console serve` in-process on 127.0.0.1:0 over data until
// stop is called (or the test ends), and returns its URL.
func serveFor(t *testing.T, data string) (url string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr callBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--data", data, "--tools", "../../examples/tools.yaml",
			"--log-level", "error"}, func(string) string { return "" }, strings.NewReader(""), &stdout, &stderr)
	}()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("serve exited %d: %s", code, stderr.String())
			}
		case <-time.After(30 * time.Second):
			t.Errorf("serve did not stop within 30s")
		}
	}
	t.Cleanup(stop)
	re := regexp.MustCompile(`listening on (http://\S+)`)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if m := re.FindStringSubmatch(stdout.String()); m != nil {
			return m[1], stop
		}
		select {
		case code := <-done:
			t.Fatalf("serve exited %d: %s", code, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start: %s", stderr.String())
		}
	}
}

// propose sends a proposal with token and returns the status and body.
func propose(t *testing.T, url, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/api/v1/calls", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(b)
}

const (
	badRefund  = `{"tool":"payments.refund","target":"invoice:INV-7","args":{"amount_minor":12.99,"currency":"USD","reason_code":"duplicate"}}`
	goodRefund = `{"tool":"payments.refund","target":"invoice:INV-7","args":{"amount_minor":1299,"currency":"USD","reason_code":"duplicate"}}`
)

// blockRefunds makes three refused proposals in a row, so that the
// fourth is refused with retry_limit.
func blockRefunds(t *testing.T, url, token string) {
	t.Helper()
	for i := range 3 {
		if code, body := propose(t, url, token, badRefund); code == http.StatusTooManyRequests || code < 400 {
			t.Fatalf("bad proposal %d: %d %s, want refused for its content", i, code, body)
		}
	}
	if code, body := propose(t, url, token, goodRefund); code != http.StatusTooManyRequests || !strings.Contains(body, "retry_limit") {
		t.Fatalf("after three refusals: %d %s, want 429 retry_limit", code, body)
	}
}

// TestUnblockOverTheControlSocket: console unblock lifts a retry block
// through the running server's control socket, in the name of an
// operator, and the audit records it on the cli channel; the agent's next
// proposal is accepted. Without a server it clears the block in the
// database. Its mistakes say what to do.
func TestUnblockOverTheControlSocket(t *testing.T) {
	data := t.TempDir()
	url, stop := serveFor(t, data)
	if code, _, errs := callRun(t, nil, "alice-password-1\n", "user", "add", "alice", "--role", "operator", "--password-stdin", "--data", data); code != 0 {
		t.Fatalf("user add: exit %d: %s", code, errs)
	}
	if code, _, errs := callRun(t, nil, "bob-password-12\n", "user", "add", "bob", "--role", "auditor", "--password-stdin", "--data", data); code != 0 {
		t.Fatalf("user add: exit %d: %s", code, errs)
	}
	code, secret, errs := callRun(t, nil, "", "token", "create", "--actor", "agent:billing-bot", "--audience", "payments-host", "--data", data)
	if code != 0 {
		t.Fatalf("token create exited %d: %s", code, errs)
	}
	token := strings.TrimSpace(secret)
	blockRefunds(t, url, token)

	// A data directory holding only a link to the server's control socket:
	// with no database to fall back on, only the socket can clear it.
	socketOnly := t.TempDir()
	if err := os.Symlink(controlPath(data), controlPath(socketOnly)); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		args []string
		code int
		err  string
	}{
		{"no tool", []string{"unblock", "agent:billing-bot", "--as", "alice"}, 2, "usage: console unblock ACTOR TOOL --as OPERATOR"},
		{"no operator", []string{"unblock", "agent:billing-bot", "payments.refund"}, 2, "usage: console unblock ACTOR TOOL --as OPERATOR"},
		{"unknown operator", []string{"unblock", "agent:billing-bot", "payments.refund", "--as", "mallory"}, 1, "console user add NAME --role operator"},
		{"an auditor", []string{"unblock", "agent:billing-bot", "payments.refund", "--as", "bob"}, 1, `"bob" is an auditor, and only operators and admins decide`},
		{"another tool", []string{"unblock", "agent:billing-bot", "deploy.rollback", "--as", "alice"}, 1, "agent:billing-bot is not blocked on deploy.rollback; nothing was cleared"},
		{"another actor", []string{"unblock", "billing-bot", "payments.refund", "--as", "alice"}, 1, "the actor as its token names it (e.g. agent:billing-bot)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := callRun(t, nil, "", append(tt.args, "--data", socketOnly)...)
			if code != tt.code || out != "" || !strings.Contains(errs, tt.err) {
				t.Errorf("%v = %d, stdout %q, stderr %q; want %d and %q", tt.args, code, out, errs, tt.code, tt.err)
			}
		})
	}
	if code, body := propose(t, url, token, goodRefund); code != http.StatusTooManyRequests {
		t.Fatalf("after refused unblocks: %d %s, want still 429", code, body)
	}

	// Flags may come before or after the names.
	code, out, errs := callRun(t, nil, "", "unblock", "--data", socketOnly, "agent:billing-bot", "--as", "alice", "payments.refund")
	if code != 0 || out != "Cleared the retry block of agent:billing-bot on payments.refund: its proposals are accepted again.\n" {
		t.Fatalf("unblock = %d, stdout %q, stderr %q", code, out, errs)
	}
	if code, body := propose(t, url, token, goodRefund); code != http.StatusCreated && code != http.StatusOK {
		t.Fatalf("after unblock: %d %s, want the proposal accepted", code, body)
	}
	if code, _, errs := callRun(t, nil, "", "unblock", "agent:billing-bot", "payments.refund", "--as", "alice", "--data", socketOnly); code != 1 ||
		!strings.Contains(errs, "is not blocked on payments.refund") {
		t.Errorf("unblock again = %d, stderr %q, want not blocked", code, errs)
	}
	_, export, _ := callRun(t, nil, "", "audit", "export", "--data", data, "--format", "jsonl")
	cleared := regexp.MustCompile(`[^\n]*"kind":"retry_cleared"[^\n]*`).FindAllString(export, -1)
	if len(cleared) != 1 || !strings.Contains(cleared[0], `"principal":"alice"`) || !strings.Contains(cleared[0], `"channel":"cli"`) ||
		!strings.Contains(cleared[0], `"tool":"payments.refund"`) || !strings.Contains(cleared[0], `"actor":"agent:billing-bot"`) {
		t.Fatalf("retry_cleared entries = %q, want one by alice on the cli channel", cleared)
	}

	// With no server running, the database directly.
	blockRefunds(t, url, token)
	stop()
	if code, out, errs := callRun(t, nil, "", "unblock", "agent:billing-bot", "payments.refund", "--as", "alice", "--data", socketOnly); code != 1 ||
		!strings.Contains(errs, "no database at ") {
		t.Errorf("unblock with neither a server nor a database = %d, %q, stderr %q; want what to do", code, out, errs)
	}
	if code, out, errs := callRun(t, nil, "", "unblock", "agent:billing-bot", "payments.refund", "--as", "alice", "--data", data); code != 0 ||
		!strings.HasPrefix(out, "Cleared the retry block") {
		t.Fatalf("unblock without a server = %d, %q, stderr %q", code, out, errs)
	}
	if code, _, errs := callRun(t, nil, "", "unblock", "agent:billing-bot", "payments.refund", "--as", "alice", "--data", data); code != 1 ||
		!strings.Contains(errs, "is not blocked on payments.refund") {
		t.Errorf("unblock again without a server = %d, stderr %q, want not blocked", code, errs)
	}
}
