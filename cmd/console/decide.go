package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"

	"github.com/countersign/countersign/internal/answer"
	"github.com/countersign/countersign/internal/control"
	"github.com/countersign/countersign/internal/grant"
	"github.com/countersign/countersign/internal/policy"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/server"
	"github.com/countersign/countersign/internal/wire"
)

func cmdApprove(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("approve", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	withUsage(fs, e, `usage: console approve CALL_ID --as OPERATOR --digest HEX [--confirm TARGET] [--accept-warnings] [--data DIR] [--tools FILE]

Approves a call in the name of an enabled operator or admin, through the
running server's control socket (or the database when none runs), under the
rules the browser applies. HEX is the full digest the call's page shows.`)
	data := fs.String("data", "", "data directory (default $COUNTERSIGN_DATA or ./countersign-data)")
	dbURL := dbFlag(fs)
	as := fs.String("as", "", "operator name (required)")
	digest := fs.String("digest", "", "the digest you checked (required)")
	toolsFile := fs.String("tools", "", "the tools file in force, when no server is running (default DATA/tools.yaml)")
	confirm := fs.String("confirm", "", "the call's target (or the word) when its tool asks for it to be typed (confirm: in the tools file)")
	accept := fs.Bool("accept-warnings", false, "approve a call that contains hidden or look-alike characters, after reading them on the call's page")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return parseExit(err)
	}
	if len(pos) != 1 || *as == "" || *digest == "" {
		fmt.Fprintln(e.stderr, "usage: console approve CALL_ID --as OPERATOR --digest HEX [--confirm TARGET] [--accept-warnings] [--data DIR] [--tools FILE]")
		return 2
	}
	if !isDigest(*digest) {
		fmt.Fprintf(e.stderr, "console approve: --digest %q is not a digest: give all 64 hex digits the call's page shows\n", *digest)
		return 2
	}
	return decide(ctx, e, dataDir(e, *data), databaseURL(e, *dbURL), *toolsFile, control.Request{Action: "approve", ID: pos[0],
		Operator: *as, Digest: *digest, Confirm: *confirm, AcceptWarnings: *accept})
}

// isDigest reports whether s is a digest as the console shows it: 64
// lowercase hex digits.
func isDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func cmdDeny(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("deny", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	withUsage(fs, e, `usage: console deny CALL_ID --as OPERATOR --reason TEXT [--data DIR]

Denies a call in the name of an enabled operator or admin; the agent
receives the reason.`)
	data := fs.String("data", "", "data directory (default $COUNTERSIGN_DATA or ./countersign-data)")
	dbURL := dbFlag(fs)
	as := fs.String("as", "", "operator name (required)")
	reason := fs.String("reason", "", "why, in words the agent will receive (required)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return parseExit(err)
	}
	if len(pos) != 1 || *as == "" || *reason == "" {
		fmt.Fprintln(e.stderr, "usage: console deny CALL_ID --as OPERATOR --reason TEXT [--data DIR]")
		return 2
	}
	return decide(ctx, e, dataDir(e, *data), databaseURL(e, *dbURL), "", control.Request{Action: "deny", ID: pos[0], Operator: *as, Reason: *reason})
}

// decide hands the decision to a running server over its control socket, or,
// when none is running, applies it to the database directly. Either way the
// same queue rules apply and the audit records the cli channel.
func decide(ctx context.Context, e *env, data, url, toolsFile string, req control.Request) int {
	resp, err := handOver(ctx, data, url, toolsFile, req)
	if err != nil {
		fmt.Fprintf(e.stderr, "console %s: %v\n", req.Action, err)
		return 1
	}
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	if resp.Error != nil {
		enc.Encode(wire.ErrorBody{Error: *resp.Error})
		return 1
	}
	enc.Encode(resp.Call)
	return 0
}

// handOver hands req to a running server over its control socket, or,
// when none is running, applies it to the database directly.
func handOver(ctx context.Context, data, url, toolsFile string, req control.Request) (control.Response, error) {
	resp, err := decideViaSocket(ctx, controlPath(data), req)
	if errors.Is(err, errNoServer) {
		if req.Action == control.ActionRevokeAllowance {
			return revokeAllowanceDirect(ctx, data, url, toolsFile, req)
		}
		resp, err = decideDirect(ctx, data, url, toolsFile, req)
	}
	return resp, err
}

var errNoServer = errors.New("no server on the control socket")

func decideViaSocket(ctx context.Context, sock string, req control.Request) (control.Response, error) {
	var out control.Response
	if _, err := os.Stat(sock); err != nil {
		return out, errNoServer
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
	body, _ := json.Marshal(req)
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://control/v1/decide", bytes.NewReader(body))
	if err != nil {
		return out, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	res, err := client.Do(hreq)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
			return out, errNoServer
		}
		return out, fmt.Errorf("control socket: %w", err)
	}
	defer res.Body.Close()
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		return out, fmt.Errorf("control socket: bad answer: %w", err)
	}
	return out, nil
}

func decideDirect(ctx context.Context, data, url, toolsFile string, req control.Request) (control.Response, error) {
	var out control.Response
	if err := databaseExists(data, url); err != nil {
		return out, err
	}
	// An approval mints a grant signed with the data directory's keyring;
	// a denial or the clearing of a retry block signs nothing and needs no
	// keys. A directory with a database and no keyring is a mistake to
	// point out, not to mend here: the approval is refused before the
	// database is opened, so nothing is made or written.
	var keys *grant.Keyring
	if req.Action == "approve" {
		var err error
		keys, err = grant.OpenExistingKeyring(keysDir(data), Issuer, time.Now)
		if errors.Is(err, grant.ErrNoKeyring) {
			return out, fmt.Errorf("no keyring in %s to sign the grant with, and no server answers on %s; nothing was created or approved. "+
				"Check that --data (or $COUNTERSIGN_DATA) names this console's data directory; "+
				"if its keys were never made, run console keys init --data %s", keysDir(data), controlPath(data), data)
		}
		if err != nil {
			return out, err
		}
	}
	d, err := openExisting(ctx, data, url)
	if err != nil {
		return out, err
	}
	defer d.Close()
	// An approval is checked against the tool's current definition, so it
	// needs the tools file; a denial does not.
	var pol *policy.Policy
	if req.Action == "approve" || req.Action == control.ActionCounter {
		if pol, _, err = loadPolicy(data, toolsFile); err != nil {
			return out, fmt.Errorf("%s without a running server needs the tools file in force: %w", req.Action, err)
		}
	}
	cfg := queue.Config{Store: d.queue, Policy: pol}
	if keys != nil {
		cfg.Signer = keys
	}
	q := queue.NewService(cfg)
	call, err := control.Decide(ctx, q, req)
	if err == nil && call != nil {
		var v wire.Call
		if v, err = answer.CallAsStored(call, time.Now()); err == nil {
			out.Call = &v
		}
	}
	if err != nil {
		e := answer.ErrorOf(server.ErrorOf(err))
		out.Error = &e
	}
	return out, nil
}
