package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/grant"
	"github.com/countersign/countersign/internal/pgstore"
)

const keysUsage = `usage: console keys init [--data DIR] [--db URL]
       console keys list|jwks [--data DIR]
       console keys rotate [--prepare | --activate [--check-replica URL]...] [--data DIR]
       console keys trust FILE...

init makes a new data directory's keys: its grant signing keyring and its
audit checkpoint key (console serve makes them on its first start too). It
makes only what is missing and never replaces a key: it refuses when
there is nothing left to make. With --db (or $COUNTERSIGN_DATABASE_URL), init also binds the
directory to that PostgreSQL database, recording its identity as the first
console serve does, so the other commands with --db accept the directory
at once; it refuses a directory bound to another database, and a SQLite
console's directory (one with countersign.db). list, jwks and
rotate refuse a data directory without a keyring rather than make one.

jwks prints this data directory's part of a cluster's trust file: its
grant keys that may verify a live grant and its audit checkpoint key.
trust merges such parts into the trust file deployed with every replica
(serve --trusted-keys FILE).

rotate makes a new key sign at once. With several replicas rotate in two
steps instead: rotate --prepare makes the next key, which verifies but
does not sign; publish it (jwks, trust, deploy the trust file to every
replica); then rotate --activate makes it sign. --check-replica URL
(repeatable) refuses to activate until the replica at URL lists the next
key in GET /api/v1/keys.`

// cmdKeys makes, lists and rotates the grant signing keys in DATA/keys. A rotation
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
		if len(args) > 1 && isHelp(args[1]) {
			fmt.Fprintln(e.stderr, keysUsage)
			return 0
		}
		return keysTrust(e, args[1:])
	}
	if sub != "init" && sub != "list" && sub != "rotate" && sub != "jwks" {
		fmt.Fprintf(e.stderr, "console keys: unknown subcommand %q (init, list, rotate, jwks, trust)\n", sub)
		return 2
	}
	fs := flag.NewFlagSet("keys "+sub, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	withUsage(fs, e, keysUsage)
	data := fs.String("data", "", "data directory (default $COUNTERSIGN_DATA or ./countersign-data)")
	dbURL := dbFlag(fs)
	var prepare, activate *bool
	var replicas listFlag
	if sub == "rotate" {
		prepare = fs.Bool("prepare", false, "make the next key, which verifies but does not sign until --activate")
		activate = fs.Bool("activate", false, "make the prepared next key sign")
		fs.Var(&replicas, "check-replica", "with --activate: the base URL of a replica that must list the next key first (repeatable)")
	}
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
	if sub == "init" {
		return keysInit(ctx, e, dataDir(e, *data), databaseURL(e, *dbURL))
	}
	// Only init makes a keyring: list and jwks only read, and rotate
	// turns the keys that are there, so a mistyped --data makes nothing.
	k, err := grant.OpenExistingKeyring(keysDir(dataDir(e, *data)), Issuer, time.Now)
	if errors.Is(err, grant.ErrNoKeyring) {
		what := ""
		if sub == "rotate" {
			what = " (rotate replaces the signing key of a keyring that is there; it makes none)"
		}
		fmt.Fprintf(e.stderr, "console keys %s: no keyring in %s; nothing was created. Check that --data (or $COUNTERSIGN_DATA) "+
			"names this console's data directory%s; to make the keys of a new one, run console keys init --data %s\n",
			sub, keysDir(dataDir(e, *data)), what, dataDir(e, *data))
		return 1
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "console keys %s: %v\n", sub, err)
		return 1
	}
	switch sub {
	case "jwks":
		signer, err := audit.LoadKey(auditKeyPath(dataDir(e, *data)))
		if errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(e.stderr, "console keys jwks: no audit key at %s; nothing was created. Run console keys init --data %s "+
				"to make it (the keyring there is kept), or start console serve there once\n",
				auditKeyPath(dataDir(e, *data)), dataDir(e, *data))
			return 1
		}
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
		switch {
		case *prepare && *activate:
			fmt.Fprintln(e.stderr, "console keys rotate: --prepare and --activate are two steps; run them one after the other")
			return 2
		case len(replicas) > 0 && !*activate:
			fmt.Fprintln(e.stderr, "console keys rotate: --check-replica goes with --activate")
			return 2
		case *prepare:
			return keysPrepare(ctx, e, k, dataDir(e, *data), databaseURL(e, *dbURL))
		case *activate:
			return keysActivate(ctx, e, k, dataDir(e, *data), databaseURL(e, *dbURL), replicas)
		}
		old := k.Keys()[0]
		ki, err := k.Rotate()
		if err != nil {
			fmt.Fprintf(e.stderr, "console keys rotate: %v\n", err)
			return 1
		}
		return keysRotated(ctx, e, k, dataDir(e, *data), databaseURL(e, *dbURL), old.KID, ki.KID)
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

