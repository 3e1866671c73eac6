package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/reveal"
)

const tokenUsage = `usage:
  console token create --actor A --audience B [--owner NAME ...] [--note T] [--data DIR]
  console token list [--data DIR]
  console token revoke ID [--data DIR]`

func cmdToken(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(e.stderr, tokenUsage)
		return 2
	}
	if isHelp(args[0]) {
		fmt.Fprintln(e.stderr, tokenUsage)
		return 0
	}
	if args[0] != "create" && args[0] != "list" && args[0] != "revoke" {
		fmt.Fprintf(e.stderr, "console token: unknown subcommand %q (create, list, revoke)\n\n%s\n", args[0], tokenUsage)
		return 2
	}
	fs := flag.NewFlagSet("token "+args[0], flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	withUsage(fs, e, tokenUsage)
	data := fs.String("data", "", "data directory (default $COUNTERSIGN_DATA or ./countersign-data)")
	dbURL := dbFlag(fs)
	var actor, audience, note string
	var owners listFlag
	if args[0] == "create" {
		// Only create takes these: a list or revoke with --actor would
		// look filtered and not be.
		fs.StringVar(&actor, "actor", "", "the agent this token speaks for, e.g. agent:billing-bot")
		fs.StringVar(&audience, "audience", "", "the host that executes its calls, e.g. payments-host")
		fs.StringVar(&note, "note", "", "a note for people")
		fs.Var(&owners, "owner", "someone who runs this agent and so may never approve its calls: an account name (alice, or oidc:HOST/SUB) or team:GROUP for a provider group; repeat for several")
	}
	pos, err := parseInterspersed(fs, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return 2
	}
	if args[0] == "revoke" && len(pos) != 1 || args[0] != "revoke" && len(pos) != 0 {
		fmt.Fprintln(e.stderr, tokenUsage)
		return 2
	}
	open := openStore
	if args[0] != "create" {
		// Listing or revoking needs the console's database: a mistyped
		// --data must not make an empty one.
		open = openExisting
	} else if err := setupDirMissing(e, *data); err != nil {
		// Creating sets the database up in a directory that is there, but
		// does not make a mistyped one.
		fmt.Fprintf(e.stderr, "console token create: %v\n", err)
		return 1
	}
	d, err := open(ctx, dataDir(e, *data), databaseURL(e, *dbURL))
	if err != nil {
		fmt.Fprintf(e.stderr, "console token: %v\n", err)
		return 1
	}
	defer d.Close()
	switch args[0] {
	case "create":
		if actor == "" || audience == "" {
			fmt.Fprintln(e.stderr, tokenUsage)
			return 2
		}
		t, secret, err := accountsOf(d).CreateTokenWith(ctx, account.TokenSpec{Actor: actor, Audience: audience, Note: note,
			Owners: owners}, cliPrincipal(e), audit.ChannelCLI)
		if err != nil {
			fmt.Fprintf(e.stderr, "console token create: %v\n", err)
			return 1
		}
		fmt.Fprintf(e.stderr, "Created %s for actor %s, audience %s", t.ID, reveal.String(t.Actor), reveal.String(t.Audience))
		if len(t.Owners) > 0 {
			fmt.Fprintf(e.stderr, ", owners %s (who may not approve its calls)", reveal.String(strings.Join(t.Owners, ", ")))
		}
		fmt.Fprintln(e.stderr, ". The token is shown once; store it now:")
		fmt.Fprintln(e.stdout, secret)
		noteUnknownOwners(ctx, e, accountsOf(d), t.Owners)
		return 0
	case "list":
		ts, err := accountsOf(d).Tokens(ctx)
		if err != nil {
			fmt.Fprintf(e.stderr, "console token list: %v\n", err)
			return 1
		}
		w := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(w, "ID\tACTOR\tAUDIENCE\tOWNERS\tCREATED\tREVOKED\tNOTE")
		for _, t := range ts {
			revoked := "-"
			if !t.RevokedAt.IsZero() {
				revoked = t.RevokedAt.Format(time.RFC3339)
			}
			// Names and notes go through the revealer: a bidi control in a
			// name from an older database must not turn the line around.
			owners := "-"
			if len(t.Owners) > 0 {
				owners = strings.Join(t.Owners, ",")
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", reveal.String(t.ID), reveal.String(t.Actor),
				reveal.String(t.Audience), reveal.String(owners), t.CreatedAt.Format(time.RFC3339), revoked, reveal.String(t.Note))
		}
		w.Flush()
		return 0
	case "revoke":
		if err := accountsOf(d).RevokeToken(ctx, pos[0], cliPrincipal(e), audit.ChannelCLI); err != nil {
			fmt.Fprintf(e.stderr, "console token revoke: %v (console token list shows the ids)\n", err)
			return 1
		}
		fmt.Fprintf(e.stdout, "revoked %s\n", pos[0])
		return 0
	}
	return 2
}

// isHelp reports whether a command's first argument asks for its usage.
func isHelp(arg string) bool { return arg == "-h" || arg == "--help" || arg == "help" }

// noteUnknownOwners warns about each owner written as a name that no
// account goes by yet. Such a name is kept, and matched when a call is
// decided (someone who has not signed in yet), but it is more often a typo,
// and a mistyped owner would be free to approve the agent's calls.
func noteUnknownOwners(ctx context.Context, e *env, svc *account.Service, owners []string) {
	users, err := svc.Users(ctx)
	if err != nil {
		return
	}
	for _, o := range owners {
		if strings.HasPrefix(o, "team:") || strings.HasPrefix(o, account.OIDCPrefix) {
			continue
		}
		known := false
		for _, u := range users {
			if strings.EqualFold(u.Name, o) || u.ShortName != "" && strings.EqualFold(u.ShortName, o) {
				known = true
				break
			}
		}
		if !known {
			fmt.Fprintf(e.stderr, "note: no account is named %s yet: the name is kept and matched when a call is decided; "+
				"if it is a typo, revoke this token and create it again (console user list shows the accounts, "+
				"team:GROUP names a provider group)\n", reveal.String(o))
		}
	}
}

// accountsOf is the account service over a database opened by a command.
func accountsOf(d *engine) *account.Service { return account.NewService(d.accounts, nil) }

// cliPrincipal names who ran a command, for the audit trail.
func cliPrincipal(e *env) string {
	if u := e.getenv("USER"); u != "" {
		return "cli:" + u
	}
	return "cli"
}
