package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/console"
	"github.com/countersign/countersign/internal/evidence"
	"github.com/countersign/countersign/internal/grant"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/scripts"
)

const packUsage = `usage: console audit pack [--data DIR] [--db URL] --since T --until T [--tool TOOL] [--actor ACTOR] --out pack.tar

Writes an evidence pack: the audit trail from the last checkpoint at or
before --since to the first at or after --until (one is signed now when
none covers the end), its checkpoints, the public keys, the passkey
evidence, each call's lineage, a summary and a README for the reader, and
a manifest of every file signed with the audit key. --tool and --actor
narrow the lineage and the summary, never the trail. Check a pack with
console audit verify pack.tar --audit-key-fingerprint HEX.`

// packSource is a pack's source: the trail and the calls of one engine.
type packSource struct {
	storage
	calls queue.Store
}

func (s packSource) Call(ctx context.Context, id string) (*queue.Call, error) {
	return s.calls.Call(ctx, id)
}

func auditPack(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("audit pack", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	withUsage(fs, e, packUsage)
	data := fs.String("data", "", "data directory (default $COUNTERSIGN_DATA or ./countersign-data)")
	dbURL := dbFlag(fs)
	since := fs.String("since", "", "start of the period, RFC 3339 or YYYY-MM-DD (UTC)")
	until := fs.String("until", "", "end of the period (exclusive), RFC 3339 or YYYY-MM-DD (UTC)")
	tool := fs.String("tool", "", "narrow the lineage and the summary to this tool")
	actor := fs.String("actor", "", "narrow the lineage and the summary to this agent")
	out := fs.String("out", "", "the pack to write (a tar archive)")
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if fs.NArg() > 0 || *out == "" || *since == "" || *until == "" {
		fmt.Fprintln(e.stderr, packUsage)
		return 2
	}
	opt := evidence.Options{Tool: *tool, Actor: *actor, Now: time.Now().UTC()}
	var err error
	if opt.Since, err = parseAuditTime(*since); err == nil {
		opt.Until, err = parseAuditTime(*until)
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "console audit pack: %v\n", err)
		return 2
	}
	if !opt.Until.After(opt.Since) {
		fmt.Fprintln(e.stderr, "console audit pack: --until must come after --since")
		return 2
	}
	dir, url := dataDir(e, *data), databaseURL(e, *dbURL)
	if opt.Signer, err = audit.LoadKey(auditKeyPath(dir)); err != nil {
		fmt.Fprintf(e.stderr, "console audit pack: %v; nothing was written. A pack is signed with the console's audit key: "+
			"run it where the console's data directory is (--data), as the user the console runs as\n", err)
		return 1
	}
	keys, err := grant.OpenExistingKeyring(keysDir(dir), Issuer, time.Now)
	if err != nil {
		fmt.Fprintf(e.stderr, "console audit pack: %v; nothing was written\n", err)
		return 1
	}
	opt.GrantKeys, opt.Verifiers = keys.JWKS(), packVerifiers()
	d, err := openExisting(ctx, dir, url)
	if err != nil {
		fmt.Fprintf(e.stderr, "console audit pack: %v\n", err)
		return 1
	}
	defer d.Close()
	res, err := writePack(ctx, *out, packSource{storage: d.storage, calls: d.queue}, opt)
	if errors.Is(err, evidence.ErrEmpty) {
		fmt.Fprintf(e.stderr, "console audit pack: the audit trail has no entry between %s and %s; nothing was written\n", *since, *until)
		return 1
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "console audit pack: %v\n", err)
		return 1
	}
	if res.Signed.Seq > 0 {
		fmt.Fprintf(e.stderr, "signed a checkpoint at entry %d for the end of the range\n", res.Signed.Seq)
	}
	fmt.Fprintf(e.stdout, "wrote %s: entries %d to %d (%d), %d calls, %d files, signed by audit key %s (fingerprint %s)\n",
		*out, res.Chain.FromSeq, res.Chain.ToSeq, res.Chain.Count, res.Calls, len(res.Manifest.Files)+2,
		opt.Signer.KID(), evidence.Fingerprint(opt.Signer.PublicKey()))
	return 0
}

