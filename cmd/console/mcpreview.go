package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/control"
	"github.com/countersign/countersign/internal/wire"
)

const mcpUsage = `usage: console mcp list [--json] [--data DIR]
       console mcp show SERVER TOOL DIGEST [--json] [--data DIR]
       console mcp approve SERVER TOOL DIGEST --as ADMIN [--data DIR]
       console mcp reject SERVER TOOL DIGEST --as ADMIN [--data DIR]

The review of MCP servers' tool definitions (docs/mcp.md) from the shell
of the console's machine, through the running server's control socket:
only the running server knows what each MCP server lists now.

list shows every server's current definitions, those awaiting review
first; show prints one with its text; approve and reject review a pending
one in the name of ADMIN, an enabled admin (audited through the cli
channel). The text is printed as JSON: a control or invisible character
is an escape, never the character itself.`

func cmdMCP(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(e.stderr, mcpUsage)
		return 2
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprintln(e.stderr, mcpUsage)
		return 0
	case "list", "show", "approve", "reject":
	default:
		fmt.Fprintln(e.stderr, mcpUsage)
		return 2
	}
	sub := args[0]
	fs := flag.NewFlagSet("mcp "+sub, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	withUsage(fs, e, mcpUsage)
	data := fs.String("data", "", "data directory (default $COUNTERSIGN_DATA or ./countersign-data)")
	var asJSON *bool
	var as *string
	if sub == "list" || sub == "show" {
		asJSON = fs.Bool("json", false, "print JSON")
	} else {
		as = fs.String("as", "", "the admin reviewing it (required)")
	}
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return parseExit(err)
	}
	req := control.Request{Action: control.ActionMCPList}
	switch {
	case sub == "list" && len(pos) == 0:
	case sub == "show" && len(pos) == 3:
		req = control.Request{Action: control.ActionMCPShow, Server: pos[0], Tool: pos[1], Digest: pos[2]}
	case (sub == "approve" || sub == "reject") && len(pos) == 3 && *as != "":
		req = control.Request{Action: control.ActionMCPReview, Server: pos[0], Tool: pos[1], Digest: pos[2], Decision: sub, Operator: *as}
	default:
		fmt.Fprintln(e.stderr, strings.SplitN(mcpUsage, "\n\n", 2)[0])
		return 2
	}
	dir := dataDir(e, *data)
	resp, err := decideViaSocket(ctx, controlPath(dir), req)
	if err == errNoServer {
		fmt.Fprintf(e.stderr, "console mcp %s: no console is running on %s: start it (console serve), since only the running console knows what each MCP server lists now\n", sub, dir)
		return 1
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "console mcp %s: %v\n", sub, err)
		return 1
	}
	if resp.Error != nil {
		fmt.Fprintf(e.stderr, "console mcp %s: %s: %s\n", sub, resp.Error.Code, resp.Error.Message)
		return 1
	}
	if sub == "list" {
		if *asJSON {
			enc := json.NewEncoder(e.stdout)
			for _, d := range resp.Definitions {
				enc.Encode(d)
			}
			return 0
		}
		if len(resp.Definitions) == 0 {
			fmt.Fprintln(e.stdout, "no MCP tool definition")
			return 0
		}
		for _, d := range resp.Definitions {
			printDefinition(e.stdout, d)
		}
		return 0
	}
	d := resp.Definition
	if asJSON != nil && *asJSON {
		json.NewEncoder(e.stdout).Encode(d)
		return 0
	}
	if sub != "show" {
		fmt.Fprintf(e.stdout, "%s: %s/%s %s is %s.\n", sub, d.Server, shown(d.Tool), d.Digest, d.Status)
	}
	printDefinition(e.stdout, *d)
	if len(d.Definition) > 0 {
		var b bytes.Buffer
		if json.Indent(&b, d.Definition, "  ", "  ") == nil {
			fmt.Fprintf(e.stdout, "  definition\n  %s\n", visible(b.String()))
		}
	}
	return 0
}

// printDefinition writes one definition as a block of lines.
func printDefinition(w io.Writer, d wire.MCPDefinition) {
	fmt.Fprintf(w, "%s/%s  %s\n", d.Server, shown(d.Tool), d.Status)
	fmt.Fprintf(w, "  digest %s; first seen %s\n", d.Digest, d.FirstSeen.UTC().Format(time.RFC3339))
	if d.PreviousDigest != "" {
		fmt.Fprintf(w, "  changed from the approved %s\n", d.PreviousDigest)
	}
	if d.DecidedBy != "" {
		fmt.Fprintf(w, "  reviewed by %s at %s\n", shown(d.DecidedBy), d.DecidedAt.UTC().Format(time.RFC3339))
	}
	for _, r := range d.Reasons {
		fmt.Fprintf(w, "  why: %s\n", shown(r))
	}
}
