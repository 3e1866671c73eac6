package console

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/gorilla/websocket"
	"golang.org/x/crypto/argon2"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/db"
	"github.com/countersign/countersign/internal/mcp/catalog"
	"github.com/countersign/countersign/internal/policy"
	"github.com/countersign/countersign/internal/present"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/server"
	"github.com/countersign/countersign/internal/testkit"
	"github.com/countersign/countersign/internal/testkit/sqlitekit"
	"github.com/countersign/countersign/internal/tools"
)

// newConsoleClock returns a clock stopped at the current second.
func newConsoleClock() *testkit.Clock {
	return testkit.NewClock(time.Now().UTC().Truncate(time.Second))
}

// consoleEnv is a real server on 127.0.0.1 with a real SQLite file, the
// example tools, and a fake clock.
type consoleEnv struct {
	t     testing.TB
	clock *testkit.Clock
	db    *db.DB
	q     *queue.Service
	srv   *server.Server
	c     *Console
	url   string
	stop  func()
}

// cheapHash hashes a password with tiny argon2id parameters so tests log
// in quickly; the console verifies whatever parameters a hash names.
func cheapHash(tb testing.TB, pw string) string {
	tb.Helper()
	salt := make([]byte, 16)
	rand.Read(salt)
	key := argon2.IDKey([]byte(pw), salt, 1, 64, 1, 32)
	enc := base64.RawStdEncoding
	h := fmt.Sprintf("$argon2id$v=19$m=64,t=1,p=1$%s$%s", enc.EncodeToString(salt), enc.EncodeToString(key))
	if err := account.Verify(h, pw); err != nil {
		tb.Fatalf("cheap hash does not verify: %v", err)
	}
	return h
}

func newConsoleEnv(tb testing.TB, adjust ...func(*Config)) *consoleEnv {
	tb.Helper()
	return newConsoleEnvWith(tb, nil, adjust...)
}

// envConfig is what a test may adjust before the server and its console
// are built: the server's Config, the console's, and the catalog the
// console's review pages read.
type envConfig struct {
	server.Config
	Console     Config
	Catalog     *catalog.Catalog
	AuditSigner *audit.Signer
}

// serveStack builds a server and its console from sc (the console takes
// the server's queue, accounts, audit trail, logger and clock, and its
// registry) and serves them on ln until cancel; done has Serve's error,
// ran is closed when the console's Run returned.
func serveStack(tb testing.TB, ln net.Listener, sc server.Config, cc Config, history queue.History) (srv *server.Server, c *Console, done chan error, ran chan struct{}, cancel func()) {
	tb.Helper()
	srv, err := server.New(sc)
	if err != nil {
		tb.Fatal(err)
	}
	cc.Queue, cc.Accounts, cc.History, cc.Audit, cc.Logger, cc.Now = sc.Queue, sc.Accounts, history, sc.Audit, sc.Logger, sc.Now
	cc.Metrics = srv.Registerer()
	if c, err = New(cc); err != nil {
		tb.Fatal(err)
	}
	srv.Mount(c)
	c.dummyHash = cheapHash(tb, "no such account")
	ctx, cancel := context.WithCancel(context.Background())
	done, ran = make(chan error, 1), make(chan struct{})
	go func() { defer close(ran); c.Run(ctx) }()
	go func() { done <- srv.Serve(ctx, ln) }()
	return srv, c, done, ran, cancel
}

// newConsoleEnvWith is newConsoleEnv with the server's Config adjusted too.
func newConsoleEnvWith(tb testing.TB, server func(*envConfig), adjust ...func(*Config)) *consoleEnv {
	tb.Helper()
	reg, err := tools.Load("../../examples/tools.yaml")
	if err != nil {
		tb.Fatal(err)
	}
	return newConsoleEnvTools(tb, reg, nil, server, adjust...)
}

// newConsoleEnvTools is newConsoleEnvWith over the given tools and rules
// (pol may be nil).
func newConsoleEnvTools(tb testing.TB, reg *tools.Registry, pol *policy.Policy, adjustServer func(*envConfig), adjust ...func(*Config)) *consoleEnv {
	tb.Helper()
	return newConsoleEnvQueueConfig(tb, reg, pol, nil, adjustServer, adjust...)
}

