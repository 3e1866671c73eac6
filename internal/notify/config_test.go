package notify_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/notify"
)

func TestConfigReadsEveryChannelType(t *testing.T) {
	dir := t.TempDir()
	secret := newSecret(t)
	whsk, _ := newSigningKey(t)
	vapid, err := notify.NewVAPIDKey()
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "hook.secret"), []byte(secret+"\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "vapid.key"), []byte(vapid), 0o600)
	file := filepath.Join(dir, "notify.yaml")
	os.WriteFile(file, []byte(`
public_url: https://approvals.example.com
channels:
  hook:
    type: webhook
    url: https://hooks.example.com/countersign
    secret: {file: hook.secret}
    signing_key: {env: HOOK_KEY}
    include_args: true
    timeout: 5s
  slack-api:
    type: slack
    token: {env: SLACK_TOKEN}
    channel: C0123456789
  slack-hook:
    type: slack
    webhook_url: {env: SLACK_WEBHOOK}
    events: [call.submitted, call.escalated]
  mail:
    type: email
    smtp: {host: smtp.example.com, username: countersign, password: {env: SMTP_PASSWORD}}
    from: Countersign <countersign@example.com>
    to: [oncall@example.com]
  browsers:
    type: push
    subject: mailto:ops@example.com
    vapid_private_key: {file: vapid.key}
routes:
  - tools: ["*"]
    notify: [hook, browsers]
    escalate_after: 10m
    escalate_to: [slack-api, mail]
    remind_before: 2m
retry: {first: 10s, max_interval: 30m, give_up_after: 12h}
lease: 2m
`), 0o600)
	env := map[string]string{"HOOK_KEY": whsk, "SLACK_TOKEN": "xoxb-1", "SLACK_WEBHOOK": "https://hooks.slack.com/services/T/B/X", "SMTP_PASSWORD": "pw"}
	cfg, err := notify.LoadConfig(file, notify.Env{Getenv: func(k string) string { return env[k] }})
	if err != nil {
		t.Fatalf("LoadConfig: %v", err)
	}
	hook := cfg.Channels["hook"]
	if hook.Type != notify.TypeWebhook || hook.Webhook.URL != "https://hooks.example.com/countersign" || len(hook.Webhook.Secret) != 32 ||
		len(hook.Webhook.SigningKey) != 64 || !hook.IncludeArgs || hook.Timeout != 5*time.Second {
		t.Fatalf("hook = %+v %+v", hook, hook.Webhook)
	}
	if s := cfg.Channels["slack-api"].Slack; s.Token != "xoxb-1" || s.Channel != "C0123456789" || s.APIURL != "https://slack.com/api/" {
		t.Fatalf("slack-api = %+v", s)
	}
	if c := cfg.Channels["slack-hook"]; c.Slack.WebhookURL != "https://hooks.slack.com/services/T/B/X" || c.Wants(notify.CallApproved) || !c.Wants(notify.CallEscalated) {
		t.Fatalf("slack-hook = %+v", c)
	}
	if e := cfg.Channels["mail"].Email; e.Port != 587 || e.TLS != "starttls" || e.Password != "pw" || len(e.To) != 1 {
		t.Fatalf("mail = %+v", e)
	}
	if p := cfg.Channels["browsers"].Push; p.PrivateKey != vapid || len(p.Allow) != len(notify.DefaultPushServices) || p.TTL != notify.DefaultPushTTL {
		t.Fatalf("push = %+v", p)
	}
	if cfg.Retry != (notify.RetryPolicy{First: 10 * time.Second, MaxInterval: 30 * time.Minute, GiveUpAfter: 12 * time.Hour}) || cfg.Lease != 2*time.Minute {
		t.Fatalf("retry %+v lease %s", cfg.Retry, cfg.Lease)
	}
	if rt := cfg.Routes[0]; !rt.Matches("anything/at_all") || rt.EscalateAfter != 10*time.Minute || rt.RemindBefore != 2*time.Minute {
		t.Fatalf("route %+v", rt)
	}
	built, err := notify.Build(cfg, notify.BuildOptions{Subscriptions: noSubs{}})
	if err != nil || len(built.Channels) != 5 || built.Push == nil {
		t.Fatalf("Build = %+v, %v", built, err)
	}
}

