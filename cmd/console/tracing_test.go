package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/countersign/countersign/examples"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/server"
	"github.com/countersign/countersign/internal/tracing"
)

// otlpReceiver is an OTLP/HTTP trace receiver on 127.0.0.1 that keeps
// every span it is sent.
type otlpReceiver struct {
	*httptest.Server
	mu       sync.Mutex
	spans    []*tracepb.Span
	services []string
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "want a protobuf POST to /v1/traces", http.StatusBadRequest)
			return
		}
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		var msg coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(b, &msg)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range msg.ResourceSpans {
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.Key == "service.name" {
					r.services = append(r.services, kv.Value.GetStringValue())
				}
			}
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *otlpReceiver) named(prefix string) []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range r.spans {
		if strings.HasPrefix(s.Name, prefix) {
			out = append(out, s)
		}
	}
	return out
}

func attr(s *tracepb.Span, key string) string {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return anyValue(kv.Value)
		}
	}
	return ""
}

func anyValue(v *commonpb.AnyValue) string {
	if a := v.GetArrayValue(); a != nil {
		var parts []string
		for _, x := range a.Values {
			parts = append(parts, anyValue(x))
		}
		return strings.Join(parts, ",")
	}
	if s, ok := v.Value.(*commonpb.AnyValue_StringValue); ok {
		return s.StringValue
	}
	return v.String()
}

