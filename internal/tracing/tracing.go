// Package tracing exports OpenTelemetry traces of the console's work over
// OTLP/HTTP: a span per HTTP request, per store write, per notification
// sent, with the W3C traceparent of an agent's request carried into the
// notifications its call causes and into the MCP upstream call it makes, so
// one agent step is one trace.
//
// It is off unless the standard OTEL_* environment variables configure an
// OTLP endpoint (FromEnv). Off, the console holds a nil *Tracer, whose
// methods do nothing and allocate nothing, and the server installs no
// middleware. It imports no transport: the server makes its middleware of
// StartRequest.
//
// Spans carry a call's id and tool, never its target or arguments, nor any
// header, body or query: what an agent proposes may be confidential, and a
// tracing backend is read by more people than the console.
package tracing

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Attribute keys of Countersign's spans.
const (
	AttrCallID  = "countersign.call.id"
	AttrTool    = "countersign.tool"
	AttrEvent   = "countersign.notification.event"
	AttrChannel = "countersign.notification.channel"
	AttrKind    = "countersign.notification.kind"
)

// maxLinks bounds the notifications whose originating trace is remembered
// until they are sent.
const maxLinks = 4096

// Tracer makes Countersign's spans. A nil *Tracer traces nothing.
type Tracer struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
	prop     propagation.TraceContext

	mu    sync.Mutex
	links map[string]trace.SpanContext // notification event id → the write that enqueued it
	order []string                     // event ids, oldest first, for eviction
}

// FromEnv returns the tracer the standard OpenTelemetry variables
// configure, or nil (off) when they configure no OTLP endpoint:
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (the full URL) or
// OTEL_EXPORTER_OTLP_ENDPOINT (the base URL; /v1/traces is added), with
// OTEL_EXPORTER_OTLP_HEADERS, OTEL_SERVICE_NAME (default "countersign"),
// OTEL_TRACES_EXPORTER (otlp or none) and OTEL_SDK_DISABLED. Only OTLP
// over HTTP with protobuf is spoken; OTEL_EXPORTER_OTLP_PROTOCOL naming
// another is refused. The SDK reads the rest itself (OTEL_TRACES_SAMPLER,
// OTEL_BSP_*, OTEL_EXPORTER_OTLP_TIMEOUT, certificates).
func FromEnv(getenv func(string) string) (*Tracer, error) {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return nil, nil
	}
	switch exp := getenv("OTEL_TRACES_EXPORTER"); exp {
	case "", "otlp":
	case "none":
		return nil, nil
	default:
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: Countersign exports traces with otlp only (or none)", exp)
	}
	if p := cmp.Or(getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), getenv("OTEL_EXPORTER_OTLP_PROTOCOL")); p != "" && p != "http/protobuf" {
		return nil, fmt.Errorf("OTLP protocol %s: Countersign exports OTLP over HTTP only (http/protobuf)", p)
	}
	endpoint := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if endpoint == "" {
		if base := getenv("OTEL_EXPORTER_OTLP_ENDPOINT"); base != "" {
			endpoint = strings.TrimSuffix(base, "/") + "/v1/traces"
		}
	}
	if endpoint == "" {
		return nil, nil
	}
	if u, err := url.Parse(endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("OTLP traces endpoint %q: not an http or https URL", endpoint)
	}
	opts := []otlptracehttp.Option{otlptracehttp.WithEndpointURL(endpoint)}
	if h := cmp.Or(getenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS"), getenv("OTEL_EXPORTER_OTLP_HEADERS")); h != "" {
		headers, err := parseHeaders(h)
		if err != nil {
			return nil, err
		}
		opts = append(opts, otlptracehttp.WithHeaders(headers))
	}
	exp, err := otlptracehttp.New(context.Background(), opts...)
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	name := getenv("OTEL_SERVICE_NAME")
	if name == "" {
		name = "countersign"
	}
	res := resource.NewSchemaless(attribute.String("service.name", name))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return newTracer(tp), nil
}

// New returns a tracer that hands its spans to tp (tests give it an
// in-memory or synchronous processor).
func New(tp *sdktrace.TracerProvider) *Tracer { return newTracer(tp) }

func newTracer(tp *sdktrace.TracerProvider) *Tracer {
	return &Tracer{provider: tp, tracer: tp.Tracer("github.com/countersign/countersign"), links: map[string]trace.SpanContext{}}
}

