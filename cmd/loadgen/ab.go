package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

// abRun is one run of an A/B comparison.
type abRun struct {
	Round  int    `json:"round"`
	Binary string `json:"binary"`
	Report Report `json:"report"`
}

// runAB starts each console binary of cfg.ab in turn, cfg.rounds times,
// each on a fresh data directory and port, runs the workload against it,
// and prints every run and, for two binaries, the ratios of the second to
// the first measured in the same round. The order alternates from round to
// round (OLD NEW, NEW OLD, OLD NEW, ...; abOrder): the binary that runs
// second in a round has been measured to come out cheaper whichever it is,
// and alternating puts each binary second in half the rounds.
func runAB(ctx context.Context, cfg config, out io.Writer) error {
	if cfg.db != "" || strings.Contains(cfg.url, ",") {
		return errors.New("--ab starts single SQLite consoles: it takes no --db and no list of --url")
	}
	var bins []string
	for _, b := range strings.Split(cfg.ab, ",") {
		abs, err := filepath.Abs(strings.TrimSpace(b))
		if err != nil {
			return err
		}
		if _, err := os.Stat(abs); err != nil {
			return fmt.Errorf("--ab: %w", err)
		}
		bins = append(bins, abs)
	}
	tools, err := filepath.Abs(cfg.tools)
	if err != nil {
		return err
	}
	var runs []abRun
	port := cfg.port
	for round := 1; round <= max(cfg.rounds, 1); round++ {
		for _, bin := range abOrder(bins, round) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			fmt.Fprintf(out, "\n== round %d: %s (load average %.2f)\n", round, bin, loadAverage())
			rep, err := serveAndMeasure(ctx, cfg, bin, tools, port)
			port++
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", round, bin, err)
			}
			rep.Binary = bin
			printReport(out, rep)
			runs = append(runs, abRun{Round: round, Binary: bin, Report: rep})
		}
	}
	printAB(out, bins, runs)
	if cfg.jsonOut != "" {
		b, _ := json.MarshalIndent(runs, "", "  ")
		return os.WriteFile(cfg.jsonOut, append(b, '\n'), 0o644)
	}
	return nil
}

// abOrder is the order in which round (from 1) runs bins: as given in odd
// rounds, reversed in even ones.
func abOrder(bins []string, round int) []string {
	if round%2 == 1 {
		return bins
	}
	r := slices.Clone(bins)
	slices.Reverse(r)
	return r
}

// serveAndMeasure starts bin serve on 127.0.0.1:port with a fresh data
// directory, measures it, and stops it.
func serveAndMeasure(ctx context.Context, cfg config, bin, tools string, port int) (Report, error) {
	dir, err := os.MkdirTemp("", "loadgen-ab-")
	if err != nil {
		return Report{}, err
	}
	defer os.RemoveAll(dir)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	log, err := os.Create(filepath.Join(dir, "serve.log"))
	if err != nil {
		return Report{}, err
	}
	defer log.Close()
	cmd := exec.Command(bin, "serve", "--addr", addr, "--data", filepath.Join(dir, "data"), "--tools", tools, "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return Report{}, err
	}
	// The run is measured under a context that ends when the console's
	// process exits: agents in long-polls (the client retries a console that
	// does not answer for minutes), approvers and socket readers all stop,
	// and the run fails with the exit instead of reporting what little it
	// measured.
	exited := make(chan struct{})
	var waitErr error
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		waitErr = cmd.Wait()
		close(exited)
		cancel(errConsoleExited)
	}()
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	}()
	died := func() error {
		b, _ := os.ReadFile(log.Name())
		return fmt.Errorf("%w (%s); the tail of its log:\n%s", errConsoleExited, exitStatus(waitErr), logTail(b, 20))
	}
	base := "http://" + addr
	if err := waitHealthy(ctx, base, exited); err != nil {
		if isClosed(exited) {
			return Report{}, died()
		}
		b, _ := os.ReadFile(log.Name())
		return Report{}, fmt.Errorf("%w\n%s", err, b)
	}
	cfg.url, cfg.urls, cfg.data, cfg.serverPID, cfg.jsonOut = base, nil, filepath.Join(dir, "data"), cmd.Process.Pid, ""
	rep, err := measure(ctx, cfg)
	if isClosed(exited) {
		// Whatever measure returned, the console did not live through the
		// run: nothing it measured stands.
		return Report{}, died()
	}
	return rep, err
}

