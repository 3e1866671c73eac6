// Package server is Countersign's HTTP floor: the agent API, health and
// metrics, and the middleware every route shares (host check, security
// headers, access log, the one error handler). The operators' console
// (internal/console) mounts its pages on it.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/grant"
	"github.com/countersign/countersign/internal/mcp/catalog"
	"github.com/countersign/countersign/internal/problem"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/tracing"
)

// Config holds what the server serves.
//
// The server depends on the domain's services and the read interfaces the
// domain declares, never on a storage engine: cmd/console picks the store
// and passes its views here.
type Config struct {
	Queue    *queue.Service
	Accounts *account.Service
	Audit    audit.Trail // checkpoints, the timeline, the chain's status, the audit export
	// Ping reports whether the store answers, for /healthz.
	Ping func(context.Context) error
	// Live, when set, is the listener that hears of the changes other
	// replicas commit to a shared store; while it is disconnected /healthz
	// answers 503 (this replica's pages and long-polls would miss other
	// replicas' changes until it has caught up) and the metrics say so.
	Live Live
	// Writes, when set, counts the store's commits and the writes they
	// held, for the metrics.
	Writes  WriteCounter
	Keys    *grant.Keyring
	Logger  *slog.Logger
	Now     func() time.Time
	OpenAPI []byte
	// TrustedProxies are the networks of reverse proxies in front of the
	// console. Only a request whose peer is in one of them has its
	// X-Forwarded-For read, right to left, skipping trusted hops: the
	// client is the nearest address that is not a trusted proxy. Without
	// any, the peer address is the client and forwarding headers are
	// ignored (anyone can send them).
	TrustedProxies []*net.IPNet
	// AllowedHosts are the names (host or host:port) that requests may
	// carry in Host besides the console's public URL, IP literals and
	// localhost. A request for any other name is refused (421), which shuts
	// out DNS rebinding: a page on an attacker's name that resolves to this
	// console cannot reach it. With neither this nor a public URL, any Host
	// is served.
	AllowedHosts []string
	// MaxWaitsPerToken caps the long-polls one API token may hold open at
	// once (default DefaultMaxWaitsPerToken); one more is answered 429
	// too_many_waits with Retry-After. Each open wait holds a connection
	// and a file descriptor, which are finite.
	MaxWaitsPerToken int
	// Waits, when set, is the count of open waits shared with the MCP
	// gateway's held tools/call requests; its cap replaces
	// MaxWaitsPerToken.
	Waits *TokenWaits
	// PublicURL is where browsers and agents reach the console, e.g.
	// https://console.example.com: its host is always answered for, and an
	// https scheme turns HSTS on.
	PublicURL string
	// MCP serves the MCP gateway at /mcp/{name} (GET, POST and DELETE of
	// Streamable HTTP); nil serves none. It authenticates its own agent
	// tokens; the Host check and the security headers apply to it too.
	MCP http.Handler
	// OperatorAPI serves the operator API under /api/v1/operator, for
	// people's operator tokens (docs/security.md); off unless set.
	OperatorAPI bool
	// Catalog, when set with OperatorAPI, lets admins review MCP servers'
	// tool definitions through the operator API.
	Catalog *catalog.Catalog
	// Tracer, when not nil, makes a span of every request, continuing the
	// trace of its traceparent header (internal/tracing).
	Tracer *tracing.Tracer
}

// Server is Countersign's HTTP front end.
type Server struct {
	cfg   Config
	hosts map[string]bool // allowed Host names and host:port pairs, lower case; nil checks nothing
	hsts  bool            // the public URL is https
	csp   string          // the Content-Security-Policy header
	// headers are the security headers every response carries, each value
	// a slice of one, shared by every response (securityHeaders).
	headers []securityHeader
	echo    *echo.Echo
	handler http.Handler // echo, HEAD answered as GET (headAsGet)
	log     *slog.Logger
	now     func() time.Time
	metrics *metrics
	pages   Pages
	waits   *TokenWaits
}

// DefaultMaxWaitsPerToken is how many requests one token may hold open
// waiting for decisions at once unless configured otherwise.
const DefaultMaxWaitsPerToken = 100

// TokenWaits counts the requests each API token holds open waiting for a
// decision: the API's long-polls, and the MCP gateway's held tools/call
// requests when it is given the same TokenWaits. Each holds a connection
// and a file descriptor, which are finite. Safe for concurrent use.
type TokenWaits struct {
	max     int
	mu      sync.Mutex
	open    map[string]int
	refused atomic.Uint64
}

// NewTokenWaits caps each token at max open waits (DefaultMaxWaitsPerToken
// when max is not positive).
func NewTokenWaits(max int) *TokenWaits {
	if max <= 0 {
		max = DefaultMaxWaitsPerToken
	}
	return &TokenWaits{max: max, open: map[string]int{}}
}

