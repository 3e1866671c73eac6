package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/notify"
	"github.com/countersign/countersign/internal/policy"
	"github.com/countersign/countersign/internal/tools"
)

const validateUsage = `usage: console validate --tools FILE [--actor A] [--audience B] [PROPOSAL]

Checks a proposal {"tool","target","args","rationale"?} exactly as the agent
API would: strict parse, then the tool's closed schema and target pattern
from the tools file. PROPOSAL is a file name, "-" or nothing for standard
input, or the JSON text itself when it starts with "{".

A valid proposal exits 0 and prints
  {"valid":true,"tool":...,"actor":...,"audience":...,"digest":...}
where the digest leaves out the tool's informational members, as the console
does. A refused one exits 2 and prints the API's error JSON on standard
output: {"error":{"code":...,"message":...,"problems":[{"code","path","message"}]}}
with code invalid_arguments, unknown_tool, or the parse problem's own code.

flags:
`

// cmdValidate parses, validates and digests a proposal against a tools file.
func cmdValidate(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprint(e.stderr, validateUsage)
		fs.PrintDefaults()
	}
	toolsFile := fs.String("tools", "", "the tools file (required), e.g. examples/tools.yaml")
	actor := fs.String("actor", "cli", "the actor of the token that would submit the proposal")
	audience := fs.String("audience", "", "the audience of that token (default: the tool's audience)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	switch {
	case *toolsFile == "":
		fmt.Fprintln(e.stderr, "console validate: --tools FILE is required")
		fs.Usage()
		return 2
	case len(pos) > 1:
		fmt.Fprintf(e.stderr, "console validate: one proposal at a time, got %d arguments\n", len(pos))
		fs.Usage()
		return 2
	}
	pol, err := policy.Load(*toolsFile)
	if err != nil {
		fmt.Fprintf(e.stderr, "console validate: the tools file is refused:\n%v\n", err)
		return 1
	}
	p, tool, code := checkedProposal(e, "console validate", pol.Registry(), pos)
	if tool == nil {
		return code
	}

	aud := *audience
	if aud == "" {
		aud = tool.Audience
	} else if aud != tool.Audience {
		fmt.Fprintf(e.stderr, "console validate: note: %s executes on %s; the console refuses it from a token for audience %s (audience_not_allowed)\n",
			tool.Name, tool.Audience, aud)
	}
	env := p.Envelope(*actor, aud)
	env.Args = tool.Bound(p.Args)
	d, err := env.Digest()
	if err != nil {
		// Only a context that is not valid UTF-8 gets here.
		fmt.Fprintf(e.stderr, "console validate: %v\n", err)
		return 2
	}
	out := struct {
		Valid    bool   `json:"valid"`
		Tool     string `json:"tool"`
		Actor    string `json:"actor"`
		Audience string `json:"audience"`
		Digest   string `json:"digest"`
	}{true, tool.Name, *actor, aud, d}
	writeJSON(e.stdout, out)
	return 0
}

// checkedProposal reads the proposal named by pos (standard input when pos
// is empty), parses it strictly and checks it against reg, as the agent API
// does. A proposal that does not pass returns a nil tool and the exit code,
// after printing the API's error JSON on standard output (or, when it cannot
// be read, a line on standard error starting with cmd).
func checkedProposal(e *env, cmd string, reg *tools.Registry, pos []string) (canonical.Proposal, *tools.Tool, int) {
	src := "-"
	if len(pos) == 1 {
		src = pos[0]
	}
	body, err := readProposal(e, src)
	if err != nil {
		fmt.Fprintf(e.stderr, "%s: %v\n", cmd, err)
		return canonical.Proposal{}, nil, 1
	}
	if len(body) > canonical.MaxBodyBytes {
		return canonical.Proposal{}, nil, refuse(e, canonical.CodeTooLarge, "", canonical.Problems{{Code: canonical.CodeTooLarge, Offset: -1,
			Message: fmt.Sprintf("the proposal is more than %d bytes; at most %d are accepted", canonical.MaxBodyBytes, canonical.MaxBodyBytes)}})
	}
	v, err := canonical.Parse(body)
	if err != nil {
		var pr *canonical.Problem
		if !errors.As(err, &pr) {
			fmt.Fprintf(e.stderr, "%s: %v\n", cmd, err)
			return canonical.Proposal{}, nil, 1
		}
		return canonical.Proposal{}, nil, refuse(e, pr.Code, pr.Message, canonical.Problems{*pr})
	}
	p, ps := canonical.ProposalFrom(v, "", true)
	if len(ps) > 0 {
		return canonical.Proposal{}, nil, refuse(e, "invalid_arguments", "", ps)
	}
	tool, ps := reg.Check(p)
	if tool == nil {
		return canonical.Proposal{}, nil, refuse(e, canonical.CodeUnknownTool, ps[0].Message, ps)
	}
	if len(ps) > 0 {
		return canonical.Proposal{}, nil, refuse(e, "invalid_arguments", "", ps)
	}
	return p, tool, 0
}