// errConsoleExited is the error of a run whose console's process exited.
var errConsoleExited = errors.New("the console exited during the run")

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// exitStatus says how a process ended, from the error of its Wait.
func exitStatus(err error) string {
	if err == nil {
		return "exit status 0"
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return fmt.Sprintf("killed by signal %d (%v)", int(ws.Signal()), ws.Signal())
		}
	}
	return err.Error()
}

// logTail is the last n lines of b.
func logTail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func waitHealthy(ctx context.Context, base string, exited <-chan struct{}) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return errors.New("the console exited before it answered")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		res, err := http.Get(base + "/healthz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
	}
	return errors.New("the console did not answer /healthz within 60 s")
}

func printAB(w io.Writer, bins []string, runs []abRun) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "\n== all runs\n")
	fmt.Fprintf(tw, "round\tbinary\tflows/s\tfloor flows/s\tratio\tCPU/flow ms\tstatements/flow\tsubmit→card p99\tapprove→wake p99\tload avg\terrors\t\n")
	for _, r := range runs {
		p := r.Report
		stmts := "—" // a console that does not count them
		if p.Statements > 0 && p.Flows > 0 {
			stmts = fmt.Sprintf("%.1f", p.Statements/float64(p.Flows))
		}
		fmt.Fprintf(tw, "%d\t%s\t%.1f\t%.1f\t%.2f\t%.2f\t%s\t%.1f\t%.1f\t%.1f–%.1f\t%d\t\n", r.Round, shortBin(bins, r.Binary),
			p.FlowsPerSecond, p.FloorFlows, p.FloorRatio, p.ServerCPUPerFlowMS, stmts, p.SubmitToCard.P99, p.ApproveToWake.P99,
			p.LoadAverage[0], p.LoadAverage[1], errorTotal(p.Errors))
	}
	tw.Flush()
	if len(bins) != 2 {
		return
	}
	fmt.Fprintf(w, "\n== %s ÷ %s, same round\n", shortBin(bins, bins[1]), shortBin(bins, bins[0]))
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "round\tflows/s\tratio to floor\tCPU/flow\t\n")
	var flows, cpu []float64
	for round := 1; ; round++ {
		var a, b *Report
		for i := range runs {
			if runs[i].Round == round && runs[i].Binary == bins[0] {
				a = &runs[i].Report
			}
			if runs[i].Round == round && runs[i].Binary == bins[1] {
				b = &runs[i].Report
			}
		}
		if a == nil || b == nil {
			break
		}
		f, c := div(b.FlowsPerSecond, a.FlowsPerSecond), div(b.ServerCPUPerFlowMS, a.ServerCPUPerFlowMS)
		flows, cpu = append(flows, f), append(cpu, c)
		fmt.Fprintf(tw, "%d\t%.2f×\t%.2f → %.2f\t%.2f×\t\n", round, f, a.FloorRatio, b.FloorRatio, c)
	}
	fmt.Fprintf(tw, "median\t%.2f×\t\t%.2f×\t\n", median(flows), median(cpu))
	tw.Flush()
}

// shortBin names a binary by the shortest tail that tells the binaries
// apart (old/console, new/console).
func shortBin(bins []string, bin string) string {
	parts := strings.Split(bin, string(filepath.Separator))
	for n := 1; n <= len(parts); n++ {
		tail := func(b string) string {
			p := strings.Split(b, string(filepath.Separator))
			return filepath.Join(p[max(0, len(p)-n):]...)
		}
		unique := true
		for _, other := range bins {
			if other != bin && tail(other) == tail(bin) {
				unique = false
			}
		}
		if unique {
			return tail(bin)
		}
	}
	return bin
}

func errorTotal(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func div(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
