package main

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/countersign/countersign/internal/notify"
)

// The demo's notifications: a webhook sink in the demo's own process, on
// 127.0.0.1, that the demo's notifications file (DATA/notify.yaml, written
// by the demo) sends every event to. The sink checks each delivery's
// signature and appends one line per event to DATA/demo-webhooks.log, so a
// newcomer sees what a receiver gets, and the admin's Deliveries page has
// rows.

const (
	demoNotifyMarker = "# Written by console demo"
	demoSinkLog      = "demo-webhooks.log"
	demoSinkSecret   = "demo-webhook.secret"
	// demoSinkMaxLines bounds the log: past it, deliveries are answered
	// but not written.
	demoSinkMaxLines = 100000
	demoSinkMaxBody  = 1 << 20
)

// demoSink receives the demo's webhook deliveries.
type demoSink struct {
	secret []byte
	mu     sync.Mutex
	out    *os.File
	lines  int
	now    func() time.Time
}

// startDemoSink starts the sink and writes the notifications file that
// points at it, unless DATA/notify.yaml is someone else's (it does not
// start with demoNotifyMarker): then it starts nothing and returns "".
// The returned log path is where the deliveries are written.
func startDemoSink(ctx context.Context, data string) (logPath string, stop func(), err error) {
	conf := filepath.Join(data, "notify.yaml")
	if b, err := os.ReadFile(conf); err == nil && !strings.HasPrefix(string(b), demoNotifyMarker) {
		return "", func() {}, nil
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", nil, err
	}
	secret := "whsec_" + base64.StdEncoding.EncodeToString(raw)
	if err := os.WriteFile(filepath.Join(data, demoSinkSecret), []byte(secret), 0o600); err != nil {
		return "", nil, err
	}
	logPath = filepath.Join(data, demoSinkLog)
	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		out.Close()
		return "", nil, err
	}
	yaml := demoNotifyMarker + `: every event goes to the demo's webhook sink, which writes
# one line per delivery to ` + demoSinkLog + ` in this directory. It is written again at
# each start of the demo; remove this first line to keep your own changes.
channels:
  demo-sink:
    type: webhook
    url: http://` + ln.Addr().String() + `/webhook
    secret: {file: ` + demoSinkSecret + `}
`
	if err := os.WriteFile(conf, []byte(yaml), 0o600); err != nil {
		ln.Close()
		out.Close()
		return "", nil, err
	}
	s := &demoSink{secret: raw, out: out, now: time.Now}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	return logPath, func() {
		shut, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
		<-done
		s.mu.Lock()
		out.Close()
		s.mu.Unlock()
	}, nil
}

// ServeHTTP takes one delivery: it checks the Standard Webhooks signature
// and writes a line saying what the event is about.
func (s *demoSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "the demo's webhook sink takes POST", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, demoSinkMaxBody))
	if err != nil {
		http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
		return
	}
	verdict := "signature ok"
	if err := s.verify(r.Header, body); err != nil {
		verdict = "SIGNATURE REFUSED: " + err.Error()
	}
	var ev struct {
		Type string `json:"type"`
		Data struct {
			ID, Tool, Target, Status string
		} `json:"data"`
	}
	_ = json.Unmarshal(body, &ev)
	line := fmt.Sprintf("%s %s %s %s %s (%s)\n", s.now().UTC().Format(time.RFC3339), orDash(ev.Type), orDash(ev.Data.ID),
		orDash(ev.Data.Tool), orDash(ev.Data.Target), verdict)
	s.mu.Lock()
	if s.lines < demoSinkMaxLines {
		s.lines++
		bw := bufio.NewWriter(s.out)
		bw.WriteString(strings.Map(printable, line[:len(line)-1]) + "\n")
		bw.Flush()
	}
	s.mu.Unlock()
	if verdict != "signature ok" {
		http.Error(w, verdict, http.StatusUnauthorized)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// verify checks the webhook-signature header against the body, as any
// Standard Webhooks receiver does.
func (s *demoSink) verify(h http.Header, body []byte) error {
	id, ts := h.Get("webhook-id"), h.Get("webhook-timestamp")
	sec, err := strconv.ParseInt(ts, 10, 64)
	if id == "" || err != nil {
		return errors.New("no webhook-id or webhook-timestamp")
	}
	want := notify.Sign(s.secret, nil, id, sec, body)
	for _, got := range strings.Fields(h.Get("webhook-signature")) {
		if hmac.Equal([]byte(got), []byte(want)) {
			return nil
		}
	}
	return errors.New("no v1 signature matches the demo's secret")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printable keeps a log line on one line and free of control characters.
func printable(r rune) rune {
	if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || (r >= 0x2028 && r <= 0x2029) || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) {
		return '?'
	}
	return r
}
