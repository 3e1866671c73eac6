package e2e

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// hookReceiver is a Standard Webhooks receiver for the kill test. It
// verifies each delivery's v1 signature itself, and, depending on its
// mode, holds requests open until the sender goes away (so deliveries are
// in flight when the console is killed), or accepts them after a short
// delay.
type hookReceiver struct {
	key []byte

	mu       sync.Mutex
	hold     bool
	delay    time.Duration
	inFlight int
	byID     map[string]int    // deliveries accepted per webhook-id
	events   map[string]string // "type call_id" → webhook-id
	bad      []string
}

func (h *hookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	id, ts := r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp")
	m := hmac.New(sha256.New, h.key)
	m.Write([]byte(id + "." + ts + "." + string(body)))
	want := "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
	h.mu.Lock()
	if !strings.Contains(" "+r.Header.Get("webhook-signature")+" ", " "+want+" ") {
		h.bad = append(h.bad, id)
		h.mu.Unlock()
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	hold, delay := h.hold, h.delay
	h.inFlight++
	h.mu.Unlock()
	defer func() { h.mu.Lock(); h.inFlight--; h.mu.Unlock() }()
	if hold {
		<-r.Context().Done() // until the sender times out or dies
		return
	}
	time.Sleep(delay)
	var ev struct {
		ID   string `json:"id"`
		Type string `json:"type"`
		Data struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &ev); err != nil || ev.ID != id {
		h.mu.Lock()
		h.bad = append(h.bad, "body of "+id)
		h.mu.Unlock()
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	h.byID[id]++
	key := ev.Type + " " + ev.Data.ID
	if prev, ok := h.events[key]; ok && prev != id {
		h.bad = append(h.bad, key+" arrived under two ids")
	}
	h.events[key] = id
	h.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (h *hookReceiver) set(hold bool, delay time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hold, h.delay = hold, delay
}

func (h *hookReceiver) missing(want map[string]bool) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for k := range want {
		if _, ok := h.events[k]; !ok {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// TestNotificationsSurviveKill kills the real console with SIGKILL between
// the commit of changes and the delivery of their webhooks, with some
// deliveries in flight (the receiver holds them open) and others not yet
// attempted, then at random moments while deliveries run; after each
// restart every committed event is delivered, none is lost, and a repeated
// delivery carries the same webhook-id.
func TestNotificationsSurviveKill(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: kill -9 of the real binary with deliveries in flight")
	}
	secret := make([]byte, 32)
	for i := range secret {
		secret[i] = byte(rand.IntN(256))
	}
	rx := &hookReceiver{key: secret, byID: map[string]int{}, events: map[string]string{}}
	hs := httptest.NewServer(rx)
	defer hs.Close()

	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "hook.secret"), []byte("whsec_"+base64.StdEncoding.EncodeToString(secret)+"\n"), 0o600)
	cfg := filepath.Join(dir, "notify.yaml")
	os.WriteFile(cfg, []byte(`channels:
  hook:
    type: webhook
    url: `+hs.URL+`/countersign
    secret: {file: hook.secret}
    timeout: 2s
retry: {first: 500ms, max_interval: 2s}
lease: 12s
`), 0o600)

	data := t.TempDir()
	s := startServer(t, data, "--notify", cfg)
	s.addUser("alice", "operator")
	token := s.token("agent:billing-bot", "payments-host")
	want := map[string]bool{}
	var wantMu sync.Mutex
	expect := func(kind, id string) { wantMu.Lock(); want[kind+" "+id] = true; wantMu.Unlock() }
	ctx := context.Background()
	invoice := 0
	// changes submits calls and decides some: each change commits its
	// outbox rows with it.
	changes := func(a *rawAgent, n int) {
		for i := 0; i < n; i++ {
			invoice++
			r, err := a.submit(ctx, fmt.Sprintf(`{"tool":"payments.refund","target":"invoice:INV-%d","args":{"amount_minor":%d,"currency":"EUR","reason_code":"duplicate"}}`, 50000+invoice, 100+invoice))
			if err != nil || r.status != http.StatusCreated {
				t.Fatalf("submit: %d %v %s", r.status, err, r.raw)
			}
			id := r.str("id")
			expect("call.submitted", id)
			switch i % 3 {
			case 0:
				if r, err := controlApprove(ctx, data, id, "alice", r.str("digest")); err != nil || r.status != http.StatusOK {
					t.Fatalf("approve: %v %s", err, r.raw)
				}
				expect("call.approved", id)
			case 1:
				if r, err := a.do(ctx, http.MethodDelete, "/api/v1/calls/"+id, nil); err != nil || r.status != http.StatusOK {
					t.Fatalf("cancel: %v %s", err, r.raw)
				}
				expect("call.cancelled", id)
			}
		}
	}

	// Round 0: the receiver holds every delivery open, so at the kill some
	// rows are leased by the dead process and the rest were never tried.
	rx.set(true, 0)
	changes(newRawAgent(s.url, token), 12)
	deadline := time.Now().Add(20 * time.Second)
	for {
		rx.mu.Lock()
		n := rx.inFlight
		rx.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no delivery reached the receiver")
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.kill()
	if got := len(rx.missing(want)); got != len(want) {
		t.Fatalf("%d of %d events arrived while the receiver held them", len(want)-got, len(want))
	}

	// Rounds 1–3: deliveries run (each takes 30 ms) and the console is
	// killed at a random moment among them.
	rx.set(false, 30*time.Millisecond)
	for round := 1; round <= 3; round++ {
		s = startServer(t, data, "--notify", cfg)
		changes(newRawAgent(s.url, token), 6)
		time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond)
		s.kill()
	}

	// The last start: everything committed is delivered, within a lease
	// and the retries' backoff.
	startServer(t, data, "--notify", cfg) // stopped by the test's cleanup
	deadline = time.Now().Add(60 * time.Second)
	for len(rx.missing(want)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after the restarts %d of %d events never arrived: %v", len(rx.missing(want)), len(want), rx.missing(want))
		}
		time.Sleep(100 * time.Millisecond)
	}
	rx.mu.Lock()
	defer rx.mu.Unlock()
	if len(rx.bad) > 0 {
		t.Fatalf("receiver refused: %v", rx.bad)
	}
	if len(rx.events) != len(want) {
		t.Fatalf("%d distinct events arrived, want %d", len(rx.events), len(want))
	}
	repeats := 0
	for _, n := range rx.byID {
		repeats += n - 1
	}
	t.Logf("%d events delivered after %d kills; %d repeated deliveries, each under its event's webhook-id", len(want), 4, repeats)
}
