package notify_test

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"context"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/notify"
	"github.com/countersign/countersign/internal/queue"
	"github.com/prometheus/client_golang/prometheus"
)

// The single-sign-on principals of the people the test events name, and how
// account.PublicNames shows them: by provider user name, by display name
// (marked as single sign-on), and nameless.
const (
	ssoUser      = "oidc:idp.example.com/8f3c2a"
	ssoDisplay   = "oidc:idp.example.com/77aa01"
	ssoNameless  = "oidc:idp.example.com/0000ff"
	shownUser    = "dana"
	shownDisplay = "Dana Q (single sign-on)"
)

func publicNames(context.Context) func(string) string {
	return func(name string) string {
		switch name {
		case ssoUser:
			return shownUser
		case ssoDisplay:
			return shownDisplay
		case ssoNameless:
			return "(single sign-on user)"
		}
		return name
	}
}

// namedEvents routes, through r, a call approved by a single-sign-on
// operator and a local one, a call denied by a single-sign-on operator, and
// a call of unknown outcome resolved by a nameless single-sign-on operator.
func namedEvents(t *testing.T, r *rig) {
	t.Helper()
	at := r.clk.Now()
	a := testCall("call_a", at)
	a.ApprovalsRequired = 2
	a.Approvals = append(a.Approvals, queue.Approval{Operator: ssoUser, Channel: "web", At: at})
	r.outbox.Enqueue(r.router.Notices(approved(a, "bob", at))...)
	b := testCall("call_b", at)
	r.outbox.Enqueue(r.router.Notices(denied(b, ssoDisplay, "not this invoice", at))...)
	c := testCall("call_c", at)
	c.Status, c.RedeemedAt = queue.StatusRedeemed, at
	c.Outcome = &queue.Outcome{Status: queue.OutcomeLeaseExpired, At: at}
	c.Resolution = &queue.Resolution{Verdict: queue.VerdictNotExecuted, By: ssoNameless, Note: "no refund in the ledger", At: at}
	r.outbox.Enqueue(r.router.Notices(queue.Event{Kind: audit.KindResolved, Call: c.Clone()})...)
	r.disp = notify.NewDispatcher(notify.DispatcherConfig{Outbox: r.outbox, Channels: r.built.Channels, Now: r.clk.Now,
		Logger: quiet, Registry: prometheus.NewRegistry(), Names: publicNames})
	if n := deliverAll(t, r.disp); n != 3 {
		t.Fatalf("delivered %d rows, want 3", n)
	}
	for _, row := range rowsOf(r.outbox, "") {
		if row.State != notify.StateDelivered {
			t.Fatalf("row %s %s: %q", row.Kind, row.State, row.LastError)
		}
	}
}

// wantNamed checks that the messages people read name each person as
// people see them and never by a principal.
func wantNamed(t *testing.T, messages []string) {
	t.Helper()
	all := strings.Join(messages, "\n")
	if strings.Contains(all, "oidc:") {
		t.Errorf("a message names a single-sign-on principal:\n%s", all)
	}
	for _, want := range []string{"approved by " + shownUser + ", bob", "denied by " + shownDisplay + ": not this invoice",
		"resolved by (single sign-on user): no refund in the ledger"} {
		if !strings.Contains(all, want) {
			t.Errorf("no message says %q:\n%s", want, all)
		}
	}
}

// Slack names approvers, the operator who denied and the one who resolved
// as people see them.
func TestSlackNamesPeopleAsPeopleSeeThem(t *testing.T) {
	fake, srv := newFakeSlack(t, "xoxb-test-token")
	cfg := mustConfig(t, `
channels:
  slack:
    type: slack
    token: {env: SLACK_TOKEN}
    channel: C0123456789
    api_url: `+srv.URL+`/api/
routes:
  - tools: ["*"]
    notify: [slack]
`, map[string]string{"SLACK_TOKEN": "xoxb-test-token"})
	r := newRig(t, cfg, notify.BuildOptions{}, 0.5)
	namedEvents(t, r)
	fake.mu.Lock()
	defer fake.mu.Unlock()
	var got []string
	for _, ts := range fake.order {
		m := fake.messages[ts]
		got = append(got, m.Text)
		got = append(got, texts(m.Blocks)...)
	}
	wantNamed(t, got)
}

