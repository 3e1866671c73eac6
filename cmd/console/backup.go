package main

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/db"
	"github.com/countersign/countersign/internal/highwater"
)

// backupFormat names the layout of a backup archive.
const backupFormat = "countersign-backup/v1"

// backupManifestName is the archive's first member: what the backup holds.
const backupManifestName = "backup.json"

// backupManifest describes a backup: the database copy, the chain it ends
// at, the data directory's high-water mark when it was taken, and the
// digest of every other member.
type backupManifest struct {
	Format   string           `json:"format"`
	TakenAt  time.Time        `json:"taken_at"`
	Identity string           `json:"database_identity"`
	Chain    markJSON         `json:"chain"`
	Mark     markJSON         `json:"high_water_mark"`
	Keys     bool             `json:"keys_included"`
	Files    []backupFileJSON `json:"files"`
}

type markJSON struct {
	Seq  int64  `json:"seq"`
	Head string `json:"head"`
}

type backupFileJSON struct {
	Name   string `json:"name"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

func toMarkJSON(m highwater.Mark) markJSON { return markJSON{Seq: m.Seq, Head: m.Head} }
func (m markJSON) mark() highwater.Mark    { return highwater.Mark{Seq: m.Seq, Head: m.Head} }
func copyMark(c db.Copy) highwater.Mark    { return highwater.Mark{Seq: c.Seq, Head: c.Head} }
func backupDBName() string                 { return "countersign.db" }

// isKeyMember reports whether an archive member is one of the data
// directory's keys: audit-key, or a file under keys/ that stays there.
func isKeyMember(name string) bool {
	return name == "audit-key" || strings.HasPrefix(name, "keys/") && filepath.ToSlash(filepath.Clean(name)) == name && !strings.Contains(name, "..")
}
func controlRunning(data string) bool { return dialable(controlPath(data)) }
func dialable(sock string) bool {
	c, err := net.DialTimeout("unix", sock, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

const backupUsage = `usage: console backup --out FILE [--data DIR] [--keys]

Writes a consistent copy of a SQLite console's database to FILE (a tar
archive, owner-only) while the console runs, with the database's identity
and the data directory's high-water mark beside it. With --keys the archive
also holds keys/ and audit-key (private keys: keep it as you keep them).
Restore it with console restore. A PostgreSQL database is backed up with
PostgreSQL's own tools (docs/deploy.md, Backups).`

