// Command loadgen drives a running Countersign console end to end and
// reports what it measured: agents propose calls over the agent API,
// logged-in operator sockets receive the live cards, approvers decide through
// the real web endpoints (session and CSRF token included), and agents
// long-poll and redeem. Agents and approvers speak HTTP/1.1 over a persistent
// connection of their own (conn.go, agent.go), so that loadgen's share of the
// cores it shares with the console stays small. It also measures, in the
// same run, the floor: raw SQLite commits per second with the console's
// settings on the same disk, or, with --db, raw PostgreSQL commits per
// second on the same server.
//
// Given several addresses (replicas on one PostgreSQL database), it spreads
// every step over them round-robin, as a load balancer would: a flow is
// submitted on one replica, waited for on the next, approved on another and
// redeemed on the next again, and the operator sockets are spread too, so
// submit-to-card and approve-to-wake are measured across replicas.
//
// It reads the server's CPU time (user + system) from /proc/PID/stat before
// and after the flows and reports it per flow; the PID is found from the
// process listening on --url's port, or given with --server-pid. The
// machine's load average is recorded at the start and end of each run.
//
// With --ab OLD,NEW it starts the console itself: each binary in turn,
// alternating, --rounds times, each run on a fresh data directory and a
// fresh port, and prints every run and the ratios of NEW to OLD measured
// in the same invocation. One binary (--ab BIN) repeats that binary.
//
// It talks only to the addresses given (or to the consoles it started on
// 127.0.0.1), is bounded in count and time, and stops by itself.
//
//	console serve --data /tmp/cs --tools examples/tools.yaml &
//	go run ./cmd/loadgen --data /tmp/cs --flows 500
//	go run ./cmd/loadgen --db postgres://... --url http://127.0.0.1:8081,http://127.0.0.1:8082 --flows 500
//	go run ./cmd/loadgen --ab /tmp/old/console,/tmp/new/console --rounds 3 --sockets 0 --pending 0 --flows 3000
//
// With --faults it soaks the console with misbehaving executors and checks
// that every call ends in an explained state (see faults.go).
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/gorilla/websocket"
	"github.com/jackc/pgx/v5"

	"github.com/countersign/countersign/client"
	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/db"
	"github.com/countersign/countersign/internal/pgstore"
)

