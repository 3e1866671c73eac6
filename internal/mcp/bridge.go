package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"
)

// The bridge connects an MCP client that only launches stdio servers (a
// desktop assistant) to a console's /mcp/{name} endpoint. It relays the
// client's JSON-RPC messages byte for byte: each line read from stdin is
// POSTed as it is, and every message of the answers and of the session's
// event stream is written to stdout as one line (white space outside
// strings removed, nothing else changed). It holds no policy and parses no
// arguments: Countersign decides everything at the endpoint.
//
// It speaks Streamable HTTP itself rather than through the SDK's client
// transport, because that transport starts its event stream only for a
// session the SDK's own client opened, and a relay must not decode and
// re-encode what it carries.

// MaxBridgeLine bounds one message read from the client.
const MaxBridgeLine = 4 << 20

// BridgeConfig configures a bridge.
type BridgeConfig struct {
	// URL is the endpoint, e.g. https://approvals.example.com/mcp/demo.
	URL string
	// Token is the agent token sent as a bearer token.
	Token string
	// HTTPClient makes the requests; http.DefaultClient when nil. It must
	// not time out whole requests: a held call answers after up to the
	// console's hold.
	HTTPClient *http.Client
	Logger     *slog.Logger
}

type bridge struct {
	cfg BridgeConfig
	log *slog.Logger

	outMu sync.Mutex
	out   io.Writer

	mu        sync.Mutex
	session   string
	version   string
	streaming bool           // the session's event stream (GET) is open or being opened
	posts     sync.WaitGroup // answers being relayed
	wg        sync.WaitGroup // the event stream
}

// Bridge relays between the client on in/out and the endpoint until in
// ends (and every answer under way is relayed) or ctx is done; then it
// ends the session.
func Bridge(ctx context.Context, cfg BridgeConfig, in io.Reader, out io.Writer) error {
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = http.DefaultClient
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	b := &bridge{cfg: cfg, log: cfg.Logger.With(slog.String("component", "mcp-bridge")), out: out}
	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		b.posts.Wait()
		b.endSession()
		cancel()
		b.wg.Wait()
	}()
	r := bufio.NewReaderSize(in, 64<<10)
	for {
		line, err := readLine(r)
		if len(bytes.TrimSpace(line)) > 0 {
			b.send(ctx, bytes.TrimSpace(line))
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// readLine reads one line of at most MaxBridgeLine bytes.
func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > MaxBridgeLine {
			return nil, fmt.Errorf("mcp-bridge: a message from the client is longer than %d bytes", MaxBridgeLine)
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return line, err
		}
	}
}

// envelope is what the bridge reads of a message: whether it is a request
// (an id to answer errors to) and its method.
type envelope struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
}

func (b *bridge) send(ctx context.Context, msg []byte) {
	var env envelope
	_ = json.Unmarshal(msg, &env) // a batch or garbage: the endpoint answers
	isRequest := len(env.ID) > 0 && env.Method != ""
	resp, err := b.post(ctx, msg)
	if err != nil {
		b.log.Warn("the endpoint could not be reached", slog.Any("error", err))
		if isRequest {
			b.answerError(env.ID, -32000, "the Countersign endpoint could not be reached: "+err.Error())
		}
		return
	}
	if env.Method == "initialize" && resp.StatusCode == http.StatusOK {
		b.mu.Lock()
		b.session = resp.Header.Get("Mcp-Session-Id")
		b.mu.Unlock()
	}
	// The answer to initialize is read before anything else is sent, so
	// that the session and the protocol version are known.
	if env.Method == "initialize" {
		b.receive(ctx, resp, env, isRequest)
		return
	}
	b.posts.Add(1)
	go func() {
		defer b.posts.Done()
		b.receive(ctx, resp, env, isRequest)
	}()
	if env.Method == "notifications/initialized" {
		b.openStream(ctx)
	}
}

func (b *bridge) post(ctx context.Context, msg []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.cfg.URL, bytes.NewReader(msg))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	b.headers(req)
	return b.cfg.HTTPClient.Do(req)
}

func (b *bridge) headers(req *http.Request) {
	req.Header.Set("Authorization", "Bearer "+b.cfg.Token)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.session != "" {
		req.Header.Set("Mcp-Session-Id", b.session)
	}
	if b.version != "" {
		req.Header.Set("Mcp-Protocol-Version", b.version)
	}
}

