package console

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/notify"
	"github.com/countersign/countersign/internal/queue"
)

// failing is a channel that refuses every message for good.
type failing struct{}

func (failing) Send(context.Context, notify.Message) (string, error) {
	return "", notify.Permanent(errors.New("HTTP 410: the receiver is gone"))
}

type fakePush struct{ allow []string }

func (p fakePush) PublicKey() string             { return "BKey" }
func (p fakePush) Allowed(endpoint string) error { return notify.AllowedEndpoint(p.allow, endpoint) }

func TestDeliveriesPageListsAndRetries(t *testing.T) {
	e := newConsoleEnv(t)
	e.addUser("root", account.RoleAdmin, rolePassword)
	e.addUser("olivia", account.RoleOperator, rolePassword)
	out := e.db.Outbox()
	disp := notify.NewDispatcher(notify.DispatcherConfig{Outbox: out, Channels: map[string]notify.Channel{"hook": failing{}},
		Now: e.clock.Now, Logger: e.c.log})
	e.c.cfg.Notifications = &Notifications{Deliveries: disp, Channels: []NotificationChannel{{Name: "hook", Type: "webhook", Detail: "POST https://h.example.com"}}}

	body := `{"id":"evt_1","type":"call.submitted","timestamp":"2030-01-01T00:00:00Z","data":{"id":"call_x","tool":"t","url":"u"}}`
	now := e.clock.Now()
	if err := e.db.Store().Update(context.Background(), func(tx queue.Tx) error {
		return tx.Enqueue([]queue.Notice{{EventID: "evt_1", Kind: notify.CallSubmitted, Channel: "hook", CallID: "call_x", Body: []byte(body), At: now, DueAt: now}})
	}); err != nil {
		t.Fatal(err)
	}
	if n, err := disp.Dispatch(context.Background()); n != 1 || err != nil {
		t.Fatalf("Dispatch = %d, %v", n, err)
	}

	op := e.browser()
	op.login("olivia", rolePassword)
	if p := op.get("/admin/deliveries"); p.status != http.StatusForbidden {
		t.Fatalf("an operator opened the deliveries page: %d", p.status)
	}
	admin := e.browser()
	admin.login("root", rolePassword)
	p := admin.get("/admin/deliveries")
	rows := p.find("delivery-row")
	if p.status != http.StatusOK || rows.Length() != 1 {
		t.Fatalf("deliveries page %d with %d rows", p.status, rows.Length())
	}
	if st := rows.Find(`[data-testid="delivery-state"]`).Text(); !strings.Contains(st, "dead") ||
		!strings.Contains(rows.Find(`[data-testid="delivery-error"]`).Text(), "HTTP 410: the receiver is gone") ||
		strings.TrimSpace(rows.Find(`[data-testid="delivery-attempts"]`).Text()) != "1" {
		t.Fatalf("row shows %q", rows.Text())
	}
	if p.find("channel-row").Length() != 1 {
		t.Fatal("the channel is not listed")
	}
	seq, _ := rows.Attr("data-seq")
	action, ok := rows.Find(`form[data-testid="retry-form"]`).Attr("action")
	if !ok || action != "/admin/deliveries/"+seq+"/retry" {
		t.Fatalf("retry form action %q", action)
	}
	if r := admin.post(action, url.Values{}); r.status != http.StatusForbidden {
		t.Fatalf("a retry without the CSRF token: %d", r.status)
	}
	if r := op.post(action, url.Values{"csrf": {op.csrf()}}); r.status != http.StatusForbidden {
		t.Fatalf("an operator's retry: %d", r.status)
	}
	r := admin.post(action, url.Values{"csrf": {admin.csrf()}})
	if r.status != http.StatusSeeOther || !strings.HasPrefix(r.header.Get("Location"), "/admin/deliveries?done=") {
		t.Fatalf("retry: %d %s", r.status, r.header.Get("Location"))
	}
	ds, _ := out.Deliveries(context.Background(), notify.Query{})
	if ds[0].State != notify.StatePending || !ds[0].DueAt.Equal(now) {
		t.Fatalf("after retry the row is %s due %s", ds[0].State, ds[0].DueAt)
	}
	if got := kindsBy(t, e, audit.KindDeliveryRetried); len(got) != 1 || got[0].Principal != "root" || got[0].CallID != "call_x" {
		t.Fatalf("delivery_retried entries %+v, want one by root about call_x", got)
	}
	p = admin.get(r.header.Get("Location"))
	if !strings.Contains(p.find("deliveries-notice").Text(), "is due again now") {
		t.Fatalf("no notice after the retry: %q", p.find("deliveries-notice").Text())
	}
	// A row waiting for its first attempt is not retried, and retrying it
	// again while it waits is refused with a reason.
	if r := admin.post("/admin/deliveries/999/retry", url.Values{"csrf": {admin.csrf()}}); r.status != http.StatusNotFound {
		t.Fatalf("retry of an unknown row: %d", r.status)
	}
	if p := admin.get("/admin/deliveries?state=delivered"); p.find("delivery-row").Length() != 0 || p.find("deliveries-empty").Length() != 1 {
		t.Fatal("the state filter shows the pending row")
	}
}