// Max is the cap of one token.
func (w *TokenWaits) Max() int { return w.max }

// Acquire takes one of the token's places, if fewer than Max are taken;
// a refusal is counted.
func (w *TokenWaits) Acquire(token string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.open[token] >= w.max {
		w.refused.Add(1)
		return false
	}
	w.open[token]++
	return true
}

// Release gives back a place that Acquire took.
func (w *TokenWaits) Release(token string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.open[token]--; w.open[token] <= 0 {
		delete(w.open, token)
	}
}

// Most is the largest number of waits any one token holds open.
func (w *TokenWaits) Most() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, v := range w.open {
		n = max(n, v)
	}
	return n
}

// Refused counts the waits refused since the start.
func (w *TokenWaits) Refused() uint64 { return w.refused.Load() }

// New builds the routes.
func New(cfg Config) (*Server, error) {
	if cfg.Queue == nil || cfg.Accounts == nil || cfg.Audit == nil || cfg.Ping == nil || cfg.Keys == nil {
		return nil, errors.New("server: queue, accounts, audit, ping and keys are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Waits == nil {
		cfg.Waits = NewTokenWaits(cfg.MaxWaitsPerToken)
	}
	cfg.MaxWaitsPerToken = cfg.Waits.Max()
	s := &Server{cfg: cfg, log: cfg.Logger, now: cfg.Now, waits: cfg.Waits}
	s.metrics = newMetrics(cfg.Queue, s.waits, cfg.Live, cfg.Writes)
	cfg.Queue.Subscribe(s.metrics.observe)

	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.IPExtractor = clientIP(cfg.TrustedProxies)
	e.HTTPErrorHandler = s.handleError
	s.csp = contentSecurityPolicy(nil)
	if err := s.allowHosts(cfg); err != nil {
		return nil, err
	}
	s.headers = securityHeaders(s.hsts, s.csp)
	chain := []echo.MiddlewareFunc{middleware.RequestIDWithConfig(middleware.RequestIDConfig{Generator: newRequestIDs().next})}
	if cfg.Tracer != nil {
		chain = append(chain, traced(cfg.Tracer))
	}
	chain = append(chain, s.accessLog(), middleware.Recover(), s.refuseLargeBodies, s.securityHeaders, s.checkHost)
	e.Use(composed(chain...))
	s.echo = e
	s.handler = headAsGet(e)

	s.routesAPI(e)
	if cfg.MCP != nil {
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
			e.Add(m, "/mcp/:name", echo.WrapHandler(cfg.MCP))
		}
	}
	return s, nil
}

// traced makes a span of each request (tracing.Tracer.StartRequest),
// naming the call of an agent API route that names one.
func traced(t *tracing.Tracer) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			route := c.Path()
			ctx, end := t.StartRequest(c.Request(), route)
			c.SetRequest(c.Request().WithContext(ctx))
			err := next(c)
			status := c.Response().Status
			var he *echo.HTTPError
			if errors.As(err, &he) && !c.Response().Committed {
				status = he.Code
			}
			callID := ""
			if strings.HasPrefix(route, "/api/") {
				callID = c.Param("id")
			}
			end(status, callID)
			return err
		}
	}
}

// Pages are the routes a browser reads: the console mounts them with
// Mount. Errors on their routes are answered as pages, not JSON.
type Pages interface {
	// Routes adds the pages' routes.
	Routes(e *echo.Echo)
	// WantsHTML reports whether an error on this request is answered with
	// an HTML page.
	WantsHTML(c echo.Context) bool
	// ErrorPage answers an error with a page.
	ErrorPage(c echo.Context, status int, message string)
	// LogPath is the request's path as the access log may show it (a path
	// that holds a credential is cut short).
	LogPath(path string) string
	// FormTargets are the origins besides the console's own that the
	// pages' forms lead to, directly or by the redirect after a post (the
	// single-sign-on provider's end-session endpoint). Each must be an
	// http(s) origin made only of host characters: it goes into the
	// Content-Security-Policy as it is.
	FormTargets() []string
}

// Mount adds the pages' routes; call it once, before serving.
func (s *Server) Mount(p Pages) {
	s.pages = p
	s.csp = contentSecurityPolicy(p.FormTargets())
	s.headers = securityHeaders(s.hsts, s.csp)
	p.Routes(s.echo)
}

// logPath is a request's path as the access log shows it.
func (s *Server) logPath(p string) string {
	if s.pages == nil {
		return p
	}
	return s.pages.LogPath(p)
}

// Registerer is the registry /metrics serves, for collaborators' series
// (the notification dispatcher's).
func (s *Server) Registerer() prometheus.Registerer { return s.metrics.reg }

// Handler returns the server's http.Handler.
func (s *Server) Handler() http.Handler { return s.handler }

