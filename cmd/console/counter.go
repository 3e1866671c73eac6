package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"

	"github.com/countersign/countersign/internal/control"
	"github.com/countersign/countersign/internal/tools"
)

// setFlags collects repeated --set MEMBER=VALUE flags.
type setFlags []string

func (s *setFlags) String() string     { return strings.Join(*s, " ") }
func (s *setFlags) Set(v string) error { *s = append(*s, v); return nil }

const counterUsage = "usage: console counter CALL_ID --as OPERATOR --digest HEX --set /POINTER=JSON [--set target=TEXT]... [--confirm TEXT] [--accept-warnings] [--data DIR] [--tools FILE]"

func cmdCounter(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("counter", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	withUsage(fs, e, counterUsage+`

Answers a pending call with an edited one, its counter-proposal, in the name
of an enabled operator or admin who may approve it, through the running
server's control socket (or the database when none runs). Each --set gives
a member the tool's counter block lists a new value: a JSON Pointer into
args with the value as JSON (--set /amount_minor=4000, --set
'/reason_code="requested"'), or target with the new target as text. The
edit is checked as a proposal; the original ends countered, and the
counter waits with your approval for its agent to accept it. Where the tool
asks for the target (or a word) to be typed, --confirm gives the edited
call's. It prints the counter.`)
	data := fs.String("data", "", "data directory (default $COUNTERSIGN_DATA or ./countersign-data)")
	dbURL := dbFlag(fs)
	as := fs.String("as", "", "operator name (required)")
	digest := fs.String("digest", "", "the digest of the call you checked (required)")
	toolsFile := fs.String("tools", "", "the tools file in force, when no server is running (default DATA/tools.yaml)")
	confirm := fs.String("confirm", "", "the edited call's target (or the word) when its tool asks for it to be typed (confirm: in the tools file)")
	accept := fs.Bool("accept-warnings", false, "approve an edited call that contains hidden or look-alike characters, after reading them")
	var sets setFlags
	fs.Var(&sets, "set", "MEMBER=VALUE: a JSON Pointer into args and its new value as JSON, or target=TEXT (repeatable, at least one)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return parseExit(err)
	}
	if len(pos) != 1 || *as == "" || *digest == "" || len(sets) == 0 {
		fmt.Fprintln(e.stderr, counterUsage)
		return 2
	}
	if !isDigest(*digest) {
		fmt.Fprintf(e.stderr, "console counter: --digest %q is not a digest: give all 64 hex digits the call's page shows\n", *digest)
		return 2
	}
	edits, err := parseSets(sets)
	if err != nil {
		fmt.Fprintf(e.stderr, "console counter: %v\n", err)
		return 2
	}
	return decide(ctx, e, dataDir(e, *data), databaseURL(e, *dbURL), *toolsFile, control.Request{Action: control.ActionCounter,
		ID: pos[0], Operator: *as, Digest: *digest, Edits: edits, Confirm: *confirm, AcceptWarnings: *accept})
}

// parseSets reads --set flags: target=TEXT, or /POINTER=JSON.
func parseSets(sets []string) (map[string]json.RawMessage, error) {
	edits := map[string]json.RawMessage{}
	for _, s := range sets {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--set %q: give MEMBER=VALUE, such as /amount_minor=4000 or target=invoice:INV-1", s)
		}
		if _, dup := edits[k]; dup {
			return nil, fmt.Errorf("--set %s is given twice", k)
		}
		switch {
		case k == tools.CounterTarget:
			b, _ := json.Marshal(v)
			edits[k] = b
		case strings.HasPrefix(k, "/"):
			if !json.Valid([]byte(v)) {
				return nil, fmt.Errorf("--set %s: %q is not JSON (a string is quoted: %s='\"text\"')", k, v, k)
			}
			edits[k] = json.RawMessage(v)
		default:
			return nil, fmt.Errorf("--set %q: the member is target or a JSON Pointer into args, starting with /", k)
		}
	}
	return edits, nil
}
