package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/countersign/countersign/docs"
	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/console"
	"github.com/countersign/countersign/internal/control"
	"github.com/countersign/countersign/internal/grant"
	"github.com/countersign/countersign/internal/highwater"
	"github.com/countersign/countersign/internal/mcp"
	"github.com/countersign/countersign/internal/policy"
	"github.com/countersign/countersign/internal/present"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/server"
	"github.com/countersign/countersign/internal/tools"
	"github.com/countersign/countersign/internal/tracing"
)

// Issuer is the iss claim of every grant this console mints.
const Issuer = "countersign"

// Audit checkpoints are signed every checkpointEvery entries, and every
// checkpointInterval when the head has moved.
const (
	checkpointInterval = 5 * time.Minute
	checkpointEvery    = 1000
)

// dataDir resolves the data directory: the flag, then COUNTERSIGN_DATA, then
// ./countersign-data.
func dataDir(e *env, flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	if v := e.getenv("COUNTERSIGN_DATA"); v != "" {
		return v
	}
	return "countersign-data"
}

func dbPath(data string) string      { return filepath.Join(data, "countersign.db") }
func keysDir(data string) string     { return filepath.Join(data, "keys") }
func controlPath(data string) string { return filepath.Join(data, "control.sock") }

// app is an opened data directory: database, keys, tools and queue.
type app struct {
	data     string
	db       *engine
	accounts *account.Service
	keys     *grant.Keyring
	tools    *tools.Registry
	policy   *policy.Policy
	toolsAt  string // the tools file
	queue    *queue.Service
	notify   *notifyApp // nil when no notifications are configured
	mark     *highwater.File
	log      *slog.Logger
	tracer   *tracing.Tracer // nil when traces are off
}

// openApp opens the data directory. ns, when not nil, says where the
// notifications configuration is; nil opens the console without them.
//
// tracer, when given and not nil, traces the console's store writes and
// notifications (and serve its requests).
func openApp(data, dbURL, toolsFile string, ns *notifySource, log *slog.Logger, tracer ...*tracing.Tracer) (*app, error) {
	if err := makeDataDir(data); err != nil {
		return nil, err
	}
	pol, toolsAt, err := loadPolicy(data, toolsFile)
	if err != nil {
		return nil, err
	}
	d, err := openStore(context.Background(), data, dbURL)
	if err != nil {
		return nil, err
	}
	mark, err := openMark(context.Background(), data, d)
	if err != nil {
		d.Close()
		return nil, err
	}
	keys, err := grant.OpenKeyring(keysDir(data), Issuer, time.Now)
	if err != nil {
		d.Close()
		return nil, err
	}
	if ns != nil && ns.toolsFile == "" {
		ns.toolsFile = toolsFile
	}
	n, err := openNotify(data, ns, d, log)
	if err == nil && ns != nil {
		err = checkRuleChannels(pol.Registry(), n)
	}
	if err != nil {
		d.Close()
		return nil, err
	}
	// Decision pages carry a presentation token under a secret every
	// replica of this database shares (internal/present).
	secret, err := accountsOf(d).ConsoleSecret(context.Background(), "presentation", 32)
	var shown *present.Key
	if err == nil {
		shown, err = present.NewKey(secret)
	}
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("presentation key: %w", err)
	}
	qc := queue.Config{Store: d.queue, Policy: pol, Signer: keys, Logger: log, Presentations: shown}
	var tr *tracing.Tracer
	if len(tracer) > 0 && tracer[0] != nil {
		tr = tracer[0]
		qc.Tracer = tr
	}
	if n != nil {
		qc.Notifier = n.router
	}
	q := queue.NewService(qc)
	if n != nil {
		n.router.SetRisk(func(tool string) (string, []string) {
			if reg := q.Tools(); reg != nil {
				if t, ok := reg.Tool(tool); ok {
					return t.Risk, t.Effects
				}
			}
			return "", nil
		})
	}
	// Every decision from here on names this tools file: record which
	// file is in force, with each tool's definition digest.
	if err := q.RecordTools(context.Background(), "console", toolsAt); err != nil {
		d.Close()
		return nil, fmt.Errorf("record the tools file: %w", err)
	}
	log.Info("tools file loaded", slog.String("file", toolsAt), slog.String("digest", pol.ToolsDigest()),
		slog.Int("tools", len(pol.Registry().Names())))
	return &app{data: data, db: d, accounts: accountsOf(d), keys: keys, tools: pol.Registry(), policy: pol, tracer: tr,
		toolsAt: toolsAt, queue: q, notify: n, mark: mark, log: log}, nil
}