// Email names them so, in the plain text and the HTML part.
func TestEmailNamesPeopleAsPeopleSeeThem(t *testing.T) {
	sink := &smtpSink{}
	port := startSMTP(t, sink, nil)
	cfg := mustConfig(t, fmt.Sprintf(`
channels:
  mail:
    type: email
    smtp: {host: 127.0.0.1, port: %d, tls: none}
    from: countersign@example.com
    to: [oncall@example.com]
routes:
  - tools: ["*"]
    notify: [mail]
`, port), nil)
	r := newRig(t, cfg, notify.BuildOptions{}, 0.5)
	namedEvents(t, r)
	sink.mu.Lock()
	defer sink.mu.Unlock()
	var text, html []string
	for _, m := range sink.mail {
		p := parseMail(t, m.data)
		text, html = append(text, p.subject, p.text), append(html, p.html)
	}
	wantNamed(t, text)
	if all := strings.Join(html, "\n"); strings.Contains(all, "oidc:") || !strings.Contains(all, shownDisplay) {
		t.Errorf("the HTML parts name a principal, or not %q:\n%s", shownDisplay, all)
	}
}

// Web Push names them so.
func TestPushNamesPeopleAsPeopleSeeThem(t *testing.T) {
	r, svc := pushRig(t)
	namedEvents(t, r)
	svc.mu.Lock()
	defer svc.mu.Unlock()
	var got []string
	for _, raw := range svc.got {
		var p notify.PushPayload
		if err := json.Unmarshal(raw, &p); err != nil {
			t.Fatal(err)
		}
		got = append(got, p.Title, p.Body)
	}
	wantNamed(t, got)
}

// A webhook keeps its by fields as the identifiers the audit trail records
// and carries, beside each, by_name as people see the person; the body with
// them added is what is signed.
func TestWebhookNamesPeopleBesideTheirIdentifiers(t *testing.T) {
	secret := newSecret(t)
	hook := newHookServer(newSWReceiver(secret, ""), nil)
	srv := httptest.NewServer(hook)
	defer srv.Close()
	cfg := mustConfig(t, webhookConfig(srv.URL, secret, "")+`
routes:
  - tools: ["*"]
    notify: [hook]
`, map[string]string{"HOOK_SECRET": secret})
	r := newRig(t, cfg, notify.BuildOptions{}, 0.5)
	hook.rx.now = r.clk.Now
	namedEvents(t, r)
	_, accepted, order, refused := hook.snapshot()
	if len(refused) != 0 || len(order) != 3 {
		t.Fatalf("accepted %d, refused %v", len(order), refused)
	}
	byCall := map[string]notify.Data{}
	for _, id := range order {
		var ev notify.Event
		if err := json.Unmarshal(accepted[id], &ev); err != nil {
			t.Fatal(err)
		}
		byCall[ev.Data.ID] = ev.Data
	}
	a, b, c := byCall["call_a"], byCall["call_b"], byCall["call_c"]
	if a.Approvals == nil || strings.Join(a.Approvals.By, ",") != ssoUser+",bob" || strings.Join(a.Approvals.ByName, ",") != shownUser+",bob" {
		t.Errorf("approvals %+v, want by [%s bob], by_name [%s bob]", a.Approvals, ssoUser, shownUser)
	}
	if b.Decision == nil || b.Decision.By != ssoDisplay || b.Decision.ByName != shownDisplay {
		t.Errorf("decision %+v, want by %s, by_name %s", b.Decision, ssoDisplay, shownDisplay)
	}
	if c.Resolution == nil || c.Resolution.By != ssoNameless || c.Resolution.ByName != "(single sign-on user)" {
		t.Errorf("resolution %+v, want by %s, by_name (single sign-on user)", c.Resolution, ssoNameless)
	}
}

