package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"syscall"
	"time"

	"github.com/countersign/countersign/client"
)

// Exit codes of `console call`, beyond 0 (success) and 2 (usage).
const (
	// exitAPIError: the console answered with an error (printed on stdout),
	// or could not be reached (stderr).
	exitAPIError = 1
	// exitRejected: a redemption was rejected; its answer is on stdout.
	exitRejected = 3
)

const callUsage = `usage: console call COMMAND [flags]

The agent API from the shell. Every command prints the console's JSON answer
on stdout and exits 0 on success, 1 on an API error (the error JSON is on
stdout), 2 on a usage error, 3 when a redemption is rejected.

commands:
  submit [FILE|-]                       propose a call; the JSON body is sent byte for byte
  get ID                                print a call
  wait ID [--timeout 5m]                wait until the call is decided
  redeem ID                             redeem the approved call's grant, presenting that call
  redeem --grant G --call FILE|-        redeem a grant, presenting the call in FILE
  outcome ID --status S [--detail T]    report succeeded, failed or unknown after running
  heartbeat ID [--extend 60s]           extend the executor's lease while the call runs
  cancel ID                             withdraw a pending call

flags of every command:
  --url URL      the console (default $COUNTERSIGN_URL or http://127.0.0.1:8080)
  --token T      the agent's API token (default $COUNTERSIGN_TOKEN)
`

// callFlags are the flags every `console call` command takes.
type callFlags struct {
	url, token string
}

func (f *callFlags) register(fs *flag.FlagSet, e *env) {
	def := e.getenv("COUNTERSIGN_URL")
	if def == "" {
		def = "http://127.0.0.1:8080"
	}
	fs.StringVar(&f.url, "url", def, "the console's base URL ($COUNTERSIGN_URL)")
	fs.StringVar(&f.token, "token", e.getenv("COUNTERSIGN_TOKEN"), "the agent's API token ($COUNTERSIGN_TOKEN)")
}

func cmdCall(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(e.stderr, callUsage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("call "+sub, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	var f callFlags
	f.register(fs, e)
	var (
		timeout  *time.Duration
		poll     *time.Duration
		grant    *string
		callFile *string
		status   *string
		detail   *string
		extend   *time.Duration
	)
	usage := ""
	switch sub {
	case "submit":
		usage = "console call submit [FILE|-] [--url URL] [--token T]"
	case "get":
		usage = "console call get ID [--url URL] [--token T]"
	case "wait":
		usage = "console call wait ID [--timeout 5m] [--poll 60s] [--url URL] [--token T]"
		timeout = fs.Duration("timeout", 5*time.Minute, "give up after this long (the call stays pending)")
		poll = fs.Duration("poll", client.DefaultPollWait, "how long each long-poll lasts (at most 60s)")
	case "redeem":
		usage = "console call redeem ID | --grant G --call FILE|- [--url URL] [--token T]"
		grant = fs.String("grant", "", "the grant to present (with --call)")
		callFile = fs.String("call", "", "file with the exact approved call {\"tool\",\"target\",\"args\"}, or - for stdin")
	case "outcome":
		usage = "console call outcome ID --status succeeded|failed|unknown [--detail TEXT] [--url URL] [--token T]"
		status = fs.String("status", "", "succeeded, failed or unknown (required)")
		detail = fs.String("detail", "", "what happened, for the audit trail")
	case "heartbeat":
		usage = "console call heartbeat ID [--extend 60s] [--url URL] [--token T]"
		extend = fs.Duration("extend", 0, "extend the lease to now plus this (default and at most the tool's outcome_within)")
	case "cancel":
		usage = "console call cancel ID [--url URL] [--token T]"
	default:
		fmt.Fprintf(e.stderr, "console call: unknown command %q\n\n%s", sub, callUsage)
		return 2
	}
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "usage: %s\n", usage)
		fs.PrintDefaults()
	}
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	bad := func(msg string) int {
		if msg != "" {
			fmt.Fprintf(e.stderr, "console call %s: %s\n", sub, msg)
		}
		fmt.Fprintf(e.stderr, "usage: %s\n", usage)
		return 2
	}
	if f.token == "" {
		return bad("no token: pass --token or set COUNTERSIGN_TOKEN (an admin creates one with 'console token create')")
	}
	var opts []client.Option
	if poll != nil {
		opts = append(opts, client.WithPollWait(*poll))
	}
	c := client.New(f.url, f.token, opts...)
	out := &callOutput{e: e, sub: sub, url: f.url}

	switch sub {
	case "submit":
		if len(pos) > 1 {
			return bad("at most one FILE")
		}
		file := "-"
		if len(pos) == 1 {
			file = pos[0]
		}
		body, err := readInput(e, file)
		if err != nil {
			return bad(err.Error())
		}
		call, err := c.SubmitJSON(ctx, body)
		return out.call(call, err)
	case "get", "cancel":
		if len(pos) != 1 {
			return bad("")
		}
		var call *client.Call
		if sub == "get" {
			call, err = c.Get(ctx, pos[0])
		} else {
			call, err = c.Cancel(ctx, pos[0])
		}
		return out.call(call, err)
	case "wait":
		if len(pos) != 1 {
			return bad("")
		}
		if *timeout <= 0 {
			return bad("--timeout must be positive")
		}
		wctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		call, err := c.Wait(wctx, pos[0])
		if err != nil && wctx.Err() != nil && ctx.Err() == nil {
			if call != nil {
				out.print(call.Raw)
			}
			fmt.Fprintf(e.stderr, "console call wait: %s is still pending after %s\n", pos[0], *timeout)
			return exitAPIError
		}
		return out.call(call, err)
	case "redeem":
		return callRedeem(ctx, c, out, pos, *grant, *callFile, bad)
	case "outcome":
		if len(pos) != 1 || *status == "" {
			return bad("")
		}
		call, err := c.ReportOutcome(ctx, pos[0], *status, *detail)
		return out.call(call, err)
	case "heartbeat":
		if len(pos) != 1 || *extend < 0 {
			return bad("")
		}
		lease, err := c.Heartbeat(ctx, pos[0], *extend)
		if err != nil {
			return out.fail(err)
		}
		b, err := json.Marshal(lease)
		if err != nil {
			return out.fail(err)
		}
		out.print(b)
		return 0
	}
	return bad("")
}

