package mcp

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"go.opentelemetry.io/otel/trace"
)

type headerSeen struct{ h http.Header }

func (s *headerSeen) RoundTrip(req *http.Request) (*http.Response, error) {
	s.h = req.Header.Clone()
	return &http.Response{StatusCode: http.StatusAccepted, Body: http.NoBody, Request: req}, nil
}

// TestUpstreamCallCarriesTraceparent: a request to an HTTP upstream made
// within a traced agent request carries that trace's W3C traceparent, and
// one made outside any trace carries none.
func TestUpstreamCallCarriesTraceparent(t *testing.T) {
	seen := &headerSeen{}
	tap := &httpTap{base: seen, headers: http.Header{}}
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	for _, tc := range []struct {
		ctx  context.Context
		want string
	}{
		{ctx, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		{context.Background(), ""},
	} {
		req, _ := http.NewRequestWithContext(tc.ctx, http.MethodPost, "http://127.0.0.1:1/mcp", http.NoBody)
		if _, err := tap.RoundTrip(req); err != nil {
			t.Fatal(err)
		}
		if got := seen.h.Get("traceparent"); got != tc.want {
			t.Errorf("traceparent %q, want %q", got, tc.want)
		}
	}
}

// TestUpstreamCallCarriesTraceInMeta: over any transport (here in memory,
// as over stdio), a traced call carries the trace's traceparent in the
// tools/call request's _meta, and its arguments are still the bytes given;
// an untraced call carries none.
func TestUpstreamCallCarriesTraceInMeta(t *testing.T) {
	srv := sdk.NewServer(&sdk.Implementation{Name: "probe", Version: "1"}, nil)
	var (
		mu   sync.Mutex
		meta []sdk.Meta
		args []string
	)
	srv.AddTool(&sdk.Tool{Name: "probe", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			mu.Lock()
			meta = append(meta, req.Params.Meta)
			args = append(args, string(req.Params.Arguments))
			mu.Unlock()
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "ok"}}}, nil
		})
	u := NewUpstream("probe", InMemory(srv), UpstreamOptions{Logger: quietLogger()})
	startUpstream(t, u)
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	traced := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	for _, ctx := range []context.Context{traced, context.Background()} {
		if _, err := u.Call(ctx, "probe", []byte(`{"n":1}`)); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(meta) != 2 {
		t.Fatalf("%d calls reached the upstream, want 2", len(meta))
	}
	if len(meta[0]) != len(meta[1])+1 {
		t.Errorf("traced call's _meta %v, want the untraced call's %v and traceparent", meta[0], meta[1])
	}
	if got := meta[0]["traceparent"]; got != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" {
		t.Errorf("traced call's _meta.traceparent = %v", got)
	}
	if _, ok := meta[1]["traceparent"]; ok {
		t.Errorf("untraced call's _meta = %v, want no traceparent", meta[1])
	}
	for _, a := range args {
		if a != `{"n":1}` {
			t.Errorf("arguments reached the upstream as %s", a)
		}
	}
}
