package notify_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/internal/notify"
	"github.com/countersign/countersign/internal/notify/outboxtest"
	"github.com/countersign/countersign/internal/testkit"
)

// TestSignStandardVector reproduces the signature the Standard Webhooks
// reference implementations publish, so their libraries verify ours.
func TestSignStandardVector(t *testing.T) {
	key, _ := base64.StdEncoding.DecodeString("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	got := notify.Sign(key, nil, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`))
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("Sign = %s, want %s", got, want)
	}
}

type rig struct {
	clk     *testkit.Clock
	outbox  *outboxtest.Memory
	router  *notify.Router
	disp    *notify.Dispatcher
	reg     *prometheus.Registry
	built   *notify.Built
	jitters []float64
}

// newRig wires a configuration to an in-memory outbox and a dispatcher on
// a fake clock; jitter is always jit.
func newRig(t *testing.T, cfg *notify.Config, opts notify.BuildOptions, jit float64) *rig {
	t.Helper()
	r := &rig{clk: testkit.NewClock(t0), outbox: outboxtest.NewMemory(), reg: prometheus.NewRegistry()}
	if opts.Now == nil {
		opts.Now = r.clk.Now
	}
	built, err := notify.Build(cfg, opts)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	r.built = built
	r.router = notify.NewRouter(cfg, "https://approvals.example.com")
	r.disp = notify.NewDispatcher(notify.DispatcherConfig{
		Outbox: r.outbox, Channels: built.Channels, Timeouts: built.Timeouts, Retry: cfg.Retry, Lease: cfg.Lease,
		Now: r.clk.Now, Jitter: func() float64 { r.jitters = append(r.jitters, jit); return jit }, Registry: r.reg,
		Owner: "test", Logger: quiet,
	})
	return r
}

func webhookConfig(url, secret, signingKeyEnv string) string {
	y := `
channels:
  hook:
    type: webhook
    url: ` + url + `
    secret: {env: HOOK_SECRET}
`
	if signingKeyEnv != "" {
		y += "    signing_key: {env: " + signingKeyEnv + "}\n"
	}
	return y
}

func TestWebhookVerifiedByIndependentReceiver(t *testing.T) {
	secret := newSecret(t)
	whsk, whpk := newSigningKey(t)
	clk := testkit.NewClock(t0)
	hmacOnly := newSWReceiver(secret, "")
	hmacOnly.now = clk.Now
	keyOnly := newSWReceiver("", whpk)
	keyOnly.now = clk.Now
	byHMAC, byKey := newHookServer(hmacOnly, nil), newHookServer(keyOnly, nil)
	s1, s2 := httptest.NewServer(byHMAC), httptest.NewServer(byKey)
	defer s1.Close()
	defer s2.Close()
	cfg := mustConfig(t, `
channels:
  by-secret:
    type: webhook
    url: `+s1.URL+`
    secret: {env: HOOK_SECRET}
    include_args: true
  by-key:
    type: webhook
    url: `+s2.URL+`
    secret: {env: HOOK_SECRET}
    signing_key: {env: HOOK_KEY}
`, map[string]string{"HOOK_SECRET": secret, "HOOK_KEY": whsk})
	r := newRig(t, cfg, notify.BuildOptions{}, 0.5)
	r.clk = clk
	r.disp = notify.NewDispatcher(notify.DispatcherConfig{Outbox: r.outbox, Channels: r.built.Channels, Now: clk.Now, Logger: quiet})
	if got := r.built.Channels["by-key"].(*notify.Webhook).PublicKey(); got != whpk {
		t.Fatalf("PublicKey = %s, want %s", got, whpk)
	}

	c := testCall("call_one", clk.Now())
	r.outbox.Enqueue(r.router.Notices(submitted(c))...)
	if n := deliverAll(t, r.disp); n != 2 {
		t.Fatalf("delivered %d rows, want 2", n)
	}
	for name, srv := range map[string]*hookServer{"secret": byHMAC, "key": byKey} {
		_, accepted, order, refused := srv.snapshot()
		if len(refused) != 0 || len(order) != 1 {
			t.Fatalf("%s receiver: accepted %v, refused %v", name, order, refused)
		}
		var ev notify.Event
		if err := json.Unmarshal(accepted[order[0]], &ev); err != nil {
			t.Fatal(err)
		}
		if ev.ID != order[0] || ev.Type != notify.CallSubmitted || ev.Data.ID != "call_one" || ev.Data.Tool != "payments.refund" ||
			ev.Data.Target != "invoice:INV-1042" || ev.Data.Actor != "agent:billing-bot" || ev.Data.Digest != c.Digest ||
			ev.Data.Status != "pending" || ev.Data.DecideBy == "" || ev.Data.URL != "https://approvals.example.com/calls/call_one" {
			t.Fatalf("%s receiver got %+v", name, ev)
		}
		body := accepted[order[0]]
		if name == "secret" {
			if !bytes.Contains(body, []byte(`"args":{"amount_minor":9007199254740991,"currency":"USD","secret_note":"s3cr3t"}`)) {
				t.Fatalf("the include_args channel got no exact args: %s", body)
			}
		} else if bytes.Contains(body, []byte("args")) || bytes.Contains(body, []byte("s3cr3t")) {
			t.Fatalf("a channel without include_args got the arguments: %s", body)
		}
	}
	// The same event on both channels carries one id, which receivers
	// deduplicate by.
	_, _, o1, _ := byHMAC.snapshot()
	_, _, o2, _ := byKey.snapshot()
	if o1[0] != o2[0] || !strings.HasPrefix(o1[0], "evt_") {
		t.Fatalf("event ids %s and %s, want one evt_ id", o1[0], o2[0])
	}
}

