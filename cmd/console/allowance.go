package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/answer"
	"github.com/countersign/countersign/internal/control"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/server"
)

const allowanceUsage = `usage: console allowance list [--all] [--tool T] [--giver NAME] [--json] [--data DIR] [--tools FILE]
       console allowance revoke ID --as NAME --reason TEXT [--data DIR] [--tools FILE]

Allowances are operators' bounded, standing approvals of calls like one
pending call, given on the call's page ("approve this and more like it";
docs/allowances.md).

list shows the allowances that have not ended (with --all, every one),
newest first: what each covers in the words its giver read (when the
tools file in force defines its tool as it was given), its uses, its time
and its people. It asks the running server through its control socket
(or reads the database when none runs).

revoke ends an allowance and revokes every grant it minted that has not
been redeemed, at once: agents get revoked when they redeem them. NAME
must be the allowance's giver, an operator allowed to approve its tool, or
an admin (an enabled account). It goes through the running server's
control socket (or the database when none runs), and the audit records
the cli channel.`

func cmdAllowance(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 || (args[0] != "list" && args[0] != "revoke") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprintln(e.stderr, allowanceUsage)
			return 0
		}
		fmt.Fprintln(e.stderr, allowanceUsage)
		return 2
	}
	fs := flag.NewFlagSet("allowance "+args[0], flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	withUsage(fs, e, allowanceUsage)
	data := fs.String("data", "", "data directory (default $COUNTERSIGN_DATA or ./countersign-data)")
	dbURL := dbFlag(fs)
	toolsFile := fs.String("tools", "", "the tools file in force (default DATA/tools.yaml): list says each allowance in words with it; revoke checks who may approve the tool with it")
	if args[0] == "list" {
		all := fs.Bool("all", false, "also the allowances that have ended")
		tool := fs.String("tool", "", "only the allowances of this tool")
		giver := fs.String("giver", "", "only the allowances this operator gave")
		asJSON := fs.Bool("json", false, "print JSON, one allowance a line")
		pos, err := parseInterleaved(fs, args[1:])
		if err != nil {
			return parseExit(err)
		}
		if len(pos) > 0 {
			fmt.Fprintln(e.stderr, "usage: console allowance list [--all] [--tool T] [--giver NAME] [--json] [--data DIR] [--tools FILE]")
			return 2
		}
		return allowanceList(ctx, e, dataDir(e, *data), databaseURL(e, *dbURL), *toolsFile,
			queue.AllowanceFilter{Live: !*all, Tool: *tool, Giver: *giver}, *asJSON)
	}
	as := fs.String("as", "", "the account revoking it (required)")
	reason := fs.String("reason", "", "why, in words the agents of its revoked grants receive (required)")
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return parseExit(err)
	}
	if len(pos) != 1 || *as == "" || strings.TrimSpace(*reason) == "" {
		fmt.Fprintln(e.stderr, "usage: console allowance revoke ID --as NAME --reason TEXT [--data DIR] [--tools FILE]")
		return 2
	}
	resp, err := handOver(ctx, dataDir(e, *data), databaseURL(e, *dbURL), *toolsFile,
		control.Request{Action: control.ActionRevokeAllowance, ID: pos[0], Operator: *as, Reason: *reason})
	if err != nil {
		fmt.Fprintf(e.stderr, "console allowance revoke: %v\n", err)
		return 1
	}
	if resp.Error != nil {
		fmt.Fprintf(e.stderr, "console allowance revoke: %s: %s\n", resp.Error.Code, resp.Error.Message)
		return 1
	}
	a := resp.Allowance
	fmt.Fprintf(e.stdout, "Revoked allowance %s (%s by %s, %d of %d used): it approves nothing more, and no grant it minted is accepted unless it was redeemed before.\n",
		a.ID, a.Tool, a.Actor, a.Used, a.Uses)
	return 0
}