// parseHeaders reads OTEL_EXPORTER_OTLP_HEADERS: key=value pairs separated
// by commas, values URL-encoded.
func parseHeaders(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, errors.New("OTEL_EXPORTER_OTLP_HEADERS: want key=value pairs separated by commas")
		}
		val, err := url.QueryUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_HEADERS: %s: %w", k, err)
		}
		out[k] = val
	}
	return out, nil
}

// Shutdown sends the spans not yet exported and stops.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// StartRequest starts the server span of a request, continuing the trace
// of its traceparent header, named for its method and route (the route's
// pattern, never the path a client sent). The returned function ends it
// with the status it was answered with and, when the route names one, the
// call's id.
func (t *Tracer) StartRequest(req *http.Request, route string) (context.Context, func(status int, callID string)) {
	if t == nil {
		return req.Context(), noRequestEnd
	}
	ctx := t.prop.Extract(req.Context(), propagation.HeaderCarrier(req.Header))
	ctx, span := t.tracer.Start(ctx, req.Method+" "+route, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.request.method", req.Method), attribute.String("http.route", route)))
	return ctx, func(status int, callID string) {
		if callID != "" {
			span.SetAttributes(attribute.String(AttrCallID, callID))
		}
		span.SetAttributes(attribute.Int("http.response.status_code", status))
		if status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(status))
		}
		span.End()
	}
}

func noRequestEnd(int, string) {}

// StartWrite starts the span of a store write. The returned function ends
// it with the calls and tools the write changed, the notifications it
// enqueued and its error; the calls and tools are set on the enclosing
// request's span too. A committed write's notifications are sent as
// children of its span.
func (t *Tracer) StartWrite(ctx context.Context) (context.Context, func(calls, tools, events []string, err error)) {
	if t == nil {
		return ctx, noEnd
	}
	parent := trace.SpanFromContext(ctx)
	ctx, span := t.tracer.Start(ctx, "store.write", trace.WithSpanKind(trace.SpanKindInternal))
	return ctx, func(calls, tools, events []string, err error) {
		defer span.End()
		var attrs []attribute.KeyValue
		if len(calls) > 0 {
			attrs = append(attrs, attribute.String(AttrCallID, calls[0]))
			if len(calls) > 1 {
				attrs = append(attrs, attribute.StringSlice(AttrCallID+"s", calls))
			}
		}
		if len(tools) > 0 {
			attrs = append(attrs, attribute.String(AttrTool, tools[0]))
		}
		span.SetAttributes(attrs...)
		if parent.IsRecording() {
			parent.SetAttributes(attrs...)
		}
		if err != nil {
			span.SetStatus(codes.Error, "the write did not commit")
			return
		}
		t.remember(events, span.SpanContext())
	}
}

func noEnd(_, _, _ []string, _ error) {}

// remember keeps the span each notification was enqueued under, the
// oldest forgotten first beyond maxLinks.
func (t *Tracer) remember(events []string, sc trace.SpanContext) {
	if len(events) == 0 || !sc.IsValid() {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range events {
		if _, ok := t.links[id]; !ok {
			t.order = append(t.order, id)
		}
		t.links[id] = sc
	}
	for len(t.order) > maxLinks {
		delete(t.links, t.order[0])
		t.order = t.order[1:]
	}
}

// StartSend starts the span of one attempt to send a notification: a child
// of the store write that enqueued it when this process committed that
// write and still remembers it, else the root of its own trace. The
// returned function ends it with the attempt's error.
func (t *Tracer) StartSend(ctx context.Context, eventID, channel, kind string) (context.Context, func(error)) {
	if t == nil {
		return ctx, noSendEnd
	}
	t.mu.Lock()
	sc, ok := t.links[eventID]
	t.mu.Unlock()
	if ok {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	ctx, span := t.tracer.Start(ctx, "notify.send "+channel, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String(AttrEvent, eventID), attribute.String(AttrChannel, channel), attribute.String(AttrKind, kind)))
	return ctx, func(err error) {
		if err != nil {
			span.SetStatus(codes.Error, "not delivered")
		}
		span.End()
	}
}

func noSendEnd(error) {}

// Traceparent is the W3C traceparent of the span in ctx, "" when ctx holds
// none: for carriers other than HTTP headers (an MCP request's _meta).
func Traceparent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"]
}

// Inject sets the W3C traceparent (and tracestate) of the span in ctx on
// an outgoing request's headers; it sets nothing when ctx holds no span.
func Inject(ctx context.Context, h http.Header) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(h))
}