// keysInit makes the keys of the data directory data: the grant keyring
// and the audit checkpoint key, each only when it is missing. With url (a
// PostgreSQL database), it first binds the directory to that database as
// the first serve does (checkDatabaseIdentity), refusing, before any key is
// made, a directory bound to another. It refuses when everything is there
// already, and never replaces a key.
func keysInit(ctx context.Context, e *env, data, url string) int {
	boundTo, err := bindDatabase(ctx, data, url)
	if err != nil {
		fmt.Fprintf(e.stderr, "console keys init: %v\n", err)
		return 1
	}
	k, err := grant.CreateKeyring(keysDir(data), Issuer, time.Now)
	madeKeyring := err == nil
	if errors.Is(err, grant.ErrKeyringExists) {
		k, err = grant.OpenExistingKeyring(keysDir(data), Issuer, time.Now)
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "console keys init: %v\n", err)
		return 1
	}
	path := auditKeyPath(data)
	_, err = audit.LoadKey(path)
	madeAudit := false
	if errors.Is(err, os.ErrNotExist) {
		_, err = audit.LoadOrCreateKey(path)
		madeAudit = err == nil
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "console keys init: %v\n", err)
		return 1
	}
	cur, err := k.SigningKey()
	if err != nil {
		fmt.Fprintf(e.stderr, "console keys init: %v\n", err)
		return 1
	}
	if !madeKeyring && !madeAudit && boundTo == "" {
		bound := ""
		if url != "" {
			bound = ", and it is bound to that database already"
		}
		fmt.Fprintf(e.stderr, "console keys init: %s has its keys already (the keyring in %s, signing with %s, and the audit key %s)%s; "+
			"nothing was changed. console keys list shows the keyring; console keys rotate makes a new signing key\n",
			data, keysDir(data), cur.KID, path, bound)
		return 1
	}
	if boundTo != "" {
		fmt.Fprintf(e.stdout, "Bound %s to the database %s (recorded in %s).\n", data, boundTo, identityPath(data))
	}
	if madeKeyring {
		fmt.Fprintf(e.stdout, "Made the keyring in %s: new grants are signed with %s.\n", keysDir(data), cur.KID)
	} else {
		fmt.Fprintf(e.stdout, "Kept the keyring in %s (signing with %s).\n", keysDir(data), cur.KID)
	}
	if madeAudit {
		fmt.Fprintf(e.stdout, "Made the audit checkpoint key %s.\n", path)
	} else {
		fmt.Fprintf(e.stdout, "Kept the audit checkpoint key %s.\n", path)
	}
	fmt.Fprintf(e.stdout, "Next, for a replica: console keys jwks --data %s prints its part of the cluster's trust file.\n", data)
	return 0
}

// bindDatabase records in data which PostgreSQL database at url it
// belongs to, as the first serve does, and returns the database's location
// (its URL without a password) when it wrote the record now, "" when the
// record was there. It refuses a directory bound to another database, a
// SQLite console's directory, and a url that is not PostgreSQL; with url empty it does nothing (SQLite
// lives in the directory itself, and its first use records it). The
// database is opened first, so an unreachable one leaves the directory as
// it was.
func bindDatabase(ctx context.Context, data, url string) (string, error) {
	if url == "" {
		return "", nil
	}
	if !pgstore.IsURL(url) {
		return "", fmt.Errorf("--db must be a postgres:// or postgresql:// URL")
	}
	if err := notADirectory(data); err != nil {
		return "", err
	}
	// A directory that holds a SQLite database is a SQLite console's: bound
	// to PostgreSQL, it would refuse its own database from then on as if
	// that had been replaced.
	if _, err := os.Stat(dbPath(data)); err == nil {
		return "", fmt.Errorf("%s holds a SQLite console's database (%s), so it cannot be bound to a PostgreSQL database; "+
			"nothing was created or changed. Check --data (or $COUNTERSIGN_DATA), and --db (or $%s): a replica's data directory "+
			"is a new directory, or one without %s", data, dbPath(data), envDatabaseURL, filepath.Base(dbPath(data)))
	}
	d, err := pgstore.Open(ctx, url, pgstore.Options{})
	if err != nil {
		return "", err
	}
	en := pgEngine(d)
	defer en.Close()
	_, err = os.Stat(identityPath(data))
	had := err == nil
	if err := makeDataDir(data); err != nil {
		return "", err
	}
	if err := os.Chmod(data, 0o700); err != nil {
		return "", fmt.Errorf("restrict data directory %s: %w", data, err)
	}
	if err := checkDatabaseIdentity(data, en, true); err != nil {
		return "", err
	}
	if had {
		return "", nil
	}
	return en.where, nil
}