// loadPolicy reads the tools file (the flag, else DATA/tools.yaml) and
// compiles its rules: a rule that does not compile, or that a tool does
// not allow, refuses the start.
func loadPolicy(data, file string) (*policy.Policy, string, error) {
	if file == "" {
		file = filepath.Join(data, "tools.yaml")
	}
	if fi, err := os.Stat(file); err == nil && fi.IsDir() {
		return nil, file, fmt.Errorf("--tools %s is a directory: pass the tools file itself, e.g. --tools %s", file, filepath.Join(file, "tools.yaml"))
	}
	pol, err := policy.Load(file)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, file, fmt.Errorf("no tools file at %s: pass --tools FILE (see examples/tools.yaml)", file)
		}
		return nil, file, err
	}
	return pol, file, nil
}

func (a *app) Close() error {
	err := a.db.Close()
	a.mark.Close()
	return err
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}

// checkLogLevel refuses a --log-level newLogger would not understand.
func checkLogLevel(level string) error {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return fmt.Errorf("--log-level %q: use debug, info, warn or error", level)
	}
	return nil
}

// check refuses, before anything is opened, the flags whose mistake would
// otherwise show only later or not at all.
func (f *serveFlags) check() error {
	if err := checkLogLevel(f.logLevel); err != nil {
		return err
	}
	if f.mcp.hold > mcp.MaxHold {
		return fmt.Errorf("--hold %s is longer than MCP clients wait: at most %s", f.mcp.hold, mcp.MaxHold)
	}
	if f.mcp.maxSessions < 1 {
		return fmt.Errorf("--max-mcp-sessions-per-token %d: give at least 1 (the default is %d)", f.mcp.maxSessions, mcp.DefaultMaxSessionsPerToken)
	}
	if f.maxWaits < 1 {
		return fmt.Errorf("--max-waits-per-token %d: give at least 1 (the default is %d)", f.maxWaits, server.DefaultMaxWaitsPerToken)
	}
	if f.idle <= 0 || f.absolute <= 0 {
		return fmt.Errorf("--session-idle %s, --session-max %s: give durations above zero, e.g. 30m and 12h (the defaults)", f.idle, f.absolute)
	}
	for _, h := range f.allowedHost {
		if h == "" || strings.ContainsAny(h, "/ ") {
			return fmt.Errorf("--allowed-host %q: give a name as requests carry it in Host, host or host:port, e.g. health.internal:8080 (no scheme, no path)", h)
		}
	}
	if f.publicURL != "" {
		u, err := url.Parse(f.publicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("--public-url %q: give the address browsers open, with its scheme, e.g. https://approvals.example.com", f.publicURL)
		}
	}
	return nil
}

type serveFlags struct {
	addr, data, db, tools, logLevel string
	trustedKeys                     string
	pprof, publicURL, notify        string
	idle, absolute                  time.Duration
	trustedProxies, allowedHost     listFlag
	maxWaits                        int
	operatorAPI                     bool
	mcp                             mcpFlags
	identity                        identityFlags
	// ready, when set, runs once every setting has been checked and the
	// server is about to answer: serve says it is listening only then,
	// and demo prints its logins and starts its agent. An error stops the
	// start.
	ready func() error
}

// listFlag is a flag that may be repeated, each value a comma-separated
// list.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