// TestTracesOfOneAgentStep: with OTEL_EXPORTER_OTLP_ENDPOINT set, an agent's
// submission carrying a W3C traceparent is one trace at an OTLP/HTTP
// receiver: the request's span continues the agent's, the store write is
// its child, and the webhook notification is sent in a child of the write
// and carries the trace to the receiver in its own traceparent header.
// Spans name the call and its tool, never its target or arguments.
func TestTracesOfOneAgentStep(t *testing.T) {
	otlp := newOTLPReceiver(t)
	var (
		hookMu      sync.Mutex
		traceparent []string
	)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hookMu.Lock()
		traceparent = append(traceparent, r.Header.Get("traceparent"))
		hookMu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer hook.Close()
	env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": otlp.URL, "OTEL_SERVICE_NAME": "countersign-test",
		"HOOK_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}
	tracer, err := tracing.FromEnv(func(k string) string { return env[k] })
	if err != nil || tracer == nil {
		t.Fatalf("FromEnv = %v, %v; want a tracer", tracer, err)
	}
	data := t.TempDir()
	toolsFile := filepath.Join(data, "tools.yaml")
	section := `
notifications:
  channels:
    hook: {type: webhook, url: "` + hook.URL + `", secret: {env: HOOK_SECRET}, events: [call.submitted]}
  routes:
    - {tools: ["*"], notify: [hook]}
`
	if err := os.WriteFile(toolsFile, append(append([]byte(nil), examples.ToolsYAML...), section...), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := openApp(data, "", toolsFile, &notifySource{publicURL: "https://cs.example.com", getenv: func(k string) string { return env[k] }},
		slog.New(slog.DiscardHandler), tracer)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx := context.Background()
	_, secret, err := a.accounts.CreateToken(ctx, "agent:billing-bot", "payments-host", "", "cli:tester", audit.ChannelCLI)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{Queue: a.queue, Accounts: a.accounts, Audit: a.db, Ping: a.db.Ping, Keys: a.keys,
		Logger: slog.New(slog.DiscardHandler), Tracer: tracer})
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(srv.Handler())
	defer api.Close()

	const (
		agentTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
		agentSpan  = "00f067aa0ba902b7"
		target     = "invoice:INV-424242"
	)
	req, _ := http.NewRequest(http.MethodPost, api.URL+"/api/v1/calls", bytes.NewReader([]byte(
		`{"tool":"payments.refund","target":"`+target+`","args":{"amount_minor":98765,"currency":"USD","reason_code":"duplicate"}}`)))
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+agentTrace+"-"+agentSpan+"-01")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode/100 != 2 {
		t.Fatalf("submit = %d %s", res.StatusCode, body)
	}
	d, _ := a.dispatcher()
	if n, err := d.Dispatch(ctx); err != nil || n != 1 {
		t.Fatalf("Dispatch = %d, %v; want the submission's notification", n, err)
	}
	if err := tracer.Shutdown(ctx); err != nil {
		t.Fatalf("flush the traces: %v", err)
	}

	reqSpans, writes, sends := otlp.named("POST /api/v1/calls"), otlp.named("store.write"), otlp.named("notify.send hook")
	if len(reqSpans) != 1 || len(writes) < 1 || len(sends) != 1 {
		t.Fatalf("spans: %d requests, %d writes, %d sends; want 1, at least 1, 1", len(reqSpans), len(writes), len(sends))
	}
	rs := reqSpans[0]
	if got := hex.EncodeToString(rs.TraceId); got != agentTrace {
		t.Errorf("request span's trace %s, want the agent's %s", got, agentTrace)
	}
	if got := hex.EncodeToString(rs.ParentSpanId); got != agentSpan {
		t.Errorf("request span's parent %s, want the agent's span %s", got, agentSpan)
	}
	callID := attr(rs, tracing.AttrCallID)
	if !strings.HasPrefix(callID, "call_") || attr(rs, tracing.AttrTool) != "payments.refund" || !strings.Contains(string(body), callID) {
		t.Errorf("request span names call %q tool %q; want the submitted call (%s) and payments.refund", callID, attr(rs, tracing.AttrTool), body)
	}
	if attr(rs, "http.response.status_code") == "" || attr(rs, "http.route") != "/api/v1/calls" {
		t.Errorf("request span attributes %v", rs.Attributes)
	}
	var write *tracepb.Span
	for _, w := range writes {
		if attr(w, tracing.AttrCallID) == callID {
			write = w
		}
	}
	if write == nil || !bytes.Equal(write.TraceId, rs.TraceId) || !bytes.Equal(write.ParentSpanId, rs.SpanId) || attr(write, tracing.AttrTool) != "payments.refund" {
		t.Fatalf("store write span %v; want a child of the request naming the call and its tool", write)
	}
	send := sends[0]
	if !bytes.Equal(send.TraceId, rs.TraceId) || !bytes.Equal(send.ParentSpanId, write.SpanId) {
		t.Errorf("notification span: trace %x parent %x; want trace %s, parent the write %x", send.TraceId, send.ParentSpanId, agentTrace, write.SpanId)
	}
	hookMu.Lock()
	got := traceparent
	hookMu.Unlock()
	if want := "00-" + agentTrace + "-" + hex.EncodeToString(send.SpanId) + "-01"; len(got) != 1 || got[0] != want {
		t.Errorf("webhook traceparent %q, want %q", got, want)
	}
	otlp.mu.Lock()
	defer otlp.mu.Unlock()
	if len(otlp.services) == 0 || otlp.services[0] != "countersign-test" {
		t.Errorf("service.name %v, want countersign-test", otlp.services)
	}
	// Nothing of the call's target or arguments reaches the traces.
	for _, s := range otlp.spans {
		all := s.Name
		for _, kv := range s.Attributes {
			all += " " + kv.Key + "=" + anyValue(kv.Value)
		}
		for _, secretPart := range []string{"INV-424242", "98765", "duplicate", secret} {
			if strings.Contains(all, secretPart) {
				t.Errorf("span %s carries %q: %s", s.Name, secretPart, all)
			}
		}
	}
}

// TestTracesOffWithoutEndpoint: without an OTLP endpoint (or with the SDK
// disabled, or the exporter none) tracing is off; a protocol other than
// OTLP over HTTP is refused.
func TestTracesOffWithoutEndpoint(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		on   bool
		fail string
	}{
		{env: map[string]string{}},
		{env: map[string]string{"OTEL_SERVICE_NAME": "x"}},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"}},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"}},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, on: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, fail: "OTLP over HTTP only"},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "zipkin"}, fail: "otlp only"},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "127.0.0.1:4318"}, fail: "not an http or https URL"},
	} {
		tr, err := tracing.FromEnv(func(k string) string { return tc.env[k] })
		switch {
		case tc.fail != "":
			if err == nil || !strings.Contains(err.Error(), tc.fail) {
				t.Errorf("FromEnv(%v) = %v; want an error saying %q", tc.env, err, tc.fail)
			}
		case err != nil || (tr != nil) != tc.on:
			t.Errorf("FromEnv(%v) = %v, %v; want on=%v", tc.env, tr, err, tc.on)
		}
		tr.Shutdown(context.Background())
	}
}
