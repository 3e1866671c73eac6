package main

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/evidence"
	"github.com/countersign/countersign/internal/grant"
	"github.com/countersign/countersign/internal/highwater"
	"github.com/countersign/countersign/internal/retention"
)

// RetainFloor is the shortest retention any flag may ask for.
const RetainFloor = retention.Floor

// pruneStore is what a prune uses of either engine.
type pruneStore interface {
	retention.Store
	AuditHead(ctx context.Context) (int64, string, error)
}

// openRetention opens the console's database, SQLite or PostgreSQL, with
// its retention store.
func openRetention(ctx context.Context, e *env, data, url string) (*engine, pruneStore, error) {
	eng, err := openExisting(ctx, dataDir(e, data), databaseURL(e, url))
	if err != nil {
		return nil, nil, err
	}
	rs, ok := eng.storage.(pruneStore)
	if !ok {
		eng.Close()
		return nil, nil, errors.New("this database keeps no retention store")
	}
	return eng, rs, nil
}

const pruneUsage = `usage: console audit prune --retain DAYS [--keep TOOL=DAYS]... [--max-entries N] --archive DIR --as ADMIN [--data DIR] [--db URL] [--trusted-keys FILE]

Removes the audit entries older than --retain (at least 30d) from the
database, keeping every entry from the first of a call still open
(pending, approved with a live grant, running, or of unknown outcome and
unresolved), of a tool kept longer (--keep, never shorter than --retain),
or under a legal hold (console hold). First it
writes an evidence pack of the entries it will remove to --archive,
verifies it and syncs it; then, in one transaction, it appends a pruned
entry (the range, its count, the last removed entry's hash, the archive's
manifest digest, who, and a snapshot of the accounts, tokens and freezes)
and deletes the entries, and signs a checkpoint at the pruned entry. The
removal ends at a signed checkpoint, so audit verify accepts the gap. It
blocks no reader. On PostgreSQL one prune runs at a time whichever
replica starts it, while every replica serves. Run console compact
afterwards to give the space back.`