func cmdBackup(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("backup", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	withUsage(fs, e, backupUsage)
	data := fs.String("data", "", "data directory (default $COUNTERSIGN_DATA or ./countersign-data)")
	out := fs.String("out", "", "the archive to write (required; must not exist)")
	keys := fs.Bool("keys", false, "include the data directory's private keys (keys/ and audit-key)")
	dbURL := dbFlag(fs)
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if fs.NArg() > 0 || *out == "" {
		fmt.Fprintln(e.stderr, "usage: console backup --out FILE [--data DIR] [--keys]")
		return 2
	}
	if databaseURL(e, *dbURL) != "" {
		fmt.Fprintln(e.stderr, "console backup: the database is PostgreSQL: back it up with PostgreSQL's tools "+
			"(continuous archiving or pg_dump), and each replica's data directory beside it; see docs/deploy.md, Backups")
		return 2
	}
	dir := dataDir(e, *data)
	m, err := backup(ctx, dir, *out, *keys, time.Now)
	if err != nil {
		fmt.Fprintf(e.stderr, "console backup: %v\n", err)
		return 1
	}
	fmt.Fprintf(e.stdout, "backed up %s to %s: a consistent copy, taken while writes went on\n", dbPath(dir), *out)
	fmt.Fprintf(e.stdout, "  database identity  %s\n", m.Identity)
	fmt.Fprintf(e.stdout, "  audit chain        ends at %s\n", m.Chain.mark())
	fmt.Fprintf(e.stdout, "  high-water mark    %s (this data directory's, read after the copy)\n", m.Mark.mark())
	if m.Keys {
		fmt.Fprintf(e.stdout, "  keys               included: keys/ and audit-key, private keys; the archive is mode 0600, keep it as you keep them\n")
		fmt.Fprintf(e.stdout, "restore: console restore --from %s --data DIR; on a new host it brings the keys, so grants and checkpoints "+
			"this console signed verify there as before. Bring the tools file (--tools), and the newest audit-mark of %s if the console ran on after this backup.\n", *out, dir)
	} else {
		fmt.Fprintf(e.stdout, "  keys               not included: keys/ and audit-key stay in %s only (pass --keys to include them)\n", dir)
		fmt.Fprintf(e.stdout, "restore: console restore --from %s --data DIR; on a new host it also needs keys: copy keys/ and audit-key from %s, "+
			"or let the console make new ones (agents and verifiers must then trust the new public keys: console keys jwks). "+
			"Bring the tools file (--tools), and the newest audit-mark of %s if the console ran on after this backup.\n", *out, dir, dir)
	}
	return 0
}

// backup writes the archive of the data directory's database (and its keys
// when keys is set) to out.
func backup(ctx context.Context, data, out string, keys bool, now func() time.Time) (backupManifest, error) {
	var m backupManifest
	if err := notADirectory(data); err != nil {
		return m, err
	}
	if err := sqliteExists(data); err != nil {
		return m, err
	}
	if _, err := os.Lstat(out); err == nil {
		return m, fmt.Errorf("%s exists; nothing was written. Name a new file", out)
	}
	work, err := os.MkdirTemp(filepath.Dir(out), ".countersign-backup-*")
	if err != nil {
		return m, err
	}
	defer os.RemoveAll(work)
	d, err := db.OpenReadOnly(dbPath(data))
	if err != nil {
		return m, err
	}
	defer d.Close()
	copied := filepath.Join(work, backupDBName())
	c, err := d.Backup(ctx, copied)
	if err != nil {
		return m, err
	}
	if want, err := os.ReadFile(identityPath(data)); err == nil && strings.TrimSpace(string(want)) != c.Identity {
		return m, fmt.Errorf("the database %s is not the one this data directory was created with (identity %s, found %s); nothing was written",
			dbPath(data), strings.TrimSpace(string(want)), c.Identity)
	}
	mark, err := highwater.Read(markPath(data), c.Identity)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return m, err
	}
	m = backupManifest{Format: backupFormat, TakenAt: now().UTC(), Identity: c.Identity,
		Chain: toMarkJSON(copyMark(c)), Mark: toMarkJSON(mark), Keys: keys}
	members := []member{{name: backupDBName(), path: copied}}
	if keys {
		km, err := keyMembers(data)
		if err != nil {
			return m, err
		}
		members = append(members, km...)
	}
	for i := range members {
		sum, size, err := fileDigest(members[i].path)
		if err != nil {
			return m, err
		}
		m.Files = append(m.Files, backupFileJSON{Name: members[i].name, SHA256: sum, Size: size})
	}
	tmp := filepath.Join(work, "archive.tar")
	if err := writeArchive(tmp, m, members); err != nil {
		return m, err
	}
	if err := os.Link(tmp, out); err != nil {
		return m, fmt.Errorf("write %s: %w", out, err)
	}
	return m, syncDir(filepath.Dir(out))
}

// member is a file of the archive: its name there and where it is now.
type member struct{ name, path string }