type config struct {
	url       string
	urls      []string
	db        string
	data      string
	agents    int
	sockets   int
	approvers int
	flows     int
	pending   int
	duration  time.Duration
	floorN    int
	jsonOut   string
	serverPID int
	ab        string
	rounds    int
	tools     string
	port      int
	// countSyncs counts the server's syncs and WAL writes with perf
	// (syscount.go).
	countSyncs bool
	// cpuProfile, when set, is where loadgen writes its own CPU profile
	// of the flows.
	cpuProfile string
	// The fault soak: see faults.go.
	faults       bool
	faultShare   float64
	resolveShare float64
	settle       time.Duration
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var cfg config
	fs := flag.NewFlagSet("loadgen", flag.ExitOnError)
	fs.StringVar(&cfg.url, "url", "http://127.0.0.1:8080", "the console's address (loopback only); several replicas' addresses separated by commas are used round-robin")
	fs.StringVar(&cfg.data, "data", "", "the console's data directory, where loadgen creates its tokens and logins (required without --db)")
	fs.StringVar(&cfg.db, "db", "", "the replicas' PostgreSQL database (postgres://...), where loadgen creates its tokens and logins and measures the commit floor")
	fs.IntVar(&cfg.agents, "agents", 8, "concurrent agents proposing, waiting and redeeming")
	fs.IntVar(&cfg.sockets, "sockets", 50, "logged-in operator WebSockets receiving live updates")
	fs.IntVar(&cfg.approvers, "approvers", 2, "operators approving through the web endpoints")
	fs.IntVar(&cfg.flows, "flows", 300, "complete flows (submit, approve, redeem) to run")
	fs.IntVar(&cfg.pending, "pending", 1000, "calls left pending in the queue during the run")
	fs.DurationVar(&cfg.duration, "duration", 2*time.Minute, "stop after this long whatever the count")
	fs.IntVar(&cfg.floorN, "floor-commits", 500, "commits for each of the two floor measurements, before and after the flows (SQLite, or PostgreSQL with --db)")
	fs.StringVar(&cfg.jsonOut, "json", "", "also write the report as JSON to this file (with --ab, every run's report)")
	fs.IntVar(&cfg.serverPID, "server-pid", 0, "the console's process id, for its CPU time (default: the process listening on --url's port)")
	fs.StringVar(&cfg.ab, "ab", "", "console binaries OLD,NEW to start and measure alternately (one binary: repeated)")
	fs.IntVar(&cfg.rounds, "rounds", 3, "with --ab, runs of each binary")
	fs.StringVar(&cfg.tools, "tools", "examples/tools.yaml", "with --ab, the tools file the consoles serve")
	fs.IntVar(&cfg.port, "port", 18400, "with --ab, the first port of 127.0.0.1 the consoles listen on (one per run)")
	fs.BoolVar(&cfg.countSyncs, "count-syncs", false, "count the server's fsync, fdatasync and WAL writes during the flows with perf stat (SQLite consoles on this machine)")
	fs.StringVar(&cfg.cpuProfile, "cpuprofile", "", "write loadgen's own CPU profile of the flows to this file (go tool pprof)")
	fs.BoolVar(&cfg.faults, "faults", false, "executors misbehave after redeeming (crash, report late, report unknown); check every call ends explained")
	fs.Float64Var(&cfg.faultShare, "fault-share", 0.5, "with --faults: the share of executors that crash or report late")
	fs.Float64Var(&cfg.resolveShare, "resolve-share", 0.5, "with --faults: the share of calls waiting for a person that an operator resolves")
	fs.DurationVar(&cfg.settle, "settle", 3*time.Minute, "with --faults: how long after the flows to wait for leases to lapse and late executors to report")
	fs.Parse(os.Args[1:])
	// One processor: loadgen shares the machine's cores with the console it
	// measures, and its work is waiting on the network. With more, idle
	// threads spin looking for goroutines to run and wake each other for
	// every response, CPU that the console would otherwise have. GOMAXPROCS
	// in the environment still decides.
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	var err error
	if cfg.ab != "" {
		err = runAB(ctx, cfg, os.Stdout)
	} else {
		_, err = run(ctx, cfg, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

// Report is what one run measured.
type Report struct {
	Replicas       int     `json:"replicas"`
	Engine         string  `json:"engine"`
	Flows          int     `json:"flows"`
	Seconds        float64 `json:"seconds"`
	FlowsPerSecond float64 `json:"flows_per_second"`
	FloorCommits   float64 `json:"floor_commits_per_second"`
	// FloorCommitsBefore and FloorCommitsAfter are the two measurements
	// FloorCommits combines: before the flows and after them.
	FloorCommitsBefore float64        `json:"floor_commits_per_second_before"`
	FloorCommitsAfter  float64        `json:"floor_commits_per_second_after"`
	FloorFlows         float64        `json:"floor_flows_per_second"`
	FloorRatio         float64        `json:"ratio_to_floor"`
	SubmitToCard       Percentiles    `json:"submit_to_card_ms"`
	ApproveToWake      Percentiles    `json:"approve_to_wake_ms"`
	Redemption         Percentiles    `json:"redemption_ms"`
	Submit             Percentiles    `json:"submit_ms"`
	Errors             map[string]int `json:"errors"`
	ServerRSSMiB       float64        `json:"server_rss_mib"`
	// ServerCPUSeconds is the server's CPU time (user + system, from
	// /proc/PID/stat) while the flows ran, and ServerCPUPerFlowMS the same
	// per completed flow; setting up (pending calls, logins, sockets) is not
	// counted. Zero when the server's process was not found.
	ServerCPUSeconds   float64 `json:"server_cpu_seconds"`
	ServerCPUPerFlowMS float64 `json:"server_cpu_per_flow_ms"`
	ServerPID          int     `json:"server_pid"`
	// LoadgenCPUPerFlowMS is this process's own CPU time per completed
	// flow over the same window: on one machine, the console and the load
	// generator share its cores, and the two together bound the flows per
	// second.
	LoadgenCPUPerFlowMS float64 `json:"loadgen_cpu_per_flow_ms"`
	// Commits and Writes are the store's write transactions during the
	// flows and the writes they held (0 when the console does not report
	// them).
	Commits float64 `json:"commits"`
	Writes  float64 `json:"writes"`
	// Statements are the SQL statements the server ran during the flows
	// (0 when it does not export them: PostgreSQL, or an older console).
	Statements float64 `json:"statements"`
	// WALFrames are the pages the server appended to SQLite's
	// write-ahead log during the flows, as it counts them (0 when it does
	// not export them: PostgreSQL, or an older console).
	WALFrames float64 `json:"wal_frames"`
	// Allocations are the server's heap allocations during the flows (Go's
	// go_memstats_mallocs_total).
	Allocations float64 `json:"allocations"`
	// Syscalls are the server's syncs and WAL writes during the flows,
	// with --count-syncs.
	Syscalls    *syscallCounts     `json:"syscalls,omitempty"`
	LoadAverage [2]float64         `json:"load_average_start_end"`
	Binary      string             `json:"binary,omitempty"`
	Settings    map[string]float64 `json:"settings"`
	Faults      *FaultReport       `json:"faults,omitempty"`
}

// Percentiles of a latency sample, in milliseconds.
type Percentiles struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

type sample struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sample) add(d time.Duration) {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
}

func (s *sample) percentiles() Percentiles {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.d) == 0 {
		return Percentiles{}
	}
	d := append([]time.Duration(nil), s.d...)
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	at := func(q float64) float64 {
		return float64(d[int(q*float64(len(d)-1))].Microseconds()) / 1000
	}
	return Percentiles{N: len(d), P50: at(.50), P95: at(.95), P99: at(.99), Max: at(1)}
}

type errorCounts struct {
	mu sync.Mutex
	m  map[string]int
}

func (e *errorCounts) add(kind string) {
	e.mu.Lock()
	if e.m == nil {
		e.m = map[string]int{}
	}
	e.m[kind]++
	e.mu.Unlock()
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func run(ctx context.Context, cfg config, out io.Writer) (Report, error) {
	rep, err := measure(ctx, cfg)
	if err != nil {
		return rep, err
	}
	printReport(out, rep)
	if rep.Faults != nil {
		printFaults(out, rep.Faults)
	}
	if cfg.jsonOut != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(cfg.jsonOut, append(b, '\n'), 0o644); err != nil {
			return rep, err
		}
	}
	if rep.Faults != nil && len(rep.Faults.Unexplained) > 0 {
		return rep, fmt.Errorf("%d calls are not in an explained state", len(rep.Faults.Unexplained))
	}
	return rep, nil
}

// measure runs the workload once against the console at cfg.url.
func measure(ctx context.Context, cfg config) (Report, error) {
	load0 := loadAverage()
	for _, raw := range strings.Split(cfg.url, ",") {
		u, err := url.Parse(strings.TrimSpace(raw))
		if err != nil || u.Scheme != "http" {
			return Report{}, fmt.Errorf("--url must be http:// addresses")
		}
		if h := u.Hostname(); h != "127.0.0.1" && h != "localhost" && h != "::1" {
			return Report{}, fmt.Errorf("--url must be loopback addresses, not %s", h)
		}
		cfg.urls = append(cfg.urls, strings.TrimRight(u.String(), "/"))
	}
	cfg.url = cfg.urls[0]
	if cfg.data == "" && cfg.db == "" {
		return Report{}, errors.New("--data DIR or --db URL is required: loadgen creates its agent tokens and operator logins there")
	}
	if len(cfg.urls) > 1 && cfg.db == "" {
		return Report{}, errors.New("several --url replicas share a PostgreSQL database: give it with --db")
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	// Executors and the settling of the fault soak outlive the flows.
	execCtx, cancelExec := context.WithTimeout(parent, cfg.duration+cfg.settle)
	defer cancelExec()
	var fault *faults

	// Credentials, created in the console's database.
	var accountStore account.Store
	var closeDB func()
	if cfg.db != "" {
		pg, err := pgstore.Open(ctx, cfg.db, pgstore.Options{MaxConns: 2})
		if err != nil {
			return Report{}, err
		}
		accountStore, closeDB = pg.Accounts(), func() { pg.Close() }
	} else {
		d, err := db.Open(filepath.Join(cfg.data, "countersign.db"))
		if err != nil {
			return Report{}, err
		}
		accountStore, closeDB = d.Accounts(), func() { d.Close() }
	}
	accounts := account.NewService(accountStore, nil)
	run := randomHex(3)
	var tokens []string
	for i := 0; i < cfg.agents+1; i++ {
		_, secret, err := accounts.CreateToken(ctx, fmt.Sprintf("agent:load-%s-%d", run, i), "weather-host", "loadgen", "loadgen", audit.ChannelCLI)
		if err != nil {
			return Report{}, err
		}
		tokens = append(tokens, secret)
	}
	password := randomHex(12)
	hash, err := account.Hash(password)
	if err != nil {
		return Report{}, err
	}
	var operators []string
	for i := 0; i < max(cfg.approvers, 1); i++ {
		name := fmt.Sprintf("load-%s-op%d", run, i)
		if _, err := accounts.AddUser(ctx, name, account.RoleOperator, hash, "loadgen", audit.ChannelCLI); err != nil {
			return Report{}, err
		}
		operators = append(operators, name)
	}
	engine := "sqlite"
	// The floor is measured before the flows and again after them, on the
	// same disk (or server), so that a change of the machine's load during
	// the run weighs on both sides of the ratio.
	measureFloorOnce := func() (float64, error) {
		if cfg.db != "" {
			return measurePostgresFloor(ctx, cfg.db, cfg.floorN)
		}
		return measureFloor(cfg.data, cfg.floorN)
	}
	if cfg.db != "" {
		engine = "postgres"
	}
	floorBefore, err := measureFloorOnce()
	closeDB()
	if err != nil {
		return Report{}, err
	}

	rep := Report{Replicas: len(cfg.urls), Engine: engine, Errors: map[string]int{}, Settings: map[string]float64{
		"agents": float64(cfg.agents), "sockets": float64(cfg.sockets), "approvers": float64(cfg.approvers),
		"pending": float64(cfg.pending)}}
	var errs errorCounts
	if cfg.faults {
		fault = &faults{share: cfg.faultShare, resolve: cfg.resolveShare, errs: &errs}
		rep.Settings["fault_share"], rep.Settings["resolve_share"] = cfg.faultShare, cfg.resolveShare
	}

	// Fill the queue with calls that stay pending.
	filler := client.New(cfg.url, tokens[cfg.agents])
	for i := 0; i < cfg.pending && ctx.Err() == nil; i++ {
		if _, err := filler.Submit(ctx, weather(fmt.Sprintf("pending %s %d", run, i))); err != nil {
			errs.add("fill:" + errKind(err))
		}
	}

	// Operator sockets: each records when it first sees each call id.
	sessions := make([]*webSession, len(operators))
	for i, name := range operators {
		if sessions[i], err = login(ctx, cfg.urls[i%len(cfg.urls)], name, password); err != nil {
			return Report{}, fmt.Errorf("log in %s: %w", name, err)
		}
	}
	// Each socket records when it first saw each call id; the join with the
	// submission times happens after the run, since a card often arrives
	// before the agent has read the submission's response.
	var submitted sync.Map // call id -> submit start time
	var submitToCard sample
	var wsWG sync.WaitGroup
	sockCtx, closeSockets := context.WithCancel(ctx)
	defer closeSockets()
	idPattern := regexp.MustCompile(`call_[a-z2-7]{24}`)
	var firstSeen []map[string]time.Time
	var seenMu sync.Mutex
	opened := 0
	for i := 0; i < cfg.sockets; i++ {
		conn, err := sessions[i%len(sessions)].dialWS(sockCtx, cfg.urls[i%len(cfg.urls)])
		if err != nil {
			errs.add("ws_dial")
			continue
		}
		opened++
		seen := map[string]time.Time{}
		firstSeen = append(firstSeen, seen)
		wsWG.Add(1)
		go func() {
			defer wsWG.Done()
			defer conn.Close()
			go func() { <-sockCtx.Done(); conn.Close() }()
			for {
				_, msg, err := conn.ReadMessage()
				if err != nil {
					if sockCtx.Err() == nil {
						errs.add("ws_closed")
					}
					return
				}
				now := time.Now()
				seenMu.Lock()
				for _, id := range idPattern.FindAll(msg, -1) {
					if _, ok := seen[string(id)]; !ok {
						seen[string(id)] = now
					}
				}
				seenMu.Unlock()
			}
		}()
	}
	if opened == 0 && cfg.sockets > 0 {
		return Report{}, errors.New("no operator socket could be opened")
	}

	// Approvers take calls from a channel and approve them on the web.
	toApprove := make(chan approval, cfg.agents*2)
	approvedAt := sync.Map{} // id -> time the approve request started
	var apprWG sync.WaitGroup
	var approveN atomic.Int64
	for i := 0; i < cfg.approvers; i++ {
		apprWG.Add(1)
		go func(ap *approver) {
			defer apprWG.Done()
			defer ap.close()
			for a := range toApprove {
				// The session lives in the database: any replica takes it.
				base := cfg.urls[int(approveN.Add(1))%len(cfg.urls)]
				approvedAt.Store(a.id, time.Now())
				if err := ap.approve(base, a.id, a.digest); err != nil {
					errs.add("approve:" + err.Error())
				}
			}
		}(newApprover(ctx, sessions[i%len(sessions)]))
	}

	// Agents run complete flows.
	var submitLat, wakeLat, redeemLat sample
	var flows atomic.Int64
	var next atomic.Int64
	var agentWG sync.WaitGroup
	rep.ServerPID = cfg.serverPID
	if rep.ServerPID == 0 {
		rep.ServerPID = listenerPID(cfg.url)
	}
	cpu0, own0 := processCPU(rep.ServerPID), processCPU(os.Getpid())
	m0 := serverMetrics(cfg.url)
	var syncs *syncCounter
	if cfg.countSyncs {
		if syncs, err = startSyncCount(rep.ServerPID, os.TempDir()); err != nil {
			return Report{}, err
		}
	}
	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err != nil {
			return Report{}, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return Report{}, err
		}
		defer pprof.StopCPUProfile()
	}
	start := time.Now()
	for i := 0; i < cfg.agents; i++ {
		agentWG.Add(1)
		conns := make([]*agentConn, len(cfg.urls))
		for j, u := range cfg.urls {
			if conns[j], err = newAgentConn(ctx, u, tokens[i]); err != nil {
				return Report{}, err
			}
		}
		// The Go client reports outcomes and heartbeats in the fault soak.
		var reporter *client.Client
		if fault != nil {
			reporter = client.New(cfg.urls[0], tokens[i])
		}
		go func() {
			defer agentWG.Done()
			defer func() {
				for _, c := range conns {
					c.h.Close()
				}
			}()
			var body []byte
			for ctx.Err() == nil {
				n := next.Add(1)
				if n > int64(cfg.flows) {
					break
				}
				// Round-robin: each step of a flow on the next replica.
				rr := func(step int) *agentConn { return conns[(int(n)+step)%len(conns)] }
				t0 := time.Now()
				body = submitBody(body[:0], "flow "+run+" "+strconv.FormatInt(n, 10))
				call, err := rr(0).submit(body)
				if err != nil {
					errs.add("submit:" + errKind(err))
					continue
				}
				submitLat.add(time.Since(t0))
				submitted.Store(call.ID, t0)
				select {
				case toApprove <- approval{call.ID, call.Digest}:
				case <-ctx.Done():
					continue
				}
				done, err := rr(1).wait(ctx, call.ID)
				if err != nil {
					errs.add("wait:" + errKind(err))
					continue
				}
				if t, ok := approvedAt.Load(call.ID); ok {
					wakeLat.add(time.Since(t.(time.Time)))
				}
				if done.Status != client.StatusApproved {
					errs.add("wait:" + string(done.Status))
					continue
				}
				t1 := time.Now()
				res, err := rr(2).redeem(done)
				if err != nil {
					errs.add("redeem:" + errKind(err))
					continue
				}
				redeemLat.add(time.Since(t1))
				if !res.accepted {
					errs.add("redeem:" + res.Reason)
					continue
				}
				flows.Add(1)
				if fault != nil {
					c := &client.Call{}
					c.ID = call.ID
					r := &client.Redemption{}
					r.OutcomeWithin, r.LeaseUntil = res.OutcomeWithin, res.LeaseUntil
					fault.executed(execCtx, reporter, n, c, r)
				}
			}
		}()
	}
	agentWG.Wait()
	elapsed := time.Since(start)
	// Both processes' CPU is read when the flows end, before the floor's
	// second measurement, which runs in this process.
	cpu1, own1 := processCPU(rep.ServerPID), processCPU(os.Getpid())
	if syncs != nil {
		// Every agent has redeemed its last flow, the flow's last write, so
		// what the flows wrote is committed and counted.
		c, err := syncs.stop()
		if err != nil {
			return Report{}, err
		}
		rep.Syscalls = &c
	}
	close(toApprove)
	apprWG.Wait()
	time.Sleep(200 * time.Millisecond) // let the last cards arrive
	closeSockets()
	wsWG.Wait()
	for _, seen := range firstSeen {
		for id, at := range seen {
			if t, ok := submitted.Load(id); ok {
				submitToCard.add(at.Sub(t.(time.Time)))
			}
		}
	}

	if errors.Is(context.Cause(ctx), errConsoleExited) {
		// The console is gone (--ab saw its process exit): what was measured
		// says nothing of it.
		return Report{}, context.Cause(ctx)
	}
	floorAfter, err := measureFloorOnce()
	if err != nil {
		return Report{}, err
	}
	// Commits per second over both measurements: the same number of
	// commits each time, so the rate is the harmonic mean.
	rep.FloorCommitsBefore, rep.FloorCommitsAfter = floorBefore, floorAfter
	rep.FloorCommits = 2 / (1/floorBefore + 1/floorAfter)
	rep.FloorFlows = rep.FloorCommits / 3
	rep.Flows = int(flows.Load())
	rep.Seconds = elapsed.Seconds()
	rep.FlowsPerSecond = float64(rep.Flows) / elapsed.Seconds()
	if rep.FloorFlows > 0 {
		rep.FloorRatio = rep.FlowsPerSecond / rep.FloorFlows
	}
	rep.SubmitToCard = submitToCard.percentiles()
	rep.ApproveToWake = wakeLat.percentiles()
	rep.Redemption = redeemLat.percentiles()
	rep.Submit = submitLat.percentiles()
	rep.Errors = errs.m
	if rep.Errors == nil {
		rep.Errors = map[string]int{}
	}
	m1 := serverMetrics(cfg.url)
	rep.ServerRSSMiB = m1["process_resident_memory_bytes"] / (1 << 20)
	rep.Commits = m1["countersign_store_commits_total"] - m0["countersign_store_commits_total"]
	rep.Writes = m1["countersign_store_writes_total"] - m0["countersign_store_writes_total"]
	rep.Statements = m1["countersign_store_statements_total"] - m0["countersign_store_statements_total"]
	rep.WALFrames = m1["countersign_store_wal_frames_total"] - m0["countersign_store_wal_frames_total"]
	rep.Allocations = m1["go_memstats_mallocs_total"] - m0["go_memstats_mallocs_total"]
	if cpu0 >= 0 {
		if cpu1 >= 0 {
			rep.ServerCPUSeconds = cpu1 - cpu0
			if rep.Flows > 0 {
				rep.ServerCPUPerFlowMS = rep.ServerCPUSeconds * 1000 / float64(rep.Flows)
			}
		}
	}
	if own0 >= 0 && own1 >= 0 && rep.Flows > 0 {
		rep.LoadgenCPUPerFlowMS = (own1 - own0) * 1000 / float64(rep.Flows)
	}
	rep.LoadAverage = [2]float64{load0, loadAverage()}
	if fault != nil {
		var trail timeliner
		if cfg.db != "" {
			pg, err := pgstore.Open(execCtx, cfg.db, pgstore.Options{MaxConns: 2})
			if err != nil {
				return rep, err
			}
			defer pg.Close()
			trail = pg
		} else {
			d, err := db.Open(filepath.Join(cfg.data, "countersign.db"))
			if err != nil {
				return rep, err
			}
			defer d.Close()
			trail = d
		}
		if rep.Faults, err = fault.settle(execCtx, trail, sessions[0]); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

type approval struct{ id, digest string }

func weather(city string) client.Proposal {
	return client.Proposal{Tool: "weather.search", Target: "weather:forecast", Args: map[string]any{"city": city}}
}

func errKind(err error) string {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.code
	}
	if e, ok := client.AsError(err); ok {
		return e.Code
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return "stopped"
	}
	return "transport"
}

// measurePostgresFloor commits n single-row transactions, one after the
// other on one connection, to a scratch table on the replicas' PostgreSQL
// server, and returns commits per second: the server's commit floor, as
// the console's writes, which serialize on the audit chain head, meet it.
func measurePostgresFloor(ctx context.Context, dbURL string, n int) (float64, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	table := pgx.Identifier{"loadgen_floor_" + randomHex(4)}.Sanitize()
	if _, err := conn.Exec(ctx, `CREATE TABLE `+table+` (k TEXT PRIMARY KEY)`); err != nil {
		return 0, err
	}
	defer conn.Exec(context.WithoutCancel(ctx), `DROP TABLE `+table)
	start := time.Now()
	for i := 0; i < n; i++ {
		if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO `+table+` (k) VALUES ($1)`, randomHex(16))
			return err
		}); err != nil {
			return 0, err
		}
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// measureFloor commits n single-row transactions to a scratch database in
// dir with the console's DSN settings and returns commits per second.
func measureFloor(dir string, n int) (float64, error) {
	path := filepath.Join(dir, "loadgen-floor-"+randomHex(4)+".db")
	defer func() {
		for _, suffix := range []string{"", "-wal", "-shm"} {
			os.Remove(path + suffix)
		}
	}()
	sqldb, err := sql.Open("sqlite3", db.DSN(path))
	if err != nil {
		return 0, err
	}
	defer sqldb.Close()
	if _, err := sqldb.Exec(`CREATE TABLE floor (k TEXT PRIMARY KEY)`); err != nil {
		return 0, err
	}
	start := time.Now()
	for i := 0; i < n; i++ {
		tx, err := sqldb.Begin()
		if err != nil {
			return 0, err
		}
		if _, err := tx.Exec(`INSERT INTO floor (k) VALUES (?)`, randomHex(16)); err != nil {
			tx.Rollback()
			return 0, err
		}
		if err := tx.Commit(); err != nil {
			return 0, err
		}
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// webSession is a logged-in operator's browser session.
type webSession struct {
	base   string
	client *http.Client
	csrf   string
}

var csrfInput = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func login(ctx context.Context, base, name, password string) (*webSession, error) {
	jar, _ := cookiejar.New(nil)
	s := &webSession{base: base, client: &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	page, err := s.get(ctx, "/login")
	if err != nil {
		return nil, err
	}
	m := csrfInput.FindStringSubmatch(page)
	if m == nil {
		return nil, errors.New("no CSRF token on the login page")
	}
	res, err := s.post(ctx, "/login", url.Values{"csrf": {m[1]}, "name": {name}, "password": {password}})
	if err != nil {
		return nil, err
	}
	if res != http.StatusSeeOther {
		return nil, fmt.Errorf("login answered %d", res)
	}
	page, err = s.get(ctx, "/")
	if err != nil {
		return nil, err
	}
	if m = csrfInput.FindStringSubmatch(page); m == nil {
		return nil, errors.New("no CSRF token on the queue page")
	}
	s.csrf = m[1]
	return s, nil
}

func (s *webSession) get(ctx context.Context, path string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.base+path, nil)
	if err != nil {
		return "", err
	}
	res, err := s.client.Do(req)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %d", path, res.StatusCode)
	}
	return string(b), err
}

func (s *webSession) post(ctx context.Context, path string, form url.Values) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.base+path, strings.NewReader(form.Encode()))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", s.base)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	res, err := s.client.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode, nil
}

func (s *webSession) dialWS(ctx context.Context, base string) (*websocket.Conn, error) {
	u, _ := url.Parse(base)
	h := http.Header{}
	h.Set("Origin", base)
	for _, c := range s.client.Jar.Cookies(u) {
		h.Add("Cookie", c.Name+"="+c.Value)
	}
	conn, _, err := websocket.DefaultDialer.DialContext(ctx, "ws://"+u.Host+"/ws", h)
	return conn, err
}

// serverMetrics reads the console's metrics that loadgen reports: its
// resident memory and the store's commits, writes and statements.
func serverMetrics(base string) map[string]float64 {
	out := map[string]float64{}
	res, err := http.Get(base + "/metrics")
	if err != nil {
		return out
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		for _, name := range []string{"process_resident_memory_bytes", "countersign_store_commits_total", "countersign_store_writes_total",
			"countersign_store_statements_total", "countersign_store_wal_frames_total", "go_memstats_mallocs_total"} {
			if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
				out[name], _ = strconv.ParseFloat(v, 64)
			}
		}
	}
	return out
}

func printReport(w io.Writer, r Report) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "replicas\t%d on %s\n", r.Replicas, r.Engine)
	fmt.Fprintf(tw, "flows\t%d in %.1f s\t%.1f flows/s\n", r.Flows, r.Seconds, r.FlowsPerSecond)
	fmt.Fprintf(tw, "floor\t%.0f commits/s\t%.1f flows/s (÷3)\tratio %.2f\t(%.0f before, %.0f after the flows)\n",
		r.FloorCommits, r.FloorFlows, r.FloorRatio, r.FloorCommitsBefore, r.FloorCommitsAfter)
	fmt.Fprintf(tw, "latency (ms)\tn\tp50\tp95\tp99\tmax\n")
	for _, row := range []struct {
		name string
		p    Percentiles
	}{{"submit", r.Submit}, {"submit-to-card", r.SubmitToCard}, {"approve-to-wake", r.ApproveToWake}, {"redemption", r.Redemption}} {
		fmt.Fprintf(tw, "  %s\t%d\t%.1f\t%.1f\t%.1f\t%.1f\n", row.name, row.p.N, row.p.P50, row.p.P95, row.p.P99, row.p.Max)
	}
	fmt.Fprintf(tw, "server RSS\t%.1f MiB\n", r.ServerRSSMiB)
	if r.ServerPID > 0 {
		fmt.Fprintf(tw, "server CPU\t%.2f s during the flows\t%.2f ms per flow\t(pid %d)\n", r.ServerCPUSeconds, r.ServerCPUPerFlowMS, r.ServerPID)
		if r.LoadgenCPUPerFlowMS > 0 {
			fmt.Fprintf(tw, "loadgen CPU\t%.2f ms per flow\t(on the same cores, %d of them: together at most %.0f flows/s)\n",
				r.LoadgenCPUPerFlowMS, runtime.NumCPU(), float64(runtime.NumCPU())*1000/(r.ServerCPUPerFlowMS+r.LoadgenCPUPerFlowMS))
		}
	} else {
		fmt.Fprintf(tw, "server CPU\tnot measured: no process found listening on the port (give --server-pid)\n")
	}
	if r.Commits > 0 {
		fmt.Fprintf(tw, "store\t%.0f writes in %.0f commits\t%.2f writes per commit\n", r.Writes, r.Commits, r.Writes/r.Commits)
	}
	if r.Statements > 0 && r.Flows > 0 {
		fmt.Fprintf(tw, "statements\t%.0f\t%.1f per flow\t%.1f per commit\n", r.Statements, r.Statements/float64(r.Flows), r.Statements/max(r.Commits, 1))
	}
	if r.Allocations > 0 && r.Flows > 0 {
		fmt.Fprintf(tw, "allocations\t%.0f per flow\t(server heap objects)\n", r.Allocations/float64(r.Flows))
	}
	if r.WALFrames > 0 && r.Flows > 0 {
		fmt.Fprintf(tw, "WAL frames\t%.1f per commit\t%.1f per flow\t(the server's count)\n",
			r.WALFrames/max(r.Commits, 1), r.WALFrames/float64(r.Flows))
	}
	if c := r.Syscalls; c != nil && r.Flows > 0 {
		fmt.Fprintf(tw, "syncs\t%.2f per flow\t%.0f fsync, %.0f fdatasync\t%.2f per commit\n",
			c.Syncs()/float64(r.Flows), c.Fsync, c.Fdatasync, c.Syncs()/max(r.Commits, 1))
		// A console that gathers a commit's frames into one write
		// (walvfs) makes one WAL write per commit: the frames are then the
		// server's own count, above.
		fmt.Fprintf(tw, "WAL writes\t%.1f per commit\t%.1f per flow\t(%.0f pwrite64 in all; one per frame without gathering)\n",
			c.WALWrites/max(r.Commits, 1), c.WALWrites/float64(r.Flows), c.Pwrite)
		fmt.Fprintf(tw, "commits\t%.2f per flow\n", r.Commits/float64(r.Flows))
	}
	fmt.Fprintf(tw, "load average\t%.2f at the start\t%.2f at the end\n", r.LoadAverage[0], r.LoadAverage[1])
	if len(r.Errors) == 0 {
		fmt.Fprintf(tw, "errors\tnone\n")
	}
	keys := make([]string, 0, len(r.Errors))
	for k := range r.Errors {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(tw, "error\t%s\t%d\n", k, r.Errors[k])
	}
	tw.Flush()
}
