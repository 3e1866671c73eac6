package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/db"
)

// rewriteTrail does what someone holding the database file but not the
// audit key can: change entry seq's details, recompute every later hash,
// drop the stored checkpoints and sign a new one with a key of their own.
func rewriteTrail(t *testing.T, dir string, seq int64, from, to string) {
	t.Helper()
	auditSQL(t, dir, `DROP TRIGGER IF EXISTS checkpoints_no_delete`, `DELETE FROM checkpoints`)
	d, err := db.Open(dbPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	rows, err := d.SQL().Query(`SELECT seq, time, kind, call_id, principal, channel, details FROM audit ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	var es []*audit.Entry
	for rows.Next() {
		var e audit.Entry
		var details string
		if err := rows.Scan(&e.Seq, &e.Time, &e.Kind, &e.CallID, &e.Principal, &e.Channel, &details); err != nil {
			t.Fatal(err)
		}
		if e.Seq == seq {
			details = strings.Replace(details, from, to, 1)
		}
		e.Details = audit.RawDetails(details)
		es = append(es, &e)
	}
	rows.Close()
	prevSeq, prev := int64(0), audit.GenesisHash
	for _, e := range es {
		if err := e.Seal(prevSeq, prev); err != nil {
			t.Fatal(err)
		}
		if _, err := d.SQL().Exec(`UPDATE audit SET details = ?, prev_hash = ?, hash = ? WHERE seq = ?`,
			string(e.Details.(audit.RawDetails)), e.PrevHash, e.Hash, e.Seq); err != nil {
			t.Fatal(err)
		}
		prevSeq, prev = e.Seq, e.Hash
	}
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	if _, err := d.Checkpoint(context.Background(), audit.NewSigner(priv)); err != nil {
		t.Fatal(err)
	}
}

// TestAuditVerifyChecksDataKey: a trail rewritten and re-signed with a
// fresh key verifies on its own chain, but console audit verify --data
// checks every checkpoint against DATA/audit-key and names the forgery.
func TestAuditVerifyChecksDataKey(t *testing.T) {
	dir := auditData(t, 5)
	auditKeyed(t, dir)
	if code, _, errOut := auditRun(t, "audit", "checkpoint", "--data", dir); code != 0 {
		t.Fatal(errOut)
	}
	code, out, _ := auditRun(t, "audit", "verify", "--data", dir)
	if code != 0 || !strings.Contains(out, "signed by the data directory's key") {
		t.Fatalf("verify before the rewrite = %d\n%s", code, out)
	}
	rewriteTrail(t, dir, 3, "agent:a2", "agent:zz")
	code, out, _ = auditRun(t, "audit", "verify", "--data", dir)
	if code != 1 || !strings.Contains(out, "not a trusted audit key") {
		t.Errorf("verify of a trail re-signed with a fresh key = %d\n%s, want damage naming the key", code, out)
	}
}

// TestAuditExportHeaderSigned: an export's header (range, head, count) is
// signed with the audit key, so dropping the tail and the checkpoint lines
// and editing the header to match is detected; a header re-signed with
// another key is refused when the data directory's key is named.
func TestAuditExportHeaderSigned(t *testing.T) {
	dir := auditData(t, 6)
	auditKeyed(t, dir)
	if code, _, errOut := auditRun(t, "audit", "checkpoint", "--data", dir); code != 0 {
		t.Fatal(errOut)
	}
	auditAppend(t, dir, 3)
	file := filepath.Join(t.TempDir(), "trail.jsonl")
	if code, _, errOut := auditRun(t, "audit", "export", "--data", dir, "--format", "jsonl", "--out", file); code != 0 {
		t.Fatalf("export = %d %s", code, errOut)
	}
	code, out, _ := auditRun(t, "audit", "verify", "--file", file, "--data", dir)
	if code != 0 || !strings.Contains(out, "header: range, head and count signed") || !strings.Contains(out, "and the export header is signed by the data directory's key") {
		t.Fatalf("verify of the export = %d\n%s", code, out)
	}
	data, _ := os.ReadFile(file)
	lines := strings.SplitAfter(string(data), "\n")
	rec, err := audit.ParseLine([]byte(strings.TrimSuffix(lines[0], "\n")))
	if err != nil || rec.Header == nil {
		t.Fatalf("header line: %v", err)
	}
	// Keep entries 1 to 4 only, drop the checkpoint line (it covers 6), and
	// make the header say so.
	entries := lines[2:6]
	last, err := audit.ParseLine([]byte(strings.TrimSuffix(entries[3], "\n")))
	if err != nil || last.Entry == nil || last.Entry.Seq != 4 {
		t.Fatalf("entry line 4: %v", err)
	}
	h := *rec.Header
	h.ToSeq, h.Head, h.Count = 4, last.Entry.Hash, 4
	write := func(h *audit.ExportHeader) string {
		hl, err := audit.AppendHeaderLine(nil, h)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Join(t.TempDir(), "cut.jsonl")
		if err := os.WriteFile(name, []byte(string(hl)+strings.Join(entries, "")), 0o600); err != nil {
			t.Fatal(err)
		}
		return name
	}
	code, out, _ = auditRun(t, "audit", "verify", "--file", write(&h))
	if code != 1 || !strings.Contains(out, "signature does not verify") {
		t.Errorf("a cut export with its header edited = %d\n%s, want damage: the signature", code, out)
	}
	// Re-signed with a fresh key it verifies on its own, but not against the
	// data directory's key.
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	if err := audit.NewSigner(priv).SignHeader(&h); err != nil {
		t.Fatal(err)
	}
	resigned := write(&h)
	if code, out, _ = auditRun(t, "audit", "verify", "--file", resigned, "--data", dir); code != 1 || !strings.Contains(out, "not a trusted audit key") {
		t.Errorf("a cut export re-signed with another key, checked against the data key = %d\n%s", code, out)
	}
	// Re-signing the whole header with another key while keeping the real
	// checkpoint lines: the checkpoints are not signed by the header's key.
	h3 := *rec.Header
	if err := audit.NewSigner(priv).SignHeader(&h3); err != nil {
		t.Fatal(err)
	}
	hl3, _ := audit.AppendHeaderLine(nil, &h3)
	mixed := filepath.Join(t.TempDir(), "mixed.jsonl")
	os.WriteFile(mixed, []byte(string(hl3)+strings.Join(lines[1:], "")), 0o600)
	if code, out, _ = auditRun(t, "audit", "verify", "--file", mixed); code != 1 || !strings.Contains(out, "not a trusted audit key") {
		t.Errorf("a header re-signed with another key beside the real checkpoints = %d\n%s", code, out)
	}
	// The count is signed too: a header that counts fewer entries than follow.
	h2 := *rec.Header
	h2.Count--
	if err := audit.NewSigner(priv).SignHeader(&h2); err != nil {
		t.Fatal(err)
	}
	hl, _ := audit.AppendHeaderLine(nil, &h2)
	miscounted := filepath.Join(t.TempDir(), "count.jsonl")
	os.WriteFile(miscounted, []byte(string(hl)+strings.Join(lines[2:], "")), 0o600)
	if code, out, _ = auditRun(t, "audit", "verify", "--file", miscounted); code != 1 || !strings.Contains(out, "counts") {
		t.Errorf("a header whose count differs = %d\n%s", code, out)
	}
}