// keyMembers lists the data directory's private keys: audit-key and every
// file under keys/.
func keyMembers(data string) ([]member, error) {
	var out []member
	if _, err := os.Stat(auditKeyPath(data)); err == nil {
		out = append(out, member{name: "audit-key", path: auditKeyPath(data)})
	}
	err := filepath.WalkDir(keysDir(data), func(path string, de fs.DirEntry, err error) error {
		if err != nil || de.IsDir() {
			return err
		}
		rel, err := filepath.Rel(data, path)
		if err != nil {
			return err
		}
		out = append(out, member{name: filepath.ToSlash(rel), path: path})
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--keys: %s holds no keys (no keys/ and no audit-key); nothing was written", data)
	}
	return out, nil
}

// fileDigest is the SHA-256 and size of the file at path, read a chunk at a
// time with a rest after each, as the archive is written.
func fileDigest(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	var n int64
	for {
		start := time.Now()
		m, err := io.CopyN(h, f, pacedChunk)
		n += m
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", 0, err
		}
		time.Sleep(db.BackupRest * time.Since(start))
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// writeArchive writes the manifest and the members to a new owner-only
// tar file at path, synced.
func writeArchive(path string, m backupManifest, members []member) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(&pacedWriter{f: f, start: time.Now()})
	manifest, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	manifest = append(manifest, '\n')
	if err := tw.WriteHeader(&tar.Header{Name: backupManifestName, Mode: 0o600, Size: int64(len(manifest)), ModTime: m.TakenAt}); err != nil {
		return err
	}
	if _, err := tw.Write(manifest); err != nil {
		return err
	}
	for _, mb := range members {
		if err := addFile(tw, mb, m.TakenAt); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Sync()
}

// pacedWriter writes to a file a chunk at a time, starting the chunk's
// writeback to disk without waiting for it (startWriteback) and then
// resting db.BackupRest times as long as it took: a backup takes at most
// about a fifth of the disk from the console's commits, never makes one
// wait behind a flush of its own, and leaves little for the final sync.
type pacedWriter struct {
	f       *os.File
	off     int64 // where the chunk being written starts
	pending int64
	start   time.Time
}

const pacedChunk = 1 << 20

func (w *pacedWriter) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.pending += int64(n)
	if err == nil && w.pending >= pacedChunk {
		startWriteback(w.f, w.off, w.pending)
		time.Sleep(db.BackupRest * time.Since(w.start))
		w.off, w.pending, w.start = w.off+w.pending, 0, time.Now()
	}
	return n, err
}

func addFile(tw *tar.Writer, mb member, at time.Time) error {
	f, err := os.Open(mb.path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: mb.name, Mode: 0o600, Size: fi.Size(), ModTime: at}); err != nil {
		return err
	}
	_, err = io.Copy(tw, f)
	return err
}

const restoreUsage = `usage: console restore --from FILE [--data DIR]

Puts a backup written by console backup in place as the data directory's
database, with its keys when the archive holds them and the directory has
none. The console must be stopped. It says what the data directory's
high-water mark will do: a copy older than what the directory has seen is
refused by console serve until an admin runs console audit accept-rollback,
which refuses every grant issued until then and revokes every allowance alive
in the copy. The database it replaces is kept beside it.`

