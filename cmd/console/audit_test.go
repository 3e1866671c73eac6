package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/db"
)

func auditRun(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	getenv := func(k string) string {
		if k == "USER" {
			return "tester"
		}
		return ""
	}
	code = run(context.Background(), args, getenv, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

// auditData makes a data directory whose trail has n token entries.
func auditData(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	auditAppend(t, dir, n)
	return dir
}

// auditKeyed makes the keys of a data directory (console keys init), as
// its first console serve would: audit checkpoint signs only with a key
// that is there.
func auditKeyed(t *testing.T, dir string) {
	t.Helper()
	if code, out, errs := auditRun(t, "keys", "init", "--data", dir); code != 0 {
		t.Fatalf("keys init = %d %s %s", code, out, errs)
	}
}

func auditAppend(t *testing.T, dir string, n int) {
	t.Helper()
	d, err := db.Open(dbPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for i := range n {
		if _, _, err := account.NewService(d.Accounts(), nil).CreateToken(context.Background(), fmt.Sprintf("agent:a%d", i), "payments-host",
			"=cmd|' /C calc'!A0", "cli:tester", audit.ChannelCLI); err != nil {
			t.Fatal(err)
		}
	}
}

// auditSQL runs statements on the database with the append-only triggers
// dropped, as someone editing the file directly could.
func auditSQL(t *testing.T, dir string, stmts ...string) {
	t.Helper()
	d, err := db.Open(dbPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, s := range append([]string{`DROP TRIGGER IF EXISTS audit_no_update`, `DROP TRIGGER IF EXISTS audit_no_delete`}, stmts...) {
		if _, err := d.SQL().Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

var verifiedRE = regexp.MustCompile(`ok: (\d+) entries verified \((\d+) to (\d+)\), head ([0-9a-f]{64})`)

func TestAuditVerifyAndCheckpoint(t *testing.T) {
	dir := auditData(t, 5)
	code, out, errOut := auditRun(t, "audit", "verify", "--data", dir)
	if code != 0 || !verifiedRE.MatchString(out) || !strings.Contains(out, "checkpoints: none") {
		t.Fatalf("verify = %d\n%s%s", code, out, errOut)
	}

	auditKeyed(t, dir)
	code, out, errOut = auditRun(t, "audit", "checkpoint", "--data", dir)
	if code != 0 {
		t.Fatalf("checkpoint = %d %s", code, errOut)
	}
	var cp audit.Checkpoint
	if err := json.Unmarshal([]byte(out), &cp); err != nil || cp.Seq != 5 || cp.Verify() != nil {
		t.Fatalf("checkpoint output %q: %v", out, err)
	}
	fi, err := os.Stat(auditKeyPath(dir))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("audit key: %v, mode %v; want 0600", err, fi)
	}
	kept := filepath.Join(t.TempDir(), "kept.json")
	if err := os.WriteFile(kept, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, _ = auditRun(t, "audit", "verify", "--data", dir, "--checkpoint", kept)
	if code != 0 || !strings.Contains(out, "checkpoints: 1 verified, the newest at entry 5, signed by key "+cp.KID) ||
		strings.Contains(out, "no outside checkpoint") {
		t.Fatalf("verify with the kept checkpoint = %d\n%s", code, out)
	}

	// Without the audit key nothing is trusted: the checkpoint's signature
	// is good under the key it names, which is not called verified.
	keyFile, err := os.ReadFile(auditKeyPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(auditKeyPath(dir)); err != nil {
		t.Fatal(err)
	}
	code, out, _ = auditRun(t, "audit", "verify", "--data", dir)
	if code != 0 || strings.Contains(out, "1 verified") ||
		!strings.Contains(out, "checkpoints: 1 with good signatures, the newest at entry 5, by key "+cp.KID+", which nothing given here trusts") {
		t.Fatalf("verify without the audit key = %d\n%s", code, out)
	}
	if err := os.WriteFile(auditKeyPath(dir), keyFile, 0o600); err != nil {
		t.Fatal(err)
	}

	// The database is later replaced by a copy that lacks the newest
	// entries: on its own it verifies, against the kept checkpoint it
	// does not.
	auditSQL(t, dir, `DELETE FROM audit WHERE seq >= 4`, `DROP TRIGGER checkpoints_no_delete`, `DELETE FROM checkpoints`)
	if code, out, _ := auditRun(t, "audit", "verify", "--data", dir); code != 0 {
		t.Fatalf("the shortened trail on its own = %d\n%s", code, out)
	}
	code, out, _ = auditRun(t, "audit", "verify", "--data", dir, "--checkpoint", kept)
	if code != 1 || !strings.Contains(out, "DAMAGED: first bad entry 4:") {
		t.Fatalf("verify against the kept checkpoint = %d\n%s, want damage at entry 4", code, out)
	}
}

func TestAuditVerifyNamesTamperedEntry(t *testing.T) {
	tests := []struct {
		name string
		sql  []string
		want string
	}{
		{"details", []string{`UPDATE audit SET details = replace(details, 'agent:a2', 'agent:a9') WHERE seq = 3`}, "first bad entry 3:"},
		{"time", []string{`UPDATE audit SET time = replace(time, '.', ',') WHERE seq = 2`}, "first bad entry 2:"},
		{"deleted", []string{`DELETE FROM audit WHERE seq = 4`}, "first bad entry 4:"},
		{"reordered", []string{`UPDATE audit SET seq = -2 WHERE seq = 2`, `UPDATE audit SET seq = 2 WHERE seq = 3`,
			`UPDATE audit SET seq = 3 WHERE seq = -2`}, "first bad entry 2:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := auditData(t, 5)
			auditSQL(t, dir, tt.sql...)
			code, out, _ := auditRun(t, "audit", "verify", "--data", dir)
			if code != 1 || !strings.Contains(out, "DAMAGED: "+tt.want) {
				t.Errorf("verify = %d\n%s, want exit 1 and %q", code, out, tt.want)
			}
		})
	}
}

func TestAuditExportRoundTrip(t *testing.T) {
	dir := auditData(t, 6)
	auditKeyed(t, dir)
	if code, _, errOut := auditRun(t, "audit", "checkpoint", "--data", dir); code != 0 {
		t.Fatal(errOut)
	}
	auditAppend(t, dir, 3)
	file := filepath.Join(t.TempDir(), "trail.jsonl")
	code, _, errOut := auditRun(t, "audit", "export", "--data", dir, "--format", "jsonl", "--out", file)
	if code != 0 || !strings.Contains(errOut, "exported 9 entries (1 to 9") || !strings.Contains(errOut, "and 1 checkpoints") {
		t.Fatalf("export = %d %s", code, errOut)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("export file: %v, want private", err)
	}
	_, dbOut, _ := auditRun(t, "audit", "verify", "--data", dir)
	code, fileOut, _ := auditRun(t, "audit", "verify", "--file", file)
	if code != 0 {
		t.Fatalf("verify --file = %d\n%s", code, fileOut)
	}
	d, f := verifiedRE.FindStringSubmatch(dbOut), verifiedRE.FindStringSubmatch(fileOut)
	if d == nil || f == nil || d[1] != f[1] || d[4] != f[4] || d[1] != "9" {
		t.Errorf("database says %q, the export says %q", d, f)
	}
	// Alone, the export's checkpoints are signed by the key of its header,
	// which nothing outside it trusts; against the data directory they
	// are verified.
	if !strings.Contains(fileOut, "checkpoints: 1 with good signatures, the newest at entry 6") || strings.Contains(fileOut, "1 verified") {
		t.Errorf("verify --file:\n%s", fileOut)
	}
	if code, out, _ := auditRun(t, "audit", "verify", "--file", file, "--data", dir); code != 0 ||
		!strings.Contains(out, "checkpoints: 1 verified, the newest at entry 6") {
		t.Errorf("verify --file --data = %d\n%s", code, out)
	}

	// One changed byte in the file is damage, named by entry.
	data, _ := os.ReadFile(file)
	lines := strings.SplitAfter(string(data), "\n")
	// Line 0 is the header, line 1 the checkpoint, line 8 entry 7 (the
	// token of the second batch's agent:a0).
	edited := strings.Replace(lines[8], "agent:a0", "agent:a7", 1)
	if edited == lines[8] {
		t.Fatalf("line 8 = %s", lines[8])
	}
	lines[8] = edited
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	os.WriteFile(bad, []byte(strings.Join(lines, "")), 0o600)
	code, out, _ := auditRun(t, "audit", "verify", "--file", bad)
	if code != 1 || !strings.Contains(out, "DAMAGED: first bad entry 7:") {
		t.Errorf("verify of an edited export = %d\n%s", code, out)
	}

	// A range export, by time.
	var e7 audit.Entry
	if err := json.Unmarshal([]byte(lines[8]), &e7); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = auditRun(t, "audit", "export", "--data", dir, "--format", "jsonl", "--since", e7.Time)
	if code != 0 {
		t.Fatalf("range export = %d %s", code, errOut)
	}
	rng := filepath.Join(t.TempDir(), "range.jsonl")
	os.WriteFile(rng, []byte(out), 0o600)
	code, out, _ = auditRun(t, "audit", "verify", "--file", rng)
	if code != 0 || !strings.Contains(out, "ok: 3 entries verified (7 to 9)") || !strings.Contains(out, "range: verified from entry 7") {
		t.Errorf("verify of a range export = %d\n%s", code, out)
	}

	// CSV: one row per entry, details as their canonical JSON text.
	code, out, _ = auditRun(t, "audit", "export", "--data", dir, "--format", "csv")
	records, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if code != 0 || err != nil || len(records) != 10 {
		t.Fatalf("csv export = %d, %d records, %v", code, len(records), err)
	}
	if !strings.Contains(records[1][6], `"note":"=cmd|' /C calc'!A0"`) {
		t.Errorf("details cell = %q", records[1][6])
	}
}

func TestAuditUsage(t *testing.T) {
	dir := auditData(t, 1)
	empty := t.TempDir()
	if _, err := db.Open(dbPath(empty)); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"audit"}, 2, "usage"},
		{[]string{"audit", "shred"}, 2, "unknown subcommand"},
		{[]string{"audit", "verify", "--data", dir, "--file", "x.jsonl"}, 1, "no audit key"},
		{[]string{"audit", "verify", "--data", dir, "extra"}, 2, "no other arguments"},
		{[]string{"audit", "verify", "--bogus"}, 2, "flag provided but not defined"},
		{[]string{"audit", "export", "--data", dir}, 2, "--format jsonl|csv"},
		{[]string{"audit", "export", "--data", dir, "--format", "xml"}, 2, "--format jsonl|csv"},
		{[]string{"audit", "export", "--data", dir, "--format", "csv", "--since", "last week"}, 2, "neither an RFC 3339 time"},
		// A mistyped --data names the file it expected and the flag to check.
		{[]string{"audit", "verify", "--data", filepath.Join(empty, "nothing")}, 1, "no database at " +
			filepath.Join(empty, "nothing", "countersign.db") + " (there is no directory " + filepath.Join(empty, "nothing") +
			"): check that --data (or $COUNTERSIGN_DATA) names the console's data directory"},
		{[]string{"audit", "verify", "--file", filepath.Join(empty, "missing.jsonl")}, 1, "no such file"},
		{[]string{"audit", "verify", "--data", dir, "--checkpoint", filepath.Join(empty, "missing.json")}, 1, "no such file"},
		{[]string{"audit", "checkpoint", "--data", empty}, 1, "no audit key at " + auditKeyPath(empty) + " to sign the checkpoint with; nothing was created or stored"},
		{[]string{"audit", "checkpoint", "--data", filepath.Join(empty, "none")}, 1, "no database"},
	}
	for _, tt := range tests {
		code, out, errOut := auditRun(t, tt.args...)
		if code != tt.code || !strings.Contains(out+errOut, tt.msg) {
			t.Errorf("%v = %d\n%s%s\nwant %d and %q", tt.args, code, out, errOut, tt.code, tt.msg)
		}
	}
	auditKeyed(t, empty)
	if code, _, errs := auditRun(t, "audit", "checkpoint", "--data", empty); code != 1 || !strings.Contains(errs, "the audit trail is empty; nothing to sign") {
		t.Errorf("checkpoint of an empty trail = %d %s", code, errs)
	}
	if code, out, _ := auditRun(t, "audit", "verify", "--data", empty); code != 0 || !strings.Contains(out, "empty") {
		t.Errorf("verify of an empty trail = %d %s", code, out)
	}
}
