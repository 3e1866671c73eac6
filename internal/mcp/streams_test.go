package mcp_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/internal/mcp"
)

// listening connects a client of the protocol without sessions that
// listens for tools/list_changed: it keeps a subscriptions/listen stream
// open.
func listening(url, token string) (*sdk.ClientSession, error) {
	tr := &sdk.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearer{token, http.DefaultTransport}}}
	return sdk.NewClient(&sdk.Implementation{Name: "listener", Version: "1"}, &sdk.ClientOptions{
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) {},
	}).Connect(context.Background(), tr, &sdk.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
}

// TestHTTPStreamsPerTokenAreCapped: one agent token keeps at most its
// bound of event streams open (subscriptions/listen and a session's GET
// stream alike); one more is refused with too_many_streams, while another
// token is still served, and a closed stream gives its place back.
func TestHTTPStreamsPerTokenAreCapped(t *testing.T) {
	e, url := httpEnv(t, envOptions{trust: true, maxSessions: 2})
	var open []*sdk.ClientSession
	for range 2 {
		cs, err := listening(url, deskToken)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		open = append(open, cs)
	}
	waitFor(t, "two streams counted", func() bool { return e.gw.StreamsOf(desk.TokenID) == 2 })

	// A third subscriptions/listen, or a session's GET stream, is refused
	// with a 429 and the code.
	for _, method := range []string{http.MethodPost, http.MethodGet} {
		resp, body := stream(t, method, url, deskToken)
		if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, `"code":"`+mcp.StatusTooManyStreams+`"`) ||
			!strings.Contains(body, `"max_streams":2`) {
			t.Fatalf("%s stream over the bound: %d %s", method, resp.StatusCode, body)
		}
	}
	if n := e.gw.StreamsOf(desk.TokenID); n != 2 {
		t.Fatalf("%d streams counted after the refusals, want 2", n)
	}

	// Another token of the same actor is served.
	other, err := listening(url, deskTwo)
	if err != nil {
		t.Fatalf("another token's stream: %v", err)
	}
	defer other.Close()
	waitFor(t, "the other token's stream counted", func() bool { return e.gw.StreamsOf("tok_two") == 1 })
	if resp, body := stream(t, http.MethodPost, url, deskTwo); resp.StatusCode != http.StatusOK {
		t.Fatalf("the other token's second stream: %d %s", resp.StatusCode, body)
	}
	if res, err := other.ListTools(context.Background(), nil); err != nil || len(res.Tools) == 0 {
		t.Fatalf("another token's requests: %v", err)
	}

	// A stream its client closes gives its place back.
	open[0].Close()
	waitFor(t, "the closed stream's place given back", func() bool { return e.gw.StreamsOf(desk.TokenID) == 1 })
	cs, err := listening(url, deskToken)
	if err != nil {
		t.Fatalf("a stream in the freed place: %v", err)
	}
	cs.Close()
}

// TestHTTPStreamsInAllAreCapped: the console keeps at most MaxStreams event
// streams open, every token's together; one more is refused with
// too_many_streams naming the console's bound, whichever token asks, even
// one under its own bound, and a closed stream gives its place back.
func TestHTTPStreamsInAllAreCapped(t *testing.T) {
	e, url := httpEnv(t, envOptions{trust: true, maxSessions: 2, maxStreams: 2})
	var open []*sdk.ClientSession
	for _, token := range []string{deskToken, deskTwo} {
		cs, err := listening(url, token)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		open = append(open, cs)
	}
	waitFor(t, "a stream of each token counted", func() bool {
		return e.gw.StreamsOf(desk.TokenID) == 1 && e.gw.StreamsOf("tok_two") == 1
	})
	for _, token := range []string{deskToken, deskTwo} {
		resp, body := stream(t, http.MethodPost, url, token)
		if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, `"code":"`+mcp.StatusTooManyStreams+`"`) ||
			!strings.Contains(body, `"max_streams":2`) || !strings.Contains(body, "all agents together") {
			t.Fatalf("a second stream of %s with the console full: %d %s", token, resp.StatusCode, body)
		}
	}
	if a, b := e.gw.StreamsOf(desk.TokenID), e.gw.StreamsOf("tok_two"); a != 1 || b != 1 {
		t.Fatalf("streams counted after the refusals: %d and %d, want 1 and 1", a, b)
	}
	open[1].Close()
	waitFor(t, "the closed stream's place given back", func() bool { return e.gw.StreamsOf("tok_two") == 0 })
	cs, err := listening(url, deskToken)
	if err != nil {
		t.Fatalf("a stream in the freed place: %v", err)
	}
	cs.Close()
}

// TestHTTPIdleStreamsClose: a stream that carries nothing for the idle
// limit is closed, and its place given back.
func TestHTTPIdleStreamsClose(t *testing.T) {
	e, url := httpEnv(t, envOptions{trust: true, maxSessions: 2, sessionTimeout: 300 * time.Millisecond})
	cs, err := listening(url, deskToken)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	waitFor(t, "the stream counted", func() bool { return e.gw.StreamsOf(desk.TokenID) == 1 })
	waitFor(t, "the idle stream closed", func() bool { return e.gw.StreamsOf(desk.TokenID) == 0 })
}

// stream opens an event stream by hand (a subscriptions/listen POST, or
// a GET) and reads what comes first.
func stream(t *testing.T, method, url, token string) (*http.Response, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader(`{"jsonrpc":"2.0","id":7,"method":"subscriptions/listen","params":{"_meta":{` +
			`"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}},` +
			`"notifications":{"toolsListChanged":true}}}`)
	}
	req, _ := http.NewRequestWithContext(ctx, method, url, body)
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	if method == http.MethodPost {
		req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
		req.Header.Set("Mcp-Method", "subscriptions/listen")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b := make([]byte, 4096)
	n, _ := resp.Body.Read(b)
	return resp, string(b[:n])
}
