package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/examples"
	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/notify"
	"github.com/countersign/countersign/internal/queue"
)

func TestNotificationsFromTheToolsFileAndTheirVAPIDKey(t *testing.T) {
	data := t.TempDir()
	tools := filepath.Join(data, "tools.yaml")
	section := `
notifications:
  channels:
    hook: {type: webhook, url: "https://hooks.example.com/cs", secret: {env: HOOK_SECRET}}
    browsers: {type: push, subject: "mailto:ops@example.com"}
`
	if err := os.WriteFile(tools, append(append([]byte(nil), examples.ToolsYAML...), section...), 0o600); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	env := func(k string) string {
		if k == "HOOK_SECRET" {
			return "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		}
		return ""
	}
	a, err := openApp(data, "", tools, &notifySource{publicURL: "https://cs.example.com", getenv: env}, log)
	if err != nil {
		t.Fatalf("openApp: %v", err)
	}
	if a.notify == nil || len(a.notify.built.Channels) != 2 || a.notify.built.Push == nil || a.notify.from != tools {
		t.Fatalf("notifications %+v", a.notify)
	}
	key := a.notify.built.Push.PublicKey()
	fi, err := os.Stat(vapidKeyPath(data))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("VAPID key file: %v %v", fi, err)
	}
	d, notes := a.dispatcher()
	if d == nil || notes.Push == nil || len(notes.Channels) != 2 || !strings.Contains(notes.Channels[1].Detail, "POST https://hooks.example.com") {
		t.Fatalf("dispatcher %v, notes %+v", d, notes)
	}
	a.Close()
	// The key survives a restart: browsers' subscriptions depend on it.
	a, err = openApp(data, "", tools, &notifySource{getenv: env}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if got := a.notify.built.Push.PublicKey(); got != key {
		t.Fatalf("VAPID public key changed across a restart: %s then %s", key, got)
	}
	// A missing secret refuses the start, naming the file and the variable.
	a.Close()
	_, err = openApp(data, "", tools, &notifySource{getenv: func(string) string { return "" }}, log)
	if err == nil || !strings.Contains(err.Error(), "tools.yaml (notifications)") || !strings.Contains(err.Error(), "HOOK_SECRET is not set") {
		t.Fatalf("openApp without the secret = %v", err)
	}
}

func TestNotifyFlagWinsAndNoConfigMeansNone(t *testing.T) {
	data := t.TempDir()
	tools := filepath.Join(data, "tools.yaml")
	os.WriteFile(tools, examples.ToolsYAML, 0o600)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	a, err := openApp(data, "", tools, &notifySource{getenv: func(string) string { return "" }}, log)
	if err != nil || a.notify != nil {
		t.Fatalf("without configuration: %+v, %v", a.notify, err)
	}
	a.Close()
	file := filepath.Join(t.TempDir(), "notify.yaml")
	os.WriteFile(file, []byte("channels:\n  hook: {type: webhook, url: \"http://127.0.0.1:9/\", secret: {file: secret}}\n"), 0o600)
	os.WriteFile(filepath.Join(filepath.Dir(file), "secret"), []byte("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n"), 0o600)
	a, err = openApp(data, "", tools, &notifySource{file: file, getenv: func(string) string { return "" }}, log)
	if err != nil || a.notify == nil || a.notify.from != file {
		t.Fatalf("--notify: %+v, %v", a.notify, err)
	}
	a.Close()
}

func TestRulesMayNameOnlyConfiguredChannels(t *testing.T) {
	data := t.TempDir()
	tools := filepath.Join(data, "tools.yaml")
	os.WriteFile(tools, []byte(`tools:
  ops.restart:
    audience: ops-host
    target: '^service:[a-z-]+$'
    approvals: 1
    decide_within: 10m
    args: {type: object, additionalProperties: false, properties: {}}
    rules:
      - {id: prod, when: 'target == "service:prod"', then: ask, notify: [oncall]}
`), 0o600)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	secret := func(string) string { return "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" }
	_, err := openApp(data, "", tools, &notifySource{getenv: secret}, log)
	if err == nil || !strings.Contains(err.Error(), "tool ops.restart, rule prod: notify names oncall, but no notifications are configured") {
		t.Fatalf("without notifications: %v", err)
	}
	file := filepath.Join(t.TempDir(), "notify.yaml")
	os.WriteFile(file, []byte("channels:\n  hook: {type: webhook, url: \"https://h.example.com/\", secret: {env: S}}\n"), 0o600)
	_, err = openApp(data, "", tools, &notifySource{file: file, getenv: secret}, log)
	if err == nil || !strings.Contains(err.Error(), "notify names oncall, which is not a channel of "+file) {
		t.Fatalf("with another channel: %v", err)
	}
	os.WriteFile(file, []byte("channels:\n  oncall: {type: webhook, url: \"https://h.example.com/\", secret: {env: S}}\n"), 0o600)
	a, err := openApp(data, "", tools, &notifySource{file: file, getenv: secret}, log)
	if err != nil {
		t.Fatalf("with the channel: %v", err)
	}
	a.Close()
}

// TestToolsLintChecksNotifications: console tools lint reads a tools
// file's notifications section with the code serve reads it with at start
// (its secrets from the environment and the file's folder), and checks that
// the rules name only its channels; every problem is a line and exits 2.
func TestToolsLintChecksNotifications(t *testing.T) {
	dir := t.TempDir()
	tools := filepath.Join(dir, "tools.yaml")
	write := func(section string) {
		t.Helper()
		src := `tools:
  ops.restart:
    audience: ops-host
    target: '^service:[a-z-]+$'
    approvals: 1
    decide_within: 10m
    args: {type: object, additionalProperties: false, properties: {}}
    rules:
      - {id: prod, when: 'target == "service:prod"', then: ask, notify: [oncall]}
` + section
		if err := os.WriteFile(tools, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	lint := func(env map[string]string) (int, string, string) {
		t.Helper()
		var out, errb strings.Builder
		code := run(t.Context(), []string{"tools", "lint", tools}, func(k string) string { return env[k] }, strings.NewReader(""), &out, &errb)
		return code, out.String(), errb.String()
	}
	write(`notifications:
  channels:
    hook: {type: webhook, url: "https://hooks.example.com/cs", secret: {env: HOOK_SECRET}}
    inline: {type: webhook, url: "https://hooks.example.com/cs", secret: whsec_written_inline}
    one: {type: push, subject: "mailto:ops@example.com"}
    two: {type: push, subject: "mailto:ops@example.com"}
`)
	code, out, errs := lint(nil)
	for _, want := range []string{
		tools + ": notifications: channel hook: secret: the environment variable HOOK_SECRET is not set",
		tools + ": notifications: channel inline: secret must be {file: PATH} or {env: NAME}",
		tools + ": notifications: channels one, two: only one push channel may be configured",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("lint lacks %q:\n%s", want, out)
		}
	}
	if code != 2 || !strings.Contains(errs, "3 problems") {
		t.Errorf("lint = %d %q, want 2 and 3 problems", code, errs)
	}

	// With the section right, a rule naming a channel it lacks is a problem.
	os.WriteFile(filepath.Join(dir, "hook-secret"), []byte("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n"), 0o600)
	write(`notifications:
  channels:
    hook: {type: webhook, url: "https://hooks.example.com/cs", secret: {file: hook-secret}}
`)
	code, out, _ = lint(nil)
	if code != 2 || !strings.Contains(out, tools+": tool ops.restart, rule prod: notify names oncall, which is not a channel of "+tools+" (notifications)") {
		t.Errorf("lint with an unknown rule channel = %d:\n%s", code, out)
	}
	write(`notifications:
  channels:
    oncall: {type: webhook, url: "https://hooks.example.com/cs", secret: {env: HOOK_SECRET}}
`)
	code, out, errs = lint(map[string]string{"HOOK_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"})
	if code != 0 || !strings.Contains(out, tools+": notifications: ok, 1 channel(s) (oncall), 1 route(s)") {
		t.Errorf("lint of a good file = %d %q %q", code, out, errs)
	}
}

// A running console's notifications name a single-sign-on operator as the
// agent API does (account.PublicNames), never by their principal: the
// webhook keeps the principal in decision.by and adds decision.by_name.
func TestNotificationsNameSingleSignOnOperatorsAsPeopleSeeThem(t *testing.T) {
	var mu sync.Mutex
	var bodies [][]byte
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, b)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer hook.Close()
	data := t.TempDir()
	tools := filepath.Join(data, "tools.yaml")
	section := `
notifications:
  channels:
    hook: {type: webhook, url: "` + hook.URL + `", secret: {env: HOOK_SECRET}, events: [call.denied]}
  routes:
    - {tools: ["*"], notify: [hook]}
`
	if err := os.WriteFile(tools, append(append([]byte(nil), examples.ToolsYAML...), section...), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(k string) string {
		if k == "HOOK_SECRET" {
			return "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		}
		return ""
	}
	a, err := openApp(data, "", tools, &notifySource{publicURL: "https://cs.example.com", getenv: env}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("openApp: %v", err)
	}
	defer a.Close()
	ctx := context.Background()
	const principal = "oidc:idp.example.com/00u-olga"
	if err := a.db.accounts.Update(ctx, func(tx account.Tx) error {
		return tx.InsertUser(account.User{Name: principal, Role: account.RoleOperator, Kind: account.KindOIDC,
			Issuer: "https://idp.example.com", Subject: "00u-olga", DisplayName: "Olga K", CreatedAt: time.Now().UTC().Truncate(time.Millisecond)})
	}); err != nil {
		t.Fatal(err)
	}
	c, _, err := a.queue.Submit(ctx, queue.Principal{Actor: "agent:billing-bot", Audience: "payments-host"},
		[]byte(`{"tool":"payments.refund","target":"invoice:INV-9","args":{"amount_minor":1200,"currency":"USD","reason_code":"duplicate"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.queue.Deny(ctx, principal, "web", c.ID, "already refunded"); err != nil {
		t.Fatal(err)
	}
	d, _ := a.dispatcher()
	if n, err := d.Dispatch(ctx); err != nil || n != 1 {
		t.Fatalf("Dispatch: %d rows, %v; want the denial", n, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bodies) != 1 {
		t.Fatalf("%d webhook posts, want 1", len(bodies))
	}
	var ev notify.Event
	if err := json.Unmarshal(bodies[0], &ev); err != nil {
		t.Fatal(err)
	}
	if dec := ev.Data.Decision; dec == nil || dec.By != principal || dec.ByName != "Olga K (single sign-on)" {
		t.Errorf("decision %+v, want by %s, by_name Olga K (single sign-on)", dec, principal)
	}
}

// TestTiersMayNameOnlyConfiguredChannels: an escalation tier's notify is
// checked against the notifications configuration at start, as a rule's.
func TestTiersMayNameOnlyConfiguredChannels(t *testing.T) {
	data := t.TempDir()
	tools := filepath.Join(data, "tools.yaml")
	os.WriteFile(tools, []byte(`tools:
  ops.restart:
    audience: ops-host
    target: '^service:[a-z-]+$'
    approvals: 1
    decide_within: 1h
    approvers: {roles: [admin]}
    escalate:
      - {after: 10m, add_roles: [operator], notify: [oncall]}
    args: {type: object, additionalProperties: false, properties: {}}
`), 0o600)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	secret := func(string) string { return "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" }
	_, err := openApp(data, "", tools, &notifySource{getenv: secret}, log)
	if err == nil || !strings.Contains(err.Error(), "tool ops.restart, escalation tier 1: notify names oncall, but no notifications are configured") {
		t.Fatalf("without notifications: %v", err)
	}
	file := filepath.Join(t.TempDir(), "notify.yaml")
	os.WriteFile(file, []byte("channels:\n  oncall: {type: webhook, url: \"https://h.example.com/\", secret: {env: S}}\n"), 0o600)
	a, err := openApp(data, "", tools, &notifySource{file: file, getenv: secret}, log)
	if err != nil {
		t.Fatalf("with the channel: %v", err)
	}
	a.Close()
}