// keysRotated audits a rotation from oldKID to newKID and says what
// happened.
func keysRotated(ctx context.Context, e *env, k *grant.Keyring, data, url, oldKID, newKID string) int {
	if err := auditKey(ctx, e, data, url, audit.KindKeyRotated, map[string]any{"old_kid": oldKID, "new_kid": newKID}); err != nil {
		fmt.Fprintf(e.stderr, "console keys rotate: the key was rotated but the audit entry failed: %v\n", err)
		return 1
	}
	fmt.Fprintf(e.stdout, "New grants are signed with %s.\n", newKID)
	for _, o := range k.Keys() {
		if o.KID == oldKID {
			fmt.Fprintf(e.stdout, "%s stopped signing; it verifies until %s, then retires.\n",
				o.KID, o.RetiredAt.UTC().Format(time.RFC3339))
		}
	}
	return 0
}

// keysPrepare makes the next key.
func keysPrepare(ctx context.Context, e *env, k *grant.Keyring, data, url string) int {
	had, already := k.NextKey()
	ki, err := k.Prepare()
	if err != nil {
		fmt.Fprintf(e.stderr, "console keys rotate --prepare: %v\n", err)
		return 1
	}
	if already && had.KID == ki.KID {
		fmt.Fprintf(e.stdout, "%s is prepared already: it verifies and does not sign yet.\n", ki.KID)
	} else {
		if err := auditKey(ctx, e, data, url, audit.KindKeyPrepared, map[string]any{"next_kid": ki.KID}); err != nil {
			fmt.Fprintf(e.stderr, "console keys rotate --prepare: the key was prepared but the audit entry failed: %v\n", err)
			return 1
		}
		fmt.Fprintf(e.stdout, "Prepared %s: it verifies and does not sign yet.\n", ki.KID)
	}
	fmt.Fprintf(e.stdout, "Next: console keys jwks here, merge it into the trust file (console keys trust), deploy that to every replica,\n"+
		"then console keys rotate --activate (with --check-replica URL for each replica to check they list %s first).\n", ki.KID)
	return 0
}

// keysActivate makes the prepared key sign, once every replica named
// lists it.
func keysActivate(ctx context.Context, e *env, k *grant.Keyring, data, url string, replicas []string) int {
	next, ok := k.NextKey()
	if !ok {
		fmt.Fprintf(e.stderr, "console keys rotate --activate: %v\n", grant.ErrNoNextKey)
		return 1
	}
	for _, r := range replicas {
		if err := replicaLists(ctx, r, next.KID); err != nil {
			fmt.Fprintf(e.stderr, "console keys rotate --activate: %v; nothing was activated. Deploy the trust file with %s to that replica "+
				"(it re-reads the file within a second) and run this again.\n", err, next.KID)
			return 1
		}
	}
	old := k.Keys()[1] // the current key, after the next one
	ki, err := k.Activate()
	if err != nil {
		fmt.Fprintf(e.stderr, "console keys rotate --activate: %v\n", err)
		return 1
	}
	if ki.KID != next.KID {
		// Another process activated and prepared again in between.
		fmt.Fprintf(e.stderr, "console keys rotate --activate: activated %s, not the %s checked; check the replicas again\n", ki.KID, next.KID)
		return 1
	}
	return keysRotated(ctx, e, k, data, url, old.KID, ki.KID)
}

// replicaLists checks that the replica at base lists kid among its keys.
func replicaLists(ctx context.Context, base, kid string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+"/api/v1/keys", nil)
	if err != nil {
		return fmt.Errorf("replica %s: %w", base, err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("replica %s: %w", base, err)
	}
	defer res.Body.Close()
	var set struct {
		Keys []grant.JWK `json:"keys"`
	}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("replica %s: GET /api/v1/keys answered %s", base, res.Status)
	}
	if err := json.NewDecoder(io.LimitReader(res.Body, 1<<20)).Decode(&set); err != nil {
		return fmt.Errorf("replica %s: GET /api/v1/keys: %w", base, err)
	}
	for _, j := range set.Keys {
		if j.KID == kid {
			return nil
		}
	}
	return fmt.Errorf("replica %s does not list %s yet", base, kid)
}

// auditKey records a change of keys on the audit trail. Keys live in
// files, not in the database, so the entry is written right after the
// rotation rather than in the same transaction.
func auditKey(ctx context.Context, e *env, data, url, kind string, details map[string]any) error {
	d, err := openStore(ctx, data, url)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.AppendAudit(ctx, &audit.Entry{Time: audit.FormatTime(time.Now()), Kind: kind,
		Principal: cliPrincipal(e), Channel: audit.ChannelCLI, Details: details})
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
