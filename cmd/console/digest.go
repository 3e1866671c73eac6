package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/tools"
)

const digestUsage = `usage: console digest --actor A --audience B [--tools TOOLS] [--canonical] [FILE]

Reads a proposal {"tool","target","args","rationale"?} from FILE, or from
standard input when FILE is absent or "-", parses it strictly and prints its
digest: 64 lowercase hex digits and a newline. The digest covers the envelope
{"v":1,"actor":A,"audience":B,"tool","target","args"}, so it is the digest the
console shows for that proposal from a token with actor A and audience B.
With --tools it leaves out the members the tool names informational in
that tools file, as the console does, so the digest is the one the console
shows for the call as its page shows it (not-bound members included).
Without --tools every member is included, and a note on standard error says
so.

With --canonical it prints the canonical envelope bytes instead, exactly the
bytes that are hashed after the prefix "countersign/v1/call:", with no
trailing newline.

A refused proposal exits 2 and prints the API's error JSON on standard output:
{"error":{"code":...,"message":...,"problems":[{"code","path","message"}]}}

flags:
`

// cmdDigest prints the digest (or the canonical envelope) of a proposal.
func cmdDigest(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("digest", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprint(e.stderr, digestUsage)
		fs.PrintDefaults()
	}
	actor := fs.String("actor", "", "the actor of the token that would submit it, e.g. agent:billing-bot (required)")
	audience := fs.String("audience", "", "the audience of that token, e.g. payments-host (required)")
	canonicalOut := fs.Bool("canonical", false, "print the canonical envelope bytes instead of the digest")
	toolsFile := fs.String("tools", "", "a tools file: leave out the tool's informational members, as the console does")
	// Flags may come before or after the file name.
	files, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	switch {
	case *actor == "" || *audience == "":
		fmt.Fprintln(e.stderr, "console digest: --actor and --audience are required: the digest binds the token's context")
		fs.Usage()
		return 2
	case len(files) > 1:
		fmt.Fprintf(e.stderr, "console digest: one proposal at a time, got %d files\n", len(files))
		fs.Usage()
		return 2
	}

	in, name := e.stdin, "standard input"
	if len(files) == 1 && files[0] != "-" {
		f, err := os.Open(files[0])
		if err != nil {
			fmt.Fprintf(e.stderr, "console digest: %v\n", err)
			return 1
		}
		defer f.Close()
		in, name = f, files[0]
	}
	// Read one byte past the limit: enough to know the body is too large
	// without holding an unbounded input.
	body, err := io.ReadAll(io.LimitReader(in, canonical.MaxBodyBytes+1))
	if err != nil {
		fmt.Fprintf(e.stderr, "console digest: read %s: %v\n", name, err)
		return 1
	}
	if len(body) > canonical.MaxBodyBytes {
		return printRefusal(e, canonical.Problems{{Code: canonical.CodeTooLarge, Offset: -1,
			Message: fmt.Sprintf("the proposal is more than %d bytes; at most %d are accepted", canonical.MaxBodyBytes, canonical.MaxBodyBytes)}})
	}
	p, err := canonical.ParseProposal(body)
	if err != nil {
		var ps canonical.Problems
		if !errors.As(err, &ps) {
			fmt.Fprintf(e.stderr, "console digest: %v\n", err)
			return 1
		}
		return printRefusal(e, ps)
	}
	env := p.Envelope(*actor, *audience)
	if *toolsFile != "" {
		reg, err := tools.Load(*toolsFile)
		if err != nil {
			fmt.Fprintf(e.stderr, "console digest: %v\n", err)
			return 1
		}
		t, ok := reg.Tool(p.Tool)
		if !ok {
			return printRefusal(e, canonical.Problems{{Code: canonical.CodeUnknownTool, Path: "/tool", Offset: -1,
				Message: fmt.Sprintf("%s is not a tool of %s (tools: %s)", p.Tool, *toolsFile, strings.Join(reg.Names(), ", "))}})
		}
		env.Args = t.Bound(p.Args)
	} else {
		fmt.Fprintln(e.stderr, "console digest: no --tools given, so informational members are included; the console leaves out the ones its tools file names (pass --tools FILE for its digest)")
	}
	if *canonicalOut {
		b, err := env.Canonical()
		if err != nil {
			fmt.Fprintf(e.stderr, "console digest: %v\n", err)
			return 2
		}
		if _, err := e.stdout.Write(b); err != nil {
			fmt.Fprintf(e.stderr, "console digest: %v\n", err)
			return 1
		}
		return 0
	}
	d, err := env.Digest()
	if err != nil {
		// Only a context that is not valid UTF-8 gets here: the proposal
		// itself was parsed strictly.
		fmt.Fprintf(e.stderr, "console digest: %v\n", err)
		return 2
	}
	fmt.Fprintln(e.stdout, d)
	return 0
}

// printRefusal prints the error JSON of a refused proposal and returns the
// exit code for refused input.
func printRefusal(e *env, ps canonical.Problems) int {
	e.stdout.Write(problemsJSON(ps))
	return 2
}

// parseProblemCodes are the problems that stop the strict parse. Such a
// problem is the error's code; any other makes the code invalid_arguments.
var parseProblemCodes = []string{
	canonical.CodeMalformedJSON, canonical.CodeInvalidUTF8, canonical.CodeDuplicateKey,
	canonical.CodeFloatNotAllowed, canonical.CodeOutOfRange, canonical.CodeTooDeep, canonical.CodeTooLarge,
}

// problemsJSON renders the agent API's error shape (DESIGN §5) for a
// refused proposal, followed by a newline:
//
//	{"error":{"code":"invalid_arguments","message":"2 problems in the proposal","problems":[...]}}
//
// A parse problem (always alone) gives its own code and message.
func problemsJSON(ps canonical.Problems) []byte {
	type body struct {
		Code     string              `json:"code"`
		Message  string              `json:"message"`
		Problems []canonical.Problem `json:"problems"`
	}
	b := body{Code: "invalid_arguments", Problems: ps}
	switch {
	case len(ps) == 1 && slices.Contains(parseProblemCodes, ps[0].Code):
		b.Code, b.Message = ps[0].Code, ps[0].Message
	case len(ps) == 1:
		b.Message = "1 problem in the proposal"
	default:
		b.Message = fmt.Sprintf("%d problems in the proposal", len(ps))
	}
	if b.Problems == nil {
		b.Problems = []canonical.Problem{}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(map[string]body{"error": b}); err != nil {
		// Problems hold only strings; encoding cannot fail.
		panic(err)
	}
	return buf.Bytes()
}
