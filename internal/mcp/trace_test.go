package mcp

import (
	"context"
	"net/http"
	"testing"

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
