package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/mcp/catalog"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/tools"
)

// Defaults of the gateway.
const (
	// DefaultHold is how long a tools/call waits for a decision before it
	// is answered as pending. It stays below the 60 s after which the
	// official TypeScript client gives up on a request.
	DefaultHold = 45 * time.Second
	// DefaultProgressEvery is how often a held call sends a progress
	// notification to a client that asked for them.
	DefaultProgressEvery = 5 * time.Second
	// DefaultForwardTimeout bounds an upstream's answer to a forwarded call.
	DefaultForwardTimeout = 2 * time.Minute
	// DefaultSessionTimeout closes a client's session after this long
	// without a request.
	DefaultSessionTimeout = 30 * time.Minute
	// DefaultOutcomeDelay is how long an answered call's outcome waits to
	// be written with the next call.
	DefaultOutcomeDelay = 100 * time.Millisecond
	// MaxHold bounds --hold: a request held longer is given up by clients.
	MaxHold = 55 * time.Second
	// DefaultMaxHoldsPerToken is how many tools/calls one agent token may
	// have held for a decision at once, as the agent API bounds the
	// long-polls of a token.
	DefaultMaxHoldsPerToken = 100
	// DefaultMaxSessionsPerToken is how many MCP sessions one agent token
	// may have open at once over HTTP.
	DefaultMaxSessionsPerToken = 16
)

// Agent is who a bearer token at /mcp/{name} speaks for.
type Agent struct {
	// TokenID identifies the token; a client session is bound to it.
	TokenID string
	queue.Principal
	// secret is the token the request presented over HTTP, checked again
	// before a call held for a decision is redeemed ("" for a session
	// connected in this process).
	secret string
}

// principal is the agent's trusted context with its token's id, which a
// redemption records as the holder of the call's lease.
func (a Agent) principal() queue.Principal {
	p := a.Principal
	if p.TokenID == "" {
		p.TokenID = a.TokenID
	}
	return p
}

// ErrUnauthorized is an unknown or revoked token.
var ErrUnauthorized = errors.New("mcp: the token is unknown or revoked")

// GatewayConfig holds the gateway's collaborators.
type GatewayConfig struct {
	Queue   *queue.Service
	Catalog *catalog.Catalog
	// Dial says how to reach each upstream, by name: FromConfig for the
	// tools file's, InMemory for one in this process.
	Dial map[string]func(ctx context.Context) (sdk.Transport, error)
	// Authenticate looks up an agent's bearer token; ErrUnauthorized when
	// it is unknown or revoked.
	Authenticate func(ctx context.Context, secret string) (Agent, error)
	// PublicURL is the console's address as browsers see it: approval
	// links point into it, and it is the one origin besides the request's
	// own that a browser's request may come from.
	PublicURL string
	// HostChecked says the console checks the Host of every request
	// against its public URL and allowed names (DNS rebinding). The SDK's
	// own check, which refuses every request relayed to a loopback
	// address by a proxy, is then turned off; without it the SDK's check
	// stays on.
	HostChecked bool
	// Hold is how long a tools/call waits for a decision (DefaultHold).
	Hold time.Duration
	// ProgressEvery is the progress notification interval
	// (DefaultProgressEvery, or a fifth of a shorter hold).
	ProgressEvery time.Duration
	// ForwardTimeout bounds an upstream's answer (DefaultForwardTimeout).
	ForwardTimeout time.Duration
	// SessionTimeout closes idle client sessions (DefaultSessionTimeout).
	SessionTimeout time.Duration
	// OutcomeDelay is how long the outcome of a call answered before its
	// outcome was written waits for the next call's transaction to carry
	// it, before it is written on its own (DefaultOutcomeDelay).
	OutcomeDelay time.Duration
	// Waits counts the requests one agent token holds open waiting for a
	// decision: pass the agent API's count (--max-waits-per-token), so
	// that held tools/calls and long-polls share one cap. Nil counts the
	// gateway's own, capped at MaxHoldsPerToken. Each held call keeps a
	// request, a goroutine and a waiter for up to the hold, so one agent
	// must not open them without end; a call over the cap is recorded as
	// usual and answered at once with too_many_waits.
	Waits Waits
	// MaxHoldsPerToken caps the gateway's own count when Waits is nil
	// (DefaultMaxHoldsPerToken).
	MaxHoldsPerToken int
	// MaxSessionsPerToken caps the sessions (initialize, protocols up to
	// 2025-11-25) one agent token may have open at once over HTTP
	// (DefaultMaxSessionsPerToken). Each is kept in memory until its
	// client closes it or it is idle for SessionTimeout; one more
	// initialize is refused with the JSON-RPC error CodeTooManySessions
	// (data code too_many_sessions), which says to reuse or close one.
	MaxSessionsPerToken int
	// MaxStreamsPerToken caps the event streams (a session's GET stream,
	// a subscriptions/listen request from 2026-07-28) one agent token may
	// have open at once over HTTP; MaxSessionsPerToken when zero. One
	// more is refused with HTTP 429 too_many_streams.
	MaxStreamsPerToken int
	// MaxStreams caps the event streams of all tokens together
	// (DefaultMaxStreams).
	MaxStreams int
	// StreamIdle closes an event stream that carried nothing for this
	// long (SessionTimeout when zero); its client opens it again.
	StreamIdle time.Duration
	// StatusURL is the address of a call's status page that the agent's
	// own user may open without a console login (URL elicitation and
	// approval_url point at it); nil points them at the console's call
	// page, which needs a login.
	StatusURL func(callID string) string
	// PublicNames names the people a call names (the operator who denied
	// it) to the agent as the agent API does (account.PublicNames): never
	// by a single-sign-on principal. Nil names every principal
	// account.UnnamedSSO.
	PublicNames func(ctx context.Context) func(name string) string
	Logger      *slog.Logger
}