func (f *serveFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.addr, "addr", "127.0.0.1:8080", "address to listen on")
	fs.StringVar(&f.data, "data", "", "data directory (default $COUNTERSIGN_DATA or ./countersign-data)")
	fs.StringVar(&f.db, "db", "", dbFlagUsage)
	fs.StringVar(&f.trustedKeys, "trusted-keys", "", "trust file of a cluster of replicas (console keys trust): the other replicas' grant and audit keys that this one accepts (default $"+envTrustedKeys+")")
	fs.StringVar(&f.tools, "tools", "", "tools file (default DATA/tools.yaml)")
	fs.StringVar(&f.notify, "notify", "", "notifications file: webhooks, Slack, email, Web Push and routing (default DATA/notify.yaml if present, else the tools file's notifications section; see docs/notifications.md)")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&f.publicURL, "public-url", "", "the console's address as browsers see it, e.g. https://approvals.example.com behind a TLS proxy (default http://ADDR); https turns on Secure __Host- cookies")
	fs.StringVar(&f.pprof, "pprof", "", "serve Go's profiler on this loopback address, e.g. 127.0.0.1:6060 (off by default)")
	fs.Var(&f.trustedProxies, "trusted-proxy", "CIDR network of a reverse proxy in front of the console (repeat or separate with commas); only requests from these have X-Forwarded-For read, right to left, for the client address that logins are throttled by")
	fs.BoolVar(&f.operatorAPI, "operator-api", false, "serve the operator API under /api/v1/operator for people's own operator tokens (made on their account page); see docs/security.md for its threat model")
	fs.Var(&f.allowedHost, "allowed-host", "another name (host or host:port) that requests may carry in Host besides the public URL's, IP addresses and localhost, e.g. a health checker's; other names are refused to shut out DNS rebinding")
	fs.IntVar(&f.maxWaits, "max-waits-per-token", server.DefaultMaxWaitsPerToken, "how many long-polls and held MCP tools/call requests one API token may hold open at once; one more long-poll is answered 429 too_many_waits, one more MCP call a too_many_waits tool error")
	fs.DurationVar(&f.idle, "session-idle", 30*time.Minute, "console session idle timeout")
	fs.DurationVar(&f.absolute, "session-max", 12*time.Hour, "console session absolute timeout")
	f.mcp.register(fs)
	f.identity.register(fs)
}

func cmdServe(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	withUsage(fs, e, `usage: console serve [--addr HOST:PORT] [--data DIR] [--tools FILE] [flags]

Runs the console: the agent API, the operator console and its WebSocket,
metrics, and the control socket in the data directory.`)
	var f serveFlags
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if err := f.check(); err != nil {
		fmt.Fprintf(e.stderr, "console serve: %v\n", err)
		return 2
	}
	log := newLogger(e.stderr, f.logLevel)
	if limit, from := tuneGC(e.getenv, "/"); limit > 0 {
		log.Info("soft memory limit set from the cgroup's (GOMEMLIMIT overrides it)",
			slog.Int64("bytes", limit), slog.Int("percent", serveMemoryLimitPercent), slog.String("cgroup_file", from))
	} else if e.getenv("GOMEMLIMIT") == "" {
		log.Debug("no cgroup memory limit found, so no soft memory limit is set (GOMEMLIMIT sets one)")
	}
	// Listen first: links in notifications need the address when no
	// --public-url names it.
	ln, err := listen(f.addr)
	if err != nil {
		fmt.Fprintf(e.stderr, "console serve: %v\n", err)
		return 1
	}
	defer ln.Close()
	// Traces, when the standard OTEL_* variables name an OTLP endpoint.
	tracer, err := tracing.FromEnv(e.getenv)
	if err != nil {
		fmt.Fprintf(e.stderr, "console serve: %v\n", err)
		return 2
	}
	if tracer != nil {
		log.Info("traces are exported over OTLP/HTTP")
		defer func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := tracer.Shutdown(sctx); err != nil {
				log.Warn("export the last traces", slog.Any("error", err))
			}
		}()
	}
	a, err := openApp(dataDir(e, f.data), databaseURL(e, f.db), f.tools, f.notifySource(e, ln), log, tracer)
	if err != nil {
		fmt.Fprintf(e.stderr, "console serve: %v\n", err)
		return 1
	}
	defer a.Close()
	if path := trustedKeysPath(e, f.trustedKeys); path != "" {
		if err := a.keys.Trust(path); err != nil {
			fmt.Fprintf(e.stderr, "console serve: %v\n", err)
			return 1
		}
		ts := a.keys.TrustSet()
		log.Info("trust file loaded", slog.String("file", path), slog.Int("grant_keys", len(ts.Keys)),
			slog.Int("audit_keys", len(ts.AuditKeys)))
	}
	f.ready = func() error {
		_, err := fmt.Fprintf(e.stdout, "Countersign listening on http://%s (data %s)\n", ln.Addr(), a.data)
		return err
	}
	if err := a.serve(ctx, ln, f); err != nil {
		fmt.Fprintf(e.stderr, "console serve: %v\n", err)
		return 1
	}
	return 0
}

// listen opens the console's address (--addr). An address already taken,
// most often by another console still running, names the way out.
func listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("%s is already in use (by another console still running, or another program): "+
			"stop it, or pass --addr with a free port, e.g. --addr 127.0.0.1:8081", addr)
	}
	if _, _, perr := net.SplitHostPort(addr); perr != nil {
		return nil, fmt.Errorf("--addr %q: give HOST:PORT, e.g. 127.0.0.1:8080 (or :8080 for every interface)", addr)
	}
	if err != nil {
		return nil, fmt.Errorf("listen on --addr %s: %w", addr, err)
	}
	return ln, nil
}

