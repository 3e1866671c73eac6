package notify_test

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/notify"
)

// hostileTarget is agent text that a client would turn into a link in bold
// if a message carried it as it is.
const (
	hostileTarget = "city:https://evil.example/approve *URGENT*"
	inertTarget   = "city:https[:]//evil[.]example/approve [U+002A]URGENT[U+002A]"
	hostileReason = "call ops@evil.example ~now~ _`here`_ www.evil.example"
	inertReason   = "call ops[@]evil[.]example [U+007E]now[U+007E] [U+005F][U+0060]here[U+0060][U+005F] www[.]evil[.]example"
)

// checkInert fails when text carries any part of the hostile target or
// reason that a client could link or format.
func checkInert(t *testing.T, where, text string, wants ...string) {
	t.Helper()
	for _, bad := range []string{"https://evil", "evil.example", "@evil", "*URGENT*", "~now~", "_`", "`here`"} {
		if strings.Contains(text, bad) {
			t.Errorf("%s carries %q: %q", where, bad, text)
		}
	}
	for _, want := range wants {
		if !strings.Contains(text, want) {
			t.Errorf("%s lacks %q: %q", where, want, text)
		}
	}
}

func TestSlackTextIsInert(t *testing.T) {
	fake, srv := newFakeSlack(t, "unused")
	cfg := mustConfig(t, `
channels:
  slack:
    type: slack
    webhook_url: {env: SLACK_WEBHOOK}
`, map[string]string{"SLACK_WEBHOOK": srv.URL + fake.hook})
	r := newRig(t, cfg, notify.BuildOptions{}, 0.5)
	c := testCall("call_a", r.clk.Now())
	c.Target = hostileTarget
	r.outbox.Enqueue(r.router.Notices(submitted(c))...)
	r.outbox.Enqueue(r.router.Notices(denied(c, "bob", hostileReason, r.clk.Now()))...)
	deliverAll(t, r.disp)
	deliverAll(t, r.disp)
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if len(fake.webhook) != 2 {
		t.Fatalf("webhook got %d messages, want 2", len(fake.webhook))
	}
	checkInert(t, "the Slack text", fake.webhook[0]["text"].(string), inertTarget, "https://approvals.example.com/calls/call_a")
	checkInert(t, "the Slack follow-up", fake.webhook[1]["text"].(string), inertTarget, inertReason)
	raw, _ := json.Marshal(fake.webhook[0]["blocks"])
	var blocks []map[string]any
	json.Unmarshal(raw, &blocks)
	if !has(texts(blocks), "Target: "+inertTarget) {
		t.Errorf("blocks %q lack the inert target", texts(blocks))
	}
}

func TestEmailTextIsInert(t *testing.T) {
	cert, caPEM := selfSigned(t)
	sink := &smtpSink{}
	port := startSMTP(t, sink, &tls.Config{Certificates: []tls.Certificate{cert}})
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "ca.pem"), caPEM, 0o600)
	cfg := mustConfig(t, fmt.Sprintf(`
channels:
  mail:
    type: email
    smtp: {host: 127.0.0.1, port: %d, ca_file: %s}
    from: Countersign <countersign@example.com>
    to: [oncall@example.com]
`, port, filepath.Join(dir, "ca.pem")), nil)
	r := newRig(t, cfg, notify.BuildOptions{}, 0.5)
	c := testCall("call_a", r.clk.Now())
	c.Target = hostileTarget
	r.outbox.Enqueue(r.router.Notices(submitted(c))...)
	deliverAll(t, r.disp)
	r.outbox.Enqueue(r.router.Notices(denied(c, "bob", hostileReason, r.clk.Now()))...)
	deliverAll(t, r.disp)
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.mail) != 2 {
		t.Fatalf("%d mails arrived, want 2", len(sink.mail))
	}
	first, second := parseMail(t, sink.mail[0].data), parseMail(t, sink.mail[1].data)
	checkInert(t, "the subject", first.subject, inertTarget)
	checkInert(t, "the plain part", first.text, "Target: "+inertTarget, "https://approvals.example.com/calls/call_a")
	checkInert(t, "the html part", first.html, strings.ReplaceAll(inertTarget, "+", "&#43;"))
	checkInert(t, "the denial's plain part", second.text, inertReason)
}

func TestPushBodyIsInert(t *testing.T) {
	b := newBrowser(t)
	svc := newPushService(t, b)
	vapid, _ := notify.NewVAPIDKey()
	subs := &memSubs{subs: []notify.Subscription{b.subscription(svc.srv.URL + "/push/abc123")}}
	r := newRig(t, pushConfig(t, hostOf(svc.srv.URL)), notify.BuildOptions{
		Transport: svc.srv.Client().Transport, VAPIDKey: vapid, Subscriptions: subs, Logger: quiet}, 0.5)
	c := testCall("call_a", r.clk.Now())
	c.Target = hostileTarget
	r.outbox.Enqueue(r.router.Notices(submitted(c))...)
	deliverAll(t, r.disp)
	r.outbox.Enqueue(r.router.Notices(denied(c, "bob", hostileReason, r.clk.Now()))...)
	deliverAll(t, r.disp)
	svc.mu.Lock()
	defer svc.mu.Unlock()
	if len(svc.errs) != 0 || len(svc.got) != 2 {
		t.Fatalf("push service: errors %v, %d messages", svc.errs, len(svc.got))
	}
	for i, want := range []string{inertTarget, inertReason} {
		var p notify.PushPayload
		if err := json.Unmarshal(svc.got[i], &p); err != nil {
			t.Fatal(err)
		}
		checkInert(t, "the push title", p.Title)
		checkInert(t, "the push body", p.Body, want)
	}
}
