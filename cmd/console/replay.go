package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/countersign/countersign/internal/policy"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/replay"
	"github.com/countersign/countersign/internal/scope"
)

const policyReplayUsage = `usage: console policy replay --tools NEW.yaml [--since 7d] [--data DIR] [--json]
       console policy replay --scope FILE|ALLOWANCE [--tools FILE] [--since 7d] [--data DIR] [--json]

Replays the calls in history through the rules of a candidate tools file,
each with now set to the time it was submitted, and reports per tool how many
would change from asking people to being approved or denied by rule (and
back), then lists every call that a person denied, or whose execution was
reported failed, which the new rules would approve. Calls the new file would
refuse outright (the tool is gone, its audience or schema changed) count as
"refused".

With --scope it reports instead which past calls an allowance's scope would
have covered: the scope of a given allowance (alw_...) or a scope in a JSON
file (the spelling docs/allowances.md gives), judged against its tool as the
tools file (--tools, or the data directory's) defines it now. It judges the
calls' shape only: rules, freezes, owners and the confirmers' standing are
not replayed.

It only reads: the database is opened read-only, so it can run beside a
running server. --since is a duration back from now (7d, 36h, 90m) or an
RFC 3339 time.

flags:
`

func cmdPolicyReplay(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("policy replay", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprint(e.stderr, policyReplayUsage)
		fs.PrintDefaults()
	}
	toolsFile := fs.String("tools", "", "the candidate tools file (required without --scope)")
	scopeArg := fs.String("scope", "", "an allowance id (alw_...) or a scope JSON file: report which past calls it covers")
	sinceFlag := fs.String("since", "7d", "how far back: a duration such as 7d or 36h, or an RFC 3339 time")
	data := fs.String("data", "", "data directory (default $COUNTERSIGN_DATA or ./countersign-data)")
	dbURL := dbFlag(fs)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if (*toolsFile == "" && *scopeArg == "") || len(pos) > 0 {
		fmt.Fprintln(e.stderr, "console policy replay: --tools FILE or --scope is required, and nothing else")
		fs.Usage()
		return 2
	}
	since, err := replay.ParseSince(*sinceFlag, time.Now())
	if err != nil {
		fmt.Fprintf(e.stderr, "console policy replay: %v\n", err)
		return 2
	}
	if *scopeArg != "" {
		return replayScope(ctx, e, *scopeArg, dataDir(e, *data), databaseURL(e, *dbURL), *toolsFile, since, *asJSON)
	}
	pol, err := policy.Load(*toolsFile)
	if err != nil {
		fmt.Fprintf(e.stderr, "console policy replay: the tools file is refused:\n%v\n", err)
		return 1
	}
	d, err := openReadOnly(ctx, dataDir(e, *data), databaseURL(e, *dbURL))
	if err != nil {
		fmt.Fprintf(e.stderr, "console policy replay: %v\n", err)
		return 1
	}
	defer d.Close()

	opt := replay.Options{}
	header := false
	if !*asJSON {
		opt.MaxFlagged = 1 // listed as they are found, not kept
		opt.OnFlagged = func(f replay.Flagged) {
			if !header {
				fmt.Fprintln(e.stdout, "calls a person denied, or reported failed, that the new rules would approve:")
				header = true
			}
			fmt.Fprintf(e.stdout, "  %s  %s  %s  %s  %s  %s  → %s\n", f.CallID, f.CreatedAt.Format(time.RFC3339), f.Tool,
				shown(f.Actor), shown(f.Target), shown(f.Why), f.Rule)
		}
	}
	rep, err := replay.Run(ctx, d, pol, since, opt)
	if err != nil {
		fmt.Fprintf(e.stderr, "console policy replay: %v\n", err)
		return 1
	}
	if *asJSON {
		writeJSON(e.stdout, reportJSON(rep))
		return 0
	}
	if header {
		fmt.Fprintln(e.stdout)
	}
	fmt.Fprintf(e.stdout, "replayed %d calls since %s through tools file %s in %s; %d would now be approved by rule after a person denied them or they failed\n\n",
		rep.Calls, rep.Since.Format(time.RFC3339), rep.ToolsDigest, rep.Elapsed.Round(time.Millisecond), rep.FlaggedTotal)
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "tool\tcalls\task→approve\task→deny\tother changes\tunchanged\teval errors")
	for _, t := range rep.Tools {
		toApprove, toDeny := t.Changed()
		var others []string
		for _, c := range t.SortedChanges() {
			if c.From == replay.Ask && (c.To == replay.Approve || c.To == replay.Deny) {
				continue
			}
			others = append(others, fmt.Sprintf("%s %d", c, t.Changes[c]))
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%d\t%d\n", t.Tool, t.Calls, toApprove, toDeny, strings.Join(others, ", "), t.Unchanged, t.EvalErrors)
	}
	tw.Flush()
	return 0
}