// Without a way to read accounts (DispatcherConfig.Names nil), a message
// still never names a principal: the dispatcher hides it.
func TestNamesWithoutAccountsHidePrincipals(t *testing.T) {
	r, svc := pushRig(t)
	r.outbox.Enqueue(r.router.Notices(denied(testCall("call_d", r.clk.Now()), ssoDisplay, "no", r.clk.Now()))...)
	deliverAll(t, r.disp)
	svc.mu.Lock()
	defer svc.mu.Unlock()
	if len(svc.got) != 1 {
		t.Fatalf("%d messages, want 1 (errors %v)", len(svc.got), svc.errs)
	}
	var p notify.PushPayload
	if err := json.Unmarshal(svc.got[0], &p); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(p.Body, "oidc:") || !strings.Contains(p.Body, "denied by (single sign-on user): no") {
		t.Errorf("body %q, want the principal hidden", p.Body)
	}
}

// A provider sends any display name, one that holds a list's separator or
// a reason's too: a message quotes such a name, so that it never reads as
// two people (a local operator among them) or as the end of the names.
func TestNamesCannotReadAsAnotherPerson(t *testing.T) {
	r, svc := pushRig(t)
	hostile := map[string]string{
		ssoUser:    "olivia, mallory (single sign-on)",
		ssoDisplay: `olivia: fine "by me" (single sign-on)`,
	}
	names := func(context.Context) func(string) string {
		return func(n string) string {
			if s, ok := hostile[n]; ok {
				return s
			}
			return n
		}
	}
	at := r.clk.Now()
	a := testCall("call_a", at)
	a.ApprovalsRequired = 2
	a.Approvals = append(a.Approvals, queue.Approval{Operator: ssoUser, Channel: "web", At: at})
	r.outbox.Enqueue(r.router.Notices(approved(a, "bob", at))...)
	r.outbox.Enqueue(r.router.Notices(denied(testCall("call_b", at), ssoDisplay, "no", at))...)
	r.disp = notify.NewDispatcher(notify.DispatcherConfig{Outbox: r.outbox, Channels: r.built.Channels, Now: r.clk.Now,
		Logger: quiet, Registry: prometheus.NewRegistry(), Names: names})
	deliverAll(t, r.disp)
	svc.mu.Lock()
	defer svc.mu.Unlock()
	var bodies []string
	for _, raw := range svc.got {
		var p notify.PushPayload
		if err := json.Unmarshal(raw, &p); err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, p.Body)
	}
	all := strings.Join(bodies, "\n")
	for _, want := range []string{`approved by "olivia, mallory (single sign-on)", bob`,
		`denied by "olivia: fine \"by me\" (single sign-on)": no`} {
		if !strings.Contains(all, want) {
			t.Errorf("no message says %s:\n%s", want, all)
		}
	}
}

// pushRig is a rig whose one route sends every notice to one browser's
// push subscription, and the push service that receives them.
func pushRig(t *testing.T) (*rig, *pushService) {
	t.Helper()
	b := newBrowser(t)
	svc := newPushService(t, b)
	vapid, _ := notify.NewVAPIDKey()
	subs := &memSubs{subs: []notify.Subscription{b.subscription(svc.srv.URL + "/push/abc123")}}
	cfg := pushConfig(t, hostOf(svc.srv.URL))
	cfg.Routes = []notify.Route{{Tools: []string{"*"}, Notify: []string{"browsers"}}}
	return newRig(t, cfg, notify.BuildOptions{Transport: svc.srv.Client().Transport, VAPIDKey: vapid, Subscriptions: subs, Logger: quiet}, 0.5), svc
}