func auditPrune(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("audit prune", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	withUsage(fs, e, pruneUsage)
	data := fs.String("data", "", "data directory (default $COUNTERSIGN_DATA or ./countersign-data)")
	dbURL := dbFlag(fs)
	trusted := fs.String("trusted-keys", "", "the cluster's trust file (console keys trust): the archive's checkpoints may be signed by its audit keys too, as each replica signs with its own (default $"+envTrustedKeys+")")
	retainText := fs.String("retain", "", "keep entries younger than this: days (400d) or a duration (9600h); at least 30d")
	archive := fs.String("archive", "", "directory to write the archive (an evidence pack) of the removed entries to")
	as := fs.String("as", "", "the admin account pruning (required)")
	maxEntries := fs.Int64("max-entries", DefaultPruneEntries, "remove at most this many entries in one run (the archive is built in memory); run again for the rest")
	keep := map[string]time.Duration{}
	fs.Func("keep", "TOOL=DAYS: keep this tool's calls longer than --retain (never shorter); repeatable", func(s string) error {
		tool, days, ok := strings.Cut(s, "=")
		if !ok || tool == "" {
			return fmt.Errorf("%q is not TOOL=DAYS", s)
		}
		d, err := parseRetain(days)
		if err != nil {
			return err
		}
		keep[tool] = d
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if fs.NArg() > 0 || *retainText == "" || *archive == "" || *as == "" {
		fmt.Fprintln(e.stderr, pruneUsage)
		return 2
	}
	retain, err := parseRetain(*retainText)
	if err != nil {
		fmt.Fprintf(e.stderr, "console audit prune: %v\n", err)
		return 2
	}
	dir := dataDir(e, *data)
	signer, err := audit.LoadKey(auditKeyPath(dir))
	if err != nil {
		fmt.Fprintf(e.stderr, "console audit prune: %v; nothing was removed. The archive is signed with the console's audit key: run it as the console's user\n", err)
		return 1
	}
	trust := []string{signer.PublicKey()}
	if path := trustedKeysPath(e, *trusted); path != "" {
		b, err := os.ReadFile(path)
		var ts *grant.TrustSet
		if err == nil {
			ts, err = grant.ParseTrust(b)
		}
		if err != nil {
			fmt.Fprintf(e.stderr, "console audit prune: %v; nothing was removed\n", err)
			return 1
		}
		for _, k := range ts.AuditKeys {
			trust = append(trust, k.X)
		}
	}
	keys, err := grant.OpenExistingKeyring(keysDir(dir), Issuer, time.Now)
	if err != nil {
		fmt.Fprintf(e.stderr, "console audit prune: %v; nothing was removed\n", err)
		return 1
	}
	eng, d, err := openRetention(ctx, e, *data, *dbURL)
	if err != nil {
		fmt.Fprintf(e.stderr, "console audit prune: %v\n", err)
		return 1
	}
	defer eng.Close()
	if eng.pg != nil {
		// One prune at a time on the shared database, whichever replica's
		// host runs it: a second would archive the same entries.
		unlock, err := eng.pg.LockPrune(ctx)
		if err != nil {
			fmt.Fprintf(e.stderr, "console audit prune: %v; nothing was removed\n", err)
			return 1
		}
		defer unlock()
	}
	accounts := account.NewService(eng.accounts, nil)
	u, err := accounts.UserByName(ctx, *as)
	if err != nil || u.Disabled() || !u.Role.CanAdminister() {
		fmt.Fprintf(e.stderr, "console audit prune: %s is not an enabled admin account; only an admin may prune the audit trail\n", *as)
		return 1
	}
	now := time.Now().UTC()
	horizon := now.Add(-retain)
	for tool, k := range keep {
		if k < retain {
			fmt.Fprintf(e.stderr, "console audit prune: --keep %s=%s is shorter than --retain %s: a tool may only be kept longer\n",
				tool, k, *retainText)
			return 2
		}
	}
	if *maxEntries < 1 {
		fmt.Fprintln(e.stderr, "console audit prune: --max-entries must be at least 1")
		return 2
	}
	plan, err := planPrune(ctx, d, horizon, now, keep, *maxEntries)
	if err == nil && plan.reason == "" {
		err = keepMark(dir, eng.Identity(), &plan)
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "console audit prune: %v\n", err)
		return 1
	}
	if plan.reason != "" {
		fmt.Fprintf(e.stdout, "nothing to prune: %s\n", plan.reason)
		return 0
	}

	// Phase one: the archive, written, verified and synced before anything
	// is removed.
	name := filepath.Join(*archive, fmt.Sprintf("countersign-audit-%d-%d.tar", plan.from, plan.to))
	res, err := writePack(ctx, name, packSource{storage: eng.storage, calls: eng.queue}, evidence.Options{FromSeq: plan.from, ToSeq: plan.to,
		Signer: signer, GrantKeys: keys.JWKS(), Verifiers: packVerifiers(), Now: now})
	if err != nil {
		fmt.Fprintf(e.stderr, "console audit prune: write the archive: %v; nothing was removed\n", err)
		return 1
	}
	if res.Chain.FromSeq != plan.from || res.Chain.ToSeq != plan.to {
		fmt.Fprintf(e.stderr, "console audit prune: the archive holds entries %d to %d, not %d to %d; nothing was removed\n",
			res.Chain.FromSeq, res.Chain.ToSeq, plan.from, plan.to)
		return 1
	}
	manifest, err := verifyArchive(name, trust)
	if err == nil {
		err = syncDir(*archive)
	}
	if err != nil {
		hint := ""
		if strings.Contains(err.Error(), "not a trusted audit key") {
			hint = ". With several replicas, each signs checkpoints with its own audit key: pass the cluster's trust file (--trusted-keys FILE, made by console keys trust)"
		}
		fmt.Fprintf(e.stderr, "console audit prune: the archive %s does not verify: %v; nothing was removed%s\n", name, err, hint)
		return 1
	}

	// Phase two: one transaction appends the pruned entry and deletes.
	snapshot, err := stateSnapshot(ctx, eng, d, accounts)
	if err != nil {
		fmt.Fprintf(e.stderr, "console audit prune: %v; nothing was removed\n", err)
		return 1
	}
	// The checkpoint signed in the same transaction covers the pruned
	// entry and its snapshot.
	entry, err := d.Prune(ctx, retention.Removal{FromSeq: plan.from, ToSeq: plan.to, By: *as, Signer: signer,
		Details: map[string]any{"archive": filepath.Base(name), "archive_sha256": hex.EncodeToString(manifest[:]),
			"retain_days": int64(retain / (24 * time.Hour)), "keep_days": keepDays(keep), "horizon": audit.FormatTime(horizon), "snapshot": snapshot}})
	if err != nil {
		fmt.Fprintf(e.stderr, "console audit prune: %v; nothing was removed (the archive %s is kept)\n", err, name)
		return 1
	}
	fmt.Fprintf(e.stdout, "removed entries %d to %d (%d) older than %s; archive %s (sha256 %s); pruned entry %d\n",
		plan.from, plan.to, plan.to-plan.from+1, audit.FormatTime(horizon), name, hex.EncodeToString(manifest[:]), entry.Seq)
	if plan.heldBy != "" {
		fmt.Fprintf(e.stdout, "note: %s\n", plan.heldBy)
	}
	if plan.more {
		fmt.Fprintf(e.stdout, "note: stopped at --max-entries %d; run it again to remove more\n", *maxEntries)
	}
	if eng.pg != nil {
		fmt.Fprintln(e.stdout, "run console compact --data DIR --db URL to make the space reusable (VACUUM; it blocks no replica)")
	} else {
		fmt.Fprintln(e.stdout, "run console compact --data DIR (while the console is stopped or quiet) to give the space back to the file system")
	}
	return 0
}

// verifyArchive reads an archive back, verifies it against the audit key
// and returns its SHA-256, reading it in pieces.
func verifyArchive(name string, trust []string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if _, err := evidence.Verify(f, fi.Size(), evidence.Trust{PublicKeys: trust}); err != nil {
		return nil, err
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, fi.Size())); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}

// prunePlan is the run of entries a prune removes, or why none.
type prunePlan struct {
	from, to int64
	heldBy   string // what kept the horizon back, when something did
	reason   string // why nothing is removed
	more     bool   // --max-entries stopped it short of the horizon
}

// DefaultPruneEntries is how many entries one prune removes at most.
const DefaultPruneEntries = 100000

// planPrune finds the entries to remove: from the oldest kept to the
// newest signed checkpoint before both the first entry younger than
// horizon and the first entry of any call still open.
func planPrune(ctx context.Context, d pruneStore, horizon, now time.Time, keep map[string]time.Duration, maxEntries int64) (prunePlan, error) {
	var p prunePlan
	oldest, err := d.OldestEntry(ctx)
	if err != nil {
		return p, err
	}
	young, err := d.FirstEntryFrom(ctx, horizon)
	if err != nil {
		return p, err
	}
	limit := young - 1
	if young == 0 {
		head, _, err := d.AuditHead(ctx)
		if err != nil {
			return p, err
		}
		// Every entry is older: the newest stays, as the chain's head.
		limit = head - 1
	}
	open, err := d.OldestOpenEntry(ctx, now)
	if err != nil {
		return p, err
	}
	if open > 0 && open-1 < limit {
		limit = open - 1
		p.heldBy = fmt.Sprintf("a call still open (first entry %d) keeps the entries from it on", open)
	}
	for tool, k := range keep {
		kept, err := d.OldestKeptForTool(ctx, tool, now.Add(-k))
		if err != nil {
			return p, err
		}
		if kept > 0 && kept-1 < limit {
			limit = kept - 1
			p.heldBy = fmt.Sprintf("%s is kept %d days (--keep): its calls keep the entries from entry %d on", tool, int64(k/(24*time.Hour)), kept)
		}
	}
	held, err := d.OldestHeldEntry(ctx)
	if err != nil {
		return p, err
	}
	if held > 0 && held-1 < limit {
		limit = held - 1
		p.heldBy = fmt.Sprintf("a legal hold (console hold list) keeps the entries from entry %d on", held)
	}
	if oldest > 0 && oldest+maxEntries-1 < limit {
		limit = oldest + maxEntries - 1
		p.more = true
	}
	if oldest == 0 || limit < oldest {
		p.reason = "no entry is older than the horizon that no open call still needs"
		return p, nil
	}
	cp, err := d.CheckpointAtOrBefore(ctx, limit)
	if errors.Is(err, audit.ErrNoCheckpoint) || (err == nil && cp.Seq < oldest) {
		p.reason = fmt.Sprintf("no signed checkpoint between entries %d and %d to end the removal at; the server signs one every 1000 entries or five minutes", oldest, limit)
		return p, nil
	}
	if err != nil {
		return p, err
	}
	p.from, p.to = oldest, cp.Seq
	return p, nil
}

// keepMark ends the removal before the data directory's high-water mark
// (docs/audit.md §8), which the next console serve looks up in the chain.
func keepMark(dir, identity string, p *prunePlan) error {
	if _, err := os.Stat(markPath(dir)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	hw, err := highwater.Open(markPath(dir), identity)
	if err != nil {
		return err
	}
	defer hw.Close()
	if m := hw.Mark(); m.Seq > 0 && m.Seq <= p.to {
		p.reason = fmt.Sprintf("the data directory's high-water mark is at entry %d, within the entries to remove; start the console once (it moves the mark to the head) and prune again", m.Seq)
	}
	return nil
}

// stateSnapshot is what the pruned entry records of the state the removed
// entries built: the accounts, their passkeys with the seq and hash of
// their registration entries (which may be among the entries removed),
// the API tokens, the freezes, and the digest of the tools file last
// loaded.
func stateSnapshot(ctx context.Context, eng *engine, d retention.Store, accounts *account.Service) (map[string]any, error) {
	users, err := accounts.Users(ctx)
	if err != nil {
		return nil, err
	}
	var us, pks []any
	for _, u := range users {
		us = append(us, map[string]any{"user": u.Name, "role": string(u.Role), "disabled": u.Disabled()})
		keys, err := accounts.Passkeys(ctx, u.Name)
		if err != nil {
			return nil, err
		}
		for _, k := range keys {
			id := base64.RawURLEncoding.EncodeToString(k.ID)
			seq, hash, err := d.PasskeyRegistration(ctx, id)
			if err != nil {
				return nil, err
			}
			pks = append(pks, map[string]any{"user": u.Name, "credential_id": id, "name": k.Name,
				"public_key": base64.RawURLEncoding.EncodeToString(k.PublicKey), "registration_seq": seq, "registration_hash": hash})
		}
	}
	toks, err := accounts.Tokens(ctx)
	if err != nil {
		return nil, err
	}
	var ts []any
	for _, t := range toks {
		ts = append(ts, map[string]any{"id": t.ID, "actor": t.Actor, "audience": t.Audience, "revoked": !t.RevokedAt.IsZero()})
	}
	fz, err := eng.queue.Freezes(ctx)
	if err != nil {
		return nil, err
	}
	var fs []any
	for _, f := range fz {
		fs = append(fs, map[string]any{"tool": f.Tool, "actor": f.Actor, "reason": f.Reason})
	}
	tools, err := d.LatestToolsDigest(ctx)
	if err != nil {
		return nil, err
	}
	return map[string]any{"accounts": orEmpty(us), "passkeys": orEmpty(pks), "tokens": orEmpty(ts), "freezes": orEmpty(fs),
		"tools_digest": tools}, nil
}

// keepDays is --keep as the pruned entry records it: days per tool.
func keepDays(keep map[string]time.Duration) map[string]any {
	out := map[string]any{}
	for tool, k := range keep {
		out[tool] = int64(k / (24 * time.Hour))
	}
	return out
}

func orEmpty(v []any) []any {
	if v == nil {
		return []any{}
	}
	return v
}

// parseRetain reads --retain: days (400d) or a Go duration, at least
// RetainFloor.
func parseRetain(s string) (time.Duration, error) {
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("--retain %q is not a number of days (400d) or a duration (9600h)", s)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("--retain %q is not a number of days (400d) or a duration (9600h)", s)
		}
	}
	if d < RetainFloor {
		return 0, fmt.Errorf("--retain %s is shorter than 30 days, the least the audit trail is kept; no flag lowers it", s)
	}
	return d, nil
}