// hidePrincipals names a single-sign-on principal account.UnnamedSSO and
// leaves every other name as it is.
func hidePrincipals(name string) string {
	if strings.HasPrefix(strings.ToLower(name), account.OIDCPrefix) {
		return account.UnnamedSSO
	}
	return name
}

// Waits counts what each agent token holds open waiting for decisions;
// internal/server's TokenWaits is one.
type Waits interface {
	// Acquire takes one of the token's places; false when it holds its
	// maximum already.
	Acquire(token string) bool
	// Release gives back a place that Acquire took.
	Release(token string)
	// Max is how many places one token has.
	Max() int
}

// Gateway serves each upstream's tools at /mcp/{name} over Streamable HTTP
// and turns every tools/call into a call that operators decide.
type Gateway struct {
	cfg       GatewayConfig
	log       *slog.Logger
	upstreams map[string]*Upstream
	servers   map[string]*sdk.Server
	handlers  map[string]http.Handler
	origins   *http.CrossOriginProtection

	mu       sync.Mutex
	sessions *sessions // HTTP sessions open per token
	streams  *streams  // event streams open per token

	listed map[string]map[string]string          // by server: tool name → what is listed (status@digest)
	local  map[*sdk.ServerSession]Agent          // sessions connected in this process (Connect)
	watch  map[string]map[*sdk.ServerSession]int // call id → sessions told to follow it by URL elicitation
	runCtx context.Context
	// pending counts the outcomes of answered calls still being written.
	pending writes
	// held are the outcomes of answered calls not written yet.
	held heldOutcomes

	stopped context.Context // done once Run has returned: event streams end
	stop    context.CancelFunc
}

