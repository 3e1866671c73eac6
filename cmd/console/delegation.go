package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/countersign/countersign/internal/answer"
	"github.com/countersign/countersign/internal/control"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/server"
	"github.com/countersign/countersign/internal/wire"
)

const delegationUsage = `usage: console delegation list [--person NAME] [--all] [--json] [--data DIR]
       console delegation end ID --as NAME [--data DIR]

A delegation lends one person's approver standing to another for a window
(docs/team.md). People give them on their account page.

list shows the delegations in force now (with --all, every one), newest
first, of NAME when --person is set (given or received), else everyone's.

end ends a live delegation at once; NAME must be one of its two people or
an admin (an enabled account). It goes through the running server's
control socket (or the database when none runs), and the audit records
the cli channel.`

func cmdDelegation(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 || (args[0] != "list" && args[0] != "end") {
		fmt.Fprintln(e.stderr, delegationUsage)
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			return 0
		}
		return 2
	}
	fs := flag.NewFlagSet("delegation "+args[0], flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	withUsage(fs, e, delegationUsage)
	data := fs.String("data", "", "data directory (default $COUNTERSIGN_DATA or ./countersign-data)")
	dbURL := dbFlag(fs)
	req := control.Request{Action: control.ActionDelegations}
	var asJSON *bool
	var as *string
	if args[0] == "list" {
		fs.StringVar(&req.Person, "person", "", "only the delegations this person gave or received")
		fs.BoolVar(&req.All, "all", false, "also the delegations that have ended")
		asJSON = fs.Bool("json", false, "print JSON, one delegation a line")
	} else {
		req.Action = control.ActionEndDelegation
		as = fs.String("as", "", "the account ending it (required)")
	}
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return parseExit(err)
	}
	if args[0] == "list" && len(pos) != 0 || args[0] == "end" && (len(pos) != 1 || *as == "") {
		fmt.Fprintln(e.stderr, delegationUsage)
		return 2
	}
	if args[0] == "end" {
		req.ID, req.Operator = pos[0], *as
	}
	resp, err := decideViaSocket(ctx, controlPath(dataDir(e, *data)), req)
	if errors.Is(err, errNoServer) {
		resp, err = delegationsDirect(ctx, dataDir(e, *data), databaseURL(e, *dbURL), req)
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "console delegation %s: %v\n", args[0], err)
		return 1
	}
	if resp.Error != nil {
		fmt.Fprintf(e.stderr, "console delegation %s: %s: %s\n", args[0], resp.Error.Code, resp.Error.Message)
		return 1
	}
	if args[0] == "end" {
		d := resp.Delegation
		fmt.Fprintf(e.stdout, "Ended delegation %s (%s for %s): %s approves nothing more for %s.\n",
			d.ID, shown(d.Delegate), shown(d.Delegator), shown(d.Delegate), shown(d.Delegator))
		return 0
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		for _, d := range resp.Delegations {
			enc.Encode(d)
		}
		return 0
	}
	if len(resp.Delegations) == 0 {
		if req.All {
			fmt.Fprintln(e.stdout, "no delegation")
		} else {
			fmt.Fprintln(e.stdout, "no delegation in force (--all lists those that ended)")
		}
		return 0
	}
	for _, d := range resp.Delegations {
		printDelegation(e, d)
	}
	return 0
}

// printDelegation writes one delegation as a line.
func printDelegation(e *env, d wire.Delegation) {
	state := "live"
	switch {
	case !d.EndedAt.IsZero():
		state = "ended by " + shown(d.EndedBy) + " at " + d.EndedAt.UTC().Format(time.RFC3339)
	case !d.Live:
		state = "ran out"
	}
	fmt.Fprintf(e.stdout, "%s  %s approves for %s until %s (given by %s at %s): %s\n", d.ID, shown(d.Delegate), shown(d.Delegator),
		d.Until.UTC().Format(time.RFC3339), shown(d.GivenBy), d.GivenAt.UTC().Format(time.RFC3339), state)
}

// delegationsDirect lists or ends delegations on the database when no
// server answers on the control socket; neither signs anything.
func delegationsDirect(ctx context.Context, data, url string, req control.Request) (control.Response, error) {
	d, err := openExisting(ctx, data, url)
	if err != nil {
		return control.Response{}, err
	}
	defer d.Close()
	resp, err := control.Delegations(ctx, queue.NewService(queue.Config{Store: d.queue}), req)
	if err != nil {
		e := answer.ErrorOf(server.ErrorOf(err))
		return control.Response{Error: &e}, nil
	}
	return resp, nil
}
