// Package mcp is Countersign's MCP gateway. The console connects to each
// MCP server configured in the mcp section of the tools file (an
// "upstream"), pins and reviews its tools' definitions, and serves those
// tools at /mcp/{name}, so that an agent's MCP client talks to Countersign
// and every tools/call becomes a call that operators approve before it is
// forwarded, byte for byte, to the upstream.
package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/internal/tools"
	"github.com/countersign/countersign/internal/tracing"
)

// Version is what the console calls itself to upstreams and clients.
const Version = "1.0.0"

// Backoff bounds between reconnection attempts.
const (
	MinBackoff = 200 * time.Millisecond
	MaxBackoff = 30 * time.Second
)

// ListedTool is one tool as the upstream listed it, its schema and
// annotations as the raw bytes it sent.
type ListedTool struct {
	Name        string
	Description string
	InputSchema json.RawMessage
	Annotations json.RawMessage
}

// Result is an upstream's answer to tools/call, raw: the gateway passes it
// back without decoding anything it does not need.
type Result struct {
	// Raw is the whole result object as the upstream sent it.
	Raw json.RawMessage
	// IsError is the upstream's isError.
	IsError bool
}

// Errors of an upstream call. ErrNotConnected means nothing was sent;
// ErrLost means the request may have reached the upstream and its outcome
// is unknown.
var (
	ErrNotConnected = errors.New("mcp: the upstream is not connected")
	ErrLost         = errors.New("mcp: the connection to the upstream broke after the call was sent")
)

// RedirectError is an HTTP upstream's redirect, which the console does not
// follow: the tools file's headers carry credentials for the upstream's
// own address, and an answer must not send them, or the call, anywhere
// else. The URL in the tools file must be the final address.
type RedirectError struct {
	Upstream string
	Status   int
	Location string
}

func (e *RedirectError) Error() string {
	return fmt.Sprintf("mcp: the upstream %s answered %d redirecting to %s; Countersign does not follow an upstream's redirects "+
		"(its headers carry credentials): set the upstream's url in the tools file to the address it should use", e.Upstream, e.Status, e.Location)
}

// RPCError is a JSON-RPC error the upstream answered a call with.
type RPCError struct {
	Code    int64
	Message string
}

func (e *RPCError) Error() string {
	return fmt.Sprintf("mcp: the upstream answered error %d: %s", e.Code, e.Message)
}

// Upstream is the console's connection to one MCP server. Run keeps it
// connected, reconnecting with exponential backoff; each connection lists
// the tools and hands them to the OnTools callback, again whenever the
// server says its tools changed.
type Upstream struct {
	Name string
	dial func(ctx context.Context) (sdk.Transport, error)
	log  *slog.Logger
	// OnTools receives every complete listing of the upstream's tools.
	onTools func([]ListedTool)

	mu        sync.Mutex
	session   *sdk.ClientSession
	connected chan struct{} // closed while a session is up; replaced when it ends
	listed    []ListedTool
}

// UpstreamOptions are the collaborators of an Upstream.
type UpstreamOptions struct {
	Logger *slog.Logger
	// OnTools is called with every complete tool listing, from the
	// goroutine that ran it.
	OnTools func([]ListedTool)
}

// NewUpstream returns an upstream that makes a fresh transport for every
// connection attempt with dial.
func NewUpstream(name string, dial func(ctx context.Context) (sdk.Transport, error), opt UpstreamOptions) *Upstream {
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.OnTools == nil {
		opt.OnTools = func([]ListedTool) {}
	}
	return &Upstream{Name: name, dial: dial, log: opt.Logger.With(slog.String("upstream", name)),
		onTools: opt.OnTools, connected: make(chan struct{})}
}