func TestReceiverRefusesTamperingOldTimestampsAndWrongSecrets(t *testing.T) {
	secret := newSecret(t)
	key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	whsk, whpk := newSigningKey(t)
	priv, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(whsk, "whsk_"))
	body := []byte(`{"id":"evt_1","type":"call.submitted"}`)
	now := time.Now()
	headers := func(id string, ts time.Time, body []byte, secret []byte, key ed25519.PrivateKey) http.Header {
		h := http.Header{}
		h.Set("webhook-id", id)
		h.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
		h.Set("webhook-signature", notify.Sign(secret, key, id, ts.Unix(), body))
		return h
	}
	rx := newSWReceiver(secret, whpk)
	if _, err := rx.verify(headers("evt_1", now, body, key, ed25519.PrivateKey(priv)), body); err != nil {
		t.Fatalf("a good delivery was refused: %v", err)
	}
	other := newSecret(t)
	otherKey, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(other, "whsec_"))
	cases := []struct {
		name string
		rx   *swReceiver
		h    http.Header
		body []byte
	}{
		{"tampered body", rx, headers("evt_1", now, body, key, nil), []byte(`{"id":"evt_1","type":"call.approved"}`)},
		{"tampered body, key signature", newSWReceiver("", whpk), headers("evt_1", now, body, key, ed25519.PrivateKey(priv)), append(body, ' ')},
		{"tampered id", rx, func() http.Header {
			h := headers("evt_1", now, body, key, nil)
			h.Set("webhook-id", "evt_2")
			return h
		}(), body},
		{"old timestamp", rx, headers("evt_1", now.Add(-6*time.Minute), body, key, nil), body},
		{"timestamp from the future", rx, headers("evt_1", now.Add(6*time.Minute), body, key, nil), body},
		{"wrong secret", rx, headers("evt_1", now, body, otherKey, nil), body},
		{"replaced timestamp", rx, func() http.Header {
			h := headers("evt_1", now.Add(-time.Minute), body, key, nil)
			h.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
			return h
		}(), body},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.rx.verify(tc.h, tc.body); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

// TestWebhookFromTheWrongClockIsRefusedAndDead drives an old timestamp
// through the real path: the receiver answers 401 and the row is dead.
func TestWebhookFromTheWrongClockIsRefusedAndDead(t *testing.T) {
	secret := newSecret(t)
	rx := newSWReceiver(secret, "")
	srv := newHookServer(rx, nil)
	hs := httptest.NewServer(srv)
	defer hs.Close()
	cfg := mustConfig(t, webhookConfig(hs.URL, secret, ""), map[string]string{"HOOK_SECRET": secret})
	r := newRig(t, cfg, notify.BuildOptions{}, 0.5)
	rx.now = func() time.Time { return r.clk.Now().Add(10 * time.Minute) }
	r.outbox.Enqueue(r.router.Notices(submitted(testCall("call_a", r.clk.Now())))...)
	deliverAll(t, r.disp)
	rows := rowsOf(r.outbox, "hook")
	if len(rows) != 1 || rows[0].State != notify.StateDead || !strings.Contains(rows[0].LastError, "401") {
		t.Fatalf("rows = %+v, want one dead row refused with 401", rows)
	}
	if _, _, _, refused := srv.snapshot(); len(refused) != 1 {
		t.Fatalf("receiver refused %v, want one refusal", refused)
	}
}

func TestWebhookRetriesUntilDelivered(t *testing.T) {
	secret := newSecret(t)
	rx := newSWReceiver(secret, "")
	const failures = 4
	srv := newHookServer(rx, func(n int) int {
		if n <= failures {
			return []int{503, 500, 429, 502}[n-1]
		}
		return 0
	})
	hs := httptest.NewServer(srv)
	defer hs.Close()
	cfg := mustConfig(t, webhookConfig(hs.URL, secret, "")+"retry: {first: 2s, max_interval: 1h}\n", map[string]string{"HOOK_SECRET": secret})
	r := newRig(t, cfg, notify.BuildOptions{}, 0.5)
	rx.now = r.clk.Now
	r.outbox.Enqueue(r.router.Notices(submitted(testCall("call_a", r.clk.Now())))...)

	var waits []time.Duration
	for attempt := 1; attempt <= failures+1; attempt++ {
		if n := deliverAll(t, r.disp); n != 1 {
			t.Fatalf("attempt %d: dispatched %d rows, want 1", attempt, n)
		}
		row := rowsOf(r.outbox, "hook")[0]
		if row.Attempts != attempt {
			t.Fatalf("attempts = %d, want %d", row.Attempts, attempt)
		}
		if attempt <= failures {
			if row.State != notify.StatePending || row.LastError == "" {
				t.Fatalf("after failure %d: %+v", attempt, row)
			}
			wait := row.DueAt.Sub(r.clk.Now())
			waits = append(waits, wait)
			r.clk.Advance(wait - time.Millisecond)
			if n := deliverAll(t, r.disp); n != 0 {
				t.Fatalf("attempt %d: sent %d rows a millisecond before the retry time", attempt, n)
			}
			r.clk.Advance(time.Millisecond)
		} else if row.State != notify.StateDelivered {
			t.Fatalf("after %d failures the row is %s (%s), want delivered", failures, row.State, row.LastError)
		}
	}
	// Jitter 0.5 puts each wait at three quarters of 2 s doubling.
	want := []time.Duration{1500 * time.Millisecond, 3 * time.Second, 6 * time.Second, 12 * time.Second}
	for i := range want {
		if waits[i] != want[i] {
			t.Fatalf("waits = %v, want %v", waits, want)
		}
	}
	requests, accepted, _, _ := srv.snapshot()
	if requests != failures+1 || len(accepted) != 1 {
		t.Fatalf("receiver saw %d requests and accepted %d events, want %d and 1", requests, len(accepted), failures+1)
	}
	if got := counter(r, "hook", "failed"); got != failures {
		t.Fatalf("failed metric = %v, want %d", got, failures)
	}
	if got := counter(r, "hook", "delivered"); got != 1 {
		t.Fatalf("delivered metric = %v, want 1", got)
	}
}

// counter reads countersign_notifications_total{channel, result}.
func counter(r *rig, channel, result string) float64 {
	mfs, _ := r.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "countersign_notifications_total" {
			continue
		}
		for _, m := range mf.Metric {
			labels := map[string]string{}
			for _, l := range m.Label {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["channel"] == channel && labels["result"] == result {
				return m.Counter.GetValue()
			}
		}
	}
	return 0
}

func TestBackoffIsExponentialJitteredAndCapped(t *testing.T) {
	cfg := mustConfig(t, "retry: {first: 5s, max_interval: 1h}\n", nil)
	for _, jit := range []float64{0, 0.999999} {
		r := newRig(t, cfg, notify.BuildOptions{}, jit)
		for attempt := 1; attempt <= 20; attempt++ {
			full := min(5*time.Second<<(attempt-1), time.Hour)
			got := r.disp.Backoff(attempt)
			if got < full/2 || got > full {
				t.Fatalf("jitter %v attempt %d: backoff %s outside [%s, %s]", jit, attempt, got, full/2, full)
			}
		}
	}
}

func TestWebhookGivesUpAfterADayAndRetryRevivesIt(t *testing.T) {
	secret := newSecret(t)
	rx := newSWReceiver(secret, "")
	broken := true
	srv := newHookServer(rx, func(int) int {
		if broken {
			return http.StatusServiceUnavailable
		}
		return 0
	})
	hs := httptest.NewServer(srv)
	defer hs.Close()
	cfg := mustConfig(t, webhookConfig(hs.URL, secret, ""), map[string]string{"HOOK_SECRET": secret})
	r := newRig(t, cfg, notify.BuildOptions{}, 0.999)
	rx.now = r.clk.Now
	r.outbox.Enqueue(r.router.Notices(submitted(testCall("call_a", r.clk.Now())))...)
	start := r.clk.Now()
	for i := 0; ; i++ {
		if i > 200 {
			t.Fatal("never gave up")
		}
		deliverAll(t, r.disp)
		row := rowsOf(r.outbox, "hook")[0]
		if row.State == notify.StateDead {
			if elapsed := r.clk.Now().Sub(start); elapsed < 24*time.Hour || elapsed > 24*time.Hour+time.Second {
				t.Fatalf("dead after %s, want 24h", elapsed)
			}
			if row.Attempts < 20 || row.Attempts > 60 {
				t.Fatalf("%d attempts in a day", row.Attempts)
			}
			if !strings.Contains(row.LastError, "503") {
				t.Fatalf("last error %q", row.LastError)
			}
			break
		}
		if !row.DueAt.After(r.clk.Now()) || row.DueAt.After(start.Add(24*time.Hour)) {
			t.Fatalf("retry at %s (now %s): want later, and no later than the give-up time", row.DueAt, r.clk.Now())
		}
		r.clk.Advance(row.DueAt.Sub(r.clk.Now()))
	}
	if got := counter(r, "hook", "dead"); got != 1 {
		t.Fatalf("dead metric = %v", got)
	}
	// An admin's retry gives the row a new day.
	broken = false
	seq := rowsOf(r.outbox, "hook")[0].Seq
	if err := r.disp.Retry(t.Context(), seq, "root"); err != nil {
		t.Fatalf("Retry: %v", err)
	}
	deliverAll(t, r.disp)
	if row := rowsOf(r.outbox, "hook")[0]; row.State != notify.StateDelivered {
		t.Fatalf("after Retry the row is %s", row.State)
	}
}

func TestWebhookPermanentRefusalsAndRedirects(t *testing.T) {
	secret := newSecret(t)
	elsewhere := newHookServer(newSWReceiver(secret, ""), nil)
	es := httptest.NewServer(elsewhere)
	defer es.Close()
	cases := []struct {
		name    string
		handler http.HandlerFunc
		state   notify.State
		want    string
		wait    time.Duration
	}{
		{"400 is permanent", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "bad payload", 400) }, notify.StateDead, "HTTP 400: bad payload", 0},
		{"a redirect is not followed", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, es.URL, http.StatusTemporaryRedirect)
		}, notify.StateDead, "redirects are not followed", 0},
		{"Retry-After is honoured", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "120")
			w.WriteHeader(http.StatusTooManyRequests)
		}, notify.StatePending, "HTTP 429", 120 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			hs := httptest.NewServer(tc.handler)
			defer hs.Close()
			cfg := mustConfig(t, webhookConfig(hs.URL, secret, ""), map[string]string{"HOOK_SECRET": secret})
			r := newRig(t, cfg, notify.BuildOptions{}, 0)
			r.outbox.Enqueue(r.router.Notices(submitted(testCall("call_a", r.clk.Now())))...)
			deliverAll(t, r.disp)
			row := rowsOf(r.outbox, "hook")[0]
			if row.State != tc.state || !strings.Contains(row.LastError, tc.want) {
				t.Fatalf("row %s %q, want %s %q", row.State, row.LastError, tc.state, tc.want)
			}
			if tc.wait > 0 && row.DueAt.Sub(r.clk.Now()) < tc.wait {
				t.Fatalf("retry in %s, want at least %s", row.DueAt.Sub(r.clk.Now()), tc.wait)
			}
		})
	}
	if n, _, _, _ := elsewhere.snapshot(); n != 0 {
		t.Fatalf("the redirect target got %d requests", n)
	}
}

