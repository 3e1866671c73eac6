package console

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/a-h/templ"
	"github.com/gorilla/securecookie"
	"github.com/gorilla/sessions"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/mcp/catalog"
	"github.com/countersign/countersign/internal/passkey"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/server"
	"github.com/countersign/countersign/internal/sso"
	"github.com/countersign/countersign/web/static"
	"github.com/countersign/countersign/web/templates"
)

// Config configures the browser console: what it serves from, and how.
type Config struct {
	Queue    *queue.Service
	Accounts *account.Service
	History  queue.History // the history pages and their exports
	Audit    audit.Trail   // checkpoints, the timeline, the chain's status, the audit export
	// AuditSigner signs the headers of audit exports (the data
	// directory's audit key); nil writes them unsigned.
	AuditSigner *audit.Signer
	// EvidencePack makes the admin page's evidence packs; nil offers
	// none.
	EvidencePack EvidencePackFunc
	// Presence, when set, shares who has which call page open with the
	// other replicas of a shared store, so that "also viewing" on a call
	// page names the viewers on every replica; without it a call page
	// names the viewers of this replica only.
	Presence Presence
	// Notifications, when set, serves the deliveries page's data and Web
	// Push subscriptions.
	Notifications *Notifications
	// Catalog holds the pinned definitions of MCP servers' tools: the
	// review pages; nil serves none.
	Catalog *catalog.Catalog
	// Metrics is where the console's series are registered (the server's
	// registry); nil registers none.
	Metrics prometheus.Registerer
	Logger  *slog.Logger
	Now     func() time.Time

	// IdleTimeout ends a session after this long without a request
	// (default 30 min); AbsoluteTimeout ends it this long after login
	// whatever happens (default 12 h).
	IdleTimeout     time.Duration
	AbsoluteTimeout time.Duration
	// PublicURL is where browsers reach the console, e.g.
	// https://console.example.com. Its scheme decides whether the session
	// cookie is Secure with the __Host- prefix, and its origin is accepted
	// in Origin headers besides the request's own host.
	PublicURL string
	// OperatorAPI says whether the server serves the operator API, for the
	// page where people make their operator tokens.
	OperatorAPI bool
	// SweepInterval is how often open sockets' sessions are checked for
	// expiry and revocation made elsewhere (default 2 s). Logout and
	// disabling through the console close sockets at once.
	SweepInterval time.Duration
	// PingInterval is how often a socket is pinged (default 30 s); a
	// socket that answers nothing for twice that long is closed.
	PingInterval time.Duration
	// WriteTimeout bounds each write to a socket (default 10 s).
	WriteTimeout time.Duration
	// SendBuffer is how many messages may wait for one socket before it is
	// dropped as too slow (default 64).
	SendBuffer int
	// MaxSocketsPerAccount bounds the sockets one account keeps open, over
	// all its sessions and tabs (default 64); MaxSockets bounds them in
	// all (default 4096). Each socket costs the hub's time on every change.
	MaxSocketsPerAccount int
	MaxSockets           int
	// MCPEndpoints are the paths of the MCP endpoints agents may connect
	// to (e.g. /mcp/github), named in the help of a console that has no
	// agent token yet.
	MCPEndpoints []string

	// SSO signs people on through an OpenID provider; nil offers local
	// accounts only. Its flows should live in the database
	// (account.Service.Oneshots) so that any replica finishes a login.
	SSO *sso.RelyingParty
	// SSOName names the provider on the login page: "Sign in with NAME"
	// (default "single sign-on").
	SSOName string
	// LocalLogin says who may log in with a local name and password:
	// LocalAll (the default), LocalAdminsOnly (break-glass
	// administrators) or LocalOff. Anything but LocalAll needs SSO.
	LocalLogin LocalLogin
	// Passkeys runs passkey ceremonies (registration on the account page,
	// approvals on the call page); nil turns passkeys off. Its
	// ceremonies should live in the database, like SSO's flows.
	Passkeys *passkey.Service
}

// LocalLogin says which local accounts may log in with a password.
type LocalLogin string

// Local login modes.
const (
	LocalAll        LocalLogin = "all"
	LocalAdminsOnly LocalLogin = "admins-only"
	LocalOff        LocalLogin = "off"
)

// ParseLocalLogin reads --local-login.
func ParseLocalLogin(s string) (LocalLogin, error) {
	switch l := LocalLogin(s); l {
	case LocalAll, LocalAdminsOnly, LocalOff:
		return l, nil
	}
	return "", fmt.Errorf("console: local login %q: want all, admins-only or off", s)
}