const compactUsage = `usage: console compact [--data DIR] [--db URL]

SQLite: rewrites the database without its free pages (VACUUM) and reports
the pages and bytes before and after. It blocks every write while it runs
(seconds per gigabyte): run it while the console is stopped or quiet,
after console audit prune.

PostgreSQL: runs VACUUM (ANALYZE) on the audit table, which makes the
space of pruned entries reusable by new ones while every replica goes on
serving, and reports the table's size before and after. Plain VACUUM
gives back to the file system only empty pages at the table's end, so the
size rarely falls; VACUUM FULL (run by hand, see docs/audit.md) shrinks
the files but stops every replica's writes while it runs.`

func cmdCompact(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("compact", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	withUsage(fs, e, compactUsage)
	data := fs.String("data", "", "data directory (default $COUNTERSIGN_DATA or ./countersign-data)")
	dbURL := dbFlag(fs)
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintln(e.stderr, compactUsage)
		return 2
	}
	eng, d, err := openRetention(ctx, e, *data, *dbURL)
	if err != nil {
		fmt.Fprintf(e.stderr, "console compact: %v\n", err)
		return 1
	}
	defer eng.Close()
	before, after, err := d.Compact(ctx)
	if err != nil {
		fmt.Fprintf(e.stderr, "console compact: %v\n", err)
		return 1
	}
	if eng.pg != nil {
		fmt.Fprintf(e.stdout, "vacuumed the audit table: %d pages (%d bytes) with its indexes before, %d pages (%d bytes) after; "+
			"about %d pages free for new entries. Plain VACUUM makes the space of pruned entries reusable by new ones and gives back to the file system only empty pages at the table's end; "+
			"VACUUM FULL audit would shrink the files but stops every replica's writes while it runs\n",
			before.Pages, before.Bytes, after.Pages, after.Bytes, after.FreePages)
		return 0
	}
	fmt.Fprintf(e.stdout, "compacted: %d pages (%d free) and %d bytes before; %d pages and %d bytes after; %d pages freed\n",
		before.Pages, before.FreePages, before.Bytes, after.Pages, after.Bytes, before.Pages-after.Pages)
	return 0
}

