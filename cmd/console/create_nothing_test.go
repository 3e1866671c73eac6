package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/testkit"
)

// dirState lists every file and directory under dir with its mode and a
// hash of its content, so a test can tell that a command made or changed
// nothing. SQLite's own -shm and -wal files are left out: opening a
// database read-only makes them, and they hold no data of their own; so is
// the -auth file of counters that opening it makes (internal/db).
func dirState(t *testing.T, dir string) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if strings.HasSuffix(path, ".db-shm") || strings.HasSuffix(path, ".db-wal") || strings.HasSuffix(path, ".db-auth") {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		line := rel + " " + fi.Mode().String()
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			line += " " + hex.EncodeToString(sum[:8])
		}
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// TestAuditExportWithoutAnAuditKey: a JSONL export only reads. From a data
// directory without DATA/audit-key (a copy made without it) it writes the
// export with an unsigned header, says so, and makes no key; the export
// verifies on its own. A mistyped --data makes nothing; an audit key that
// cannot be read exports nothing.
func TestAuditExportWithoutAnAuditKey(t *testing.T) {
	dir := auditData(t, 5)
	before := dirState(t, dir)
	file := filepath.Join(t.TempDir(), "trail.jsonl")
	code, out, errs := auditRun(t, "audit", "export", "--data", dir, "--format", "jsonl", "--out", file)
	if code != 0 || out != "" || !strings.Contains(errs, "exported 5 entries") ||
		!strings.Contains(errs, "note: "+dir+" has no audit key ("+auditKeyPath(dir)+"), and none was made") ||
		!strings.Contains(errs, "header is not signed") || !strings.Contains(errs, "export where the console's audit key is") {
		t.Fatalf("export without an audit key = %d, stdout %q, stderr %q; want 0 and a note", code, out, errs)
	}
	if after := dirState(t, dir); after != before {
		t.Errorf("the export changed the data directory:\n%s\nwas\n%s", after, before)
	}
	code, out, errs = auditRun(t, "audit", "verify", "--file", file)
	if code != 0 || !strings.Contains(out, "ok: 5 entries verified") || !strings.Contains(out, "header is not signed (exported without the audit key") {
		t.Errorf("verify of the unsigned export = %d\n%s%s", code, out, errs)
	}
	// CSV was never signed: no note.
	if code, _, errs := auditRun(t, "audit", "export", "--data", dir, "--format", "csv"); code != 0 || strings.Contains(errs, "note:") {
		t.Errorf("csv export = %d, stderr %q", code, errs)
	}

	// With the key there, the header is signed with it, and nothing is
	// noted.
	if code, _, errs := keysRun(t, nil, "keys", "init", "--data", dir); code != 0 {
		t.Fatalf("keys init = %d: %s", code, errs)
	}
	signer, err := audit.LoadKey(auditKeyPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	code, out, errs = auditRun(t, "audit", "export", "--data", dir, "--format", "jsonl")
	if code != 0 || strings.Contains(errs, "note:") || !strings.Contains(out, `"kid":"`+signer.KID()+`"`) {
		t.Errorf("export with the audit key = %d, stderr %q, header %.300s", code, errs, out)
	}

	// A mistyped --data: refused for want of a database, saying which
	// file was expected and what to check; nothing made.
	typo := filepath.Join(t.TempDir(), "typo")
	if code, _, errs := auditRun(t, "audit", "export", "--data", typo, "--format", "jsonl"); code != 1 ||
		!strings.Contains(errs, "no database at "+dbPath(typo)+" (there is no directory "+typo+")") ||
		!strings.Contains(errs, "check that --data (or $COUNTERSIGN_DATA) names the console's data directory") {
		t.Errorf("export from a mistyped --data = %d, stderr %q", code, errs)
	}
	if _, err := os.Stat(typo); !os.IsNotExist(err) {
		t.Errorf("the export made the mistyped data directory: %v", err)
	}

	// An audit key that is there but cannot be read: refused, no file
	// written, rather than an unsigned export that hides the damage.
	broken := auditData(t, 2)
	if err := os.WriteFile(auditKeyPath(broken), []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out2 := filepath.Join(t.TempDir(), "broken.jsonl")
	code, _, errs = auditRun(t, "audit", "export", "--data", broken, "--format", "jsonl", "--out", out2)
	if code != 1 || !strings.Contains(errs, "does not hold a PEM") || !strings.Contains(errs, "nothing was exported") {
		t.Errorf("export with an unreadable audit key = %d, stderr %q", code, errs)
	}
	if names, _ := os.ReadDir(filepath.Dir(out2)); len(names) != 0 {
		t.Errorf("a refused export left %v", names)
	}
}

// TestApproveWithoutAKeyringCreatesNothing: with no server running,
// approve on a data directory that has a database but no keyring refuses,
// says what to do, and makes or writes nothing; deny signs nothing and
// works without one; once keys init made the keys, approve works.
func TestApproveWithoutAKeyringCreatesNothing(t *testing.T) {
	ctx := context.Background()
	data := t.TempDir()
	a := rollbackApp(t, data)
	testkit.SeedUsers(t, a.db.accounts, account.RoleOperator, "olivia")
	var calls []string
	var digests []string
	for _, inv := range []string{"INV-1", "INV-2"} {
		c, _, err := a.queue.Submit(ctx, rollbackAgent, []byte(`{"tool":"payments.refund","target":"invoice:`+inv+
			`","args":{"amount_minor":1299,"currency":"USD","reason_code":"duplicate"}}`))
		if err != nil {
			t.Fatal(err)
		}
		calls, digests = append(calls, c.ID), append(digests, c.Digest)
	}
	a.Close()
	if err := os.RemoveAll(keysDir(data)); err != nil {
		t.Fatal(err)
	}
	before := dirState(t, data)

	approve := []string{"approve", calls[0], "--as", "olivia", "--digest", digests[0], "--data", data, "--tools", rollbackTools}
	code, out, errs := userRun(t, "", approve...)
	if code != 1 || out != "" || !strings.Contains(errs, "console approve: no keyring in "+keysDir(data)) ||
		!strings.Contains(errs, "nothing was created or approved") || !strings.Contains(errs, "Check that --data") ||
		!strings.Contains(errs, "console keys init --data "+data) {
		t.Fatalf("approve without a keyring = %d, stdout %q, stderr %q; want 1 and what to do", code, out, errs)
	}
	if after := dirState(t, data); after != before {
		t.Errorf("the refused approval changed the data directory:\n%s\nwas\n%s", after, before)
	}

	// A denial mints no grant: it needs no keyring, and makes none.
	code, out, errs = userRun(t, "", "deny", calls[1], "--as", "olivia", "--reason", "already refunded", "--data", data)
	if code != 0 || callJSON(t, out)["status"] != "denied" {
		t.Fatalf("deny without a keyring = %d, %s %s", code, out, errs)
	}
	if _, err := os.Stat(keysDir(data)); !os.IsNotExist(err) {
		t.Errorf("deny made a keyring: %v", err)
	}

	if code, _, errs := keysRun(t, nil, "keys", "init", "--data", data); code != 0 {
		t.Fatalf("keys init = %d: %s", code, errs)
	}
	code, out, errs = userRun(t, "", approve...)
	if v := callJSON(t, out); code != 0 || v["status"] != "approved" {
		t.Errorf("approve after keys init = %d, %s %s", code, out, errs)
	}
}

// TestAuditCheckpointWithoutAnAuditKey: audit checkpoint signs only with
// the data directory's audit key. Without one (a mistyped --data, or keys
// never made) it refuses, says what to do, and makes and stores nothing:
// a key made here would sign a checkpoint nobody trusts.
func TestAuditCheckpointWithoutAnAuditKey(t *testing.T) {
	dir := auditData(t, 3)
	before := dirState(t, dir)
	code, out, errs := auditRun(t, "audit", "checkpoint", "--data", dir)
	if code != 1 || out != "" || !strings.Contains(errs, "no audit key at "+auditKeyPath(dir)+" to sign the checkpoint with; nothing was created or stored") ||
		!strings.Contains(errs, "run console keys init --data "+dir) {
		t.Fatalf("checkpoint without an audit key = %d, stdout %q, stderr %q", code, out, errs)
	}
	if after := dirState(t, dir); after != before {
		t.Errorf("the refused checkpoint changed the data directory:\n%s\nwas\n%s", after, before)
	}
	if code, out, _ := auditRun(t, "audit", "verify", "--data", dir); code != 0 || !strings.Contains(out, "checkpoints: none") {
		t.Errorf("verify after the refused checkpoint = %d\n%s, want no checkpoint stored", code, out)
	}

	typo := filepath.Join(t.TempDir(), "typo")
	if code, _, errs := auditRun(t, "audit", "checkpoint", "--data", typo); code != 1 || !strings.Contains(errs, "no database at "+dbPath(typo)) {
		t.Errorf("checkpoint with a mistyped --data = %d %s", code, errs)
	}
	if _, err := os.Stat(typo); !os.IsNotExist(err) {
		t.Errorf("checkpoint made the mistyped data directory: %v", err)
	}

	// Once keys init made the key, the checkpoint is signed with it.
	auditKeyed(t, dir)
	signer, err := audit.LoadKey(auditKeyPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	if code, out, errs := auditRun(t, "audit", "checkpoint", "--data", dir); code != 0 || !strings.Contains(out, `"kid":"`+signer.KID()+`"`) {
		t.Errorf("checkpoint after keys init = %d %q %s", code, out, errs)
	}
}
