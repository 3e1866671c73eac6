package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode"
	"unicode/utf16"

	"github.com/countersign/countersign/internal/answer"
	"github.com/countersign/countersign/internal/control"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/server"
	"github.com/countersign/countersign/internal/wire"
)

const queueUsage = `usage: console queue [--tool T] [--json] [--data DIR]

Lists the pending calls, newest first (at most 500), each with its digest,
so that a person on the console's machine can check one and approve it with
console approve CALL_ID --as NAME --digest HEX. It asks the running server
through its control socket (or reads the database when none runs).

--json prints one call a line, as the agent API's call object.
Arguments and targets are printed as JSON text: a control or invisible
character is an escape, never the character itself.`

func cmdQueue(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("queue", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	withUsage(fs, e, queueUsage)
	data := fs.String("data", "", "data directory (default $COUNTERSIGN_DATA or ./countersign-data)")
	dbURL := dbFlag(fs)
	tool := fs.String("tool", "", "only the calls of this tool")
	asJSON := fs.Bool("json", false, "print JSON, one call a line")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return parseExit(err)
	}
	if len(pos) > 0 {
		fmt.Fprintln(e.stderr, "usage: console queue [--tool T] [--json] [--data DIR]")
		return 2
	}
	req := control.Request{Action: control.ActionQueue, Tool: *tool}
	dir := dataDir(e, *data)
	resp, err := decideViaSocket(ctx, controlPath(dir), req)
	if err == errNoServer {
		resp, err = queueDirect(ctx, dir, databaseURL(e, *dbURL), req)
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "console queue: %v\n", err)
		return 1
	}
	if resp.Error != nil {
		fmt.Fprintf(e.stderr, "console queue: %s: %s\n", resp.Error.Code, resp.Error.Message)
		return 1
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		for _, c := range resp.Calls {
			enc.Encode(c)
		}
		return 0
	}
	if len(resp.Calls) == 0 {
		fmt.Fprintln(e.stdout, "no call is waiting for a decision")
		return 0
	}
	for _, c := range resp.Calls {
		printQueued(e.stdout, c)
	}
	if resp.Truncated {
		fmt.Fprintf(e.stdout, "more than %d calls are pending; --tool narrows the list\n", control.MaxQueue)
	}
	return 0
}

// queueDirect lists the queue from the database when no server answers on
// the control socket.
func queueDirect(ctx context.Context, data, url string, req control.Request) (control.Response, error) {
	d, err := openExisting(ctx, data, url)
	if err != nil {
		return control.Response{}, err
	}
	defer d.Close()
	resp, err := control.Queue(ctx, queue.NewService(queue.Config{Store: d.queue}), req)
	if err != nil {
		e := answer.ErrorOf(server.ErrorOf(err))
		return control.Response{Error: &e}, nil
	}
	return resp, nil
}

// printQueued writes one pending call as a block of lines.
func printQueued(w io.Writer, c wire.Call) {
	target, _ := json.Marshal(c.Target)
	fmt.Fprintf(w, "%s  %s by %s for %s\n", c.ID, c.Tool, shown(c.Actor), shown(c.Audience))
	fmt.Fprintf(w, "  target %s\n", visible(string(target)))
	fmt.Fprintf(w, "  args   %s\n", visible(strings.TrimSpace(string(c.Args))))
	fmt.Fprintf(w, "  digest %s\n", c.Digest)
	fmt.Fprintf(w, "  approvals %d of %d; decide by %s\n", c.Approvals.Received, c.Approvals.Required, c.DecideBy.UTC().Format(time.RFC3339))
}

// visible is JSON text s with every character that is not printable, or
// is a format character (bidi controls, zero-width ones), written as a
// JSON escape: what a terminal shows is what the digest covers. Newlines,
// which JSON text has only between its values, are kept.
func visible(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r > 0xffff && (!unicode.IsPrint(r) || unicode.Is(unicode.Cf, r)):
			hi, lo := utf16.EncodeRune(r)
			fmt.Fprintf(&b, "\\u%04x\\u%04x", hi, lo)
		case r == '\n':
			// JSON text holds no raw newline inside a string: this one is
			// the layout of indented JSON.
			b.WriteRune(r)
		case !unicode.IsPrint(r) || unicode.Is(unicode.Cf, r):
			fmt.Fprintf(&b, "\\u%04x", r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
