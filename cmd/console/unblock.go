package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/countersign/countersign/internal/control"
	"github.com/countersign/countersign/internal/queue"
)

const unblockUsage = `usage: console unblock ACTOR TOOL --as OPERATOR [--data DIR]

Lifts the retry block on ACTOR's proposals for TOOL, as the Clear button of
the console's queue does: after three refused proposals in a row for one
tool, the agent is refused with 429 retry_limit until a person clears it.
TOOL is a tool's name, (unknown) for the block on names that are not tools
of the tools file, or * for the block on every tool that an actor holding
10 blocks gets. OPERATOR must be an enabled operator or admin. It goes
through the running server's control socket (or the database when none
runs), and the audit records the cli channel.`

func cmdUnblock(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("unblock", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	withUsage(fs, e, unblockUsage)
	data := fs.String("data", "", "data directory (default $COUNTERSIGN_DATA or ./countersign-data)")
	dbURL := dbFlag(fs)
	as := fs.String("as", "", "operator name (required)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return parseExit(err)
	}
	if len(pos) != 2 || *as == "" {
		fmt.Fprintln(e.stderr, "usage: console unblock ACTOR TOOL --as OPERATOR [--data DIR] (console unblock -h says more)")
		return 2
	}
	actor, tool := pos[0], pos[1]
	resp, err := handOver(ctx, dataDir(e, *data), databaseURL(e, *dbURL), "",
		control.Request{Action: "clear", Operator: *as, Actor: actor, Tool: tool})
	if err != nil {
		fmt.Fprintf(e.stderr, "console unblock: %v\n", err)
		return 1
	}
	if resp.Error != nil {
		if resp.Error.Code == "not_blocked" {
			fmt.Fprintf(e.stderr, "console unblock: %s is not blocked on %s; nothing was cleared. Check both names against the blocks "+
				"the console's queue lists: the actor as its token names it (e.g. agent:billing-bot), the tool by its name, "+
				"%s for names that are not tools of the tools file, %s for every tool\n", actor, tool, queue.UnknownTool, queue.AnyTool)
			return 1
		}
		fmt.Fprintf(e.stderr, "console unblock: %s\n", resp.Error.Message)
		return 1
	}
	fmt.Fprintf(e.stdout, "Cleared the retry block of %s on %s: its proposals are accepted again.\n", actor, tool)
	return 0
}
