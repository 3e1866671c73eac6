package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/countersign/countersign/internal/canonical"
)

// StatusTooManyStreams is the code of the HTTP error that refuses an event
// stream over its token's bound or the console's.
const StatusTooManyStreams = "too_many_streams"

// DefaultMaxStreams bounds the event streams open at once, every token's
// together.
const DefaultMaxStreams = 1024

// streams counts the event streams open over HTTP: a session's GET stream
// and a subscriptions/listen request (2026-07-28 and later), which both
// stay open for as long as the client keeps them. Each is counted from
// its request's arrival until it ends.
type streams struct {
	perToken, total int
	mu              sync.Mutex
	open            map[string]int // token id → open streams
	all             int
}

// take counts one stream of token; ok is false when the token (tokenFull)
// or the console has its maximum open already.
func (s *streams) take(token string) (ok, tokenFull bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open[token] >= s.perToken {
		return false, true
	}
	if s.all >= s.total {
		return false, false
	}
	s.open[token]++
	s.all++
	return true, false
}

func (s *streams) give(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.all--
	if s.open[token]--; s.open[token] <= 0 {
		delete(s.open, token)
	}
}

func (s *streams) count(token string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open[token]
}

func (s *streams) sum() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.all
}

// isStream reports whether r opens an event stream: a GET, or a POST at
// 2026-07-28 or later whose body (one message or a batch) holds a
// subscriptions/listen request. The body is read (up to the body limit,
// beyond which the SDK refuses the request) and put back.
func isStream(r *http.Request) bool {
	if r.Method == http.MethodGet {
		return true
	}
	if r.Method != http.MethodPost || r.Header.Get("Mcp-Protocol-Version") < firstStatelessVersion || r.Body == nil {
		return false
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, canonical.MaxBodyBytes+1))
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
	if err != nil {
		return false
	}
	type message struct {
		Method string `json:"method"`
	}
	var msgs []message
	body = bytes.TrimSpace(body)
	if len(body) > 0 && body[0] == '[' {
		_ = json.Unmarshal(body, &msgs)
	} else {
		var m message
		_ = json.Unmarshal(body, &m)
		msgs = append(msgs, m)
	}
	for _, m := range msgs {
		if m.Method == "subscriptions/listen" {
			return true
		}
	}
	return false
}

// tooManyStreams refuses an event stream.
func (g *Gateway) tooManyStreams(w http.ResponseWriter, tokenFull bool) {
	w.Header().Set("Retry-After", "30")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusTooManyRequests)
	msg := "Countersign did not open another event stream: this agent's token already has %d open, its limit. " +
		"Close one you no longer use (each session needs one GET stream, a client one subscriptions/listen) and open it again; " +
		"a stream that carries nothing for %s closes by itself."
	max := g.streams.perToken
	if !tokenFull {
		msg = "Countersign did not open another event stream: it holds %d open for all agents together, its limit. Retry later; " +
			"a stream that carries nothing for %s closes by itself."
		max = g.streams.total
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": StatusTooManyStreams,
		"message": fmt.Sprintf(msg, max, g.cfg.StreamIdle), "max_streams": max, "idle_timeout_seconds": int(g.cfg.StreamIdle.Seconds())}})
}

// idleWriter ends a stream's request when nothing was written to it for
// idle: every write (an event, a keep-alive) starts the time again.
type idleWriter struct {
	http.ResponseWriter
	timer *time.Timer
	idle  time.Duration
}

func newIdleWriter(w http.ResponseWriter, idle time.Duration, cancel context.CancelFunc) *idleWriter {
	return &idleWriter{ResponseWriter: w, idle: idle, timer: time.AfterFunc(idle, cancel)}
}

func (w *idleWriter) Write(p []byte) (int, error) {
	w.timer.Reset(w.idle)
	return w.ResponseWriter.Write(p)
}

func (w *idleWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *idleWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *idleWriter) stop() { w.timer.Stop() }
