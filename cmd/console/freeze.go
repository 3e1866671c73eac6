package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/server"
)

const freezeUsage = `usage: console freeze [--tool T] [--actor A] [--allow-unknown] --reason TEXT --as NAME [--data DIR] [--tools FILE]
       console unfreeze [--tool T] [--actor A] --as ADMIN [--data DIR]
       console freeze --list [--data DIR]

The kill switch. While a freeze is in force, no call it matches is approved,
by a person or by a rule, and no grant for one is redeemed; agents get 503
frozen with the reason, and every console page shows a banner. Without
--tool and --actor a freeze matches every call. It is written to the
database directly and takes effect at once, also for a server that is
running on it. NAME must be an enabled operator or admin; lifting a freeze
needs an enabled admin and names the same --tool and --actor.

--tool names a tool of the tools file (or one calls were made of), or an
MCP server of the tools file, which freezes every tool it serves, now and
later; --actor names an actor with an API token or with calls. A name
that matches nothing is refused with the names close to it; a tool or
actor not seen yet is frozen only with --allow-unknown.

flags:
`

func cmdFreeze(ctx context.Context, e *env, args []string) int {
	return freezeCommand(ctx, e, "freeze", args)
}
func cmdUnfreeze(ctx context.Context, e *env, args []string) int {
	return freezeCommand(ctx, e, "unfreeze", args)
}

func freezeCommand(ctx context.Context, e *env, name string, args []string) int {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprint(e.stderr, freezeUsage)
		fs.PrintDefaults()
	}
	data := fs.String("data", "", "data directory (default $COUNTERSIGN_DATA or ./countersign-data)")
	dbURL := dbFlag(fs)
	tool := fs.String("tool", "", "freeze only this tool's calls")
	actor := fs.String("actor", "", "freeze only this actor's calls")
	reason := fs.String("reason", "", "why, in words agents and operators will see (freeze only)")
	as := fs.String("as", "", "the account taking the action")
	list := fs.Bool("list", false, "list the freezes in force")
	allowUnknown := fs.Bool("allow-unknown", false, "freeze a tool or actor this console has not seen yet (freeze only)")
	toolsFile := fs.String("tools", "", "the tools file in force, to check --tool against (default DATA/tools.yaml)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if len(pos) > 0 || (!*list && *as == "") || (name == "freeze" && !*list && *reason == "") {
		fs.Usage()
		return 2
	}
	d, err := openExisting(ctx, dataDir(e, *data), databaseURL(e, *dbURL))
	if err != nil {
		fmt.Fprintf(e.stderr, "console %s: %v\n", name, err)
		return 1
	}
	defer d.Close()
	cfg := queue.Config{Store: d.queue}
	if name == "freeze" && !*list && *tool != "" {
		// The tool is checked against the tools file in force and the
		// tools of the calls; without the file, against the calls only.
		pol, _, err := loadPolicy(dataDir(e, *data), *toolsFile)
		if err != nil && *toolsFile != "" {
			fmt.Fprintf(e.stderr, "console %s: %v\n", name, err)
			return 1
		}
		cfg.Policy = pol
	}
	q := queue.NewService(cfg)
	if *list {
		fz, err := q.Freezes(ctx)
		if err != nil {
			fmt.Fprintf(e.stderr, "console %s: %v\n", name, err)
			return 1
		}
		if len(fz) == 0 {
			fmt.Fprintln(e.stdout, "no freeze in force")
		}
		for _, f := range fz {
			fmt.Fprintf(e.stdout, "%s frozen since %s by %s: %s\n", f.Scope(), f.At.Format(time.RFC3339), f.By, shown(f.Reason))
		}
		return 0
	}
	if name == "freeze" {
		f, err := q.FreezeWith(ctx, queue.FreezeRequest{By: *as, Channel: audit.ChannelCLI, Tool: *tool, Actor: *actor,
			Reason: *reason, AllowUnknown: *allowUnknown})
		if err != nil {
			fmt.Fprintf(e.stderr, "console freeze: %s\n", refusal(err))
			return 1
		}
		fmt.Fprintf(e.stdout, "%s frozen: no approval and no redemption until an admin runs console unfreeze%s%s\n",
			f.Scope(), flagIf("--tool", f.Tool), flagIf("--actor", f.Actor))
		if len(f.Unseen) > 0 {
			fmt.Fprintf(e.stdout, "note: this console has not seen %s yet; the freeze applies once it appears\n", strings.Join(f.Unseen, " or "))
		}
		return 0
	}
	lifted, err := q.Unfreeze(ctx, *as, audit.ChannelCLI, *tool, *actor)
	if err != nil {
		fmt.Fprintf(e.stderr, "console unfreeze: %s\n", refusal(err))
		return 1
	}
	fmt.Fprintf(e.stdout, "%s unfrozen (%d freeze(s) lifted)\n", lifted[0].Scope(), len(lifted))
	return 0
}

// refusal is what the command line says of err: the error table's code
// and message for a refusal (so that scripts can match the code the API
// and the control socket answer), the error itself for anything else.
func refusal(err error) string {
	if ae := server.ErrorOf(err); ae.Status < 500 {
		return ae.Code + ": " + ae.Message
	}
	return err.Error()
}

func flagIf(name, v string) string {
	if v == "" {
		return ""
	}
	return " " + name + " " + v
}