// NewGateway builds the gateway's servers, one per upstream.
func NewGateway(cfg GatewayConfig) (*Gateway, error) {
	if cfg.Queue == nil || cfg.Catalog == nil || cfg.Authenticate == nil {
		return nil, errors.New("mcp: the gateway needs a queue, a catalog and a token check")
	}
	if cfg.Hold <= 0 {
		cfg.Hold = DefaultHold
	}
	if cfg.Hold > MaxHold {
		return nil, fmt.Errorf("mcp: a hold of %s is longer than clients wait (at most %s)", cfg.Hold, MaxHold)
	}
	if cfg.ProgressEvery <= 0 {
		cfg.ProgressEvery = max(min(DefaultProgressEvery, cfg.Hold/5), 100*time.Millisecond)
	}
	if cfg.ForwardTimeout <= 0 {
		cfg.ForwardTimeout = DefaultForwardTimeout
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = DefaultSessionTimeout
	}
	if cfg.OutcomeDelay <= 0 {
		cfg.OutcomeDelay = DefaultOutcomeDelay
	}
	if cfg.MaxHoldsPerToken <= 0 {
		cfg.MaxHoldsPerToken = DefaultMaxHoldsPerToken
	}
	if cfg.MaxSessionsPerToken <= 0 {
		cfg.MaxSessionsPerToken = DefaultMaxSessionsPerToken
	}
	if cfg.MaxStreamsPerToken <= 0 {
		cfg.MaxStreamsPerToken = cfg.MaxSessionsPerToken
	}
	if cfg.MaxStreams <= 0 {
		cfg.MaxStreams = DefaultMaxStreams
	}
	if cfg.StreamIdle <= 0 {
		cfg.StreamIdle = cfg.SessionTimeout
	}
	if cfg.Waits == nil {
		cfg.Waits = &holds{max: cfg.MaxHoldsPerToken, open: map[string]int{}}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.PublicNames == nil {
		cfg.PublicNames = func(context.Context) func(string) string { return hidePrincipals }
	}
	cfg.PublicURL = strings.TrimRight(cfg.PublicURL, "/")
	g := &Gateway{cfg: cfg, log: cfg.Logger.With(slog.String("component", "mcp")),
		upstreams: map[string]*Upstream{}, servers: map[string]*sdk.Server{}, handlers: map[string]http.Handler{},
		listed: map[string]map[string]string{}, local: map[*sdk.ServerSession]Agent{},
		watch: map[string]map[*sdk.ServerSession]int{}, runCtx: context.Background(),
		sessions: &sessions{max: cfg.MaxSessionsPerToken, open: map[string]int{}, of: map[*sdk.ServerSession]string{}},
		streams:  &streams{perToken: cfg.MaxStreamsPerToken, total: cfg.MaxStreams, open: map[string]int{}}}
	g.stopped, g.stop = context.WithCancel(context.Background())
	g.origins = http.NewCrossOriginProtection()
	if cfg.PublicURL != "" {
		u, err := url.Parse(cfg.PublicURL)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("mcp: public URL %q must be http(s)://host[:port]", cfg.PublicURL)
		}
		if err := g.origins.AddTrustedOrigin(u.Scheme + "://" + u.Host); err != nil {
			return nil, fmt.Errorf("mcp: public URL: %w", err)
		}
	}
	g.origins.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeHTTPError(w, http.StatusForbidden, "forbidden",
			"a browser page on another origin may not use this MCP endpoint (Origin %q)", r.Header.Get("Origin"))
	}))
	for _, name := range cfg.Catalog.Servers() {
		dial, ok := cfg.Dial[name]
		if !ok {
			return nil, fmt.Errorf("mcp: no way to reach the upstream %s", name)
		}
		name := name
		g.upstreams[name] = NewUpstream(name, dial, UpstreamOptions{Logger: cfg.Logger, OnTools: func(ts []ListedTool) {
			g.applyListing(name, ts)
		}})
		srv := sdk.NewServer(&sdk.Implementation{Name: "countersign-" + name, Title: "Countersign: " + name, Version: Version},
			&sdk.ServerOptions{
				Logger: cfg.Logger,
				Instructions: "Countersign gates these tools: every call waits for an operator's approval before it runs. " +
					"A call still waiting answers with status approval_pending; re-issue the identical call to continue.",
				// The tools capability only: no logging, prompts or
				// resources are offered on an upstream's behalf.
				Capabilities: &sdk.ServerCapabilities{Tools: &sdk.ToolCapabilities{ListChanged: true}},
			})
		srv.AddReceivingMiddleware(g.boundSessions)
		g.servers[name] = srv
		opts := func(stateless bool) *sdk.StreamableHTTPOptions {
			return &sdk.StreamableHTTPOptions{
				Logger:         cfg.Logger,
				Stateless:      stateless,
				SessionTimeout: cfg.SessionTimeout,
				// DESIGN §4's body limit, not the SDK's 4 MiB.
				MaxRequestBodyBytes: canonical.MaxBodyBytes,
				// The console checks Host itself (HostChecked); the SDK's
				// check would refuse a TLS proxy's relayed requests.
				DisableLocalhostProtection: cfg.HostChecked,
			}
		}
		get := func(*http.Request) *sdk.Server { return srv }
		g.handlers[name] = byProtocol{
			sessions:  sdk.NewStreamableHTTPHandler(get, opts(false)),
			stateless: sdk.NewStreamableHTTPHandler(get, opts(true)),
		}
	}
	cfg.Catalog.OnChange(g.syncTools)
	cfg.Queue.Subscribe(g.observe)
	return g, nil
}