func TestConfigRefusesListingEveryProblem(t *testing.T) {
	env := map[string]string{"SECRET": newSecret(t), "SHORT": "whsec_c2hvcnQ="}
	cfg := `
channels:
  hook:
    type: webhook
    url: http://hooks.example.com/countersign
    secret: whsec_written_inline
  Bad Name:
    type: webhook
  short:
    type: webhook
    url: https://h.example.com/
    secret: {env: SHORT}
    channel: C1
  nosecret:
    type: webhook
    url: https://h.example.com/
    secret: {env: MISSING}
  sms:
    type: sms
  push:
    type: push
    subject: ops@example.com
    include_args: true
    allow: ["https://evil.example.com/x"]
  mail:
    type: email
    smtp: {host: smtp.example.com, tls: none}
    from: a@example.com
    to: []
  slack:
    type: slack
    token: {env: SECRET}
routes:
  - tools: [payments.*]
    notify: [nowhere]
    escalate_after: 10m
  - notify: [hook]
    escalate_after: ten minutes
lease: 5s
unknown_top: 1
`
	_, err := notify.ParseConfig([]byte(cfg), notify.Env{Getenv: func(k string) string { return env[k] }})
	var ce *notify.ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("ParseConfig = %v, want a ConfigError", err)
	}
	// Decoding stops at the first layer: unknown fields and bad values in
	// the document's shape come first.
	msg := err.Error()
	for _, want := range []string{"unknown field unknown_top", "ten minutes"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	cfg = strings.Replace(strings.Replace(cfg, "unknown_top: 1\n", "", 1), "escalate_after: ten minutes", "escalate_after: 5m", 1)
	_, err = notify.ParseConfig([]byte(cfg), notify.Env{Getenv: func(k string) string { return env[k] }})
	if err == nil {
		t.Fatal("accepted")
	}
	msg = err.Error()
	for _, want := range []string{
		"channel hook: url must be https (http is allowed only to 127.0.0.1",
		"channel hook: secret must be {file: PATH} or {env: NAME}; secrets are not written into the configuration",
		`channel name "Bad Name"`,
		"channel short: secret: the key is 5 bytes",
		"channel short: channel is not a field of a webhook channel",
		"channel nosecret: secret: the environment variable MISSING is not set",
		`channel sms: type "sms" is not one of`,
		"channel push: subject must be a mailto: or https: contact",
		"channel push: a push message never carries arguments",
		`channel push: allow entry "https://evil.example.com/x"`,
		"channel push: include_args is not a field of a push channel",
		"channel mail: smtp.tls none is allowed only for a relay on this machine",
		"channel mail: to needs at least one address",
		"channel slack: channel is required with a token",
		`routes[0]: no channel named "nowhere"`,
		"routes[0]: escalate_after and escalate_to go together",
		"routes[1]: tools is required",
		"lease (5s) must exceed the longest channel timeout",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(msg)
	}
}

func TestConfigUnknownFieldsHaveLines(t *testing.T) {
	_, err := notify.ParseConfig([]byte("channels:\n  hook:\n    type: webhook\n    url: https://h.example.com/\n    secret: {env: S, fil: x}\n"),
		notify.Env{Getenv: func(string) string { return newSecret(t) }})
	if err == nil || !strings.Contains(err.Error(), "channel hook: line 5: unknown field secret.fil (fields: file, env)") {
		t.Fatalf("err = %v", err)
	}
}

func TestConfigFromToolsFile(t *testing.T) {
	tools := []byte(`
tools:
  payments.refund: {audience: payments-host}
notifications:
  channels:
    hook: {type: webhook, url: "https://h.example.com/", secret: {env: S}}
`)
	cfg, err := notify.FromToolsFile(tools, notify.Env{Getenv: func(string) string { return newSecret(t) }})
	if err != nil || cfg == nil || cfg.Channels["hook"] == nil {
		t.Fatalf("FromToolsFile = %+v, %v", cfg, err)
	}
	if cfg, err := notify.FromToolsFile([]byte("tools: {}\n"), notify.Env{}); cfg != nil || err != nil {
		t.Fatalf("without a section: %+v, %v", cfg, err)
	}
}

type noSubs struct{}

func (noSubs) PushSubscriptions(ctx context.Context) ([]notify.Subscription, error) { return nil, nil }
func (noSubs) DeletePushSubscription(ctx context.Context, endpoint string, _ time.Time) error {
	return nil
}

// TestConfigTypeErrorsAreProblems: every value of the wrong type is its own
// problem with its line, without the YAML library's heading.
func TestConfigTypeErrorsAreProblems(t *testing.T) {
	_, err := notify.ParseConfig([]byte("channels: {}\npublic_url: [1]\nroutes: {a: 1}\n"), notify.Env{Getenv: func(string) string { return "" }})
	var ce *notify.ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("ParseConfig = %v, want a ConfigError", err)
	}
	msg := err.Error()
	for _, want := range []string{"line 2: cannot unmarshal", "line 3: cannot unmarshal"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "unmarshal errors") {
		t.Errorf("error carries the library's heading:\n%s", msg)
	}
}

// TestConfigChecksWhatBuildNeeds: one push channel at most, and an SMTP
// CA file that holds a certificate, are problems of the configuration, so
// console tools lint finds them as serve would.
func TestConfigChecksWhatBuildNeeds(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "ca.pem"), []byte("not a certificate\n"), 0o600)
	cfg := `
channels:
  a: {type: push, subject: "mailto:ops@example.com"}
  b: {type: push, subject: "mailto:ops@example.com"}
  mail: {type: email, smtp: {host: smtp.example.com, ca_file: ca.pem}, from: a@example.com, to: [b@example.com]}
  mail2: {type: email, smtp: {host: smtp.example.com, ca_file: missing.pem}, from: a@example.com, to: [b@example.com]}
`
	_, err := notify.ParseConfig([]byte(cfg), notify.Env{Getenv: func(string) string { return "" }, Dir: dir})
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"channels a, b: only one push channel", "channel mail: smtp.ca_file " + filepath.Join(dir, "ca.pem") + " holds no PEM certificate",
		"channel mail2: smtp.ca_file: open " + filepath.Join(dir, "missing.pem")} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}
