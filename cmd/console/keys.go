package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/grant"
)

const keysUsage = `usage: console keys list|rotate|jwks [--data DIR]
       console keys trust FILE...

jwks prints this data directory's part of a cluster's trust file: its
grant keys that may verify a live grant and its audit checkpoint key.
trust merges such parts into the trust file deployed with every replica
(serve --trusted-keys FILE). With several replicas, rotate one replica's
key, then give every replica the new trust file.`

// cmdKeys lists and rotates the grant signing keys in DATA/keys. A rotation
// may run while the server runs: the server signs its next grant with the
// new key.
func cmdKeys(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(e.stderr, keysUsage)
		return 2
	}
	sub := args[0]
	if sub == "-h" || sub == "--help" || sub == "help" {
		fmt.Fprintln(e.stderr, keysUsage)
		return 0
	}
	if sub == "trust" {
		return keysTrust(e, args[1:])
	}
	if sub != "list" && sub != "rotate" && sub != "jwks" {
		fmt.Fprintf(e.stderr, "console keys: unknown subcommand %q (list, rotate, jwks, trust)\n", sub)
		return 2
	}
	fs := flag.NewFlagSet("keys "+sub, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	data := fs.String("data", "", "data directory (default $COUNTERSIGN_DATA or ./countersign-data)")
	dbURL := dbFlag(fs)
	if err := fs.Parse(args[1:]); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(e.stderr, "console keys %s: unexpected argument %q\n%s\n", sub, fs.Arg(0), keysUsage)
		return 2
	}
	k, err := grant.OpenKeyring(keysDir(dataDir(e, *data)), Issuer, time.Now)
	if err != nil {
		fmt.Fprintf(e.stderr, "console keys %s: %v\n", sub, err)
		return 1
	}
	switch sub {
	case "jwks":
		signer, err := audit.LoadOrCreateKey(auditKeyPath(dataDir(e, *data)))
		if err != nil {
			fmt.Fprintf(e.stderr, "console keys jwks: %v\n", err)
			return 1
		}
		aj, err := grant.AuditJWK(signer.PublicKey())
		if err != nil {
			fmt.Fprintf(e.stderr, "console keys jwks: %v\n", err)
			return 1
		}
		return printTrust(e, &grant.TrustSet{Keys: k.OwnJWKs(), AuditKeys: []grant.JWK{aj}})
	case "rotate":
		old := k.Keys()[0]
		ki, err := k.Rotate()
		if err != nil {
			fmt.Fprintf(e.stderr, "console keys rotate: %v\n", err)
			return 1
		}
		if err := auditKeyRotation(ctx, e, dataDir(e, *data), databaseURL(e, *dbURL), old.KID, ki.KID); err != nil {
			fmt.Fprintf(e.stderr, "console keys rotate: the key was rotated but the audit entry failed: %v\n", err)
			return 1
		}
		fmt.Fprintf(e.stdout, "New grants are signed with %s.\n", ki.KID)
		for _, o := range k.Keys() {
			if o.KID == old.KID {
				fmt.Fprintf(e.stdout, "%s stopped signing; it verifies until %s, then retires.\n",
					o.KID, o.RetiredAt.UTC().Format(time.RFC3339))
			}
		}
		return 0
	default: // list
		w := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(w, "KID\tSTATE\tCREATED\tRETIRES AT")
		for _, ki := range k.Keys() {
			retires := "-"
			if !ki.RetiredAt.IsZero() {
				retires = ki.RetiredAt.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", ki.KID, ki.State, ki.Created.UTC().Format(time.RFC3339), retires)
		}
		if err := w.Flush(); err != nil {
			fmt.Fprintf(e.stderr, "console keys list: %v\n", err)
			return 1
		}
		return 0
	}
}

// auditKeyRotation records a rotation on the audit trail. Keys live in
// files, not in the database, so the entry is written right after the
// rotation rather than in the same transaction.
func auditKeyRotation(ctx context.Context, e *env, data, url, oldKID, newKID string) error {
	d, err := openStore(ctx, data, url)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.AppendAudit(ctx, &audit.Entry{Time: audit.FormatTime(time.Now()), Kind: audit.KindKeyRotated,
		Principal: cliPrincipal(e), Channel: audit.ChannelCLI,
		Details: map[string]any{"old_kid": oldKID, "new_kid": newKID}})
}

// keysTrust merges trust file parts (console keys jwks of each replica, or
// earlier trust files) into one trust file on standard output.
func keysTrust(e *env, files []string) int {
	if len(files) == 0 {
		fmt.Fprintln(e.stderr, "usage: console keys trust FILE... (each the output of console keys jwks, or a trust file)")
		return 2
	}
	var sets []*grant.TrustSet
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			fmt.Fprintf(e.stderr, "console keys trust: %v\n", err)
			return 1
		}
		t, err := grant.ParseTrust(b)
		if err != nil {
			fmt.Fprintf(e.stderr, "console keys trust: %s: %v\n", f, err)
			return 1
		}
		sets = append(sets, t)
	}
	return printTrust(e, grant.Merge(sets...))
}

func printTrust(e *env, t *grant.TrustSet) int {
	b, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		fmt.Fprintf(e.stderr, "console keys: %v\n", err)
		return 1
	}
	fmt.Fprintf(e.stdout, "%s\n", b)
	return 0
}