func (cfg *Config) defaults() {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 30 * time.Minute
	}
	if cfg.AbsoluteTimeout <= 0 {
		cfg.AbsoluteTimeout = 12 * time.Hour
	}
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = 2 * time.Second
	}
	if cfg.PingInterval <= 0 {
		cfg.PingInterval = 30 * time.Second
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 10 * time.Second
	}
	if cfg.SendBuffer <= 0 {
		cfg.SendBuffer = 64
	}
	if cfg.MaxSocketsPerAccount <= 0 {
		cfg.MaxSocketsPerAccount = 64
	}
	if cfg.MaxSockets <= 0 {
		cfg.MaxSockets = 4096
	}
	if cfg.LocalLogin == "" {
		cfg.LocalLogin = LocalAll
	}
	if cfg.SSOName == "" {
		cfg.SSOName = "single sign-on"
	}
}

// Console serves the operators' browser pages and their WebSocket.
type Console struct {
	cfg Config
	// shown holds, for the approval that usually follows, what each call's
	// page showed of its call (console_pages.go).
	shown    shownCalls
	pushes   *prometheus.CounterVec // live updates sent, and sockets dropped
	accounts *account.Service
	history  queue.History
	trail    audit.Trail
	q        *queue.Service
	log      *slog.Logger
	now      func() time.Time

	cookies    *sessions.CookieStore
	cookieName string
	secure     bool
	origin     string // PublicURL's origin, or ""
	loginKey   []byte // keys the login form's token

	verifySlots chan struct{}                     // bounds concurrent password hashing
	verify      func(hash, password string) error // account.Verify; tests count calls
	dummyHash   string                            // verified for unknown names, so timing does not tell

	deviceCodec      *securecookie.SecureCookie // signs and encrypts known-device cookies
	deviceCookieName string

	ssoCodec      *securecookie.SecureCookie // signs and encrypts the login-under-way cookie
	ssoCookieName string

	links *StatusLinks // the status pages' capability links

	hub     *hub
	sockets *slots // the sockets open, per account and in all
	packs   *slots // the evidence packs being made
	// needsCounts is what needs people, counted for every page's
	// navigation (needs.go).
	needsCounts *needsCounts
	chain       *audit.Watcher // the audit chain's background verification
	stop        chan struct{}
	wg          sync.WaitGroup // the hub, the sweeper, the chain's verification and every socket goroutine
	once        sync.Once

	connMu  sync.Mutex // guards closing, so no socket starts after shutdown
	closing bool
}