// Servers returns the names of the upstreams the gateway serves.
func (g *Gateway) Servers() []string { return g.cfg.Catalog.Servers() }

// Upstream returns the connection to one upstream.
func (g *Gateway) Upstream(name string) (*Upstream, bool) {
	u, ok := g.upstreams[name]
	return u, ok
}

// Run keeps every upstream connected until ctx ends.
func (g *Gateway) Run(ctx context.Context) {
	g.mu.Lock()
	g.runCtx = ctx
	g.mu.Unlock()
	defer g.stop()
	var wg sync.WaitGroup
	for _, u := range g.upstreams {
		wg.Add(1)
		go func() { defer wg.Done(); u.Run(ctx) }()
	}
	wg.Wait()
}

func (g *Gateway) applyListing(server string, ts []ListedTool) {
	listing := make([]catalog.Listed, len(ts))
	for i, t := range ts {
		listing[i] = catalog.Listed{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema, Annotations: t.Annotations}
	}
	g.mu.Lock()
	ctx := g.runCtx
	g.mu.Unlock()
	if err := g.cfg.Catalog.Apply(ctx, server, listing); err != nil {
		g.log.Error("the upstream's tools could not be pinned; none of them is served", slog.String("upstream", server), slog.Any("error", err))
	}
}

// pendingDescription is what a client is told about a tool whose
// definition no admin has approved yet: nothing the upstream wrote (its
// description may carry instructions for the model) reaches the client
// before an admin has read it.
const pendingDescription = "Awaiting an administrator's review in Countersign; calls are refused until it is approved."

// UnreviewedPrefix begins the name under which a tool is listed while no
// definition of it was ever approved: its name is upstream text as much as
// its description, and reaches the model only once an admin has read it.
const UnreviewedPrefix = "unreviewed_"

// ListedName is the name under which a catalog entry is listed to
// clients: the upstream's own name once any definition of the tool was
// approved (a changed definition keeps the name an admin read), else
// UnreviewedPrefix and the first 12 hex digits of the definition's digest.
func ListedName(e catalog.Entry) string {
	if e.Status == catalog.Approved || e.Previous != nil {
		return e.Pin.Tool
	}
	return UnreviewedPrefix + e.Digest[:min(12, len(e.Digest))]
}