func TestDeliveriesPageWithoutChannels(t *testing.T) {
	e := newConsoleEnv(t)
	e.addUser("root", account.RoleAdmin, rolePassword)
	admin := e.browser()
	admin.login("root", rolePassword)
	p := admin.get("/admin/deliveries")
	if p.status != http.StatusOK || p.find("deliveries-unconfigured").Length() != 1 {
		t.Fatalf("status %d: %s", p.status, p.body)
	}
	if p := admin.get("/admin"); p.find("admin-deliveries").Length() != 1 {
		t.Fatal("the admin page does not link the deliveries")
	}
}

func b64url(n int) string { return base64.RawURLEncoding.EncodeToString(make([]byte, n)) }

func TestPushSubscriptionsOnlyForAllowlistedServices(t *testing.T) {
	e := newConsoleEnv(t)
	e.addUser("olivia", account.RoleOperator, rolePassword)
	e.addUser("aude", account.RoleAuditor, rolePassword)
	op := e.browser()
	op.login("olivia", rolePassword)
	if p := op.get("/push/key"); p.status != http.StatusNotFound {
		t.Fatalf("/push/key without a push channel: %d", p.status)
	}
	out := e.db.Outbox()
	e.c.cfg.Notifications = &Notifications{Push: fakePush{allow: notify.DefaultPushServices}, Subscriptions: out}
	if p := op.get("/push/key"); p.status != http.StatusOK || !strings.Contains(p.body, `"key":"BKey"`) {
		t.Fatalf("/push/key: %d %s", p.status, p.body)
	}
	sub := func(b *consoleBrowser, endpoint string) *htmlPage {
		return b.post("/push/subscribe", url.Values{"csrf": {b.csrf()}, "endpoint": {endpoint}, "p256dh": {b64url(65)}, "auth": {b64url(16)}},
			"Accept", "application/json")
	}
	for _, bad := range []string{"https://attacker.example/collect", "http://fcm.googleapis.com/fcm/send/x", "https://127.0.0.1:8443/x"} {
		p := sub(op, bad)
		if p.status != http.StatusBadRequest || !strings.Contains(p.body, "push_service_not_allowed") {
			t.Fatalf("subscribing %s: %d %s", bad, p.status, p.body)
		}
	}
	if p := op.post("/push/subscribe", url.Values{"csrf": {op.csrf()}, "endpoint": {"https://fcm.googleapis.com/fcm/send/x"},
		"p256dh": {"short"}, "auth": {b64url(16)}}, "Accept", "application/json"); p.status != http.StatusBadRequest {
		t.Fatalf("a malformed key was accepted: %d", p.status)
	}
	if p := sub(op, "https://fcm.googleapis.com/fcm/send/abc"); p.status != http.StatusOK {
		t.Fatalf("subscribing an allowed service: %d %s", p.status, p.body)
	}
	aude := e.browser()
	aude.login("aude", rolePassword)
	if p := aude.post("/push/subscribe", url.Values{"csrf": {aude.csrf()}, "endpoint": {"https://fcm.googleapis.com/fcm/send/aude"},
		"p256dh": {b64url(65)}, "auth": {b64url(16)}}, "Accept", "application/json"); p.status != http.StatusForbidden {
		t.Fatalf("an auditor subscribed: %d", p.status)
	}
	subs, err := out.PushSubscriptions(context.Background())
	if err != nil || len(subs) != 1 || subs[0].Account != "olivia" || subs[0].Endpoint != "https://fcm.googleapis.com/fcm/send/abc" {
		t.Fatalf("stored subscriptions %+v, %v", subs, err)
	}
	// A disabled operator's subscription is not sent to.
	if err := accountsOf(e.db).DisableUser(context.Background(), "olivia", "test", "cli"); err != nil {
		t.Fatal(err)
	}
	if subs, _ := out.PushSubscriptions(context.Background()); len(subs) != 0 {
		t.Fatalf("a disabled account's subscription is listed: %+v", subs)
	}
}