// A signing key is its 32-byte seed, or 64 bytes of seed and public key
// that agree; a 64-byte key whose halves disagree is refused, and what an
// accepted key signs verifies under the whpk_ key the channel lists.
func TestSigningKeyHalvesMustAgree(t *testing.T) {
	const hook = `
channels:
  hook:
    type: webhook
    url: https://hooks.example.com/countersign
    secret: {env: HOOK_SECRET}
    signing_key: {env: HOOK_KEY}
`
	secret := newSecret(t)
	_, privA, _ := ed25519.GenerateKey(nil)
	pubB, _, _ := ed25519.GenerateKey(nil)
	mismatched := append(append([]byte(nil), privA.Seed()...), pubB...)
	_, err := notify.ParseConfig([]byte(hook), notify.Env{Getenv: func(k string) string {
		return map[string]string{"HOOK_SECRET": secret, "HOOK_KEY": "whsk_" + base64.StdEncoding.EncodeToString(mismatched)}[k]
	}})
	if err == nil || !strings.Contains(err.Error(), "signing_key: the last 32 bytes of the 64-byte key are not the public key of its first 32") {
		t.Fatalf("ParseConfig with mismatched halves: %v, want the signing_key refused", err)
	}

	for name, key := range map[string][]byte{"64-byte key": privA, "32-byte seed": privA.Seed()} {
		t.Run(name, func(t *testing.T) {
			whpk := "whpk_" + base64.StdEncoding.EncodeToString(privA.Public().(ed25519.PublicKey))
			cfg := mustConfig(t, hook, map[string]string{"HOOK_SECRET": secret, "HOOK_KEY": "whsk_" + base64.StdEncoding.EncodeToString(key)})
			var got http.Header
			var body []byte
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got = r.Header.Clone()
				body, _ = io.ReadAll(r.Body)
			}))
			defer srv.Close()
			wc := *cfg.Channels["hook"].Webhook
			wc.URL = srv.URL
			w := notify.NewWebhook(&wc, nil, nil)
			if w.PublicKey() != whpk {
				t.Fatalf("PublicKey = %s, want %s", w.PublicKey(), whpk)
			}
			if _, err := w.Send(context.Background(), notify.Message{Event: notify.Event{ID: "evt_1"}, Body: []byte(`{"id":"evt_1"}`)}); err != nil {
				t.Fatal(err)
			}
			if _, err := newSWReceiver("", whpk).verify(got, body); err != nil {
				t.Fatalf("the v1a signature does not verify under %s: %v", whpk, err)
			}
		})
	}
}