// Serve serves on ln until ctx ends, then drains: in-flight requests
// finish, and Serve returns once the listener is closed and requests are
// done (or after 20 s). Open long-polls end when their queue is shut down
// by its owner (queue.Service.Run ends with its context).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      queue.MaxWait + 15*time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    32 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	s.log.Info("shutting down: draining requests")
	dctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := srv.Shutdown(dctx); err != nil {
		return fmt.Errorf("server: shutdown: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// composed is the server's middleware as one echo middleware, composed
// once: echo applies each middleware it is given to every request, which
// makes a closure per middleware per request. The chain ends in the
// handler the router found for the request (the next that echo passes
// in, which is always the context's handler).
func composed(chain ...echo.MiddlewareFunc) echo.MiddlewareFunc {
	h := Chain(func(c echo.Context) error { return c.Handler()(c) }, chain...)
	return func(echo.HandlerFunc) echo.HandlerFunc { return h }
}

// Chain is h behind middleware m (the first outermost), composed once: a
// route given its middleware through echo gets a closure per middleware
// at every request.
func Chain(h echo.HandlerFunc, m ...echo.MiddlewareFunc) echo.HandlerFunc {
	for i := len(m) - 1; i >= 0; i-- {
		h = m[i](h)
	}
	return h
}

// headAsGet answers HEAD wherever GET is answered: the request is routed
// and handled as a GET whose body is thrown away, and it is a HEAD again
// before net/http writes the response's header (no body is written, so
// the header goes out when the handler is done), so the answer is a HEAD
// answer with GET's status and headers.
func headAsGet(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodHead {
			next.ServeHTTP(w, r)
			return
		}
		r.Method = http.MethodGet
		defer func() { r.Method = http.MethodHead }()
		next.ServeHTTP(headWriter{w}, r)
	})
}

// headWriter drops a response's body; flushing is put off to the end, so
// that the header is written for the HEAD request.
type headWriter struct{ w http.ResponseWriter }

func (h headWriter) Header() http.Header         { return h.w.Header() }
func (h headWriter) WriteHeader(status int)      { h.w.WriteHeader(status) }
func (h headWriter) Write(p []byte) (int, error) { return len(p), nil }
func (h headWriter) Flush()                      {}

// clientIP is how the client's address is found: the peer, or, behind
// trusted proxies, X-Forwarded-For read right to left (echo's extractor,
// with its defaults of trusting loopback and private networks turned off:
// only the networks named are proxies).
func clientIP(trusted []*net.IPNet) echo.IPExtractor {
	if len(trusted) == 0 {
		return echo.ExtractIPDirect()
	}
	opts := []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false)}
	for _, n := range trusted {
		opts = append(opts, echo.TrustIPRange(n))
	}
	return echo.ExtractIPFromXFFHeader(opts...)
}

// ParseTrustedProxies reads CIDR networks (or single addresses) for
// Config.TrustedProxies.
func ParseTrustedProxies(list []string) ([]*net.IPNet, error) {
	var out []*net.IPNet
	for _, s := range list {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !strings.Contains(s, "/") {
			ip := net.ParseIP(s)
			if ip == nil {
				return nil, fmt.Errorf("server: trusted proxy %q is neither an address nor a CIDR network", s)
			}
			bits := 128
			if ip.To4() != nil {
				ip, bits = ip.To4(), 32
			}
			out = append(out, &net.IPNet{IP: ip, Mask: net.CIDRMask(bits, bits)})
			continue
		}
		_, n, err := net.ParseCIDR(s)
		if err != nil {
			return nil, fmt.Errorf("server: trusted proxy %q is not a CIDR network: %w", s, err)
		}
		out = append(out, n)
	}
	return out, nil
}

// allowHosts collects the Host values the server answers for.
func (s *Server) allowHosts(cfg Config) error {
	names := append([]string(nil), cfg.AllowedHosts...)
	if cfg.PublicURL != "" {
		u, err := url.Parse(cfg.PublicURL)
		if err != nil || u.Host == "" {
			return fmt.Errorf("server: public URL %q must be http(s)://host[:port]", cfg.PublicURL)
		}
		names = append(names, u.Host)
		s.hsts = u.Scheme == "https"
	}
	for _, n := range names {
		if n = strings.ToLower(strings.TrimSpace(n)); n != "" {
			if s.hosts == nil {
				s.hosts = map[string]bool{}
			}
			s.hosts[n] = true
		}
	}
	return nil
}

// hostAllowed reports whether a request's Host is one the server answers
// for: an allowed name (with any port when it was given without one), an
// IP literal or localhost. A browser sends the name it resolved, so a name
// an attacker controls never passes; an address cannot be rebound.
func (s *Server) hostAllowed(host string) bool {
	if s.hosts == nil {
		return true
	}
	host = strings.ToLower(host)
	if s.hosts[host] {
		return true
	}
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	}
	name = strings.TrimSuffix(strings.TrimPrefix(name, "["), "]")
	return s.hosts[name] || name == "localhost" || net.ParseIP(name) != nil
}