// packVerifiers are the verifiers a pack carries copies of.
func packVerifiers() map[string][]byte {
	return map[string][]byte{"verify_evidence_pack.py": scripts.EvidencePackVerifier,
		"verify_passkey_evidence.py": scripts.PasskeyEvidenceVerifier}
}

// evidencePackFunc makes the admin page's evidence packs from d, signed
// with the audit key.
func evidencePackFunc(d *engine, keys *grant.Keyring, signer *audit.Signer) console.EvidencePackFunc {
	return func(ctx context.Context, w io.Writer, since, until time.Time, tool, actor string) error {
		_, err := evidence.Write(ctx, w, packSource{storage: d.storage, calls: d.queue}, evidence.Options{Since: since, Until: until,
			Tool: tool, Actor: actor, Signer: signer, GrantKeys: keys.JWKS(), Verifiers: packVerifiers(), Now: time.Now().UTC()})
		return err
	}
}

// writePack writes a pack beside out and renames it into place when it is
// complete and synced.
func writePack(ctx context.Context, out string, src evidence.Source, opt evidence.Options) (evidence.Result, error) {
	tmp, err := os.CreateTemp(filepath.Dir(out), ".tmp-evidence-pack-*")
	if err != nil {
		return evidence.Result{}, err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	bw := bufio.NewWriterSize(tmp, 1<<20)
	if opt.TempDir == "" {
		opt.TempDir = filepath.Dir(out)
	}
	res, err := evidence.Write(ctx, bw, src, opt)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = tmp.Sync()
	}
	if err == nil {
		err = tmp.Close()
	}
	if err == nil {
		err = os.Rename(tmp.Name(), out)
	}
	return res, err
}

var fingerprintRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// verifyPack is console audit verify PACK.tar: it trusts only the keys
// given from outside (--audit-key-fingerprint, --checkpoint, --data,
// --trusted-keys).
func verifyPack(e *env, name string, trust evidence.Trust) int {
	if trust.Empty() {
		fmt.Fprintf(e.stdout, "NOT VERIFIED: %s: %v. Give the audit key from outside the pack: --audit-key-fingerprint HEX "+
			"(ask the console's operators; console keys jwks prints it), --checkpoint FILE (one you kept), or --data DIR\n", name, evidence.ErrUntrusted)
		return 1
	}
	f, err := os.Open(name)
	if err != nil {
		fmt.Fprintf(e.stderr, "console audit verify: %v\n", err)
		return 1
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		fmt.Fprintf(e.stderr, "console audit verify: %v\n", err)
		return 1
	}
	rep, err := evidence.Verify(f, fi.Size(), trust)
	if errors.Is(err, evidence.ErrUntrusted) {
		fmt.Fprintf(e.stdout, "NOT VERIFIED: %s: %v. Nothing in it was checked further\n", name, err)
		return 1
	}
	if err != nil {
		fmt.Fprintf(e.stdout, "DAMAGED: %v\n", err)
		return 1
	}
	m := rep.Manifest
	fmt.Fprintf(e.stdout, "ok: evidence pack of database %s, made %s, signed by audit key %s\n", m.Database, m.CreatedAt, rep.KID)
	fmt.Fprintf(e.stdout, "files: %d, each matches its SHA-256 in the signed manifest\n", rep.Files)
	fmt.Fprintf(e.stdout, "chain: entries %d to %d (%d) verified, head %s, between %d signed checkpoints\n",
		m.Chain.FromSeq, m.Chain.ToSeq, m.Chain.Count, m.Chain.Head, rep.Checkpoints)
	fmt.Fprintf(e.stdout, "passkeys: %d approval signatures re-verified\n", rep.Passkeys)
	fmt.Fprintf(e.stdout, "redemptions: %d, each of a digest that was approved\n", rep.Redeemed)
	fmt.Fprintf(e.stdout, "lineage: %d calls agree with the chain\n", rep.Lineage)
	for _, n := range rep.Notes {
		fmt.Fprintf(e.stdout, "note: %s\n", n)
	}
	return 0
}
