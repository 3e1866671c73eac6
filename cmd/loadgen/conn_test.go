package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// countingServer is an httptest server on 127.0.0.1 that counts the
// connections it accepted.
func countingServer(t *testing.T, h http.Handler) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

// TestHTTPConnReadsEveryAnswerOnOneConnection: answers with a length,
// chunked answers (a flushed page), and answers with no body are read
// whole, one after the other on one kept-alive connection; the headers
// given are sent; a cookie the server sets is sent back, and replaced
// when it is set again.
func TestHTTPConnReadsEveryAnswerOnOneConnection(t *testing.T) {
	big := strings.Repeat("<p>a call's page</p>", 2000)
	srv, conns := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got := r.Header.Get("Authorization"); got != "Bearer tok" {
			http.Error(w, "no token: "+got, http.StatusUnauthorized)
			return
		}
		switch r.URL.Path {
		case "/length":
			body, _ := io.ReadAll(r.Body)
			w.Header().Set("Set-Cookie", "s=one; Path=/; HttpOnly")
			fmt.Fprintf(w, "%s %s %s", r.Method, r.Header.Get("Content-Type"), body)
		case "/chunked":
			w.Write([]byte(big[:len(big)/2]))
			w.(http.Flusher).Flush()
			w.Write([]byte(big[len(big)/2:]))
		case "/cookie":
			c, _ := r.Cookie("s")
			if c != nil && c.Value == "one" {
				w.Header().Set("Set-Cookie", "s=two; Path=/")
			}
			fmt.Fprint(w, r.Header.Get("Cookie"))
		case "/empty":
			w.WriteHeader(http.StatusSeeOther)
		}
	}))
	h, err := newHTTPConn(context.Background(), srv.URL, "Authorization: Bearer tok\r\n", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	check := func(method, path string, body []byte, wantStatus int, want string) {
		t.Helper()
		status, got, err := h.do(method, path, "application/json", body, "", 0)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		if status != wantStatus || string(got) != want {
			t.Fatalf("%s %s: %d %.80q, want %d %.80q", method, path, status, got, wantStatus, want)
		}
	}
	for i := 0; i < 3; i++ {
		check(http.MethodPost, "/length", []byte(`{"n":1}`), 200, `POST application/json {"n":1}`)
		check(http.MethodGet, "/chunked", nil, 200, big)
		check(http.MethodGet, "/empty", nil, 303, "")
	}
	check(http.MethodGet, "/cookie", nil, 200, "s=one")
	check(http.MethodGet, "/cookie", nil, 200, "s=two")
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for 11 requests, want 1", n)
	}
}

// TestHTTPConnDialsAgain: an answer with Connection: close closes the
// connection and the next request dials a new one; a kept-alive connection
// the server closed while idle is noticed by the next request, which is
// sent again on a new connection and answered.
func TestHTTPConnDialsAgain(t *testing.T) {
	srv, conns := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/close" {
			w.Header().Set("Connection", "close")
		}
		fmt.Fprint(w, r.URL.Path)
	}))
	h, err := newHTTPConn(context.Background(), srv.URL, "", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for i, path := range []string{"/close", "/a", "/b"} {
		status, got, err := h.do(http.MethodGet, path, "", nil, "", 0)
		if err != nil || status != 200 || string(got) != path {
			t.Fatalf("request %d: %d %q %v", i, status, got, err)
		}
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections after an answer that closed its connection, want 2", n)
	}
	// The server drops its idle connections.
	srv.CloseClientConnections()
	time.Sleep(50 * time.Millisecond)
	status, got, err := h.do(http.MethodGet, "/after", "", nil, "", 0)
	if err != nil || status != 200 || string(got) != "/after" {
		t.Fatalf("after the server closed the idle connection: %d %q %v", status, got, err)
	}
	if n := conns.Load(); n != 3 {
		t.Errorf("%d connections, want 3", n)
	}
}

// TestHTTPConnStopsWithItsContext: a request waiting for an answer (a
// long-poll) returns the context's error as soon as the context ends, and
// later requests do not dial.
func TestHTTPConnStopsWithItsContext(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	srv, conns := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	ctx, cancel := context.WithCancel(context.Background())
	h, err := newHTTPConn(ctx, srv.URL, "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, _, err = h.do(http.MethodGet, "/wait", "", nil, "", time.Minute)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 10*time.Second { // a failure bound, not a measurement
		t.Fatalf("returned %v after its context ended", d)
	}
	if _, _, err := h.do(http.MethodGet, "/again", "", nil, "", 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("after the context ended: %v, want context.Canceled", err)
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections, want 1", n)
	}
}

// TestHTTPConnAllocations: a request and its answer reuse the
// connection's buffers: at most one allocation each (net/http's client
// makes some sixty, and a goroutine's worth of work per connection).
func TestHTTPConnAllocations(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// A server with buffers of its own only: it reads each request's
	// header and answers with the same bytes.
	answer := []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 26\r\n\r\n{\"id\":\"call_a\",\"status\":1}")
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadSlice('\n')
			if err != nil {
				return
			}
			if len(line) <= 2 {
				if _, err := c.Write(answer); err != nil {
					return
				}
			}
		}
	}()
	h, err := newHTTPConn(context.Background(), "http://"+ln.Addr().String(), "Authorization: Bearer tok\r\n", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	get := func() {
		status, body, err := h.do(http.MethodGet, "/api/v1/calls/call_a?wait=60s", "", nil, "", 0)
		if err != nil || status != 200 || !json.Valid(body) {
			t.Fatalf("%d %q %v", status, body, err)
		}
	}
	get() // dials
	n := testing.AllocsPerRun(200, get)
	t.Logf("%.1f allocations per request", n)
	if n > 1 {
		t.Errorf("%.1f allocations per request, want at most 1", n)
	}
}