func cmdRestore(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("restore", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	withUsage(fs, e, restoreUsage)
	data := fs.String("data", "", "data directory (default $COUNTERSIGN_DATA or ./countersign-data); made when missing")
	from := fs.String("from", "", "the archive console backup wrote (required)")
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if fs.NArg() > 0 || *from == "" {
		fmt.Fprintln(e.stderr, "usage: console restore --from FILE [--data DIR]")
		return 2
	}
	dir := dataDir(e, *data)
	r, err := restore(ctx, dir, *from, time.Now)
	if err != nil {
		fmt.Fprintf(e.stderr, "console restore: %v\n", err)
		return 1
	}
	fmt.Fprintf(e.stdout, "restored %s into %s: the database %s, its audit chain ending at %s, taken %s\n",
		*from, dir, r.manifest.Identity, r.manifest.Chain.mark(), r.manifest.TakenAt.Format(time.RFC3339))
	if r.replaced != "" {
		fmt.Fprintf(e.stdout, "  the database it replaces is kept in %s\n", r.replaced)
	}
	switch {
	case r.keysWritten:
		fmt.Fprintf(e.stdout, "  keys: the archive's keys/ and audit-key are in place\n")
	case r.manifest.Keys:
		fmt.Fprintf(e.stdout, "  keys: %s has keys already; they are kept, the archive's are not used\n", dir)
	default:
		fmt.Fprintf(e.stdout, "  keys: the archive holds none; %s keeps its own, or console serve makes new ones (trust their public keys: console keys jwks)\n", dir)
	}
	fmt.Fprintf(e.stdout, "  high-water mark: %s\n", r.markSays)
	return 0
}

// restored is what a restore did.
type restored struct {
	manifest    backupManifest
	replaced    string // where the replaced database was moved, or ""
	keysWritten bool
	markSays    string // what the high-water mark will do at the next start
}

// restore puts the archive at from in place in the data directory.
func restore(ctx context.Context, data, from string, now func() time.Time) (restored, error) {
	var r restored
	if err := makeDataDir(data); err != nil {
		return r, err
	}
	if err := os.Chmod(data, 0o700); err != nil {
		return r, err
	}
	if controlRunning(data) {
		return r, fmt.Errorf("a console is running on %s (its control socket answers); stop it, then restore; nothing was changed", data)
	}
	work, err := os.MkdirTemp(data, ".restore-*")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(work)
	m, err := unpack(from, work)
	if err != nil {
		return r, fmt.Errorf("%s: %w; nothing was changed", from, err)
	}
	r.manifest = m
	copied := filepath.Join(work, backupDBName())
	c, err := db.ReadCopy(ctx, copied)
	if err != nil {
		return r, err
	}
	if c.Identity != m.Identity || copyMark(c) != m.Chain.mark() {
		return r, fmt.Errorf("%s: its database is %s ending at %s, but its manifest says %s ending at %s; nothing was changed",
			from, c.Identity, copyMark(c), m.Identity, m.Chain.mark())
	}
	if want, err := os.ReadFile(identityPath(data)); err == nil && strings.TrimSpace(string(want)) != c.Identity {
		return r, fmt.Errorf("%s belongs to another database (identity %s; the copy is of %s); nothing was changed. "+
			"Restore into a new directory, or remove %s to start this one over on purpose",
			data, strings.TrimSpace(string(want)), c.Identity, identityPath(data))
	}
	// What the directory has seen of this database, before anything moves.
	seen, err := highwater.Read(markPath(data), c.Identity)
	hadMark := err == nil && seen.Seq > 0
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return r, err
	}
	if r.replaced, err = setAside(data, now); err != nil {
		return r, err
	}
	if err := os.Rename(copied, dbPath(data)); err != nil {
		return r, fmt.Errorf("put %s in place: %w", dbPath(data), err)
	}
	if err := syncDir(data); err != nil {
		return r, err
	}
	if _, err := os.Stat(identityPath(data)); errors.Is(err, fs.ErrNotExist) {
		if err := writeFileAtomic(identityPath(data), []byte(c.Identity+"\n")); err != nil {
			return r, err
		}
	}
	if m.Keys {
		if r.keysWritten, err = placeKeys(data, work, m); err != nil {
			return r, err
		}
	}
	head := copyMark(c)
	if !hadMark {
		// A directory that has seen nothing of this database takes the
		// mark the backup recorded: a copy behind it is refused.
		hw, err := highwater.Open(markPath(data), c.Identity)
		if err != nil {
			return r, err
		}
		err = hw.Reset(m.Mark.mark())
		hw.Close()
		if err != nil {
			return r, err
		}
		seen = m.Mark.mark()
	}
	d, err := db.OpenReadOnly(dbPath(data))
	if err != nil {
		return r, err
	}
	defer d.Close()
	err = highwater.Check(seen, head, func(seq int64) (string, error) { return d.AuditHashAt(ctx, seq) })
	var be *highwater.BehindError
	switch {
	case errors.As(err, &be):
		r.markSays = fmt.Sprintf("%s has seen %s, and the copy ends at %s: console serve refuses it until an admin accepts the rollback "+
			"with console audit accept-rollback --as ADMIN --data %s. That refuses every grant issued until then and revokes every "+
			"allowance alive in the copy, which has forgotten the uses and revocations made after it was taken", data, seen, head, data)
	case err != nil:
		return r, err
	case hadMark:
		r.markSays = fmt.Sprintf("the copy reaches %s, which %s has seen: console serve starts on it", seen, data)
	default:
		r.markSays = fmt.Sprintf("%s had no mark of this database; it now holds the one the backup recorded (%s), which the copy reaches, "+
			"so console serve starts on it. If the console the copy came from ran on after the backup, put its audit-mark in %s "+
			"before starting (console serve then refuses the copy until the rollback is accepted): otherwise grants redeemed there "+
			"since could redeem again while they live, and the copy's allowances have forgotten their later uses", data, seen, data)
	}
	return r, nil
}