// syncTools makes a server's listing what the catalog says: approved
// tools with their pinned definitions, pending ones with a neutral
// description, under ListedName. Quarantined and rejected tools are not
// listed.
func (g *Gateway) syncTools(server string) {
	srv, ok := g.servers[server]
	if !ok {
		return
	}
	want := map[string]string{}
	var add []*sdk.Tool
	entries := g.cfg.Catalog.Entries(server)
	if g.cfg.Catalog.Quarantined(server) {
		entries = nil // a quarantined upstream serves nothing
	}
	for _, e := range entries {
		var t *sdk.Tool
		name := ListedName(e)
		switch {
		case e.Callable():
			t = listedTool(name, e.Tool)
		case e.Status == catalog.Pending:
			t = &sdk.Tool{Name: name, Description: pendingDescription, InputSchema: json.RawMessage(`{"type":"object"}`)}
		default:
			continue
		}
		key := string(e.Status) + "@" + e.Digest
		want[name] = key
		g.mu.Lock()
		same := g.listed[server][name] == key
		g.mu.Unlock()
		if !same {
			add = append(add, t)
		}
	}
	g.mu.Lock()
	var remove []string
	for name := range g.listed[server] {
		if _, ok := want[name]; !ok {
			remove = append(remove, name)
		}
	}
	g.listed[server] = want
	g.mu.Unlock()
	if len(remove) > 0 {
		srv.RemoveTools(remove...)
	}
	for _, t := range add {
		g.addTool(srv, server, t)
	}
}

// addTool registers one tool with the SDK. AddTool panics on a schema that
// is not an object; the mirror compiler quarantines those before, so a
// panic here is a bug that must not take the console down.
func (g *Gateway) addTool(srv *sdk.Server, server string, t *sdk.Tool) {
	defer func() {
		if r := recover(); r != nil {
			g.log.Error("a tool could not be listed", slog.String("upstream", server), slog.String("tool", t.Name), slog.Any("panic", r))
		}
	}()
	srv.AddTool(t, func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		return g.call(ctx, server, req)
	})
}

// listedTool is an approved tool as clients see it: the upstream's name,
// description, input schema and annotations as pinned.
func listedTool(name string, t *tools.Tool) *sdk.Tool {
	out := &sdk.Tool{Name: name, Description: t.Description, InputSchema: json.RawMessage(t.SchemaJSON())}
	if a := t.Mirror.Annotations; len(a) > 0 && string(a) != "null" {
		var ann sdk.ToolAnnotations
		if err := json.Unmarshal(a, &ann); err == nil {
			out.Annotations = &ann
			out.Title = ann.Title
		}
	}
	return out
}