// receive relays one POST's answer: nothing (202), one JSON message, or an
// event stream of them.
func (b *bridge) receive(ctx context.Context, resp *http.Response, env envelope, isRequest bool) {
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusAccepted {
		return
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		msg := httpErrorMessage(resp.StatusCode, body)
		b.log.Warn("the endpoint refused a message", slog.Int("status", resp.StatusCode), slog.String("method", env.Method), slog.String("error", msg))
		if isRequest {
			b.answerError(env.ID, -32000, msg)
		}
		return
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch mt {
	case "text/event-stream":
		b.relayEvents(ctx, resp.Body, env.Method == "initialize")
	default:
		body, err := io.ReadAll(io.LimitReader(resp.Body, MaxBridgeLine+1))
		if err != nil || len(body) > MaxBridgeLine {
			if isRequest {
				b.answerError(env.ID, -32000, "the endpoint's answer could not be read")
			}
			return
		}
		b.deliver(body, env.Method == "initialize")
	}
}

// httpErrorMessage reads the console's error shape when the body has it.
func httpErrorMessage(status int, body []byte) string {
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
		return fmt.Sprintf("Countersign answered %d %s: %s", status, e.Error.Code, e.Error.Message)
	}
	return fmt.Sprintf("Countersign answered %d: %s", status, strings.TrimSpace(string(body)))
}

// relayEvents writes the data of every event of an SSE stream.
func (b *bridge) relayEvents(ctx context.Context, body io.Reader, initialize bool) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), MaxBridgeLine)
	var data []byte
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case len(line) == 0:
			if len(data) > 0 {
				b.deliver(data, initialize)
				data = nil
			}
		case bytes.HasPrefix(line, []byte("data:")):
			d := bytes.TrimPrefix(bytes.TrimPrefix(line, []byte("data:")), []byte(" "))
			if len(data) > 0 {
				data = append(data, '\n')
			}
			data = append(data, d...)
		}
		if ctx.Err() != nil {
			return
		}
	}
	if len(data) > 0 {
		b.deliver(data, initialize)
	}
}

// deliver writes one message to the client as one line. The answer to
// initialize tells which protocol version the session speaks.
func (b *bridge) deliver(msg []byte, initialize bool) {
	var compact bytes.Buffer
	if err := json.Compact(&compact, msg); err != nil {
		b.log.Warn("the endpoint sent a message that is not JSON; dropped", slog.Any("error", err))
		return
	}
	if initialize {
		var res struct {
			Result struct {
				ProtocolVersion string `json:"protocolVersion"`
			} `json:"result"`
		}
		if json.Unmarshal(compact.Bytes(), &res) == nil && res.Result.ProtocolVersion != "" {
			b.mu.Lock()
			b.version = res.Result.ProtocolVersion
			b.mu.Unlock()
		}
	}
	compact.WriteByte('\n')
	b.outMu.Lock()
	defer b.outMu.Unlock()
	if _, err := b.out.Write(compact.Bytes()); err != nil {
		b.log.Warn("the client went away", slog.Any("error", err))
	}
}

func (b *bridge) answerError(id json.RawMessage, code int, msg string) {
	m, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": code, "message": msg}})
	b.deliver(m, false)
}

// openStream keeps the session's event stream open, for what the console
// sends unasked (tools/list_changed, elicitation/complete), reconnecting
// with backoff until ctx ends; an endpoint that offers none (405) is left
// alone.
func (b *bridge) openStream(ctx context.Context) {
	b.mu.Lock()
	if b.session == "" || b.streaming {
		b.mu.Unlock()
		return
	}
	b.streaming = true
	b.mu.Unlock()
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		backoff := MinBackoff
		for ctx.Err() == nil {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.cfg.URL, nil)
			if err != nil {
				return
			}
			req.Header.Set("Accept", "text/event-stream")
			b.headers(req)
			resp, err := b.cfg.HTTPClient.Do(req)
			if err == nil {
				switch {
				case resp.StatusCode == http.StatusOK:
					backoff = MinBackoff
					b.relayEvents(ctx, resp.Body, false)
				case resp.StatusCode == http.StatusMethodNotAllowed || resp.StatusCode == http.StatusNotFound ||
					resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
					resp.Body.Close()
					b.log.Info("no event stream for this session", slog.Int("status", resp.StatusCode))
					return
				}
				resp.Body.Close()
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, MaxBackoff)
		}
	}()
}

// endSession tells the endpoint the session is over.
func (b *bridge) endSession() {
	b.mu.Lock()
	session := b.session
	b.mu.Unlock()
	if session == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, b.cfg.URL, nil)
	if err != nil {
		return
	}
	b.headers(req)
	if resp, err := b.cfg.HTTPClient.Do(req); err == nil {
		resp.Body.Close()
	}
}
