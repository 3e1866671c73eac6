package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"

	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/evidence"
	"github.com/countersign/countersign/internal/grant"
	"github.com/countersign/countersign/internal/passkey"
)

// auditKeyPath is the audit checkpoint signing key, separate from the
// grant keys in DATA/keys.
func auditKeyPath(data string) string { return filepath.Join(data, "audit-key") }

const auditUsage = `usage:
  console audit verify [--data DIR] [--file EXPORT] [--checkpoint FILE]...
  console audit verify PACK.tar [--audit-key-fingerprint HEX]... [--checkpoint FILE]... [--data DIR]
  console audit pack --since T --until T [--tool TOOL] [--actor ACTOR] --out PACK.tar [--data DIR]
  console audit export [--data DIR] [--since T] [--until T] --format jsonl|csv [--out FILE]
  console audit checkpoint [--data DIR]
  console audit prune --retain DAYS --archive DIR --as ADMIN [--data DIR]
  console audit accept-rollback --as ADMIN [--data DIR]

verify recomputes the hash chain and checks every signed checkpoint; it
exits 0 when all is intact, 1 on any damage (naming the first bad entry),
2 on a usage error. export streams the trail; a JSONL export verifies
offline with verify --file. export only reads: from a data directory
without its audit key it writes the JSONL header unsigned, and makes no
key. checkpoint signs the current head now with the data directory's
audit key (made by keys init or serve; without one it refuses and makes
none) and prints it as GET /api/v1/audit/checkpoint would.
accept-rollback accepts a database restored from an older copy, which
serve refuses: every grant issued until then is refused from then on, and
every allowance alive in the copy is revoked, every approved plan cancelled
and every live delegation ended (console restore, docs/deploy.md).
pack writes an evidence pack of a period; verify PACK.tar checks one
against an audit key given from outside it, and refuses a pack signed by
any other. prune removes entries older than --retain (at least 30 days)
after archiving them in a verified pack.`

func cmdAudit(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(e.stderr, auditUsage)
		return 2
	}
	switch args[0] {
	case "verify":
		return auditVerify(ctx, e, args[1:])
	case "export":
		return auditExport(ctx, e, args[1:])
	case "checkpoint":
		return auditCheckpoint(ctx, e, args[1:])
	case "pack":
		return auditPack(ctx, e, args[1:])
	case "prune":
		return auditPrune(ctx, e, args[1:])
	case "accept-rollback":
		return auditAcceptRollback(ctx, e, args[1:])
	case "-h", "--help", "help":
		fmt.Fprintln(e.stderr, auditUsage)
		return 0
	}
	fmt.Fprintf(e.stderr, "console audit: unknown subcommand %q\n\n%s\n", args[0], auditUsage)
	return 2
}