// newConsoleEnvQueueConfig is newConsoleEnvTools with the queue's Config
// adjusted too (adjustQueue may be nil).
func newConsoleEnvQueueConfig(tb testing.TB, reg *tools.Registry, pol *policy.Policy, adjustQueue func(*queue.Config),
	adjustServer func(*envConfig), adjust ...func(*Config)) *consoleEnv {
	tb.Helper()
	shown, err := present.NewKey([]byte("console tests' presentation key!"))
	if err != nil {
		tb.Fatal(err)
	}
	k := sqlitekit.NewQueue(tb, sqlitekit.WithTools(reg), sqlitekit.WithPolicy(pol), sqlitekit.WithClock(newConsoleClock()),
		sqlitekit.WithConfig(func(cfg *queue.Config) {
			cfg.Presentations = shown
			if adjustQueue != nil {
				adjustQueue(cfg)
			}
		}))
	clock, d, keys, q := k.Clock, k.DB, k.Keys, k.Service
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	cc := Config{PublicURL: "http://" + ln.Addr().String(), SweepInterval: 50 * time.Millisecond}
	for _, f := range adjust {
		f(&cc)
	}
	cfg := envConfig{Config: server.Config{Queue: q, Accounts: account.NewService(d.Accounts(), clock.Now), Audit: d, Ping: d.Ping,
		Keys: keys, Logger: log, Now: clock.Now, PublicURL: cc.PublicURL}, Console: cc}
	if adjustServer != nil {
		adjustServer(&cfg)
	}
	cc = cfg.Console
	cc.Catalog, cc.AuditSigner = cfg.Catalog, cfg.AuditSigner
	srv, c, done, ran, cancel := serveStack(tb, ln, cfg.Config, cc, d.Store())
	var once sync.Once
	env := &consoleEnv{t: tb, clock: clock, db: d, q: q, srv: srv, c: c, url: "http://" + ln.Addr().String()}
	env.stop = func() {
		once.Do(func() {
			cancel()
			q.Shutdown() // the harness owns the queue: open long-polls end
			if err := <-done; err != nil {
				tb.Errorf("Serve: %v", err)
			}
			<-ran
			d.Close()
		})
	}
	tb.Cleanup(env.stop)
	return env
}

func (e *consoleEnv) addUser(name string, role account.Role, pw string) {
	e.t.Helper()
	if _, err := accountsOf(e.db).AddUser(context.Background(), name, role, cheapHash(e.t, pw), "test", audit.ChannelCLI); err != nil {
		e.t.Fatal(err)
	}
}

// submit proposes a call through the queue as an agent would.
func (e *consoleEnv) submit(actor, audience, body string) *queue.Call {
	e.t.Helper()
	c, _, err := e.q.Submit(context.Background(), queue.Principal{Actor: actor, Audience: audience}, []byte(body))
	if err != nil {
		e.t.Fatalf("submit %s: %v", body, err)
	}
	return c
}

// insertRaw stores a call that no tool validated, as a tampered database or
// a future schema could hold: the console must still show it safely.
func (e *consoleEnv) insertRaw(actor, tool, target string, args canonical.Object, rationale string) *queue.Call {
	e.t.Helper()
	env := canonical.Envelope{Actor: actor, Audience: "test-host", Tool: tool, Target: target, Args: args}
	b, err := env.Canonical()
	if err != nil {
		e.t.Fatal(err)
	}
	now := e.clock.Now()
	c := &queue.Call{ID: queue.NewCallID(), Actor: actor, Audience: "test-host", Tool: tool, Target: target, Args: args,
		Rationale: rationale, Envelope: b, Digest: canonical.DigestOf(b), Status: queue.StatusPending,
		ApprovalsRequired: 1, GrantTTL: time.Minute, CreatedAt: now, DecideBy: now.Add(time.Hour)}
	if err := e.db.Store().Update(context.Background(), func(tx queue.Tx) error { return tx.InsertCall(c) }); err != nil {
		e.t.Fatal(err)
	}
	return c
}

// consoleBrowser is a cookie-keeping HTTP client that does not follow redirects
// and sends what a consoleBrowser sends on same-origin requests.
type consoleBrowser struct {
	e      *consoleEnv
	client *http.Client
	jar    *cookiejar.Jar
}

// exec runs a statement on the console's SQLite file directly, as someone
// editing the database could.
func (e *consoleEnv) exec(q string, args ...any) {
	e.t.Helper()
	if _, err := e.db.SQL().Exec(q, args...); err != nil {
		e.t.Fatal(err)
	}
}

func (e *consoleEnv) browser() *consoleBrowser {
	jar, _ := cookiejar.New(nil)
	return &consoleBrowser{e: e, jar: jar, client: &http.Client{
		Jar:           jar,
		Timeout:       10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

type htmlPage struct {
	status int
	header http.Header
	body   string
	doc    *goquery.Document
}

func (p *htmlPage) find(testid string) *goquery.Selection {
	return p.doc.Find(`[data-testid="` + testid + `"]`)
}

func (b *consoleBrowser) do(req *http.Request) *htmlPage {
	b.e.t.Helper()
	resp, err := b.client.Do(req)
	if err != nil {
		b.e.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		b.e.t.Fatal(err)
	}
	doc, err := goquery.NewDocumentFromReader(strings.NewReader(string(body)))
	if err != nil {
		b.e.t.Fatal(err)
	}
	return &htmlPage{status: resp.StatusCode, header: resp.Header, body: string(body), doc: doc}
}

func (b *consoleBrowser) get(path string) *htmlPage {
	b.e.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, b.e.url+path, nil)
	req.Header.Set("Accept", "text/html")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	return b.do(req)
}

// post sends a form as a same-origin consoleBrowser would; headers override.
func (b *consoleBrowser) post(path string, form url.Values, headers ...string) *htmlPage {
	b.e.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, b.e.url+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "text/html")
	req.Header.Set("Origin", b.e.url)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i+1] == "" {
			req.Header.Del(headers[i])
		} else {
			req.Header.Set(headers[i], headers[i+1])
		}
	}
	return b.do(req)
}