// New builds the console; Mount it on a server and Run it beside.
func New(cfg Config) (*Console, error) {
	if cfg.Queue == nil || cfg.Accounts == nil || cfg.History == nil || cfg.Audit == nil {
		return nil, errors.New("console: queue, accounts, history and audit are required")
	}
	cfg.defaults()
	if _, err := ParseLocalLogin(string(cfg.LocalLogin)); err != nil {
		return nil, err
	}
	if cfg.LocalLogin != LocalAll && cfg.SSO == nil {
		return nil, fmt.Errorf("console: local login %s needs single sign-on configured, or nobody could log in", cfg.LocalLogin)
	}
	c := &Console{
		cfg: cfg, accounts: cfg.Accounts, history: cfg.History, trail: cfg.Audit, q: cfg.Queue, log: cfg.Logger, now: cfg.Now,
		verifySlots: make(chan struct{}, 2),
		verify:      account.Verify,
		stop:        make(chan struct{}),
	}
	c.cookieName, c.deviceCookieName, c.ssoCookieName = "countersign", "countersign-device", "countersign-oidc"
	if cfg.PublicURL != "" {
		u, err := url.Parse(cfg.PublicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("console: public URL %q must be http(s)://host[:port]", cfg.PublicURL)
		}
		c.origin = u.Scheme + "://" + strings.ToLower(u.Host)
		if u.Scheme == "https" {
			c.secure = true
			c.cookieName, c.deviceCookieName, c.ssoCookieName = "__Host-countersign", "__Host-countersign-device", "__Host-countersign-oidc"
		}
	}
	ctx := context.Background()
	hashKey, err := c.accounts.ConsoleSecret(ctx, "cookie-hash", 64)
	if err != nil {
		return nil, err
	}
	blockKey, err := c.accounts.ConsoleSecret(ctx, "cookie-block", 32)
	if err != nil {
		return nil, err
	}
	if c.loginKey, err = c.accounts.ConsoleSecret(ctx, "login-form", 32); err != nil {
		return nil, err
	}
	devHash, err := c.accounts.ConsoleSecret(ctx, "device-cookie-hash", 64)
	if err != nil {
		return nil, err
	}
	devBlock, err := c.accounts.ConsoleSecret(ctx, "device-cookie-block", 32)
	if err != nil {
		return nil, err
	}
	if c.links, err = NewStatusLinks(ctx, c.accounts, cfg.PublicURL); err != nil {
		return nil, err
	}
	c.deviceCodec = securecookie.New(devHash, devBlock).MaxAge(int(deviceCookieAge / time.Second))
	c.ssoCodec = securecookie.New(hashKey, blockKey).MaxAge(int(sso.FlowTTL / time.Second))
	c.ssoCodec.SetSerializer(securecookie.JSONEncoder{})
	c.cookies = sessions.NewCookieStore(hashKey, blockKey)
	for _, codec := range c.cookies.Codecs {
		if sc, ok := codec.(*securecookie.SecureCookie); ok {
			sc.SetSerializer(cookieJSON{})
		}
	}
	c.cookies.Options = &sessions.Options{Path: "/", HttpOnly: true, Secure: c.secure, SameSite: http.SameSiteStrictMode}
	c.cookies.MaxAge(int(cfg.AbsoluteTimeout / time.Second))
	if c.dummyHash, err = account.Hash("countersign: no such account"); err != nil {
		return nil, err
	}
	c.pushes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "countersign_live_pushes_total",
		Help: "Live updates sent to console sockets, and clients dropped for falling behind."}, []string{"result"})
	c.sockets = newSlots(cfg.MaxSocketsPerAccount, cfg.MaxSockets)
	c.packs = newSlots(maxPacksPerAccount, maxPacks)
	c.hub = newHub(hubDeps{fragment: c.fragmentFor, presence: cfg.Presence, pushes: c.pushes, log: c.log, now: c.now, stop: c.stop})
	c.chain = audit.NewWatcher(c.trail, c.now, c.log)
	c.q.Subscribe(c.hub.publish)
	c.needsCounts = newNeedsCounts()
	c.q.Subscribe(c.needsCounts.changed)
	if cfg.Presence != nil {
		cfg.Presence.OnChange(c.hub.othersChanged)
	}
	if cfg.Metrics != nil {
		verified := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "countersign_audit_verified",
			Help: "The newest periodic verification of the stored audit chain: 1 verified, 0 broken or unreadable, -1 none finished yet."},
			func() float64 {
				switch c.chain.Status().State {
				case "verified":
					return 1
				case "pending":
					return -1
				}
				return 0
			})
		verifiedAt := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "countersign_audit_verified_timestamp_seconds",
			Help: "When the newest verification of the stored audit chain finished (Unix seconds; 0 before the first)."},
			func() float64 {
				at := c.chain.Status().At
				if at.IsZero() {
					return 0
				}
				return float64(at.UnixMilli()) / 1000
			})
		if err := cfg.Metrics.Register(verified); err != nil {
			return nil, fmt.Errorf("console: metrics: %w", err)
		}
		if err := cfg.Metrics.Register(verifiedAt); err != nil {
			return nil, fmt.Errorf("console: metrics: %w", err)
		}
		sockets := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "countersign_sockets_open",
			Help: "Console pages' WebSockets open on this replica."}, func() float64 { return float64(c.hub.clientCount()) })
		if err := cfg.Metrics.Register(sockets); err != nil {
			return nil, fmt.Errorf("console: metrics: %w", err)
		}
		if err := cfg.Metrics.Register(c.pushes); err != nil {
			return nil, fmt.Errorf("console: metrics: %w", err)
		}
	}
	return c, nil
}

// VerifyEvery is how often the console asks for the audit chain to be
// verified again (the watcher verifies only when the chain has moved or
// its last result is old, never more often than it allows).
const VerifyEvery = 5 * time.Minute

