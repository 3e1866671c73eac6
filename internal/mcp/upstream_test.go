package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/examples/mcpdemo"
	"github.com/countersign/countersign/internal/tools"
)

var (
	buildOnce sync.Once
	demoBin   string
	buildErr  error
)

// demoBinary builds the example upstream once per test run.
func demoBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "mcp-demo-")
		if err != nil {
			buildErr = err
			return
		}
		demoBin = filepath.Join(dir, "mcp-demo")
		out, err := exec.Command("go", "build", "-o", demoBin, "github.com/countersign/countersign/examples/mcpdemo/cmd/mcp-demo").CombinedOutput()
		if err != nil {
			buildErr = errors.New(string(out))
		}
	})
	if buildErr != nil {
		t.Fatalf("build the example upstream: %v", buildErr)
	}
	return demoBin
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))
}

// startUpstream runs u until the test ends and waits until it is
// connected.
func startUpstream(t *testing.T, u *Upstream) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { u.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-u.Connected():
	case <-time.After(30 * time.Second):
		t.Fatalf("upstream %s did not connect", u.Name)
	}
}

// httpDemo serves the example upstream over Streamable HTTP on 127.0.0.1.
func httpDemo(t *testing.T, opt mcpdemo.Options) string {
	t.Helper()
	server := mcpdemo.NewServer(opt)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var seen atomic.Value
	h := sdk.NewStreamableHTTPHandler(func(r *http.Request) *sdk.Server {
		seen.Store(r.Header.Get("X-Demo-Key"))
		return server
	}, nil)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Demo-Key") != "k-123" {
			http.Error(w, "missing key", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String() + "/mcp"
}

// upstreams returns the example upstream over each transport.
func upstreams(t *testing.T) map[string]func(context.Context) (sdk.Transport, error) {
	key := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(key, []byte("k-123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return map[string]func(context.Context) (sdk.Transport, error){
		"in-memory": InMemory(mcpdemo.NewServer(mcpdemo.Options{})),
		"stdio":     FromConfig(tools.Upstream{Name: "demo", Command: []string{demoBinary(t)}}, os.Getenv, quietLogger()),
		"http": FromConfig(tools.Upstream{Name: "demo", URL: httpDemo(t, mcpdemo.Options{}),
			Headers: []tools.Header{{Name: "X-Demo-Key", File: key}}}, os.Getenv, quietLogger()),
	}
}

func TestUpstreamRawAcrossTransports(t *testing.T) {
	for name, dial := range upstreams(t) {
		t.Run(name, func(t *testing.T) {
			u := NewUpstream("demo", dial, UpstreamOptions{Logger: quietLogger()})
			startUpstream(t, u)
			listed := map[string]ListedTool{}
			for _, lt := range u.Tools() {
				listed[lt.Name] = lt
			}
			for _, want := range []string{"add", "scale", "create_order", "echo", "big_result", "fail", "anything"} {
				if _, ok := listed[want]; !ok {
					t.Errorf("tool %s not listed", want)
				}
			}
			// The schema is the upstream's own bytes (modulo the
			// transport's compaction), with its member order.
			if got := compact(t, listed["create_order"].InputSchema); !strings.HasPrefix(got, `{"type":"object","properties":{"customer"`) {
				t.Errorf("create_order schema = %s", got)
			}
			if got := compact(t, listed["add"].Annotations); got != `{"idempotentHint":false,"openWorldHint":false,"readOnlyHint":true}` {
				t.Errorf("add annotations = %s", got)
			}

			args := []byte(`{"inner":{"k":-9007199254740991},"n":9007199254740991,"s":"caf\u00e9","x":2.5e-7}`)
			res, err := u.Call(context.Background(), "echo", args)
			if err != nil {
				t.Fatal(err)
			}
			var got struct {
				StructuredContent json.RawMessage `json:"structuredContent"`
				Content           []struct{ Text string }
			}
			if err := json.Unmarshal(res.Raw, &got); err != nil {
				t.Fatal(err)
			}
			if string(got.StructuredContent) != string(args) || got.Content[0].Text != string(args) {
				t.Errorf("the upstream received %s / %s, want exactly %s", got.StructuredContent, got.Content[0].Text, args)
			}

			res, err = u.Call(context.Background(), "big_result", []byte(`{}`))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(res.Raw, []byte(`"balance_minor":123456789012345678901234567890`)) ||
				!bytes.Contains(res.Raw, []byte(`18446744073709551615`)) {
				t.Errorf("large integers lost: %s", res.Raw)
			}

			res, err = u.Call(context.Background(), "fail", []byte(`{}`))
			if err != nil || !res.IsError {
				t.Errorf("fail: %+v, %v; want an error result", res, err)
			}
		})
	}
}

func compact(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	return b.String()
}

// TestUpstreamReconnects: a dropped session and failing dials are retried
// with backoff until the upstream is back, and the tools are listed again.
func TestUpstreamReconnects(t *testing.T) {
	server := mcpdemo.NewServer(mcpdemo.Options{})
	var dials atomic.Int64
	inner := InMemory(server)
	dial := func(ctx context.Context) (sdk.Transport, error) {
		if n := dials.Add(1); n == 2 || n == 3 {
			return nil, errors.New("refused")
		}
		return inner(ctx)
	}
	listings := make(chan int, 10)
	u := NewUpstream("demo", dial, UpstreamOptions{Logger: quietLogger(), OnTools: func(ts []ListedTool) { listings <- len(ts) }})
	startUpstream(t, u)
	<-listings
	for ss := range server.Sessions() {
		ss.Close()
	}
	select {
	case n := <-listings:
		if n == 0 {
			t.Errorf("relisted no tools")
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("did not reconnect after %d dials", dials.Load())
	}
	if d := dials.Load(); d < 4 {
		t.Errorf("%d dials, want the two failures retried", d)
	}
	if _, err := u.Call(context.Background(), "add", []byte(`{"a":1,"b":2}`)); err != nil {
		t.Errorf("call after reconnecting: %v", err)
	}
}

// TestUpstreamListChanged: a tool added while connected is listed again.
func TestUpstreamListChanged(t *testing.T) {
	server := mcpdemo.NewServer(mcpdemo.Options{})
	listings := make(chan []ListedTool, 10)
	u := NewUpstream("demo", InMemory(server), UpstreamOptions{Logger: quietLogger(), OnTools: func(ts []ListedTool) { listings <- ts }})
	startUpstream(t, u)
	<-listings
	server.AddTool(&sdk.Tool{Name: "late", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{}, nil
		})
	select {
	case ts := <-listings:
		found := false
		for _, lt := range ts {
			found = found || lt.Name == "late"
		}
		if !found {
			t.Errorf("the new tool is not in the new listing")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no listing after the tools changed")
	}
}

func TestUpstreamNotConnected(t *testing.T) {
	u := NewUpstream("demo", func(context.Context) (sdk.Transport, error) { return nil, errors.New("down") }, UpstreamOptions{})
	if _, err := u.Call(context.Background(), "add", []byte(`{}`)); !errors.Is(err, ErrNotConnected) {
		t.Errorf("Call = %v, want ErrNotConnected", err)
	}
}

func TestHeaderFromEnvMissing(t *testing.T) {
	dial := FromConfig(tools.Upstream{Name: "x", URL: "http://127.0.0.1:1/mcp", Headers: []tools.Header{{Name: "Authorization", Env: "NOPE_TOKEN"}}},
		func(string) string { return "" }, quietLogger())
	if _, err := dial(context.Background()); err == nil || !strings.Contains(err.Error(), "NOPE_TOKEN") {
		t.Errorf("dial = %v, want the missing variable named", err)
	}
}