// FromConfig returns the dial function for an upstream of the tools file:
// the command spawned over stdio, or the Streamable HTTP URL with its
// headers, read from the environment or files at each connection.
func FromConfig(u tools.Upstream, getenv func(string) string, logger *slog.Logger) func(ctx context.Context) (sdk.Transport, error) {
	if len(u.Command) > 0 {
		return func(ctx context.Context) (sdk.Transport, error) {
			cmd := exec.Command(u.Command[0], u.Command[1:]...)
			cmd.Dir = u.Dir
			// The console's own environment may hold its secrets: the
			// upstream gets a minimal one plus what the tools file sets.
			cmd.Env = []string{}
			for _, k := range []string{"PATH", "HOME", "LANG", "TMPDIR"} {
				if v := getenv(k); v != "" {
					cmd.Env = append(cmd.Env, k+"="+v)
				}
			}
			for _, e := range u.Env {
				cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
			}
			cmd.Stderr = &logWriter{log: logger.With(slog.String("upstream", u.Name))}
			return tapTransport{inner: &sdk.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}}, nil
		}
	}
	return func(ctx context.Context) (sdk.Transport, error) {
		headers := http.Header{}
		for _, h := range u.Headers {
			var v string
			if h.Env != "" {
				v = getenv(h.Env)
				if v == "" {
					return nil, fmt.Errorf("mcp: %s: header %s: the environment variable %s is empty", u.Name, h.Name, h.Env)
				}
			} else {
				b, err := os.ReadFile(h.File)
				if err != nil {
					return nil, fmt.Errorf("mcp: %s: header %s: %w", u.Name, h.Name, err)
				}
				v = strings.TrimRight(string(b), "\r\n")
			}
			headers.Set(h.Name, h.Prefix+v)
		}
		client := &http.Client{Transport: &httpTap{base: http.DefaultTransport, headers: headers},
			// The headers go to the tools file's URL only: no redirect is
			// followed, to another origin or the same one.
			CheckRedirect: func(req *http.Request, _ []*http.Request) error {
				status := 0
				if req.Response != nil {
					status = req.Response.StatusCode
				}
				e := &RedirectError{Upstream: u.Name, Status: status, Location: req.URL.Redacted()}
				if cp := captureFrom(req.Context()); cp != nil {
					cp.refuse(e) // the SDK does not pass the error on
				}
				return e
			}}
		return &sdk.StreamableClientTransport{Endpoint: u.URL, HTTPClient: client}, nil
	}
}

// InMemory returns a dial function that connects to server in this
// process, through the SDK's in-memory transports.
func InMemory(server *sdk.Server) func(ctx context.Context) (sdk.Transport, error) {
	return func(ctx context.Context) (sdk.Transport, error) {
		ct, st := sdk.NewInMemoryTransports()
		if _, err := server.Connect(ctx, st, nil); err != nil {
			return nil, err
		}
		return tapTransport{inner: ct}, nil
	}
}

// logWriter logs an upstream's stderr line by line.
type logWriter struct {
	log  *slog.Logger
	mu   sync.Mutex
	part []byte
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.part = append(w.part, p...)
	for {
		i := strings.IndexByte(string(w.part), '\n')
		if i < 0 {
			break
		}
		w.log.Info("upstream stderr", slog.String("line", string(w.part[:i])))
		w.part = w.part[i+1:]
	}
	if len(w.part) > 4096 {
		w.log.Info("upstream stderr", slog.String("line", string(w.part)))
		w.part = nil
	}
	return len(p), nil
}

// Run keeps the upstream connected until ctx ends.
func (u *Upstream) Run(ctx context.Context) {
	backoff := MinBackoff
	for ctx.Err() == nil {
		start := time.Now()
		err := u.connectOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) > 10*MaxBackoff/3 {
			backoff = MinBackoff // it was up for a while: start over
		}
		u.log.Warn("upstream disconnected; reconnecting", slog.Any("error", err), slog.Duration("in", backoff))
		jitter := time.Duration(rand.Int64N(int64(backoff)/4 + 1))
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff + jitter):
		}
		backoff = min(2*backoff, MaxBackoff)
	}
}

// connectOnce connects, lists the tools and waits for the session to end.
func (u *Upstream) connectOnce(ctx context.Context) error {
	t, err := u.dial(ctx)
	if err != nil {
		return err
	}
	changed := make(chan struct{}, 1)
	client := sdk.NewClient(&sdk.Implementation{Name: "countersign", Version: Version}, &sdk.ClientOptions{
		Logger: u.log,
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) {
			select {
			case changed <- struct{}{}:
			default:
			}
		},
		// No roots, sampling or elicitation: the gateway asks nothing of
		// anyone on an upstream's behalf.
		Capabilities: &sdk.ClientCapabilities{},
	})
	cs, err := client.Connect(ctx, t, nil)
	if err != nil {
		return fmt.Errorf("mcp: connect: %w", err)
	}
	defer cs.Close()
	listed, err := u.list(ctx, cs)
	if err != nil {
		return err
	}
	u.mu.Lock()
	u.session, u.listed = cs, listed
	close(u.connected)
	u.mu.Unlock()
	defer func() {
		u.mu.Lock()
		u.session = nil
		u.connected = make(chan struct{})
		u.mu.Unlock()
	}()
	u.log.Info("upstream connected", slog.Int("tools", len(listed)))
	u.onTools(listed)
	ended := make(chan error, 1)
	go func() { ended <- cs.Wait() }()
	for {
		select {
		case err := <-ended:
			if err == nil {
				err = errors.New("the session ended")
			}
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
			listed, err := u.list(ctx, cs)
			if err != nil {
				u.log.Warn("upstream tool list failed", slog.Any("error", err))
				continue
			}
			u.mu.Lock()
			u.listed = listed
			u.mu.Unlock()
			u.onTools(listed)
		}
	}
}