// Run runs the console's background work until ctx ends: the socket hub,
// the sweep of sessions, and the audit chain's verification (a first run
// at once, then when the history is looked at, and asked for every
// VerifyEvery, which verifies when the chain has moved or its last
// verification is older than audit.MaxVerifyAge: countersign_audit_verified
// says the result). Then it closes every socket, asking pages to reconnect
// later, and waits for them.
func (c *Console) Run(ctx context.Context) {
	c.wg.Go(c.hub.run)
	c.wg.Go(c.needsLoop)
	c.wg.Go(c.sweepLoop)
	c.wg.Go(func() { c.chain.Run(ctx) })
	c.wg.Go(func() {
		t := time.NewTicker(VerifyEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				c.chain.Request(c.now())
			}
		}
	})
	<-ctx.Done()
	c.shutdown()
}

// Routes adds the console's routes (server.Pages).
func (c *Console) Routes(e *echo.Echo) {
	e.GET(static.Prefix+"*", echo.WrapHandler(static.Handler()))
	e.HEAD(static.Prefix+"*", echo.WrapHandler(static.Handler()))
	// Browsers ask for /favicon.ico whatever the page links to.
	e.GET("/favicon.ico", func(ec echo.Context) error {
		return ec.Redirect(http.StatusMovedPermanently, static.URL("favicon.svg"))
	})
	e.GET("/login", c.loginPage)
	e.POST("/login", c.login)
	if c.cfg.SSO != nil {
		e.GET(ssoLoginPath, c.ssoLogin)
		e.GET(ssoCallbackPath, c.ssoCallback)
	}

	// Middleware is attached per route: a Group with an empty prefix would
	// also claim every unknown path.
	// (server.Chain composes a route's middleware once, where echo would
	// at every request.)
	e.GET("/", server.Chain(c.queuePage, c.requireSession))
	e.GET("/calls/:id", server.Chain(c.callPage, c.requireSession))
	// A call's status page needs no login: its link is the credential.
	e.GET(statusPath+":id/:token", c.statusPage)
	e.GET("/ws", server.Chain(c.serveWS, c.requireSession))
	e.GET("/admin", server.Chain(c.adminPage, c.requireSession, c.requireAdmin))
	e.GET("/account", server.Chain(c.accountPage, c.requireSession))
	e.GET(passwordPath, server.Chain(c.passwordPage, c.requireSession))
	c.routesHistory(e.Group(historyPath, c.requireSession))
	c.routesNotify(e)
	c.routesMCP(e)

	post := func(path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) {
		e.POST(path, server.Chain(h, append([]echo.MiddlewareFunc{c.requireSession, c.requireCSRF}, m...)...))
	}
	post("/logout", c.logout)
	post(passwordPath, c.changePassword)
	post("/account/reauth", c.reauth)
	post("/account/passkeys/begin", c.beginRegistration)
	post("/account/passkeys/finish", c.finishRegistration)
	post("/account/passkeys/remove", c.removePasskey)
	post("/account/delegations", c.giveDelegation, c.requireDecider)
	post("/account/delegations/:id/end", c.endDelegation)
	post("/calls/:id/approve", c.approve, c.requireDecider)
	post("/calls/:id/deny", c.deny, c.requireDecider)
	post("/calls/:id/revoke", c.revoke, c.requireDecider)
	post("/calls/:id/passkey/begin", c.beginPasskeyApproval, c.requireDecider)
	post("/calls/:id/passkey/finish", c.finishPasskeyApproval, c.requireDecider)
	post("/blocks/clear", c.clearBlock, c.requireDecider)
	c.routesBatch(e, post)
	c.routesPlans(e, post)
	c.routesAllowances(e, post)
	c.routesCounter(e, post)
	c.routesUnresolved(e, post)
	c.routesTokens(e, post)
	post("/admin/users", c.addUser, c.requireAdmin)
	post("/admin/users/:name/disable", c.disableUser, c.requireAdmin)
	post("/admin/users/end-sessions", c.endSessions, c.requireAdmin)
	post("/admin/tokens", c.createToken, c.requireAdmin)
	post("/admin/tokens/:id/revoke", c.revokeToken, c.requireAdmin)
	post("/admin/freeze", c.freeze, c.requireAdmin)
	post("/admin/unfreeze", c.unfreeze, c.requireAdmin)
	post("/admin/replay", c.replay, c.requireAdmin)
	post("/admin/evidence-pack", c.evidencePack, c.requireAdmin)
}

// shutdown closes every socket (asking pages to reconnect later) and
// stops the console's goroutines.
func (c *Console) shutdown() {
	c.once.Do(func() {
		c.connMu.Lock()
		c.closing = true
		c.connMu.Unlock()
		close(c.stop)
	})
	done := make(chan struct{})
	go func() { c.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		c.log.Warn("console: sockets still closing after 5 s")
	}
}