type toolReportJSON struct {
	Tool       string           `json:"tool"`
	Calls      int64            `json:"calls"`
	AskApprove int64            `json:"ask_to_approve"`
	AskDeny    int64            `json:"ask_to_deny"`
	Changes    map[string]int64 `json:"changes"`
	Unchanged  int64            `json:"unchanged"`
	EvalErrors int64            `json:"eval_errors"`
}

type flaggedJSON struct {
	CallID    string `json:"call_id"`
	Tool      string `json:"tool"`
	Actor     string `json:"actor"`
	Target    string `json:"target"`
	CreatedAt string `json:"created_at"`
	Why       string `json:"why"`
	Rule      string `json:"rule"`
}

func reportJSON(rep *replay.Report) any {
	tools := []toolReportJSON{}
	for _, t := range rep.Tools {
		a, d := t.Changed()
		ch := map[string]int64{}
		for c, n := range t.Changes {
			ch[c.String()] = n
		}
		tools = append(tools, toolReportJSON{t.Tool, t.Calls, a, d, ch, t.Unchanged, t.EvalErrors})
	}
	flagged := []flaggedJSON{}
	for _, f := range rep.Flagged {
		flagged = append(flagged, flaggedJSON{f.CallID, f.Tool, f.Actor, f.Target, f.CreatedAt.Format(time.RFC3339Nano), f.Why, f.Rule})
	}
	return map[string]any{
		"since": rep.Since.Format(time.RFC3339), "tools_digest": rep.ToolsDigest, "calls": rep.Calls,
		"tools": tools, "flagged": flagged, "flagged_total": rep.FlaggedTotal, "elapsed_ms": rep.Elapsed.Milliseconds(),
	}
}

// shown prints text from history as it is when every character is a
// visible one, and otherwise quoted with invisible and control characters
// escaped, so that nothing in a terminal reads other than it is.
func shown(s string) string {
	for _, r := range s {
		if !unicode.IsPrint(r) || unicode.Is(unicode.Cf, r) {
			return fmt.Sprintf("%+q", s)
		}
	}
	return s
}

// replayScope reports which past calls since since the scope named by arg
// (an allowance id, or a scope JSON file) would have covered.
func replayScope(ctx context.Context, e *env, arg, data, url, toolsFile string, since time.Time, asJSON bool) int {
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(e.stderr, "console policy replay: "+format+"\n", a...)
		return code
	}
	d, err := openReadOnly(ctx, data, url)
	if err != nil {
		return fail(1, "%v", err)
	}
	defer d.Close()
	var raw []byte
	if strings.HasPrefix(arg, "alw_") {
		a, err := queue.NewService(queue.Config{Store: d.queue}).Allowance(ctx, arg)
		if err != nil {
			return fail(1, "%s", refusal(err))
		}
		raw = a.Scope
	} else if raw, err = os.ReadFile(arg); err != nil {
		return fail(2, "%v", err)
	}
	sc, err := scope.Parse(raw)
	if err != nil {
		return fail(2, "%s: %v", arg, err)
	}
	pol, _, err := loadPolicy(data, toolsFile)
	if err != nil {
		return fail(1, "the tools file is refused:\n%v", err)
	}
	t, ok := pol.Registry().Tool(sc.Tool)
	if !ok {
		return fail(1, "the tools file defines no tool %s: the scope covers nothing", sc.Tool)
	}
	cov, err := replay.Cover(ctx, d, sc, t, since)
	if err != nil {
		return fail(1, "%v", err)
	}
	if asJSON {
		calls := []map[string]string{}
		for _, c := range cov.Listed {
			calls = append(calls, map[string]string{"call_id": c.CallID, "created_at": c.CreatedAt.UTC().Format(time.RFC3339),
				"actor": c.Actor, "target": c.Target, "status": string(c.Status), "before": string(c.Before)})
		}
		writeJSON(e.stdout, map[string]any{"scope_digest": cov.ScopeDigest, "tool": cov.Tool, "since": cov.Since.UTC().Format(time.RFC3339),
			"calls": cov.Calls, "covered": cov.Covered, "distinct": cov.Distinct, "uses": cov.Uses, "listed": calls})
		return 0
	}
	fmt.Fprintf(e.stdout, "scope %s: %s\n", cov.ScopeDigest, shown(scope.Words(sc, t, nil)))
	fmt.Fprintf(e.stdout, "it covers %d of the %d calls of %s since %s (%d distinct); it allows %d uses\n",
		cov.Covered, cov.Calls, cov.Tool, cov.Since.UTC().Format(time.RFC3339), cov.Distinct, cov.Uses)
	for _, c := range cov.Listed {
		fmt.Fprintf(e.stdout, "  %s  %s  %s  %s  %s (%s)\n", c.CallID, c.CreatedAt.UTC().Format(time.RFC3339), shown(c.Actor),
			shown(c.Target), c.Status, c.Before)
	}
	if cov.Covered > int64(len(cov.Listed)) {
		fmt.Fprintf(e.stdout, "  ... and %d more\n", cov.Covered-int64(len(cov.Listed)))
	}
	return 0
}