// MaxListPages bounds a tool listing.
const MaxListPages = 100

// list reads every page of tools/list as raw JSON.
func (u *Upstream) list(ctx context.Context, cs *sdk.ClientSession) ([]ListedTool, error) {
	var out []ListedTool
	cursor := ""
	for page := 0; ; page++ {
		if page == MaxListPages {
			return nil, fmt.Errorf("mcp: tools/list has more than %d pages", MaxListPages)
		}
		cctx, cp := withCapture(ctx)
		if _, err := cs.ListTools(cctx, &sdk.ListToolsParams{Cursor: cursor}); err != nil {
			if re := cp.refused(); re != nil {
				return nil, fmt.Errorf("mcp: tools/list: %w", re)
			}
			return nil, fmt.Errorf("mcp: tools/list: %w", err)
		}
		raw, ok := cp.get()
		if !ok {
			return nil, errors.New("mcp: tools/list: the raw result was not captured")
		}
		var res struct {
			Tools      []json.RawMessage `json:"tools"`
			NextCursor string            `json:"nextCursor"`
		}
		if err := json.Unmarshal(raw, &res); err != nil {
			return nil, fmt.Errorf("mcp: tools/list: %w", err)
		}
		for _, t := range res.Tools {
			var lt struct {
				Name        string          `json:"name"`
				Description string          `json:"description"`
				InputSchema json.RawMessage `json:"inputSchema"`
				Annotations json.RawMessage `json:"annotations"`
			}
			if err := json.Unmarshal(t, &lt); err != nil {
				u.log.Warn("upstream listed an unreadable tool", slog.Any("error", err))
				continue
			}
			out = append(out, ListedTool{Name: lt.Name, Description: lt.Description, InputSchema: lt.InputSchema, Annotations: lt.Annotations})
		}
		if res.NextCursor == "" {
			return out, nil
		}
		cursor = res.NextCursor
	}
}

// Tools returns the latest listing.
func (u *Upstream) Tools() []ListedTool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]ListedTool(nil), u.listed...)
}

// Connected returns a channel that is closed while the upstream is
// connected (a fresh one after each disconnection).
func (u *Upstream) Connected() <-chan struct{} {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.connected
}

// Call forwards tools/call with exactly the argument bytes given. args
// must be a JSON object (the canonical bytes that were hashed).
func (u *Upstream) Call(ctx context.Context, name string, args []byte) (*Result, error) {
	u.mu.Lock()
	cs := u.session
	u.mu.Unlock()
	if cs == nil {
		return nil, ErrNotConnected
	}
	cctx, cp := withCapture(ctx)
	params := &sdk.CallToolParams{Name: name, Arguments: json.RawMessage(args)}
	// The agent's trace reaches the upstream over any transport in the
	// request's _meta (the arguments stay the bytes that were approved);
	// over HTTP the request's traceparent header carries it too.
	if tp := tracing.Traceparent(ctx); tp != "" {
		params.Meta = sdk.Meta{"traceparent": tp}
	}
	res, err := cs.CallTool(cctx, params)
	if err != nil {
		if re := cp.refused(); re != nil {
			u.log.Warn("the upstream answered a call with a redirect, which is not followed", slog.Int("status", re.Status), slog.String("location", re.Location))
			return nil, re
		}
		var werr *jsonrpc.Error
		if errors.As(err, &werr) {
			// The upstream answered: the call failed there.
			return nil, &RPCError{Code: werr.Code, Message: werr.Message}
		}
		return nil, fmt.Errorf("%w: %v", ErrLost, err)
	}
	raw, ok := cp.get()
	if !ok {
		return nil, fmt.Errorf("%w: the raw result was not captured", ErrLost)
	}
	return &Result{Raw: raw, IsError: res.IsError}, nil
}
