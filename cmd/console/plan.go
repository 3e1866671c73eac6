package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/countersign/countersign/client"
)

const planUsage = `usage: console plan COMMAND ID [flags]

A plan of the agent's token (docs/plans.md) from the shell. Every command
prints the console's JSON answer on stdout and exits 0 on success, 1 on an
API error (the error JSON is on stdout), 2 on a usage error.

commands:
  get ID        print the plan with every item
  cancel ID     withdraw the plan: revoke its unredeemed grants, cancel its unminted items

flags of every command:
  --url URL      the console (default $COUNTERSIGN_URL or http://127.0.0.1:8080)
  --token T      the agent's API token (default $COUNTERSIGN_TOKEN)
`

func cmdPlan(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(e.stderr, planUsage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	sub, args := args[0], args[1:]
	if sub != "get" && sub != "cancel" {
		fmt.Fprintf(e.stderr, "console plan: unknown command %q\n%s", sub, planUsage)
		return 2
	}
	usage := "console plan " + sub + " ID [--url URL] [--token T]"
	fs := flag.NewFlagSet("plan "+sub, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	var f callFlags
	f.register(fs, e)
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
	if f.token == "" || len(pos) != 1 {
		if f.token == "" {
			fmt.Fprintf(e.stderr, "console plan %s: no token: pass --token or set COUNTERSIGN_TOKEN (an admin creates one with 'console token create')\n", sub)
		}
		fmt.Fprintf(e.stderr, "usage: %s\n", usage)
		return 2
	}
	c := client.New(f.url, f.token)
	out := &callOutput{e: e, sub: sub, url: f.url}
	var p *client.Plan
	if sub == "get" {
		p, err = c.GetPlan(ctx, pos[0])
	} else {
		p, err = c.CancelPlan(ctx, pos[0])
	}
	if err != nil {
		return out.fail(err)
	}
	out.print(p.Raw)
	return 0
}