func callRedeem(ctx context.Context, c *client.Client, out *callOutput, pos []string, grant, callFile string, bad func(string) int) int {
	switch {
	case len(pos) == 1 && grant == "" && callFile == "":
		// Present the approved call exactly as the console returned it:
		// its grant, tool, target and args (raw JSON, every digit kept).
		call, err := c.Get(ctx, pos[0])
		if err != nil {
			return out.call(nil, err)
		}
		if call.Status != client.StatusApproved || call.Grant == "" {
			out.print(call.Raw)
			fmt.Fprintf(out.e.stderr, "console call redeem: %s is %s, not approved: there is no grant to redeem\n", call.ID, call.Status)
			return exitAPIError
		}
		res, err := c.Redeem(ctx, call.Grant, call.Spec())
		return out.redemption(res, err)
	case len(pos) == 0 && grant != "" && callFile != "":
		body, err := readInput(out.e, callFile)
		if err != nil {
			return bad(err.Error())
		}
		res, err := c.RedeemJSON(ctx, grant, body)
		return out.redemption(res, err)
	}
	return bad("give either a call ID, or --grant and --call")
}

// callOutput prints answers and turns them into exit codes.
type callOutput struct {
	e   *env
	sub string
	url string // the console it talks to, named when it refuses the token
}

func (o *callOutput) call(call *client.Call, err error) int {
	if err != nil {
		return o.fail(err)
	}
	o.print(call.Raw)
	return 0
}

func (o *callOutput) redemption(r *client.Redemption, err error) int {
	if err != nil {
		return o.fail(err)
	}
	o.print(r.Raw)
	if !r.Accepted {
		fmt.Fprintf(o.e.stderr, "console call redeem: rejected: %s\n", r.Reason)
		return exitRejected
	}
	return 0
}

// fail prints a console error's JSON on stdout, or a transport error on
// stderr.
func (o *callOutput) fail(err error) int {
	if ae, ok := client.AsError(err); ok && len(ae.Raw) > 0 && json.Valid(ae.Raw) {
		o.print(ae.Raw)
		if ae.Status == http.StatusUnauthorized {
			// The token is another console's, revoked or mistyped; say
			// which console refused it, since the address came from a
			// flag or the environment the reader may not have in view.
			fmt.Fprintf(o.e.stderr, "console call %s: %d %s from %s: that console does not accept this token (check --url or COUNTERSIGN_URL, and --token or COUNTERSIGN_TOKEN; an admin of that console creates one with 'console token create')\n",
				o.sub, ae.Status, ae.Code, o.url)
			return exitAPIError
		}
		fmt.Fprintf(o.e.stderr, "console call %s: %d %s\n", o.sub, ae.Status, ae.Code)
		return exitAPIError
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		fmt.Fprintf(o.e.stderr, "console call %s: %v (is the console running at that address? pass --url URL or set COUNTERSIGN_URL)\n", o.sub, err)
		return exitAPIError
	}
	fmt.Fprintf(o.e.stderr, "console call %s: %v\n", o.sub, err)
	return exitAPIError
}

// print writes JSON text indented, keeping every number as the console
// wrote it.
func (o *callOutput) print(raw []byte) {
	raw = bytes.TrimSpace(raw)
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		o.e.stdout.Write(raw)
		fmt.Fprintln(o.e.stdout)
		return
	}
	b.WriteByte('\n')
	o.e.stdout.Write(b.Bytes())
}

// readInput reads a file, or stdin for "-".
func readInput(e *env, name string) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(e.stdin)
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// parseInterleaved parses flags that may come before, between or after the
// positional arguments ("get ID --url X"), and returns the positionals.
// After "--" everything is positional.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}