// WantsHTML reports whether an error on this request is answered with a
// page rather than the API's JSON (server.Pages).
func (c *Console) WantsHTML(ec echo.Context) bool {
	p := ec.Request().URL.Path
	switch {
	case strings.HasPrefix(p, "/api/"), p == "/healthz", p == "/metrics", p == "/ws", strings.HasPrefix(p, static.Prefix):
		return false
	case p == "/account/passkeys/begin", p == "/account/passkeys/finish",
		strings.HasPrefix(p, "/calls/") && (strings.HasSuffix(p, "/passkey/begin") || strings.HasSuffix(p, "/passkey/finish")):
		return false
	case p == "/", p == "/login", p == "/logout", p == "/admin", p == "/history", p == "/account", p == unresolvedPath,
		strings.HasPrefix(p, "/account/"), strings.HasPrefix(p, "/auth/"),
		strings.HasPrefix(p, "/calls/"), strings.HasPrefix(p, statusPath), strings.HasPrefix(p, "/admin/"), strings.HasPrefix(p, "/blocks/"),
		strings.HasPrefix(p, "/history/"), strings.HasPrefix(p, "/plans/"):
		return true
	}
	return strings.Contains(ec.Request().Header.Get("Accept"), "text/html")
}

// ErrorPage renders an error as a page, with the navigation when the
// request had a session (server.Pages).
func (c *Console) ErrorPage(ec echo.Context, status int, msg string) {
	p := templates.Page{Title: http.StatusText(status), Now: c.now()}
	if v, err := c.currentViewer(ec); err == nil {
		p.Viewer = v.templ()
	}
	if err := c.render(ec, status, templates.ErrorPage(templates.ErrorView{Page: p, Status: status, Message: msg})); err != nil {
		_ = ec.String(status, msg)
	}
}

// render writes a component as the response. It renders into memory
// first, so a failure yields an error page rather than half a page.
func (c *Console) render(ec echo.Context, status int, comp templ.Component) error {
	var buf bytes.Buffer
	buf.Grow(pageSize)
	if err := comp.Render(ec.Request().Context(), &buf); err != nil {
		return fmt.Errorf("console: render page: %w", err)
	}
	ec.Response().Header()["Cache-Control"] = noStore
	return ec.HTMLBlob(status, buf.Bytes())
}

// pageSize is room for a call's page (8 to 13 KiB) in one allocation,
// where the buffer would grow two or three times.
const pageSize = 16 << 10

// noStore is the Cache-Control of every page, one slice shared by them all
// (a response adding to it copies it).
var noStore = []string{"no-store"}

// renderBytes renders a fragment for the socket.
func renderBytes(comp templ.Component) ([]byte, error) {
	var buf bytes.Buffer
	if err := comp.Render(context.Background(), &buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// sweepLoop closes sockets whose sessions ended without passing through
// this console (a timeout, or a user disabled from the command line).
func (c *Console) sweepLoop() {
	t := time.NewTicker(c.cfg.SweepInterval)
	defer t.Stop()
	prune := time.NewTicker(time.Hour)
	defer prune.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			c.sweep(context.Background())
		case <-prune.C:
			if _, err := c.accounts.PruneSessions(context.Background(), c.now().Add(-c.cfg.AbsoluteTimeout-24*time.Hour)); err != nil {
				c.log.Warn("console: prune sessions", slog.Any("error", err))
			}
		}
	}
}

// sweep checks the session of every open socket and closes those whose
// session is over.
func (c *Console) sweep(ctx context.Context) {
	ids := c.hub.sessionIDs()
	if len(ids) == 0 {
		return
	}
	rows, err := c.accounts.Sessions(ctx, ids)
	if err != nil {
		c.log.Warn("console: check socket sessions", slog.Any("error", err))
		return
	}
	now := c.now()
	var ended []string
	for _, id := range ids {
		row, ok := rows[id]
		if !ok {
			ended = append(ended, id)
			continue
		}
		if reason := c.sessionOver(row, now); reason != "" {
			if !row.Revoked() {
				if err := c.accounts.RevokeSession(ctx, id, reason, now); err != nil {
					c.log.Warn("console: end session", slog.Any("error", err))
				}
			}
			ended = append(ended, id)
		}
	}
	if len(ended) > 0 {
		c.hub.endSessions(ended...)
	}
}

var errNoSession = errors.New("console: no console session")
