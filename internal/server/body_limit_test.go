package server

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/problem"
)

// A client that declares a body over the limit and asks to be told before
// sending it (Expect: 100-continue, as curl does for large bodies) reads a
// 413 too_large every time, never "100 Continue" and never a reset.
func TestLargeBodyRefusedBeforeContinue(t *testing.T) {
	st := startAPIStack(t)
	token := st.token("agent:billing-bot", "payments-host")
	addr := strings.TrimPrefix(st.url, "http://")
	for _, path := range []string{"/api/v1/calls", "/login"} {
		for try := range 8 {
			size := 3<<20 + try*(1<<20)
			status, body := expectContinue(t, addr, path, token, size)
			if status != http.StatusRequestEntityTooLarge {
				t.Fatalf("%s try %d (%d bytes): status %d, want 413; body %q", path, try, size, status, body)
			}
			var e struct {
				Error problem.Error `json:"error"`
			}
			if path == "/api/v1/calls" {
				if err := json.Unmarshal(body, &e); err != nil || e.Error.Code != "too_large" {
					t.Fatalf("%s try %d: body %q (%v), want the error too_large", path, try, body, err)
				}
			}
		}
	}
	// A body within the limit still reaches the handler.
	status, _ := expectContinue(t, addr, "/api/v1/calls", token, canonical.MaxBodyBytes)
	if status == http.StatusRequestEntityTooLarge {
		t.Errorf("a body of exactly the limit was refused before it was read")
	}
}

// expectContinue sends the header of a POST of size bytes with Expect:
// 100-continue and reads the first answer. When the server asks for the
// body (100 Continue), it sends it, as a client must, and reads the final
// answer; the status returned is then 100, which the caller refuses.
func expectContinue(t *testing.T, addr, path, token string, size int) (int, []byte) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n"+
		"Content-Length: %d\r\nExpect: 100-continue\r\n\r\n", path, addr, token, size)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	if resp.StatusCode == http.StatusContinue {
		// The server is reading the body: send it, so that it answers.
		body := append([]byte(`{"tool":"payments.refund","target":"t","args":{},"rationale":"`), strings.Repeat("x", size)...)
		conn.Write(body[:size])
		return http.StatusContinue, nil
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the body of the %d: %v", resp.StatusCode, err)
	}
	if resp.StatusCode == http.StatusRequestEntityTooLarge {
		if !resp.Close {
			t.Errorf("the 413 does not close the connection (Connection: %q)", resp.Header.Get("Connection"))
		}
		// The server closes its side cleanly: the client reads the end of
		// the stream, not a reset.
		if n, err := br.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("after the 413: read %d bytes, %v; want io.EOF", n, err)
		}
	}
	return resp.StatusCode, b
}
