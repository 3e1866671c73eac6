package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/internal/tracing"
)

// The SDK's client decodes results into its own types: an input schema and
// structuredContent become map[string]any, so integers above 2^53 lose
// digits and duplicate member names collapse. The gateway must pin exactly
// the schema the upstream sent and pass results back without loss, so it
// captures the raw JSON of the results of its own requests beneath the
// SDK: a capture travels in the request's context, and a tap on the
// connection (stdio, in-memory) or on the HTTP round trip (Streamable HTTP)
// stores the raw "result" of the response to that request.
//
// The HTTP tap is used for Streamable HTTP rather than a connection tap
// because the SDK tells its Streamable HTTP connection about the
// negotiated session through an unexported method, which a wrapping
// connection would hide.

type captureKey struct{}

// capture receives the raw result of one request.
type capture struct {
	mu  sync.Mutex
	raw json.RawMessage
	set bool
	// redirect is the redirect the upstream answered the request with,
	// which was not followed.
	redirect *RedirectError
}

func (c *capture) refuse(e *RedirectError) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.redirect = e
}

func (c *capture) refused() *RedirectError {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.redirect
}

func (c *capture) put(raw json.RawMessage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.set {
		c.raw = append(json.RawMessage(nil), raw...)
		c.set = true
	}
}

func (c *capture) get() (json.RawMessage, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.raw, c.set
}

func withCapture(ctx context.Context) (context.Context, *capture) {
	c := &capture{}
	return context.WithValue(ctx, captureKey{}, c), c
}

func captureFrom(ctx context.Context) *capture {
	c, _ := ctx.Value(captureKey{}).(*capture)
	return c
}

// tapTransport wraps a transport whose connection can be wrapped (stdio,
// a command, in-memory).
type tapTransport struct{ inner sdk.Transport }

func (t tapTransport) Connect(ctx context.Context) (sdk.Connection, error) {
	c, err := t.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &tapConn{Connection: c, pending: map[jsonrpc.ID]*capture{}}, nil
}

type tapConn struct {
	sdk.Connection
	mu      sync.Mutex
	pending map[jsonrpc.ID]*capture
}

func (c *tapConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() {
		if cp := captureFrom(ctx); cp != nil {
			c.mu.Lock()
			c.pending[req.ID] = cp
			c.mu.Unlock()
		}
	}
	return c.Connection.Write(ctx, msg)
}

func (c *tapConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if resp, ok := msg.(*jsonrpc.Response); ok && err == nil {
		c.mu.Lock()
		cp := c.pending[resp.ID]
		delete(c.pending, resp.ID)
		c.mu.Unlock()
		if cp != nil && resp.Error == nil {
			cp.put(resp.Result)
		}
	}
	return msg, err
}

// httpTap is a RoundTripper that adds the upstream's headers to every
// request and, for a POST carrying a capture, reads the raw result of the
// JSON-RPC response out of the response body (JSON or an SSE stream) as
// the SDK reads it.
type httpTap struct {
	base    http.RoundTripper
	headers http.Header
}

func (t *httpTap) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for name, values := range t.headers {
		req.Header[name] = values
	}
	// The trace of the agent's request that this call belongs to.
	tracing.Inject(req.Context(), req.Header)
	cp := captureFrom(req.Context())
	var id json.RawMessage
	if cp != nil && req.Method == http.MethodPost && req.GetBody != nil {
		if body, err := req.GetBody(); err == nil {
			var m struct {
				ID json.RawMessage `json:"id"`
			}
			if b, err := io.ReadAll(body); err == nil && json.Unmarshal(b, &m) == nil {
				id = m.ID
			}
		}
	}
	if len(id) == 0 {
		return t.base.RoundTrip(req)
	}
	// The request is cancelled with its caller's context until its
	// response is read; after that, not at once: the caller returns as
	// soon as it has the response, while the SDK still reads the rest of
	// the stream (the end of an SSE answer), and a request cancelled
	// before its body ends takes its connection down with it, so that the
	// next call would dial the upstream again. The rest gets drainGrace.
	inner := req.Context()
	ctx, cancel := context.WithCancel(context.WithoutCancel(inner))
	stop := context.AfterFunc(inner, cancel)
	resp, err := t.base.RoundTrip(req.WithContext(ctx))
	if err != nil || resp.StatusCode != http.StatusOK {
		if err != nil {
			stop()
			cancel()
		} else {
			resp.Body = &endBody{ReadCloser: resp.Body, end: func() { stop(); cancel() }}
		}
		return resp, err
	}
	sse := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	// Both run on the goroutine that reads the body (and closes it).
	var grace *time.Timer
	resp.Body = &tapBody{ReadCloser: resp.Body, cp: cp, id: id, sse: sse,
		answered: func() {
			if stop() {
				grace = time.AfterFunc(drainGrace, cancel)
			}
		},
		end: func() {
			stop()
			if grace != nil {
				grace.Stop()
			}
			cancel()
		}}
	return resp, nil
}

// drainGrace bounds how long the rest of an upstream's answer may take
// once the response to the call was read from it.
const drainGrace = 5 * time.Second

// endBody runs end once the body is closed.
type endBody struct {
	io.ReadCloser
	end  func()
	once sync.Once
}

func (b *endBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.end)
	return err
}

// tapBody watches the bytes the SDK reads for the response to id. It
// calls answered once it has seen it, and end when it is closed.
type tapBody struct {
	io.ReadCloser
	cp       *capture
	id       json.RawMessage
	sse      bool
	buf      bytes.Buffer
	done     bool
	answered func()
	end      func()
	once     sync.Once
}

func (b *tapBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.end)
	return err
}

func (b *tapBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if !b.done {
		b.buf.Write(p[:n])
		if b.sse {
			b.scanEvents()
		} else if err != nil {
			b.match(b.buf.Bytes())
		}
	}
	return n, err
}

// scanEvents looks at every complete SSE event read so far.
func (b *tapBody) scanEvents() {
	for !b.done {
		data := b.buf.Bytes()
		end, sep := bytes.Index(data, []byte("\n\n")), 2
		if i := bytes.Index(data, []byte("\r\n\r\n")); i >= 0 && (end < 0 || i < end) {
			end, sep = i, 4
		}
		if end < 0 {
			return
		}
		var payload []byte
		sc := bufio.NewScanner(bytes.NewReader(data[:end]))
		sc.Buffer(nil, len(data)+1)
		for sc.Scan() {
			line := sc.Bytes()
			if v, ok := bytes.CutPrefix(line, []byte("data:")); ok {
				if len(payload) > 0 {
					payload = append(payload, '\n')
				}
				payload = append(payload, bytes.TrimPrefix(v, []byte(" "))...)
			}
		}
		b.buf.Next(end + sep)
		b.match(payload)
	}
}

func (b *tapBody) match(payload []byte) {
	var m struct {
		ID     json.RawMessage `json:"id"`
		Result json.RawMessage `json:"result"`
	}
	if json.Unmarshal(payload, &m) != nil || m.Result == nil || !bytes.Equal(bytes.TrimSpace(m.ID), bytes.TrimSpace(b.id)) {
		return
	}
	b.cp.put(m.Result)
	b.done = true
	b.buf = bytes.Buffer{}
	b.answered()
}