func auditVerify(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("audit verify", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	withUsage(fs, e, auditUsage)
	data := fs.String("data", "", "data directory whose database to verify (default $COUNTERSIGN_DATA or ./countersign-data)")
	dbURL := dbFlag(fs)
	trusted := fs.String("trusted-keys", "", "the cluster's trust file (console keys trust): checkpoints signed by its audit keys are accepted too (default $"+envTrustedKeys+")")
	file := fs.String("file", "", "a JSONL export to verify offline, without the database")
	var cpFiles []string
	fs.Func("checkpoint", "a checkpoint kept outside (as GET /api/v1/audit/checkpoint returned it); repeatable", func(s string) error {
		cpFiles = append(cpFiles, s)
		return nil
	})
	var fingerprints []string
	fs.Func("audit-key-fingerprint", "with a PACK.tar: the SHA-256 (64 hex digits) of the audit key to trust, from outside the pack; repeatable", func(s string) error {
		if !fingerprintRE.MatchString(s) {
			return fmt.Errorf("%q is not 64 lowercase hex digits (the whole SHA-256 of the audit key; its 16-digit id is too short to stand for it)", s)
		}
		fingerprints = append(fingerprints, s)
		return nil
	})
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return parseExit(err)
	}
	pack := ""
	switch {
	case len(pos) == 1 && *file == "" && isFile(pos[0]):
		pack = pos[0]
	case len(pos) > 0:
		fmt.Fprintln(e.stderr, "console audit verify: give --data DIR and/or --file EXPORT, or one evidence pack, and no other arguments")
		return 2
	case len(fingerprints) > 0:
		fmt.Fprintln(e.stderr, "console audit verify: --audit-key-fingerprint goes with an evidence pack (console audit verify PACK.tar)")
		return 2
	}
	var opts audit.VerifyOptions
	for _, name := range cpFiles {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintf(e.stderr, "console audit verify: %v\n", err)
			return 1
		}
		cps, err := audit.ReadCheckpoints(f)
		f.Close()
		if err != nil {
			fmt.Fprintf(e.stderr, "console audit verify: %s: %v\n", name, err)
			return 1
		}
		opts.Checkpoints = append(opts.Checkpoints, cps...)
	}
	// The keys of checkpoints kept outside are the ones to trust: every
	// checkpoint in the log must be signed by one of them.
	// Keys are trusted by their whole public key; their ids are only shown.
	var trustedIDs []string
	trust := func(publicKey, kid string) {
		if !containsString(opts.TrustedKeys, publicKey) {
			opts.TrustedKeys = append(opts.TrustedKeys, publicKey)
			trustedIDs = append(trustedIDs, kid)
		}
	}
	for _, c := range opts.Checkpoints {
		trust(c.PublicKey, c.KID)
	}
	// With several replicas, each signs checkpoints with its own audit
	// key: the trust file deployed with them lists them all.
	if path := trustedKeysPath(e, *trusted); path != "" {
		b, err := os.ReadFile(path)
		if err == nil {
			var ts *grant.TrustSet
			if ts, err = grant.ParseTrust(b); err == nil {
				for _, k := range ts.AuditKeys {
					trust(k.X, k.KID)
				}
			}
		}
		if err != nil {
			fmt.Fprintf(e.stderr, "console audit verify: %v\n", err)
			return 1
		}
	}
	// So is the data directory's own audit key: a trail rewritten and
	// re-signed with a fresh key does not verify against it. With --file,
	// --data names the directory whose key must have signed the export.
	dataKey := ""
	if *data != "" || (*file == "" && pack == "") {
		dir := dataDir(e, *data)
		if *file == "" && databaseURL(e, *dbURL) != "" {
			// The shared database opens from anywhere: a named directory
			// that is not there is a mistyped --data, whose key would
			// silently not be trusted.
			if err := namedDirMissing(e, *data); err != nil {
				fmt.Fprintf(e.stderr, "console audit verify: %v; nothing was verified. Check that --data (or $COUNTERSIGN_DATA) "+
					"names the console's data directory, whose audit key the checkpoints are checked against, or leave both out "+
					"and verify with --trusted-keys FILE or --checkpoint FILE\n", err)
				return 1
			}
		}
		signer, err := audit.LoadKey(auditKeyPath(dir))
		switch {
		case err == nil:
			dataKey = signer.KID()
			trust(signer.PublicKey(), dataKey)
		case errors.Is(err, os.ErrNotExist):
			if *file != "" || pack != "" {
				fmt.Fprintf(e.stderr, "console audit verify: %s has no audit key (%s) to check against\n", dir, auditKeyPath(dir))
				return 1
			}
		default:
			fmt.Fprintf(e.stderr, "console audit verify: %v\n", err)
			return 1
		}
	}

	if pack != "" {
		return verifyPack(e, pack, evidence.Trust{PublicKeys: opts.TrustedKeys, Fingerprints: fingerprints, Checkpoints: opts.Checkpoints})
	}

	// Every approval signed by a passkey is re-verified on the way: its
	// evidence against the call id, digest and operator its entry records,
	// and its key against the passkey's registration entry.
	passkeys := passkey.NewTrailChecker()
	opts.Check = passkeys.Check

	var rep audit.Report
	var damage error
	if *file != "" {
		f, err := os.Open(*file)
		if err != nil {
			fmt.Fprintf(e.stderr, "console audit verify: %v\n", err)
			return 1
		}
		defer f.Close()
		rep, damage = audit.VerifyExport(bufio.NewReaderSize(f, 1<<20), opts)
		var be *audit.BreakError
		if damage != nil && !errors.As(damage, &be) {
			// Not a chain break but an unreadable or malformed file: still
			// damage to the export.
			damage = &audit.BreakError{Seq: 0, Reason: audit.ReasonOf(damage)}
		}
	} else {
		d, err := openReadOnly(ctx, dataDir(e, *data), databaseURL(e, *dbURL))
		if err != nil {
			fmt.Fprintf(e.stderr, "console audit verify: %v\n", err)
			return 1
		}
		defer d.Close()
		res, err := d.Verify(ctx, opts)
		if err != nil {
			fmt.Fprintf(e.stderr, "console audit verify: %v\n", err)
			return 1
		}
		damage = res.Err
		rep = audit.Report{Count: res.Count, FromSeq: max(res.FromSeq, 1), PrevHash: audit.GenesisHash, LastSeq: res.LastSeq, Head: res.Head,
			Checkpoints: res.Checkpoints, CheckpointSeq: res.CheckpointSeq, KeyIDs: res.KeyIDs, Uncovered: res.Uncovered, Pruned: res.FromSeq > 1}
	}
	if damage != nil {
		var be *audit.BreakError
		if errors.As(damage, &be) && be.Seq > 0 {
			fmt.Fprintf(e.stdout, "DAMAGED: first bad entry %d: %s\n", be.Seq, be.Reason)
		} else {
			fmt.Fprintf(e.stdout, "DAMAGED: %s\n", audit.ReasonOf(damage))
		}
		return 1
	}
	if len(passkeys.Unregistered) > 0 && rep.FromSeq <= 1 {
		fmt.Fprintf(e.stdout, "DAMAGED: first bad entry %d: the passkey that signed this approval has no registration entry in the trail\n",
			passkeys.Unregistered[0])
		return 1
	}
	printReport(e.stdout, rep, len(opts.Checkpoints), len(opts.TrustedKeys))
	if passkeys.Verified > 0 {
		fmt.Fprintf(e.stdout, "passkeys: %d approval signatures re-verified against their registered public keys\n", passkeys.Verified)
	}
	for _, seq := range passkeys.Unregistered {
		fmt.Fprintf(e.stdout, "note: the passkey that signed entry %d was registered before the entries verified; its signature verified, its key was not compared with the registration\n", seq)
	}
	if dataKey != "" && len(opts.TrustedKeys) > 1 {
		fmt.Fprintf(e.stdout, "audit keys: every checkpoint%s is signed by one of %s (the data directory's key %s, and the trusted ones)\n",
			map[bool]string{true: " and the export header", false: ""}[*file != ""], strings.Join(trustedIDs, ", "), dataKey)
	} else if dataKey != "" {
		fmt.Fprintf(e.stdout, "audit key: every checkpoint%s is signed by the data directory's key %s\n",
			map[bool]string{true: " and the export header", false: ""}[*file != ""], dataKey)
	} else if *file == "" {
		fmt.Fprintln(e.stdout, "note: the data directory has no audit key yet, so no checkpoint was compared with it")
	}
	return 0
}