func TestServiceWorkerIsServedFromTheRoot(t *testing.T) {
	e := newConsoleEnv(t)
	resp, err := http.Get(e.url + "/sw.js")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Content-Type"), "javascript") ||
		resp.Header.Get("Cache-Control") != "no-cache" || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "script-src 'self'") {
		t.Fatalf("/sw.js: %d %v", resp.StatusCode, resp.Header)
	}
}

func kindsBy(t *testing.T, e *consoleEnv, kind string) []audit.Entry {
	t.Helper()
	var buf bytes.Buffer
	if _, err := e.db.ExportAudit(context.Background(), &buf, audit.ExportOptions{Format: "jsonl"}); err != nil {
		t.Fatal(err)
	}
	var out []audit.Entry
	for dec := json.NewDecoder(&buf); dec.More(); {
		var en audit.Entry
		if err := dec.Decode(&en); err != nil {
			t.Fatal(err)
		}
		if en.Kind == kind {
			out = append(out, en)
		}
	}
	return out
}

// An operator subscribes at most notify.MaxPushSubscriptionsPerAccount
// browsers; an endpoint stays with the account that registered it; adding
// and removing are audited.
func TestPushSubscriptionsBoundedBoundAndAudited(t *testing.T) {
	e := newConsoleEnv(t)
	e.addUser("olivia", account.RoleOperator, rolePassword)
	e.addUser("oscar", account.RoleOperator, rolePassword)
	out := e.db.Outbox()
	e.c.cfg.Notifications = &Notifications{Push: fakePush{allow: notify.DefaultPushServices}, Subscriptions: out}
	sub := func(b *consoleBrowser, endpoint string) *htmlPage {
		return b.post("/push/subscribe", url.Values{"csrf": {b.csrf()}, "endpoint": {endpoint}, "p256dh": {b64url(65)}, "auth": {b64url(16)}},
			"Accept", "application/json")
	}
	olivia, oscar := e.browser(), e.browser()
	olivia.login("olivia", rolePassword)
	oscar.login("oscar", rolePassword)
	endpoint := func(who string, i int) string {
		return fmt.Sprintf("https://fcm.googleapis.com/fcm/send/%s-%d", who, i)
	}
	for i := 0; i < notify.MaxPushSubscriptionsPerAccount; i++ {
		if p := sub(olivia, endpoint("olivia", i)); p.status != http.StatusOK {
			t.Fatalf("subscription %d: %d %s", i+1, p.status, p.body)
		}
	}
	p := sub(olivia, endpoint("olivia", 99))
	if p.status != http.StatusConflict || !strings.Contains(p.body, `"too_many_push_subscriptions"`) || !strings.Contains(p.body, "remove an old device") {
		t.Fatalf("subscription %d: %d %s", notify.MaxPushSubscriptionsPerAccount+1, p.status, p.body)
	}
	// Another account cannot take over olivia's endpoint.
	p = sub(oscar, endpoint("olivia", 0))
	if p.status != http.StatusConflict || !strings.Contains(p.body, `"push_endpoint_taken"`) {
		t.Fatalf("oscar registering olivia's endpoint: %d %s", p.status, p.body)
	}
	if p := sub(oscar, endpoint("oscar", 0)); p.status != http.StatusOK {
		t.Fatalf("oscar's own subscription with olivia full: %d %s", p.status, p.body)
	}
	subs, _ := out.PushSubscriptions(context.Background())
	for _, s := range subs {
		if s.Endpoint == endpoint("olivia", 0) && s.Account != "olivia" {
			t.Fatalf("olivia's endpoint moved to %s", s.Account)
		}
	}
	if p := olivia.post("/push/unsubscribe", url.Values{"csrf": {olivia.csrf()}, "endpoint": {endpoint("olivia", 3)}},
		"Accept", "application/json"); p.status != http.StatusOK {
		t.Fatalf("unsubscribe: %d %s", p.status, p.body)
	}
	if p := sub(olivia, endpoint("olivia", 99)); p.status != http.StatusOK {
		t.Fatalf("after removing a device: %d %s", p.status, p.body)
	}
	added, removed := kindsBy(t, e, audit.KindPushSubscribed), kindsBy(t, e, audit.KindPushUnsubscribed)
	if len(added) != notify.MaxPushSubscriptionsPerAccount+2 || len(removed) != 1 || removed[0].Principal != "olivia" {
		t.Fatalf("%d push_subscribed and %+v push_unsubscribed entries", len(added), removed)
	}
}