// checkHost refuses a request whose Host the server does not answer for.
func (s *Server) checkHost(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if !s.hostAllowed(c.Request().Host) {
			return problem.New(http.StatusMisdirectedRequest, "misdirected_request",
				"this console does not answer for the host %q; use the address in its --public-url (or add the name with --allowed-host)", c.Request().Host)
		}
		return next(c)
	}
}

// bodyLimit is the most a route reads of a request's body: the agent
// API's JSON bodies and the console's forms; 0 for the routes that bound
// their own (the MCP gateway's).
func (s *Server) bodyLimit(path string) int64 {
	switch {
	case strings.HasPrefix(path, "/api/"):
		return canonical.MaxBodyBytes
	case strings.HasPrefix(path, "/mcp/"):
		return 0
	}
	return MaxFormBytes
}

// MaxFormBytes is the most a page's form body may hold (the console reads
// its forms with this limit).
const MaxFormBytes = 64 << 10

// refuseLargeBodies answers 413 too_large to a request whose declared
// Content-Length is over its route's limit, before anything reads the
// body: net/http then never sends "100 Continue", so a client that asked
// for it (curl does, for large bodies) reads the 413 instead of sending
// megabytes into a connection that is about to close. The connection
// closes after the answer. Bodies without a length are still cut at the
// limit by the readers of each route.
func (s *Server) refuseLargeBodies(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if limit := s.bodyLimit(r.URL.Path); limit > 0 && r.ContentLength > limit {
			c.Response().Header().Set(echo.HeaderConnection, "close")
			return problem.New(http.StatusRequestEntityTooLarge, "too_large",
				"the body is larger than %d bytes (its Content-Length is %d); send a smaller one", limit, r.ContentLength)
		}
		return next(c)
	}
}

// securityHeader is one header every response carries.
type securityHeader struct {
	name  string // in canonical form
	value []string
}

// securityHeaders are the headers every response carries, and HSTS when
// the public URL is https. Each value is a slice of one with no room to
// grow (a literal of one), so that a response adding a value to it
// (Header.Add) copies it rather than writing into the slice the others
// share.
func securityHeaders(hsts bool, csp string) []securityHeader {
	h := []securityHeader{
		{"Content-Security-Policy", []string{csp}},
		{"X-Content-Type-Options", []string{"nosniff"}},
		{"Referrer-Policy", []string{"no-referrer"}},
		{"Cross-Origin-Opener-Policy", []string{"same-origin"}},
		{"Cross-Origin-Resource-Policy", []string{"same-origin"}},
		{"X-Frame-Options", []string{"DENY"}},
	}
	if hsts {
		h = append(h, securityHeader{"Strict-Transport-Security", []string{"max-age=31536000"}})
	}
	return h
}

// securityHeaders sets the headers every response carries, error pages
// included.
func (s *Server) securityHeaders(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Response().Header()
		for _, sh := range s.headers {
			h[sh.name] = sh.value
		}
		return next(c)
	}
}

// contentSecurityPolicy is the policy of every response. Forms post only
// to the console, and to the origins its pages name (the single-sign-on
// provider's end-session endpoint): the browser checks form-action against
// the redirect that follows a post too, and logging out redirects there.
func contentSecurityPolicy(formTargets []string) string {
	formAction := "'self'"
	for _, o := range formTargets {
		formAction += " " + o
	}
	return "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action " +
		formAction + "; frame-ancestors 'none'"
}

func (s *Server) accessLog() echo.MiddlewareFunc {
	return middleware.RequestLoggerWithConfig(middleware.RequestLoggerConfig{
		LogStatus: true, LogURIPath: true, LogMethod: true, LogLatency: true, LogRequestID: true, LogRemoteIP: true,
		// The error handler answers first, so the status logged is the one
		// the client got (else every error a handler returns reads 200).
		HandleError: true,
		LogValuesFunc: func(c echo.Context, v middleware.RequestLoggerValues) error {
			s.metrics.responses.WithLabelValues(statusLabel(v.Status)).Inc()
			level := slog.LevelInfo
			if refusal, _ := c.Get(refusalKey).(bool); v.Status >= 500 && !refusal {
				level = slog.LevelError
			}
			s.log.LogAttrs(c.Request().Context(), level, "request",
				slog.String("method", v.Method), slog.String("path", s.logPath(v.URIPath)), slog.Int("status", v.Status),
				slog.Duration("latency", v.Latency), slog.String("request_id", v.RequestID), slog.String("remote", v.RemoteIP))
			return nil
		},
	})
}