// unpack extracts the archive at from into dir, checking every member
// against the manifest, and returns the manifest.
func unpack(from, dir string) (backupManifest, error) {
	var m backupManifest
	f, err := os.Open(from)
	if err != nil {
		return m, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	h, err := tr.Next()
	if err != nil || h.Name != backupManifestName {
		return m, errors.New("not a Countersign backup (it does not start with backup.json)")
	}
	if err := json.NewDecoder(io.LimitReader(tr, 1<<20)).Decode(&m); err != nil || m.Format != backupFormat {
		return m, fmt.Errorf("not a Countersign backup of format %s", backupFormat)
	}
	want := map[string]backupFileJSON{}
	for _, fj := range m.Files {
		want[fj.Name] = fj
	}
	seen := map[string]bool{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return m, err
		}
		fj, ok := want[h.Name]
		if !ok || (h.Name != backupDBName() && !isKeyMember(h.Name)) || seen[h.Name] || h.Typeflag != tar.TypeReg {
			return m, fmt.Errorf("holds %s, which its manifest does not list", h.Name)
		}
		seen[h.Name] = true
		path := filepath.Join(dir, filepath.FromSlash(h.Name))
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return m, err
		}
		out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return m, err
		}
		hash := sha256.New()
		n, err := io.Copy(io.MultiWriter(out, hash), tr)
		if err == nil {
			err = out.Sync()
		}
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return m, err
		}
		if n != fj.Size || hex.EncodeToString(hash.Sum(nil)) != fj.SHA256 {
			return m, fmt.Errorf("%s does not match the digest its manifest records", h.Name)
		}
	}
	for name := range want {
		if !seen[name] {
			return m, fmt.Errorf("lacks %s, which its manifest lists", name)
		}
	}
	if !seen[backupDBName()] {
		return m, fmt.Errorf("holds no %s", backupDBName())
	}
	return m, nil
}

// setAside moves the data directory's database and its WAL and shared
// memory files, when there, into a new directory beside them and returns
// it ("" when there was no database). A WAL left beside another database
// would be replayed into it.
func setAside(data string, now func() time.Time) (string, error) {
	if _, err := os.Stat(dbPath(data)); errors.Is(err, fs.ErrNotExist) {
		for _, suffix := range []string{"-wal", "-shm"} {
			os.Remove(dbPath(data) + suffix)
		}
		return "", nil
	}
	dir := filepath.Join(data, "replaced-"+now().UTC().Format("20060102T150405Z"))
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", fmt.Errorf("keep the replaced database: %w", err)
	}
	for _, suffix := range []string{"-wal", "-shm", ""} {
		from := dbPath(data) + suffix
		if _, err := os.Stat(from); err != nil {
			continue
		}
		if err := os.Rename(from, filepath.Join(dir, filepath.Base(from))); err != nil {
			return "", fmt.Errorf("keep the replaced database: %w", err)
		}
	}
	return dir, syncDir(data)
}

// placeKeys moves the archive's keys into the data directory when it has
// none, and reports whether it did.
func placeKeys(data, work string, m backupManifest) (bool, error) {
	for _, name := range []string{"audit-key", "keys"} {
		if _, err := os.Stat(filepath.Join(data, name)); err == nil {
			return false, nil
		}
	}
	for _, fj := range m.Files {
		if !isKeyMember(fj.Name) {
			continue
		}
		to := filepath.Join(data, filepath.FromSlash(fj.Name))
		if err := os.MkdirAll(filepath.Dir(to), 0o700); err != nil {
			return false, err
		}
		if err := os.Rename(filepath.Join(work, filepath.FromSlash(fj.Name)), to); err != nil {
			return false, err
		}
	}
	return true, syncDir(data)
}

// syncDir makes the names in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
