package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/policy"
)

const policyUsage = `usage: console policy test|replay [flags]

  test    which rule of a tools file decides a proposal, and why
  replay  what the rules of a tools file would have done to the calls in history

Run 'console policy test -h' or 'console policy replay -h' for the flags.
`

// cmdPolicy runs the policy subcommands.
func cmdPolicy(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(e.stderr, policyUsage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	switch args[0] {
	case "test":
		return cmdPolicyTest(ctx, e, args[1:])
	case "replay":
		return cmdPolicyReplay(ctx, e, args[1:])
	}
	fmt.Fprintf(e.stderr, "console policy: unknown subcommand %q\n\n%s", args[0], policyUsage)
	return 2
}

const policyTestUsage = `usage: console policy test --tools FILE --actor A [--audience B] [--now TIME] [--json] [PROPOSAL]

Runs a proposal {"tool","target","args","rationale"?} through the rules of
its tool in the tools file, as the console would when an agent with actor A
and audience B submits it: strict parse, the tool's schema, then each rule in
order until one matches. Prints the decision (approve, deny, or ask and how
many approvals), the rule that made it and every rule tried on the way, with
--json as one JSON object. PROPOSAL is a file name, "-" or nothing for
standard input, or the JSON text itself when it starts with "{".

Exit 0 with a decision (whatever it is), 2 for a refused proposal (the API's
error JSON on standard output), 1 when the tools file is refused.

flags:
`

func cmdPolicyTest(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("policy test", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprint(e.stderr, policyTestUsage)
		fs.PrintDefaults()
	}
	toolsFile := fs.String("tools", "", "the tools file with the rules (required)")
	actor := fs.String("actor", "", "the actor of the token that would submit the proposal, e.g. agent:billing-bot (required)")
	audience := fs.String("audience", "", "the audience of that token (default: the tool's audience)")
	nowFlag := fs.String("now", "", "the time the rules see as now, RFC 3339 (default: the current time)")
	asJSON := fs.Bool("json", false, "print the decision as JSON")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	switch {
	case *toolsFile == "" || *actor == "":
		fmt.Fprintln(e.stderr, "console policy test: --tools FILE and --actor A are required")
		fs.Usage()
		return 2
	case len(pos) > 1:
		fmt.Fprintf(e.stderr, "console policy test: one proposal at a time, got %d arguments\n", len(pos))
		return 2
	}
	now := time.Now().UTC()
	if *nowFlag != "" {
		if now, err = time.Parse(time.RFC3339, *nowFlag); err != nil {
			fmt.Fprintf(e.stderr, "console policy test: --now must be an RFC 3339 time such as 2026-11-30T10:00:00Z, not %q\n", *nowFlag)
			return 2
		}
	}
	pol, err := policy.Load(*toolsFile)
	if err != nil {
		fmt.Fprintf(e.stderr, "console policy test: the tools file is refused:\n%v\n", err)
		return 1
	}
	p, tool, code := checkedProposal(e, "console policy test", pol.Registry(), pos)
	if tool == nil {
		return code
	}
	aud := *audience
	if aud == "" {
		aud = tool.Audience
	} else if aud != tool.Audience {
		fmt.Fprintf(e.stderr, "console policy test: note: %s executes on %s; the console refuses it from a token for audience %s (audience_not_allowed) before any rule runs\n",
			tool.Name, tool.Audience, aud)
	}
	d := pol.Decide(tool, policy.Input{Target: p.Target, Args: p.Args, Actor: *actor, Audience: aud, Now: now})

	type step struct {
		Rule    string `json:"rule"`
		Then    string `json:"then"`
		Matched bool   `json:"matched"`
		Error   string `json:"error,omitempty"`
	}
	out := struct {
		Tool        string `json:"tool"`
		Decision    string `json:"decision"`
		Rule        string `json:"rule,omitempty"`
		RuleDigest  string `json:"rule_digest,omitempty"`
		Reason      string `json:"reason,omitempty"`
		Approvals   int    `json:"approvals"`
		Error       string `json:"error,omitempty"`
		Steps       []step `json:"steps"`
		ToolDigest  string `json:"tool_digest"`
		ToolsDigest string `json:"tools_digest"`
		Now         string `json:"now"`
	}{Tool: tool.Name, Decision: string(d.Action), Reason: d.Reason, Approvals: d.Approvals, Steps: []step{},
		ToolDigest: tool.DefinitionDigest, ToolsDigest: pol.ToolsDigest(), Now: now.Format(time.RFC3339)}
	if d.Rule != nil {
		out.Rule, out.RuleDigest = d.Rule.ID, d.Rule.Digest
	}
	if d.Err != nil {
		out.Error = d.Err.Error()
	}
	for _, s := range d.Steps {
		st := step{Rule: s.Rule.ID, Then: s.Rule.Then, Matched: s.Matched}
		if s.Err != nil {
			st.Error = s.Err.Error()
		}
		out.Steps = append(out.Steps, st)
	}
	if *asJSON {
		writeJSON(e.stdout, out)
		return 0
	}

	var b strings.Builder
	switch {
	case d.Err != nil:
		fmt.Fprintf(&b, "ask: %d approval(s) from people; no automatic decision because a rule could not be evaluated\n", d.Approvals)
	case d.Rule == nil && len(tool.Rules) == 0:
		fmt.Fprintf(&b, "ask: %d approval(s) from people; %s has no rules\n", d.Approvals, tool.Name)
	case d.Rule == nil:
		fmt.Fprintf(&b, "ask: %d approval(s) from people; no rule matched\n", d.Approvals)
	case d.Action == policy.Ask:
		fmt.Fprintf(&b, "ask: %d approval(s) from people, by rule %s\n", d.Approvals, d.Rule.ID)
	case d.Action == policy.Approve:
		fmt.Fprintf(&b, "approve: by rule %s, recorded as %s, no person asked\n", d.Rule.ID, d.Rule.Principal())
	default:
		fmt.Fprintf(&b, "deny: by rule %s; the agent gets 403 denied_by_policy\n", d.Rule.ID)
	}
	if d.Reason != "" {
		fmt.Fprintf(&b, "reason: %s\n", d.Reason)
	}
	for _, s := range d.Steps {
		mark := "no match"
		switch {
		case s.Err != nil:
			mark = "error: " + s.Err.Error()
		case s.Matched:
			mark = "MATCH"
		}
		fmt.Fprintf(&b, "  %-8s %-24s %s\n", s.Rule.Then, s.Rule.ID, mark)
		fmt.Fprintf(&b, "           when: %s\n", oneLineExpr(s.Rule.When))
	}
	fmt.Fprintf(&b, "tool %s, definition %s; tools file %s; now %s\n", tool.Name, tool.DefinitionDigest, pol.ToolsDigest(), now.Format(time.RFC3339))
	fmt.Fprint(e.stdout, b.String())
	return 0
}

func oneLineExpr(s string) string { return strings.Join(strings.Fields(s), " ") }