// printReport writes what verification found: outside is how many
// checkpoints kept outside the log were given, trusted how many keys the
// log's checkpoints had to be signed by (none: any key was accepted).
func printReport(w io.Writer, rep audit.Report, outside, trusted int) {
	if rep.Count == 0 {
		fmt.Fprintln(w, "ok: the audit trail is empty")
	} else {
		fmt.Fprintf(w, "ok: %d entries verified (%d to %d), head %s\n", rep.Count, rep.FromSeq, rep.LastSeq, rep.Head)
	}
	if rep.Pruned {
		fmt.Fprintf(w, "pruned: entries 1 to %d were removed, as the pruned entry in the chain records, behind the signed checkpoint at entry %d\n",
			rep.FromSeq-1, rep.FromSeq-1)
	} else if rep.Count > 0 && rep.FromSeq > 1 {
		fmt.Fprintf(w, "range: verified from entry %d's prev_hash %s, which must equal the hash of entry %d (the head of the export before this one)\n",
			rep.FromSeq, rep.PrevHash, rep.FromSeq-1)
	}
	if rep.Header != nil {
		fmt.Fprintf(w, "export of database %s, written %s\n", rep.Header.Database, rep.Header.ExportedAt)
		switch {
		case rep.Header.Signed() && trusted == 0:
			// As for checkpoints below: a good signature by a key nothing
			// trusts is what an export rewritten and re-signed with a key
			// made for it has too.
			fmt.Fprintf(w, "header: range, head and count signed by audit key %s, which nothing given here trusts: "+
				"pass the console's --data (its audit key), --trusted-keys FILE or --checkpoint FILE to check who signed it\n", rep.Header.KID)
		case rep.Header.Signed():
			fmt.Fprintf(w, "header: range, head and count signed by audit key %s\n", rep.Header.KID)
		default:
			fmt.Fprintln(w, "note: the header is not signed (exported without the audit key, or an older export format): entries dropped from the end together with their checkpoint lines and the header edited would not show")
		}
	}
	if rep.Checkpoints == 0 {
		fmt.Fprintln(w, "checkpoints: none within the entries verified")
	} else if trusted == 0 {
		// Each signature is good under the key its checkpoint names, but
		// a trail rewritten and re-signed with a key made for it would
		// read the same: that is not a verification by a trusted key.
		fmt.Fprintf(w, "checkpoints: %d with good signatures, the newest at entry %d, by key %s, which nothing given here trusts: "+
			"pass the console's --data (its audit key), --trusted-keys FILE or --checkpoint FILE to check who signed them\n",
			rep.Checkpoints, rep.CheckpointSeq, strings.Join(rep.KeyIDs, ", "))
	} else {
		fmt.Fprintf(w, "checkpoints: %d verified, the newest at entry %d, signed by key %s\n", rep.Checkpoints, rep.CheckpointSeq, strings.Join(rep.KeyIDs, ", "))
	}
	for _, seq := range rep.Uncovered {
		fmt.Fprintf(w, "note: the outside checkpoint at entry %d falls before the entries verified and was not compared\n", seq)
	}
	if outside == 0 {
		fmt.Fprintln(w, "note: no outside checkpoint given (--checkpoint): entries removed after the last checkpoint, or a log re-signed with another key, would not show")
	}
}