// publicURLOf is --public-url, else the listener's address.
func (f *serveFlags) publicURLOf(ln net.Listener) string {
	if f.publicURL != "" {
		return strings.TrimRight(f.publicURL, "/")
	}
	return "http://" + ln.Addr().String()
}

func (f *serveFlags) notifySource(e *env, ln net.Listener) *notifySource {
	return &notifySource{file: f.notify, toolsFile: f.tools, publicURL: f.publicURLOf(ln), getenv: e.getenv}
}

// serve runs the HTTP server, the control socket, the expiry loop and the
// notification dispatcher until ctx ends, then shuts them down in order.
// A stop (Ctrl-C, SIGTERM) that comes while it is still starting is a
// clean stop too: the write or wait it cancelled is not a failure.
func (a *app) serve(ctx context.Context, ln net.Listener, f serveFlags) error {
	err := a.run(ctx, ln, f)
	if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
		a.log.Info("stopped while starting", slog.String("cancelled", err.Error()))
		return nil
	}
	return err
}

func (a *app) run(ctx context.Context, ln net.Listener, f serveFlags) error {
	publicURL := f.publicURLOf(ln)
	proxies, err := server.ParseTrustedProxies(f.trustedProxies)
	if err != nil {
		return fmt.Errorf("--trusted-proxy: %w", err)
	}
	signer, err := audit.LoadOrCreateKey(auditKeyPath(a.data))
	if err != nil {
		return err
	}
	disp, notes := a.dispatcher()
	// The API's long-polls and the MCP gateway's held calls count against
	// one cap per token.
	waits := server.NewTokenWaits(f.maxWaits)
	links, err := console.NewStatusLinks(ctx, a.accounts, publicURL)
	if err != nil {
		return err
	}
	gw, cat, err := a.gateway(f, publicURL, waits, links)
	if err != nil {
		return err
	}
	var mcpHandler http.Handler
	if gw != nil {
		mcpHandler = gw
	}
	cc := &console.Config{IdleTimeout: f.idle, AbsoluteTimeout: f.absolute, PublicURL: publicURL}
	if gw != nil {
		// A console without agent tokens names its MCP endpoints in the
		// help on how to connect an agent.
		for _, u := range a.tools.Upstreams() {
			cc.MCPEndpoints = append(cc.MCPEndpoints, "/mcp/"+u.Name)
		}
	}
	if err := f.identity.consoleIdentity(ctx, a.accounts, publicURL, cc); err != nil {
		return err
	}
	// Every goroutine started below is waited for on every way out: the
	// deferred cancel runs first, then the deferred Wait.
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cfg := server.Config{
		Queue: a.queue, Accounts: a.accounts, Audit: a.db, Ping: a.db.Ping, Writes: a.db.writeCounter(),
		Keys: a.keys, Logger: a.log, OpenAPI: docs.OpenAPI, TrustedProxies: proxies,
		AllowedHosts: f.allowedHost, Waits: waits, PublicURL: publicURL,
		MCP: mcpHandler, OperatorAPI: f.operatorAPI, Catalog: cat, Tracer: a.tracer,
	}
	cc.Queue, cc.Accounts, cc.History, cc.Audit, cc.AuditSigner = a.queue, a.accounts, a.db, a.db, signer
	cc.EvidencePack = evidencePackFunc(a.db, a.keys, signer)
	cc.Notifications, cc.Catalog, cc.Logger = notes, cat, a.log
	cc.OperatorAPI = f.operatorAPI
	if a.db.pg != nil {
		// Other replicas' changes reach this one's pages and long-polls.
		live, err := a.db.pg.Listen(ctx, a.queue.Apply, a.log)
		if err != nil {
			return fmt.Errorf("listen for other replicas' changes: %w", err)
		}
		cfg.Live = live
		// Who has which call page open, on every replica.
		cc.Presence = live.Presence()
		// The listener says goodbye to the other replicas' presence on
		// the way out.
		wg.Add(1)
		go func() { defer wg.Done(); <-live.Done() }()
	}
	srv, err := server.New(cfg)
	if err != nil {
		return err
	}
	cc.Metrics = srv.Registerer()
	if err := srv.Registerer().Register(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "countersign_highwater_refusals_total",
		Help: "Commits refused because the database's audit chain is behind, or beside, this data directory's high-water mark: " +
			"the database was rolled back or replaced under the running console."},
		func() float64 { return float64(a.mark.Refusals()) })); err != nil {
		return err
	}
	pages, err := console.New(*cc)
	if err != nil {
		return err
	}
	srv.Mount(pages)
	if f.pprof != "" {
		if err := servePprof(ctx, &wg, f.pprof, a.log); err != nil {
			return err
		}
	}
	if gw != nil {
		srv.Registerer().MustRegister(gw.Collectors()...)
	}
	if disp != nil {
		srv.Registerer().MustRegister(disp.Collectors()...)
		// Every commit may have written outbox rows: wake the dispatcher.
		a.queue.Subscribe(func(queue.Event) { disp.Kick() })
		if cat != nil {
			// So may a pinned definition that awaits review.
			cat.OnChange(func(string) { disp.Kick() })
		}
		wg.Add(1)
		go func() { defer wg.Done(); disp.Run(ctx) }()
	}
	wg.Add(2)
	go func() { defer wg.Done(); a.queue.Run(ctx) }() // ends the queue, and its long-polls, with ctx
	go func() { defer wg.Done(); pages.Run(ctx) }()
	if gw != nil {
		wg.Add(1)
		go func() { defer wg.Done(); gw.Run(ctx) }()
	}

	wg.Add(1)
	go func() {
		defer wg.Done()
		audit.RunCheckpoints(ctx, a.db, signer, checkpointInterval, checkpointEvery, a.log)
	}()

	ctl, err := control.Listen(controlPath(a.data))
	if err != nil {
		return err
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := control.ServeServices(ctx, ctl, control.Services{Queue: a.queue, Catalog: cat, Accounts: a.accounts}, a.log); err != nil && ctx.Err() == nil {
			a.log.Error("control socket", slog.Any("error", err))
		}
	}()
	if f.ready != nil {
		if err := f.ready(); err != nil {
			return err
		}
	}
	err = srv.Serve(ctx, ln)
	cancel()
	wg.Wait()
	if gw != nil {
		// No call is redeemed from now on, and those redeemed are
		// forwarded and their outcomes written before the database closes.
		gw.Close()
	}
	return err
}