const holdUsage = `usage:
  console hold add (--tool TOOL | --actor ACTOR | --call ID) --reason TEXT --as ADMIN [--data DIR] [--db URL]
  console hold list [--data DIR] [--db URL]
  console hold remove ID --as ADMIN [--data DIR] [--db URL]

A legal hold keeps every audit entry of the calls it covers, and every
later entry, from console audit prune: the calls of a tool, of an agent,
or one call. Adding and removing one is for an admin and is audited
(hold_added, hold_removed); a database keeps at most 1,000.`

func cmdHold(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 || (args[0] != "add" && args[0] != "list" && args[0] != "remove") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprintln(e.stderr, holdUsage)
			return 0
		}
		fmt.Fprintln(e.stderr, holdUsage)
		return 2
	}
	sub := args[0]
	fs := flag.NewFlagSet("hold "+sub, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	withUsage(fs, e, holdUsage)
	data := fs.String("data", "", "data directory (default $COUNTERSIGN_DATA or ./countersign-data)")
	tool := fs.String("tool", "", "hold every call of this tool")
	actor := fs.String("actor", "", "hold every call of this agent")
	call := fs.String("call", "", "hold this call")
	reason := fs.String("reason", "", "why (a case, a request), kept with the hold and in its audit entry")
	as := fs.String("as", "", "the admin account (required to add or remove)")
	dbURL := dbFlag(fs)
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return parseExit(err)
	}
	eng, d, err := openRetention(ctx, e, *data, *dbURL)
	if err != nil {
		fmt.Fprintf(e.stderr, "console hold: %v\n", err)
		return 1
	}
	defer eng.Close()
	if sub == "list" {
		holds, err := d.Holds(ctx)
		if err != nil {
			fmt.Fprintf(e.stderr, "console hold: %v\n", err)
			return 1
		}
		for _, h := range holds {
			fmt.Fprintf(e.stdout, "%s\t%s %s\tby %s at %s\t%s\n", h.ID, h.Kind, h.Value, h.By, time.UnixMilli(h.CreatedAt).UTC().Format(time.RFC3339), h.Reason)
		}
		if len(holds) == 0 {
			fmt.Fprintln(e.stdout, "no legal holds")
		}
		return 0
	}
	u, err := account.NewService(eng.accounts, nil).UserByName(ctx, *as)
	if *as == "" || err != nil || u.Disabled() || !u.Role.CanAdminister() {
		fmt.Fprintf(e.stderr, "console hold %s: --as %q is not an enabled admin account; only an admin adds or removes a legal hold\n", sub, *as)
		return 1
	}
	if sub == "remove" {
		if len(pos) != 1 {
			fmt.Fprintln(e.stderr, "usage: console hold remove ID --as ADMIN [--data DIR]")
			return 2
		}
		if err := d.RemoveHold(ctx, pos[0], *as); err != nil {
			fmt.Fprintf(e.stderr, "console hold remove: %v (console hold list shows the holds)\n", err)
			return 1
		}
		fmt.Fprintf(e.stdout, "removed hold %s\n", pos[0])
		return 0
	}
	kind, value, n := "", "", 0
	for _, x := range []struct{ k, v string }{{"tool", *tool}, {"actor", *actor}, {"call", *call}} {
		if x.v != "" {
			kind, value, n = x.k, x.v, n+1
		}
	}
	if n != 1 || len(pos) > 0 || strings.TrimSpace(*reason) == "" {
		fmt.Fprintln(e.stderr, "usage: console hold add (--tool TOOL | --actor ACTOR | --call ID) --reason TEXT --as ADMIN [--data DIR]: exactly one of --tool, --actor, --call, and a reason")
		return 2
	}
	h, err := d.AddHold(ctx, kind, value, *reason, *as)
	if err != nil {
		fmt.Fprintf(e.stderr, "console hold add: %v\n", err)
		return 1
	}
	fmt.Fprintf(e.stdout, "added hold %s on %s %s\n", h.ID, h.Kind, h.Value)
	return 0
}
