package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/db"
	"github.com/countersign/countersign/internal/evidence"
	"github.com/countersign/countersign/internal/grant"
	"github.com/countersign/countersign/internal/pgtest"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/testkit"
	"github.com/countersign/countersign/internal/tools"
)

// packRun is a data directory after a real run through the queue: calls
// approved by command, by an allowance and by two people, redeemed with an
// outcome, one whose lease ended unresolved, denied, cancelled, expired,
// a refused redemption, a freeze and its lifting, tokens and users, and a
// checkpoint in the middle. It returns the directory and the audit key.
func packRun(t *testing.T) (data string, key *audit.Signer) {
	t.Helper()
	data, _, covered := allowanceData(t)
	key, err := audit.LoadOrCreateKey(auditKeyPath(data))
	if err != nil {
		t.Fatal(err)
	}
	d, err := db.Open(dbPath(data))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	keys, err := grant.OpenKeyring(keysDir(data), Issuer, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.Load(filepath.Join(data, "tools.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	clock := testkit.NewClock(time.Now())
	q := queue.NewService(queue.Config{Store: d.Store(), Tools: reg, Signer: keys, Now: clock.Now, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx := context.Background()
	payer := queue.Principal{Actor: "agent:billing", Audience: "payments-host", TokenID: "tok1"}
	submit := func(target string, amount int) *queue.Call {
		t.Helper()
		c, _, err := q.Submit(ctx, payer, []byte(`{"tool":"payments.refund","target":"`+target+`","args":{"amount_minor":`+strconv.Itoa(amount)+`,"currency":"EUR"}}`))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	redeem := func(c *queue.Call) *queue.Redemption {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"grant": c.Grant, "call": map[string]any{"tool": c.Tool, "target": c.Target, "args": c.Args}})
		r, err := q.Redeem(ctx, payer, body)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// The call the allowance approved runs and succeeds.
	if r := redeem(covered); !r.Accepted {
		t.Fatalf("redeem covered = %+v", r)
	}
	must(q.ReportOutcome(ctx, payer, covered.ID, "succeeded", "refunded"))
	if _, err := d.Checkpoint(ctx, key); err != nil {
		t.Fatal(err)
	}
	// Approved by command (outside the allowance's amount), run twice.
	big := submit("invoice:INV-7", 90000)
	approved, err := q.Approve(ctx, "bob", audit.ChannelCLI, big.ID, big.Digest)
	if err != nil || approved.Status != queue.StatusApproved {
		t.Fatalf("approve = %v, %v", approved, err)
	}
	if r := redeem(approved); !r.Accepted {
		t.Fatalf("redeem = %+v", r)
	}
	if r := redeem(approved); r.Accepted {
		t.Fatal("a second redemption was accepted")
	}
	must(q.ReportOutcome(ctx, payer, big.ID, "unknown", "the connection dropped"))
	must(q.Deny(ctx, "alice", audit.ChannelWeb, submit("invoice:INV-8", 80000).ID, "not this one"))
	must(q.Cancel(ctx, payer, submit("invoice:INV-9", 70000).ID))
	must(q.Freeze(ctx, "alice", audit.ChannelWeb, "payments.refund", "", "incident"))
	testkit.SeedUsers(t, d.Accounts(), account.RoleAdmin, "root")
	must(q.Unfreeze(ctx, "root", audit.ChannelCLI, "payments.refund", ""))
	// Refused, revoked, expired undecided, and run with no outcome until
	// the lease ended and a person resolved it.
	if _, _, err := q.Submit(ctx, payer, []byte(`{"tool":"payments.refund","target":"invoice:INV-1","args":{"amount_minor":0,"currency":"EUR"}}`)); err == nil {
		t.Fatal("an invalid proposal was accepted")
	}
	rv := submit("invoice:INV-10", 60000)
	must(q.Approve(ctx, "bob", audit.ChannelCLI, rv.ID, rv.Digest))
	must(q.RevokeGrant(ctx, "alice", audit.ChannelWeb, rv.ID, "wrong amount"))
	submit("invoice:INV-11", 50000)
	lost := submit("invoice:INV-12", 40000)
	lost, err = q.Approve(ctx, "bob", audit.ChannelCLI, lost.ID, lost.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if r := redeem(lost); !r.Accepted {
		t.Fatalf("redeem = %+v", r)
	}
	clock.Advance(2 * time.Hour)
	if n, err := q.ExpireDue(ctx); err != nil || n != 1 {
		t.Fatalf("ExpireDue = %d, %v; want 1", n, err)
	}
	if n, err := q.ExpireLeases(ctx); err != nil || n != 1 {
		t.Fatalf("ExpireLeases = %d, %v; want 1", n, err)
	}
	must(q.Resolve(ctx, "alice", audit.ChannelWeb, lost.ID, "executed", "the bank shows it", "https://bank.example/statement/12"))
	// A passkey registered and an approval signed with it: recorded WebAuthn
	// evidence, appended as the console writes them.
	ev, err := os.ReadFile(filepath.Join("..", "..", "internal", "passkey", "testdata", "evidence.json"))
	if err != nil {
		t.Fatal(err)
	}
	var evd map[string]any
	if err := json.Unmarshal(ev, &evd); err != nil {
		t.Fatal(err)
	}
	evv, err := canonical.Parse(ev)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.AppendAudit(ctx, &audit.Entry{Time: audit.FormatTime(clock.Now()), Kind: audit.KindPasskeyAdded, Principal: "alice", Channel: audit.ChannelWeb,
		Details: map[string]any{"user": "alice", "credential_id": evd["credential_id"], "name": evd["credential_name"],
			"public_key": evd["public_key"], "sign_count": int64(0)}}); err != nil {
		t.Fatal(err)
	}
	if err := d.AppendAudit(ctx, &audit.Entry{Time: audit.FormatTime(clock.Now()), Kind: audit.KindApproved, CallID: evd["call_id"].(string), Principal: "alice", Channel: audit.ChannelWeb,
		Details: map[string]any{"digest": evd["digest"], "received": int64(1), "required": int64(1), "method": "passkey", "human": "true",
			"passkey": map[string]any{"credential_id": evd["credential_id"], "name": evd["credential_name"]}, "evidence": evv}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := account.NewService(d.Accounts(), nil).CreateToken(ctx, "agent:other", "payments-host", "", "cli:root", audit.ChannelCLI); err != nil {
		t.Fatal(err)
	}
	return data, key
}

// makePack writes a pack of the whole run and returns its path.
func makePack(t *testing.T, data string, extra ...string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "pack.tar")
	args := append([]string{"audit", "pack", "--data", data, "--since", "2000-01-01", "--until", "2100-01-01", "--out", out}, extra...)
	if code, stdout, stderr := auditRun(t, args...); code != 0 {
		t.Fatalf("audit pack = %d\n%s\n%s", code, stdout, stderr)
	}
	return out
}

func fingerprintOf(key *audit.Signer) string { return evidence.Fingerprint(key.PublicKey()) }

// TestAuditPackVerifies: a pack of a real run verifies with the audit key
// given from outside, holds what a reader needs, and is refused when no
// key, or another key, is given.
func TestAuditPackVerifies(t *testing.T) {
	data, key := packRun(t)
	pack := makePack(t, data)
	code, out, errs := auditRun(t, "audit", "verify", pack, "--audit-key-fingerprint", fingerprintOf(key))
	if code != 0 {
		t.Fatalf("verify = %d\n%s\n%s", code, out, errs)
	}
	for _, want := range []string{"ok: evidence pack", "redemptions: 3, each of a digest that was approved", "between 2 signed checkpoints", "passkeys: 1 approval signatures re-verified"} {
		if !strings.Contains(out, want) {
			t.Errorf("verify output lacks %q:\n%s", want, out)
		}
	}
	files := readPack(t, pack)
	readme := string(files[evidence.FileReadme])
	for _, want := range []string{"relate to the EU AI Act", "does not by itself show compliance", "your own copy of Countersign",
		"| Approvals given by automation: an allowance a person gave earlier | 1 |",
		"| Approvals given without a record of what was shown (a command or the operator API) | 4 |",
		"| Approvals given by a person who was shown the call | 1 |", "| Calls that expired undecided | 1 |", "| Approvals revoked before use | 1 |",
		"| Calls denied | 1 |", "| Freezes (stops) put in place | 1 |", "| Calls whose outcome is still unresolved | 1 |"} {
		if !strings.Contains(readme, want) {
			t.Errorf("README lacks %q:\n%s", want, readme)
		}
	}
	if strings.Contains(strings.ToLower(readme), "is compliant") {
		t.Error("the README claims compliance")
	}
	for _, name := range []string{evidence.FileChain, evidence.FileCheckpoints, evidence.FileAuditKey, evidence.FileGrantKeys,
		evidence.FileLineage, evidence.FileSummary, "verify/verify_evidence_pack.py", "verify/verify_passkey_evidence.py"} {
		if len(files[name]) == 0 {
			t.Errorf("the pack has no %s", name)
		}
	}

	other, _ := audit.LoadOrCreateKey(filepath.Join(t.TempDir(), "k"))
	for _, args := range [][]string{
		{"audit", "verify", pack},
		{"audit", "verify", pack, "--audit-key-fingerprint", fingerprintOf(other)},
	} {
		code, out, _ := auditRun(t, args...)
		if code != 1 || !strings.Contains(out, "signed by a key nothing you gave trusts") {
			t.Errorf("%v = %d %q, want 1 and the key refused", args, code, out)
		}
	}
	if code, out, _ := auditRun(t, "audit", "verify", pack, "--data", data); code != 0 {
		t.Errorf("verify --data = %d\n%s", code, out)
	}
}

// readPack returns a pack's files by name, in order.
func readPack(t *testing.T, name string) map[string][]byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name], _ = io.ReadAll(tr)
	}
}

// writePackFiles writes files as a tar archive.
func writePackFiles(t *testing.T, files map[string][]byte) string {
	t.Helper()
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(files[n])), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write(files[n])
	}
	tw.Close()
	out := filepath.Join(t.TempDir(), "tampered.tar")
	if err := os.WriteFile(out, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return out
}

// reseal recomputes the manifest's sums and signs it with key, as only
// the holder of the audit key could.
func reseal(t *testing.T, files map[string][]byte, key *audit.Signer) {
	t.Helper()
	var m evidence.Manifest
	if err := json.Unmarshal(files[evidence.FileManifest], &m); err != nil {
		t.Fatal(err)
	}
	m.Files = nil
	hr, err := audit.ParseLine(bytes.SplitN(files[evidence.FileChain], []byte("\n"), 2)[0])
	if err != nil {
		t.Fatal(err)
	}
	h := hr.Header
	m.Chain = evidence.ChainRange{FromSeq: h.FromSeq, ToSeq: h.ToSeq, Count: h.Count, Head: h.Head}
	for name, b := range files {
		if name == evidence.FileManifest || name == evidence.FileSignature {
			continue
		}
		sum := sha256.Sum256(b)
		m.Files = append(m.Files, evidence.FileSum{Name: name, SHA256: hex.EncodeToString(sum[:]), Size: int64(len(b))})
	}
	sort.Slice(m.Files, func(i, j int) bool { return m.Files[i].Name < m.Files[j].Name })
	mb, _ := json.Marshal(m)
	files[evidence.FileManifest] = append(mb, '\n')
	sb, _ := json.Marshal(evidence.Sign(key, files[evidence.FileManifest]))
	files[evidence.FileSignature] = sb
}

// chainLines splits the chain into its header, checkpoint and entry lines.
func chainLines(t *testing.T, chain []byte) (header []byte, cps, entries [][]byte) {
	t.Helper()
	for _, line := range bytes.Split(bytes.TrimSuffix(chain, []byte("\n")), []byte("\n")) {
		switch {
		case bytes.HasPrefix(line, []byte(`{"export"`)):
			header = line
		case bytes.HasPrefix(line, []byte(`{"checkpoint"`)):
			cps = append(cps, line)
		default:
			entries = append(entries, line)
		}
	}
	return header, cps, entries
}

func joinLines(parts ...[][]byte) []byte {
	var b bytes.Buffer
	for _, p := range parts {
		for _, l := range p {
			b.Write(l)
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

// rechain rewrites the chain as someone holding key could: edit changes
// an entry; every later hash, every checkpoint and the header are made
// again and signed with key.
func rechain(t *testing.T, chain []byte, key *audit.Signer, edit func(e *audit.Entry, details map[string]any) bool) []byte {
	t.Helper()
	hl, cpl, el := chainLines(t, chain)
	hr, err := audit.ParseLine(hl)
	if err != nil {
		t.Fatal(err)
	}
	h := hr.Header
	var lines [][]byte
	prev := h.PrevHash
	hashAt := map[int64]string{}
	for _, l := range el {
		r, err := audit.ParseLine(l)
		if err != nil {
			t.Fatal(err)
		}
		e := r.Entry
		raw := []byte(e.Details.(audit.RawDetails))
		var d map[string]any
		json.Unmarshal(raw, &d)
		if edit(e, d) {
			v, _ := json.Marshal(d)
			raw = v
		}
		parsed, err := audit.ParseDetails(raw)
		if err != nil {
			t.Fatal(err)
		}
		e.Details, e.PrevHash = parsed, prev
		if e.Hash, err = e.ComputeHash(); err != nil {
			t.Fatal(err)
		}
		canon, err := canonical.Encode(parsed)
		if err != nil {
			t.Fatal(err)
		}
		line, err := audit.AppendEntryLine(nil, e, canon)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, bytes.TrimSuffix(line, []byte("\n")))
		prev, hashAt[e.Seq] = e.Hash, e.Hash
	}
	var cps [][]byte
	for _, l := range cpl {
		r, _ := audit.ParseLine(l)
		c, err := key.Sign(r.Checkpoint.Seq, hashAt[r.Checkpoint.Seq], time.Now())
		if err != nil {
			t.Fatal(err)
		}
		line, _ := audit.AppendCheckpointLine(nil, c)
		cps = append(cps, bytes.TrimSuffix(line, []byte("\n")))
	}
	h.Head = prev
	if len(el) > 0 {
		first, _ := audit.ParseLine(el[0])
		h.FromSeq, h.Count = first.Entry.Seq, int64(len(el))
		h.ToSeq = h.FromSeq + h.Count - 1
	}
	if err := key.SignHeader(h); err != nil {
		t.Fatal(err)
	}
	hb, _ := audit.AppendHeaderLine(nil, h)
	return joinLines([][]byte{bytes.TrimSuffix(hb, []byte("\n"))}, cps, lines)
}

// setChain puts a rewritten chain in the pack with its checkpoints file.
func setChain(t *testing.T, files map[string][]byte, chain []byte) {
	t.Helper()
	_, cps, _ := chainLines(t, chain)
	files[evidence.FileChain], files[evidence.FileCheckpoints] = chain, joinLines(cps)
}

// tampering is one way of altering a pack, and what a verifier must say
// of it.
type tampering struct {
	name string
	edit func(files map[string][]byte)
	want string
}

// tamperings are the ways a pack can be altered; each must be found.
func tamperings(t *testing.T, key *audit.Signer) []tampering {
	fresh, err := audit.LoadOrCreateKey(filepath.Join(t.TempDir(), "fresh"))
	if err != nil {
		t.Fatal(err)
	}
	return []tampering{
		{"an entry edited, the manifest resealed", func(f map[string][]byte) {
			f[evidence.FileChain] = bytes.Replace(f[evidence.FileChain], []byte(`"refunded"`), []byte(`"refundeD"`), 1)
			reseal(t, f, key)
		}, "hash does not match"},
		{"an entry removed, the manifest resealed", func(f map[string][]byte) {
			h, cps, es := chainLines(t, f[evidence.FileChain])
			f[evidence.FileChain] = joinLines([][]byte{h}, cps, append(es[:3:3], es[4:]...))
			reseal(t, f, key)
		}, "expected entry 4, found 5"},
		{"two entries reordered, the manifest resealed", func(f map[string][]byte) {
			h, cps, es := chainLines(t, f[evidence.FileChain])
			es[4], es[5] = es[5], es[4]
			f[evidence.FileChain] = joinLines([][]byte{h}, cps, es)
			reseal(t, f, key)
		}, "expected entry 5, found 6"},
		{"the tail cut with its checkpoint, the manifest resealed", func(f map[string][]byte) {
			h, cps, es := chainLines(t, f[evidence.FileChain])
			f[evidence.FileChain] = joinLines([][]byte{h}, cps[:len(cps)-1], es[:len(es)-2])
			reseal(t, f, key)
		}, "lines were removed from the end"},
		{"the tail cut and everything signed again", func(f map[string][]byte) {
			h, cps, es := chainLines(t, f[evidence.FileChain])
			cut := rechain(t, joinLines([][]byte{h}, cps[:len(cps)-1], es[:len(es)-1]), key, func(*audit.Entry, map[string]any) bool { return false })
			setChain(t, f, cut)
			reseal(t, f, key)
		}, "does not end at a signed checkpoint"},
		{"the manifest swapped for another pack's", func(f map[string][]byte) {
			var m evidence.Manifest
			json.Unmarshal(f[evidence.FileManifest], &m)
			m.Files = m.Files[1:]
			b, _ := json.Marshal(m)
			f[evidence.FileManifest] = append(b, '\n')
		}, "signature does not verify"},
		{"the key swapped: everything signed again with a fresh key", func(f map[string][]byte) {
			setChain(t, f, rechain(t, f[evidence.FileChain], fresh, func(*audit.Entry, map[string]any) bool { return false }))
			ak, _ := json.Marshal(evidence.AuditKey{KID: fresh.KID(), PublicKey: fresh.PublicKey(), Fingerprint: evidence.Fingerprint(fresh.PublicKey())})
			f[evidence.FileAuditKey] = append(ak, '\n')
			reseal(t, f, fresh)
		}, "signed by a key nothing you gave trusts"},
		{"the verifier in the pack edited", func(f map[string][]byte) {
			f["verify/verify_evidence_pack.py"] = append(f["verify/verify_evidence_pack.py"], []byte("\nsys.exit(0)\n")...)
		}, "verify/verify_evidence_pack.py"},
		{"a redeemed digest rewritten and the chain signed again with the audit key", func(f map[string][]byte) {
			setChain(t, f, rechain(t, f[evidence.FileChain], key, func(e *audit.Entry, d map[string]any) bool {
				if e.Kind != audit.KindRedeemed {
					return false
				}
				d["digest"] = strings.Repeat("ab", 32)
				return true
			}))
			reseal(t, f, key)
		}, "is not a digest any approval of the call approved"},
		{"a passkey approval's evidence edited and the chain signed again with the audit key", func(f map[string][]byte) {
			setChain(t, f, rechain(t, f[evidence.FileChain], key, func(e *audit.Entry, d map[string]any) bool {
				if e.Kind != audit.KindApproved || d["method"] != "passkey" {
					return false
				}
				d["evidence"].(map[string]any)["origin"] = "http://localhost:40152"
				return true
			}))
			reseal(t, f, key)
		}, "the passkey signature of this approval does not verify"},
		{"a checkpoint edited, the manifest resealed", func(f map[string][]byte) {
			h, cps, es := chainLines(t, f[evidence.FileChain])
			cps[0] = bytes.Replace(cps[0], []byte(`"seq":`), []byte(`"seq":1`), 1)
			f[evidence.FileChain] = joinLines([][]byte{h}, cps, es)
			reseal(t, f, key)
		}, "checkpoint signature does not verify"},
		{"the lineage edited, the manifest resealed", func(f map[string][]byte) {
			var l map[string]any
			lines := bytes.Split(f[evidence.FileLineage], []byte("\n"))
			json.Unmarshal(lines[0], &l)
			l["lineage"].(map[string]any)["proposed"].(map[string]any)["digest"] = strings.Repeat("cd", 32)
			lines[0], _ = json.Marshal(l)
			f[evidence.FileLineage] = bytes.Join(lines, []byte("\n"))
			reseal(t, f, key)
		}, "the proposed digest differs from the chain"},
		{"a file added", func(f map[string][]byte) {
			f["notes.txt"] = []byte("nothing to see")
		}, "not in the manifest"},
	}
}

// pyVerify runs the independent Python verifier on a pack.
func pyVerify(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	if err := exec.Command("python3", "-c", "import cryptography.hazmat.primitives.asymmetric.ed25519").Run(); err != nil {
		testkit.Need(t, "the Python evidence pack verifier needs python3 and its cryptography package: apt install python3 python3-cryptography")
	}
	cmd := exec.Command("python3", append([]string{filepath.Join("..", "..", "scripts", "verify_evidence_pack.py")}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("python3: %v", err)
	}
	return cmd.ProcessState.ExitCode(), out.String()
}

// TestPythonVerifierChecksAPack: the independent verifier accepts a pack
// of a real run with the audit key given from outside (a fingerprint, a
// kept checkpoint or the data directory), refuses one signed by a key
// nothing given trusts, and says SIGNATURES NOT CHECKED, exit 3, without
// cryptography.
func TestPythonVerifierChecksAPack(t *testing.T) {
	data, key := packRun(t)
	pack := makePack(t, data)
	kept := filepath.Join(t.TempDir(), "kept.jsonl")
	code, cp, errs := auditRun(t, "audit", "checkpoint", "--data", data)
	if code != 0 {
		t.Fatalf("audit checkpoint = %d %s", code, errs)
	}
	if err := os.WriteFile(kept, []byte(cp), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{pack, "--audit-key-fingerprint", fingerprintOf(key)},
		{pack, "--data", data},
		{pack, "--checkpoint", kept},
	} {
		code, out := pyVerify(t, nil, args...)
		if code != 0 || !strings.Contains(out, "redemptions: 3, each of a digest that was approved") {
			t.Errorf("python verify %v = %d\n%s", args[1:], code, out)
		}
		if code, out, _ := auditRun(t, append([]string{"audit", "verify"}, args...)...); code != 0 {
			t.Errorf("console audit verify %v = %d\n%s", args[1:], code, out)
		}
	}
	other, _ := audit.LoadOrCreateKey(filepath.Join(t.TempDir(), "k"))
	for _, args := range [][]string{{pack}, {pack, "--audit-key-fingerprint", fingerprintOf(other)}} {
		if code, out := pyVerify(t, nil, args...); code != 1 || !strings.Contains(out, "signed by a key nothing you gave trusts") {
			t.Errorf("python verify %v = %d %q, want 1 and the key refused", args[1:], code, out)
		}
	}
	// A cryptography package that cannot be imported, ahead of the real one.
	fake := filepath.Join(t.TempDir(), "cryptography")
	if err := os.MkdirAll(fake, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(fake, "__init__.py"), []byte("raise ImportError('not installed')\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out := pyVerify(t, []string{"PYTHONPATH=" + filepath.Dir(fake)}, pack, "--audit-key-fingerprint", fingerprintOf(key))
	if code != 3 || !strings.Contains(out, "SIGNATURES NOT CHECKED") {
		t.Errorf("python verify without cryptography = %d %q, want 3 and SIGNATURES NOT CHECKED", code, out)
	}
}

// TestAuditPackKeptCheckpoint: whoever holds the audit key can cut the
// end of a pack's trail and sign it all again, with a checkpoint at the new
// end; the pack then verifies on its own, but a checkpoint kept outside,
// signed within the period, shows the cut to both verifiers.
func TestAuditPackKeptCheckpoint(t *testing.T) {
	data, key := packRun(t)
	pack := makePack(t, data)
	files := readPack(t, pack)
	h, cps, es := chainLines(t, files[evidence.FileChain])
	kept := filepath.Join(t.TempDir(), "kept.jsonl")
	if err := os.WriteFile(kept, append(cps[len(cps)-1], '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	cut := rechain(t, joinLines([][]byte{h}, cps[:len(cps)-1], es[:len(es)-1]), key, func(*audit.Entry, map[string]any) bool { return false })
	ch, ccps, ces := chainLines(t, cut)
	last, err := audit.ParseLine(ces[len(ces)-1])
	if err != nil {
		t.Fatal(err)
	}
	c, err := key.Sign(last.Entry.Seq, last.Entry.Hash, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	line, _ := audit.AppendCheckpointLine(nil, c)
	setChain(t, files, joinLines([][]byte{ch}, append(ccps, bytes.TrimSuffix(line, []byte("\n"))), ces))
	reseal(t, files, key)
	bad := writePackFiles(t, files)
	if code, out, _ := auditRun(t, "audit", "verify", bad, "--audit-key-fingerprint", fingerprintOf(key)); code != 0 {
		t.Fatalf("the cut pack re-signed with the audit key, on its own = %d\n%s; want it to verify (only a kept checkpoint shows the cut)", code, out)
	}
	want := "entries were cut from its end"
	if code, out, _ := auditRun(t, "audit", "verify", bad, "--checkpoint", kept); code != 1 || !strings.Contains(out, want) {
		t.Errorf("verify with the kept checkpoint = %d\n%s; want 1 and %q", code, out, want)
	}
	if code, out := pyVerify(t, nil, bad, "--checkpoint", kept); code != 1 || !strings.Contains(out, want) {
		t.Errorf("python verify with the kept checkpoint = %d\n%s; want 1 and %q", code, out, want)
	}
	if code, out, _ := auditRun(t, "audit", "verify", pack, "--checkpoint", kept); code != 0 {
		t.Errorf("the whole pack with the kept checkpoint = %d\n%s", code, out)
	}
	// A checkpoint kept from after the period is for a later pack: noted.
	after, err := key.Sign(1000, strings.Repeat("ab", 32), time.Date(2101, 1, 1, 0, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	line, _ = audit.AppendCheckpointLine(nil, after)
	if err := os.WriteFile(kept, line, 0o600); err != nil {
		t.Fatal(err)
	}
	note := "the checkpoint you gave at entry 1000 was signed after the period and was not compared"
	if code, out, _ := auditRun(t, "audit", "verify", pack, "--checkpoint", kept); code != 0 || !strings.Contains(out, note) {
		t.Errorf("verify with a later kept checkpoint = %d\n%s", code, out)
	}
	if code, out := pyVerify(t, nil, pack, "--checkpoint", kept); code != 0 || !strings.Contains(out, note) {
		t.Errorf("python verify with a later kept checkpoint = %d\n%s", code, out)
	}
}

// TestAuditPackTampering: each way of altering a pack is found by
// console audit verify and by the independent Python verifier.
func TestAuditPackTampering(t *testing.T) {
	data, key := packRun(t)
	pack := makePack(t, data)
	for _, tc := range tamperings(t, key) {
		t.Run(tc.name, func(t *testing.T) {
			files := readPack(t, pack)
			tc.edit(files)
			bad := writePackFiles(t, files)
			code, out, errs := auditRun(t, "audit", "verify", bad, "--audit-key-fingerprint", fingerprintOf(key))
			if code != 1 || !(strings.HasPrefix(out, "DAMAGED: ") || strings.HasPrefix(out, "NOT VERIFIED: ")) || !strings.Contains(out, tc.want) {
				t.Errorf("verify = %d\n%s\n%s; want 1 and %q", code, out, errs, tc.want)
			}
			code, out = pyVerify(t, nil, bad, "--audit-key-fingerprint", fingerprintOf(key))
			if code != 1 || !(strings.HasPrefix(out, "DAMAGED: ") || strings.HasPrefix(out, "NOT VERIFIED: ")) || !strings.Contains(out, tc.want) {
				t.Errorf("python verify = %d\n%s; want 1 and %q", code, out, tc.want)
			}
		})
	}
}

// TestAuditPackOnPostgres: a pack made from a PostgreSQL console verifies
// with both verifiers; pruning there is refused, saying what to do.
func TestAuditPackOnPostgres(t *testing.T) {
	url := pgtest.Database(t)
	dir := t.TempDir()
	env := map[string]string{"USER": "root", envDatabaseURL: url}
	if code, out, errs := runWith(t, env, "", "keys", "init", "--data", dir); code != 0 {
		t.Fatalf("keys init = %d %q %s", code, out, errs)
	}
	for _, actor := range []string{"agent:a", "agent:b"} {
		if code, _, errs := runWith(t, env, "", "token", "create", "--actor", actor, "--audience", "payments-host", "--data", dir); code != 0 {
			t.Fatalf("token create = %d %s", code, errs)
		}
	}
	out := filepath.Join(t.TempDir(), "pack.tar")
	code, stdout, errs := runWith(t, env, "", "audit", "pack", "--data", dir, "--since", "2000-01-01", "--until", "2100-01-01", "--out", out)
	if code != 0 || !strings.Contains(stdout, "entries 1 to 2 (2)") {
		t.Fatalf("audit pack on PostgreSQL = %d %q %s", code, stdout, errs)
	}
	key, err := audit.LoadKey(auditKeyPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	if code, stdout, _ := runWith(t, env, "", "audit", "verify", out, "--audit-key-fingerprint", fingerprintOf(key)); code != 0 {
		t.Errorf("verify = %d\n%s", code, stdout)
	}
	if code, stdout := pyVerify(t, nil, out, "--audit-key-fingerprint", fingerprintOf(key)); code != 0 {
		t.Errorf("python verify = %d\n%s", code, stdout)
	}
}

// TestAuditPackFiltersNarrowOnlyTheSummary: --tool and --actor narrow the
// lineage and the summary; the chain section stays whole.
func TestAuditPackFiltersNarrowOnlyTheSummary(t *testing.T) {
	data, key := packRun(t)
	whole := readPack(t, makePack(t, data))
	for _, tc := range []struct {
		args  []string
		calls string
	}{
		{[]string{"--actor", "agent:nobody"}, `"calls":0`},
		{[]string{"--tool", "payments.refund", "--actor", "agent:billing"}, `"calls":8`},
	} {
		pack := makePack(t, data, tc.args...)
		files := readPack(t, pack)
		if code, out, _ := auditRun(t, "audit", "verify", pack, "--audit-key-fingerprint", fingerprintOf(key)); code != 0 {
			t.Errorf("%v: verify = %d\n%s", tc.args, code, out)
		}
		if !strings.Contains(string(files[evidence.FileSummary]), tc.calls) {
			t.Errorf("%v: summary %s, want %s", tc.args, files[evidence.FileSummary], tc.calls)
		}
		_, _, wholeEntries := chainLines(t, whole[evidence.FileChain])
		_, _, entries := chainLines(t, files[evidence.FileChain])
		if len(entries) != len(wholeEntries) {
			t.Errorf("%v: the chain holds %d entries, the unfiltered pack's %d", tc.args, len(entries), len(wholeEntries))
		}
	}
	nobody := readPack(t, makePack(t, data, "--actor", "agent:nobody"))
	if len(nobody[evidence.FileLineage]) != 0 {
		t.Errorf("a pack for an agent with no calls has lineage %q", nobody[evidence.FileLineage])
	}
}