// servePprof serves net/http/pprof on its own loopback listener, never on
// the console's address.
func servePprof(ctx context.Context, wg *sync.WaitGroup, addr string, log *slog.Logger) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--pprof: %w", err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("--pprof must be a loopback address, not %s", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--pprof: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	wg.Add(2)
	go func() { defer wg.Done(); <-ctx.Done(); srv.Close() }()
	go func() { defer wg.Done(); srv.Serve(ln) }()
	log.Info("profiler listening", slog.String("addr", ln.Addr().String()))
	return nil
}

// identityPath records which database a data directory was created with.
func identityPath(data string) string { return filepath.Join(data, "database-identity") }

// checkDatabaseIdentity refuses to start on a database that is not the one
// this data directory has been using: a deleted database file would
// otherwise come back empty, forgetting which grants were redeemed and the
// whole history, without a word. With record, the first start records the
// identity; without (a command that must find the console there), a
// directory that has none is refused on PostgreSQL and left unrecorded on
// SQLite, whose database is in the directory itself.
func checkDatabaseIdentity(data string, d *engine, record bool) error {
	want, err := os.ReadFile(identityPath(data))
	if errors.Is(err, os.ErrNotExist) {
		switch {
		case record:
			return writeFileAtomic(identityPath(data), []byte(d.Identity()+"\n"))
		case d.pg != nil:
			return fmt.Errorf("%s has no %s, so no console has used it with a database yet; nothing was changed", data, identityPath(data))
		default:
			return nil
		}
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", identityPath(data), err)
	}
	if got := strings.TrimSpace(string(want)); got != d.Identity() {
		return fmt.Errorf("the database %s is not the one this data directory was created with (identity %s, found %s): "+
			"it was deleted or replaced, and starting would forget which grants were redeemed. Restore the database, "+
			"or, to start over on purpose, remove %s", d.where, got, d.Identity(), identityPath(data))
	}
	return nil
}

// writeFileAtomic writes an owner-only file through a temporary file, fsync
// and rename, so a crash leaves the old file or the new one, never half.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer dir.Close()
	return dir.Sync()
}