// login logs in through the login form and fails the test unless it
// redirects to the queue.
func (b *consoleBrowser) login(name, pw string) {
	b.e.t.Helper()
	if p := b.tryLogin(name, pw); p.status != http.StatusSeeOther || p.header.Get("Location") != "/" {
		b.e.t.Fatalf("login %s: status %d, location %q: %s", name, p.status, p.header.Get("Location"), p.find("login-error").Text())
	}
}

func (b *consoleBrowser) tryLogin(name, pw string) *htmlPage {
	b.e.t.Helper()
	lp := b.get("/login")
	token, _ := lp.doc.Find(`form[data-testid="login-form"] input[name="csrf"]`).Attr("value")
	return b.post("/login", url.Values{"csrf": {token}, "name": {name}, "password": {pw}})
}

// csrf reads the session's form token from a page.
// presented is the presentation token the call's page gives this
// browser's operator in its approve form ("" when it shows none).
func (b *consoleBrowser) presented(id string) string {
	b.e.t.Helper()
	v, _ := b.get("/calls/" + id).doc.Find(`[data-testid="approve-presented"]`).Attr("value")
	return v
}

func (b *consoleBrowser) csrf() string {
	b.e.t.Helper()
	p := b.get("/")
	tok, ok := p.doc.Find(`form[data-testid="logout-form"] input[name="csrf"]`).Attr("value")
	if !ok || tok == "" {
		b.e.t.Fatalf("no CSRF token on the queue page (status %d)", p.status)
	}
	return tok
}

func (b *consoleBrowser) cookieHeader() string {
	u, _ := url.Parse(b.e.url)
	var parts []string
	for _, c := range b.jar.Cookies(u) {
		parts = append(parts, c.Name+"="+c.Value)
	}
	return strings.Join(parts, "; ")
}

// dial opens the console socket with the consoleBrowser's cookies and the given
// Origin ("" sends none).
func (b *consoleBrowser) dial(path, origin string) (*websocket.Conn, *http.Response, error) {
	h := http.Header{}
	if origin != "" {
		h.Set("Origin", origin)
	}
	if c := b.cookieHeader(); c != "" {
		h.Set("Cookie", c)
	}
	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second}
	return d.Dial("ws"+strings.TrimPrefix(b.e.url, "http")+path, h)
}

// mustDial opens a socket and returns it with its first message.
func (b *consoleBrowser) mustDial(path string) (*websocket.Conn, string) {
	b.e.t.Helper()
	conn, resp, err := b.dial(path, b.e.url)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		b.e.t.Fatalf("dial %s: %v (status %d)", path, err, status)
	}
	b.e.t.Cleanup(func() { conn.Close() })
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, msg, err := conn.ReadMessage()
	if err != nil {
		b.e.t.Fatalf("first message on %s: %v", path, err)
	}
	return conn, string(msg)
}

// wsReadUntil reads socket messages until one contains want.
func wsReadUntil(tb testing.TB, conn *websocket.Conn, want string) string {
	tb.Helper()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		_, msg, err := conn.ReadMessage()
		if err != nil {
			tb.Fatalf("waiting for %q: %v", want, err)
		}
		if strings.Contains(string(msg), want) {
			return string(msg)
		}
	}
}

// wsReadClose reads until the socket closes and returns the close code.
func wsReadClose(tb testing.TB, conn *websocket.Conn) (int, []string) {
	tb.Helper()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	var msgs []string
	for {
		_, msg, err := conn.ReadMessage()
		if err != nil {
			if ce, ok := err.(*websocket.CloseError); ok {
				return ce.Code, msgs
			}
			return -1, msgs
		}
		msgs = append(msgs, string(msg))
	}
}

func fragmentDoc(tb testing.TB, msg string) *goquery.Document {
	tb.Helper()
	doc, err := goquery.NewDocumentFromReader(strings.NewReader(msg))
	if err != nil {
		tb.Fatal(err)
	}
	return doc
}

const (
	conRefundBody = `{"tool":"payments.refund","target":"invoice:INV-1042","args":{"amount_minor":129999,"currency":"USD","reason_code":"duplicate","notes":"customer was charged twice"},"rationale":"The customer asked for a refund of the duplicate charge."}`
	conDeployBody = `{"tool":"releases.deploy","target":"service:checkout","args":{"version":"v1.4.2","environment":"production","change_ticket":"CHG-1234","canary_percent":10}}`
)

// accountsOf is the account service over d.
func accountsOf(d *db.DB) *account.Service { return account.NewService(d.Accounts(), nil) }