// Connect serves one client session over a transport in this process, as
// agent: the in-memory transports of tests, or any other a program wires
// itself. The agent's audience must be the upstream's name.
func (g *Gateway) Connect(ctx context.Context, server string, agent Agent, t sdk.Transport) (*sdk.ServerSession, error) {
	srv, ok := g.servers[server]
	if !ok {
		return nil, fmt.Errorf("mcp: no upstream named %s", server)
	}
	if agent.Audience != server {
		return nil, fmt.Errorf("mcp: the agent's audience is %q, not %s", agent.Audience, server)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	ss, err := srv.Connect(ctx, t, nil)
	if err != nil {
		return nil, err
	}
	g.local[ss] = agent
	go func() {
		ss.Wait()
		g.mu.Lock()
		delete(g.local, ss)
		g.mu.Unlock()
	}()
	return ss, nil
}

// agentOf returns who a request speaks for: the token of its HTTP request,
// or the agent a session in this process was connected as.
func (g *Gateway) agentOf(req *sdk.CallToolRequest) (Agent, bool) {
	if req.Extra != nil && req.Extra.TokenInfo != nil {
		a, ok := req.Extra.TokenInfo.Extra[agentKey].(Agent)
		return a, ok
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	a, ok := g.local[req.Session]
	return a, ok
}

const agentKey = "countersign.agent"

type agentCtxKey struct{}

// ServeHTTP serves /mcp/{name}: the token must be an agent token whose
// audience is {name}.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name, ok := strings.CutPrefix(r.URL.Path, "/mcp/")
	h, known := g.handlers[name]
	if !ok || !known {
		writeHTTPError(w, http.StatusNotFound, "not_found", "no MCP server is served at %s (servers: %s)", r.URL.Path, strings.Join(g.Servers(), ", "))
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	scheme, secret, _ := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	secret = strings.TrimSpace(secret)
	if !strings.EqualFold(scheme, "Bearer") || secret == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="countersign"`)
		writeHTTPError(w, http.StatusUnauthorized, "unauthorized",
			"send Authorization: Bearer <token>; an admin creates one with 'console token create --actor agent:NAME --audience %s'", name)
		return
	}
	agent, err := g.cfg.Authenticate(r.Context(), secret)
	if errors.Is(err, ErrUnauthorized) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="countersign", error="invalid_token"`)
		writeHTTPError(w, http.StatusUnauthorized, "unauthorized", "the token is unknown or revoked")
		return
	}
	if err != nil {
		g.log.Error("token check failed", slog.Any("error", err))
		writeHTTPError(w, http.StatusServiceUnavailable, "unavailable", "the console cannot check tokens right now; retry later")
		return
	}
	agent.secret = secret
	if agent.Audience != name {
		writeHTTPError(w, http.StatusForbidden, "audience_not_allowed",
			"this token is for the audience %q; it opens /mcp/%s, not /mcp/%s", agent.Audience, agent.Audience, name)
		return
	}
	// An event stream (GET, or subscriptions/listen from 2026-07-28) lives
	// as long as its client wants it and carries something now and then:
	// each token has a bounded number open, and one idle for StreamIdle
	// is closed.
	if isStream(r) {
		ok, tokenFull := g.streams.take(agent.TokenID)
		if !ok {
			g.log.Info("MCP event stream refused: the token or the console has its maximum open",
				slog.String("actor", agent.Actor), slog.String("token", agent.TokenID), slog.Bool("token_full", tokenFull))
			g.tooManyStreams(w, tokenFull)
			return
		}
		defer g.streams.give(agent.TokenID)
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		iw := newIdleWriter(w, g.cfg.StreamIdle, cancel)
		defer iw.stop()
		w, r = iw, r.WithContext(ctx)
	}
	// A held tools/call answers within the hold and the upstream's time.
	rc := http.NewResponseController(w)
	if r.Method == http.MethodGet || r.Header.Get("Mcp-Protocol-Version") >= firstStatelessVersion {
		_ = rc.SetWriteDeadline(time.Time{})
		// An event stream would otherwise hold a graceful shutdown until
		// its drain timeout.
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		defer context.AfterFunc(g.stopped, cancel)()
		r = r.WithContext(ctx)
	} else {
		_ = rc.SetWriteDeadline(time.Now().Add(g.cfg.Hold + g.cfg.ForwardTimeout + 30*time.Second))
	}
	r = r.WithContext(context.WithValue(r.Context(), agentCtxKey{}, agent))
	// The SDK binds a session to the token that opened it through the
	// token info its bearer middleware sets; the token was checked above.
	bind := auth.RequireBearerToken(func(ctx context.Context, _ string, r *http.Request) (*auth.TokenInfo, error) {
		a := r.Context().Value(agentCtxKey{}).(Agent)
		return &auth.TokenInfo{UserID: a.TokenID, Extra: map[string]any{agentKey: a}}, nil
	}, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})
	g.origins.Handler(bind(h)).ServeHTTP(w, r)
}

// byProtocol sends each request to the handler of its protocol version.
// Up to 2025-11-25 a client opens a session (initialize), whose
// capabilities say whether it takes URL elicitation, and whose event
// stream carries tools/list_changed and elicitation/complete: those
// sessions live in this process, so replicas need sticky routing by
// Mcp-Session-Id. From 2026-07-28 every request stands alone (its
// capabilities travel with it), which the SDK serves only statelessly: any
// replica can answer.
type byProtocol struct{ sessions, stateless http.Handler }

// firstStatelessVersion is the first protocol version without sessions.
const firstStatelessVersion = "2026-07-28"

func (h byProtocol) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost && r.Header.Get("Mcp-Protocol-Version") >= firstStatelessVersion {
		h.stateless.ServeHTTP(w, r)
		return
	}
	h.sessions.ServeHTTP(w, r)
}

// writeHTTPError answers with the console's error shape.
func writeHTTPError(w http.ResponseWriter, status int, code, format string, args ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": code, "message": fmt.Sprintf(format, args...)}})
}