// isFile reports whether name is a file that is there.
func isFile(name string) bool {
	fi, err := os.Stat(name)
	return err == nil && fi.Mode().IsRegular()
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// parseAuditTime reads an RFC 3339 time or a UTC date (2006-01-02).
func parseAuditTime(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse("2006-01-02", s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time (2025-03-01T12:00:00Z) nor a date (2025-03-01)", s)
}

func auditExport(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("audit export", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	withUsage(fs, e, auditUsage)
	data := fs.String("data", "", "data directory (default $COUNTERSIGN_DATA or ./countersign-data)")
	dbURL := dbFlag(fs)
	since := fs.String("since", "", "first entry time, RFC 3339 or YYYY-MM-DD (UTC)")
	until := fs.String("until", "", "entries before this time, RFC 3339 or YYYY-MM-DD (UTC)")
	format := fs.String("format", "", "jsonl (verifiable offline) or csv")
	out := fs.String("out", "", "file to write (default standard output)")
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if fs.NArg() > 0 || (*format != "jsonl" && *format != "csv") {
		fmt.Fprintln(e.stderr, "usage: console audit export [--data DIR] [--since T] [--until T] --format jsonl|csv [--out FILE]")
		return 2
	}
	opt := audit.ExportOptions{Format: *format}
	for _, x := range []struct {
		flag string
		dst  *time.Time
	}{{*since, &opt.Since}, {*until, &opt.Until}} {
		if x.flag == "" {
			continue
		}
		t, err := parseAuditTime(x.flag)
		if err != nil {
			fmt.Fprintf(e.stderr, "console audit export: %v\n", err)
			return 2
		}
		*x.dst = t
	}
	if *format == "jsonl" && databaseURL(e, *dbURL) != "" {
		// The shared database opens from anywhere: a named directory that
		// is not there is a mistyped --data, not a copy without its key.
		if err := namedDirMissing(e, *data); err != nil {
			fmt.Fprintf(e.stderr, "console audit export: %v; nothing was exported. Check that --data (or $COUNTERSIGN_DATA) "+
				"names the console's data directory, whose audit key signs the export's header, or leave both out to export "+
				"with an unsigned header\n", err)
			return 1
		}
	}
	d, err := openReadOnly(ctx, dataDir(e, *data), databaseURL(e, *dbURL))
	if err != nil {
		fmt.Fprintf(e.stderr, "console audit export: %v\n", err)
		return 1
	}
	defer d.Close()
	unsigned := false
	if *format == "jsonl" {
		// The header is signed with the data directory's audit key, so a
		// copy whose tail and checkpoint lines were dropped cannot be given
		// a header that matches what is left. Exporting only reads: a
		// directory without the key (a copy made without it, or one whose
		// server never started) exports with an unsigned header rather
		// than get a new key, which would sign for nobody.
		path := auditKeyPath(dataDir(e, *data))
		signer, err := audit.LoadKey(path)
		switch {
		case err == nil:
			opt.Signer = signer
		case errors.Is(err, os.ErrNotExist):
			unsigned = true
		case errors.Is(err, os.ErrPermission):
			fmt.Fprintf(e.stderr, "console audit export: %v; nothing was exported. The header of a JSONL export is signed with this key: "+
				"run the export as the user the console runs as, or from a copy of the data directory without its audit-key "+
				"(the export's header is then not signed)\n", err)
			return 1
		default:
			fmt.Fprintf(e.stderr, "console audit export: %v; nothing was exported\n", err)
			return 1
		}
	}

	w := e.stdout
	var tmp *os.File
	if *out != "" {
		// Written beside the destination and renamed into place when
		// complete, so a failed export leaves no partial file.
		tmp, err = os.CreateTemp(filepath.Dir(*out), ".tmp-audit-export-*")
		if err != nil {
			fmt.Fprintf(e.stderr, "console audit export: %v\n", err)
			return 1
		}
		defer os.Remove(tmp.Name())
		defer tmp.Close()
		w = tmp
	}
	res, err := d.ExportAudit(ctx, w, opt)
	if err == nil && tmp != nil {
		if err = tmp.Sync(); err == nil {
			if err = tmp.Close(); err == nil {
				err = os.Rename(tmp.Name(), *out)
			}
		}
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "console audit export: %v\n", err)
		return 1
	}
	dest := *out
	if dest == "" {
		dest = "standard output"
	}
	if res.Count == 0 {
		fmt.Fprintf(e.stderr, "exported no entries (none in that time range) to %s\n", dest)
	} else {
		fmt.Fprintf(e.stderr, "exported %d entries (%d to %d, head %s) and %d checkpoints to %s\n",
			res.Count, res.FromSeq, res.ToSeq, res.Head, res.Checkpoints, dest)
	}
	if unsigned {
		fmt.Fprintf(e.stderr, "note: %s has no audit key (%s), and none was made: the export's header is not signed (format %s). "+
			"audit verify --file checks its entries and checkpoints but cannot tell entries dropped from its end, and refuses it "+
			"when audit keys are trusted (--data, --checkpoint, --trusted-keys). To sign the header, export where the console's audit key is\n",
			dataDir(e, *data), auditKeyPath(dataDir(e, *data)), audit.ExportFormatV1)
	}
	return 0
}

func auditCheckpoint(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("audit checkpoint", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	withUsage(fs, e, auditUsage)
	data := fs.String("data", "", "data directory (default $COUNTERSIGN_DATA or ./countersign-data)")
	dbURL := dbFlag(fs)
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintln(e.stderr, "usage: console audit checkpoint [--data DIR] [--db URL]")
		return 2
	}
	dir, url := dataDir(e, *data), databaseURL(e, *dbURL)
	if err := databaseExists(dir, url); err != nil {
		fmt.Fprintf(e.stderr, "console audit checkpoint: %v\n", err)
		return 1
	}
	// A checkpoint is trusted for the key that signs it: one signed with
	// a key made here, for a mistyped --data or a directory whose keys
	// were never made, would be stored (in the shared database, with --db)
	// under a key nobody trusts. The key must be there already.
	signer, err := audit.LoadKey(auditKeyPath(dir))
	if errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(e.stderr, "console audit checkpoint: no audit key at %s to sign the checkpoint with; nothing was created or stored. "+
			"Check that --data (or $COUNTERSIGN_DATA) names this console's data directory; if its keys were never made, "+
			"run console keys init --data %s\n", auditKeyPath(dir), dir)
		return 1
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "console audit checkpoint: %v; nothing was stored\n", err)
		return 1
	}
	d, err := openExisting(ctx, dir, url)
	if err != nil {
		fmt.Fprintf(e.stderr, "console audit checkpoint: %v\n", err)
		return 1
	}
	defer d.Close()
	c, err := d.Checkpoint(ctx, signer)
	if errors.Is(err, audit.ErrNoCheckpoint) {
		fmt.Fprintln(e.stderr, "console audit checkpoint: the audit trail is empty; nothing to sign")
		return 1
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "console audit checkpoint: %v\n", err)
		return 1
	}
	b, err := json.Marshal(c)
	if err != nil {
		fmt.Fprintf(e.stderr, "console audit checkpoint: %v\n", err)
		return 1
	}
	fmt.Fprintln(e.stdout, string(b))
	return 0
}