// revokeAllowanceDirect revokes an allowance on the database when no
// server answers on the control socket. Revoking signs nothing; the tools
// file, when there is one, says who may approve the allowance's tool (else
// only its giver or an admin may revoke it).
func revokeAllowanceDirect(ctx context.Context, data, url, toolsFile string, req control.Request) (control.Response, error) {
	var out control.Response
	d, err := openExisting(ctx, data, url)
	if err != nil {
		return out, err
	}
	defer d.Close()
	cfg := queue.Config{Store: d.queue}
	if pol, _, err := loadPolicy(data, toolsFile); err == nil {
		cfg.Policy = pol
	}
	a, err := control.RevokeAllowance(ctx, queue.NewService(cfg), req)
	if err != nil {
		e := answer.ErrorOf(server.ErrorOf(err))
		out.Error = &e
		return out, nil
	}
	v := control.AllowanceOf(a, time.Now())
	out.Allowance = &v
	return out, nil
}

func allowanceList(ctx context.Context, e *env, data, url, toolsFile string, f queue.AllowanceFilter, asJSON bool) int {
	req := control.Request{Action: control.ActionAllowances, All: !f.Live, Tool: f.Tool, Giver: f.Giver}
	resp, err := decideViaSocket(ctx, controlPath(data), req)
	if errors.Is(err, errNoServer) {
		resp, err = allowancesDirect(ctx, data, url, toolsFile, req)
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "console allowance list: %v\n", err)
		return 1
	}
	if resp.Error != nil {
		fmt.Fprintf(e.stderr, "console allowance list: %s: %s\n", resp.Error.Code, resp.Error.Message)
		return 1
	}
	if asJSON {
		enc := json.NewEncoder(e.stdout)
		for _, a := range resp.Allowances {
			enc.Encode(a)
		}
		return 0
	}
	if len(resp.Allowances) == 0 {
		if f.Live {
			fmt.Fprintln(e.stdout, "no allowance in force (--all lists those that ended)")
		} else {
			fmt.Fprintln(e.stdout, "no allowance")
		}
		return 0
	}
	for _, a := range resp.Allowances {
		printAllowance(e.stdout, a)
	}
	return 0
}

// allowancesDirect lists allowances from the database when no server
// answers on the control socket, in words with the tools file when there
// is one.
func allowancesDirect(ctx context.Context, data, url, toolsFile string, req control.Request) (control.Response, error) {
	d, err := openExisting(ctx, data, url)
	if err != nil {
		return control.Response{}, err
	}
	defer d.Close()
	cfg := queue.Config{Store: d.queue}
	if pol, _, err := loadPolicy(data, toolsFile); err == nil {
		cfg.Policy = pol
	} else if toolsFile != "" {
		return control.Response{}, err
	}
	resp, err := control.Allowances(ctx, queue.NewService(cfg), req)
	if err != nil {
		e := answer.ErrorOf(server.ErrorOf(err))
		return control.Response{Error: &e}, nil
	}
	return resp, nil
}

// printAllowance writes one allowance as a block of lines.
func printAllowance(w io.Writer, a control.Allowance) {
	fmt.Fprintf(w, "%s  %s  %s by %s for %s\n", a.ID, a.State, a.Tool, shown(a.Actor), shown(a.Audience))
	fmt.Fprintf(w, "  %d of %d used, until %s; given by %s at %s from call %s\n", a.Used, a.Uses,
		a.Until.UTC().Format(time.RFC3339), shown(a.Giver), a.GivenAt.UTC().Format(time.RFC3339), a.BaseCall)
	confirmers := make([]string, len(a.Confirmers))
	for i, c := range a.Confirmers {
		confirmers[i] = shown(c)
	}
	fmt.Fprintf(w, "  confirmers %s (%d needed)\n", strings.Join(confirmers, ", "), a.ConfirmersNeeded)
	if !a.EndedAt.IsZero() {
		fmt.Fprintf(w, "  ended %s at %s by %s\n", a.EndReason, a.EndedAt.UTC().Format(time.RFC3339), shown(a.EndedBy))
	}
	fmt.Fprintf(w, "  scope digest %s\n", a.ScopeDigest)
	if a.Words != "" {
		fmt.Fprintf(w, "  %s\n", a.Words)
	}
}