// readProposal reads the proposal from a file, standard input ("-"), or the
// argument itself when it is JSON text. It reads one byte past the size
// limit, enough to refuse a larger body without holding all of it.
func readProposal(e *env, src string) ([]byte, error) {
	if strings.HasPrefix(strings.TrimSpace(src), "{") {
		return []byte(src), nil
	}
	in := e.stdin
	if src != "-" {
		f, err := os.Open(src)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		in = f
	}
	return io.ReadAll(io.LimitReader(in, canonical.MaxBodyBytes+1))
}

// refuse prints the agent API's error JSON (DESIGN §5) and returns the exit
// code for refused input. An empty message counts the problems.
func refuse(e *env, code, message string, ps canonical.Problems) int {
	if message == "" {
		message = "1 problem in the proposal"
		if len(ps) != 1 {
			message = fmt.Sprintf("%d problems in the proposal", len(ps))
		}
	}
	type body struct {
		Code     string              `json:"code"`
		Message  string              `json:"message"`
		Problems []canonical.Problem `json:"problems"`
	}
	writeJSON(e.stdout, map[string]body{"error": {Code: code, Message: message, Problems: ps}})
	return 2
}

// writeJSON writes v as one line of JSON without HTML escaping, so that
// messages read as written.
func writeJSON(w io.Writer, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Only strings, booleans and canonical values are encoded.
		panic(err)
	}
	w.Write(buf.Bytes())
}

const toolsUsage = `usage: console tools lint FILE

Lints a tools file (see docs/tools.md) and compiles its rules (see
docs/policy.md). A good file exits 0 with a one-line summary ending in the
file's digest, the one every decision records; otherwise every problem is
printed, one per line as FILE:LINE: TOOL: PATH: MESSAGE, and the exit code
is 2.
`

// cmdTools runs the tools subcommands; lint is the only one.
func cmdTools(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(e.stderr, toolsUsage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if args[0] != "lint" {
		fmt.Fprintf(e.stderr, "console tools: unknown subcommand %q\n\n%s", args[0], toolsUsage)
		return 2
	}
	if len(args) == 2 && isHelp(args[1]) {
		fmt.Fprint(e.stderr, toolsUsage)
		return 0
	}
	if len(args) != 2 || strings.HasPrefix(args[1], "-") {
		fmt.Fprint(e.stderr, toolsUsage)
		return 2
	}
	file := args[1]
	pol, err := policy.Load(file)
	problems := 0
	var le *tools.LintError
	switch {
	case errors.As(err, &le):
		fmt.Fprintln(e.stdout, le.Error())
		problems += len(le.Problems)
	case err != nil:
		fmt.Fprintf(e.stderr, "console tools lint: %v\n", err)
		return 1
	}
	// The notifications section, read as serve reads it at start: its
	// secrets too, from this environment and the file's folder.
	b, err := os.ReadFile(file)
	if err != nil {
		fmt.Fprintf(e.stderr, "console tools lint: %v\n", err)
		return 1
	}
	notes, err := toolsFileNotifications(file, b, e.getenv)
	var ce *notify.ConfigError
	switch {
	case errors.As(err, &ce):
		for _, p := range ce.Problems {
			fmt.Fprintf(e.stdout, "%s: notifications: %s\n", file, p)
		}
		problems += len(ce.Problems)
	case err != nil:
		fmt.Fprintf(e.stderr, "console tools lint: %v\n", err)
		return 1
	case notes != nil && pol != nil:
		// Without a section the channels may come from --notify or
		// DATA/notify.yaml, which serve checks at start.
		for _, p := range ruleChannelProblems(pol.Registry(), notes, file+" (notifications)") {
			fmt.Fprintf(e.stdout, "%s: %s\n", file, p)
			problems++
		}
	}
	switch {
	case problems == 1:
		fmt.Fprintf(e.stderr, "console tools lint: %s: 1 problem\n", file)
		return 2
	case problems > 1:
		fmt.Fprintf(e.stderr, "console tools lint: %s: %d problems\n", file, problems)
		return 2
	}
	names := pol.Registry().Names()
	noun := "tools"
	if len(names) == 1 {
		noun = "tool"
	}
	rules := 0
	for _, n := range names {
		rules += len(pol.Rules(n))
	}
	ruleNoun := "rules"
	if rules == 1 {
		ruleNoun = "rule"
	}
	fmt.Fprintf(e.stdout, "%s: ok, %d %s (%s), %d %s; digest %s\n", file, len(names), noun, strings.Join(names, ", "), rules, ruleNoun, pol.ToolsDigest())
	if notes != nil {
		channels := make([]string, 0, len(notes.Channels))
		for name := range notes.Channels {
			channels = append(channels, name)
		}
		sort.Strings(channels)
		fmt.Fprintf(e.stdout, "%s: notifications: ok, %d channel(s) (%s), %d route(s)\n", file, len(channels), strings.Join(channels, ", "), len(notes.Routes))
	}
	return 0
}
