// Command console runs Countersign: the approval console for AI agents' tool
// calls, and the administrative commands beside it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

func main() {
	// Everything the console writes (the database and its WAL, keys, the
	// control socket) is for its owner alone.
	syscall.Umask(0o077)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr))
}

// env is what a command may touch of the outside world, so tests can run
// commands in-process.
type env struct {
	getenv func(string) string
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
}

// A command runs with its arguments and returns the process exit code:
// 0 success, 1 failure, 2 refused input.
type command struct {
	summary string
	run     func(ctx context.Context, e *env, args []string) int
}

func commands() map[string]command {
	return map[string]command{
		"serve":      {"run the console server", cmdServe},
		"demo":       {"run a demo console with sample tools, logins and an agent", cmdDemo},
		"digest":     {"print the digest of a proposal", cmdDigest},
		"validate":   {"parse, validate and digest a proposal against a tools file", cmdValidate},
		"tools":      {"tools lint FILE: check a tools file", cmdTools},
		"policy":     {"policy test|replay: try a tools file's rules on a proposal or on history", cmdPolicy},
		"freeze":     {"stop approvals and redemptions (all, or one tool or actor): the kill switch", cmdFreeze},
		"unfreeze":   {"lift a freeze (admin)", cmdUnfreeze},
		"keys":       {"keys init|list|rotate|jwks|trust: grant signing keys, and a cluster's trust file", cmdKeys},
		"token":      {"token create|list|revoke: agent API tokens", cmdToken},
		"user":       {"user add|list|disable: console accounts", cmdUser},
		"queue":      {"list the calls waiting for a decision, with their digests", cmdQueue},
		"approve":    {"approve a call as an operator", cmdApprove},
		"deny":       {"deny a call as an operator", cmdDeny},
		"counter":    {"approve a call with an edit, as an operator", cmdCounter},
		"unblock":    {"lift the retry block on an agent's proposals for a tool (operator)", cmdUnblock},
		"allowance":  {"allowance list|revoke: operators' standing approvals of calls like one call", cmdAllowance},
		"delegation": {"delegation list|end: people's approver standing lent to others for a window", cmdDelegation},
		"call":       {"call submit|get|wait|redeem|heartbeat|outcome|cancel: the agent API from the shell", cmdCall},
		"mcp":        {"mcp list|show|approve|reject: review MCP servers' tool definitions (admin)", cmdMCP},
		"plan":       {"plan get|cancel: an agent's plan of calls from the shell", cmdPlan},
		"mcp-bridge": {"relay an MCP client that launches stdio servers to a console's /mcp/{name}", cmdMCPBridge},
		"backup":     {"copy a running SQLite console's database (and, with --keys, its keys) into an archive", cmdBackup},
		"restore":    {"put a backup in place in a data directory, saying what its high-water mark will do", cmdRestore},
		"audit":      {"audit verify|export|checkpoint|pack|prune|accept-rollback: the tamper-evident audit trail", cmdAudit},
		"hold":       {"hold add|list|remove: legal holds that keep calls' audit entries from pruning (admin)", cmdHold},
		"compact":    {"give the space back after audit prune (SQLite: VACUUM, blocks writes; PostgreSQL: VACUUM of the audit table, blocks nothing)", cmdCompact},
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := &env{getenv: getenv, stdin: stdin, stdout: stdout, stderr: stderr}
	cmds := commands()
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr, cmds)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "console: unknown command %q\n\n", args[0])
		usage(stderr, cmds)
		return 2
	}
	return c.run(ctx, e, args[1:])
}

// parseExit is the exit code of a command whose flags did not parse: 0 when
// they asked for its usage (-h, --help), 2 otherwise. The flag package has
// printed the usage or the problem already.
func parseExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}

// withUsage makes a command's -h print text, then its flags.
func withUsage(fs *flag.FlagSet, e *env, text string) {
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "%s\n\nflags:\n", text)
		fs.PrintDefaults()
	}
}

func usage(w io.Writer, cmds map[string]command) {
	fmt.Fprintln(w, "usage: console COMMAND [flags]\n\ncommands:")
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, cmds[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'console COMMAND -h' for a command's flags.")
}
