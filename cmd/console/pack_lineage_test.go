package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/evidence"
	"github.com/countersign/countersign/internal/grant"
)

// TestAuditPackLineageFollowsTheChain: lineage.jsonl holds one line per
// call in the order of the calls' first entries in the chain section, so
// that a verifier reads the two side by side; a pack whose lineage is in
// another order (by call id, as packs once were) still verifies with both
// verifiers, which then hold the chain's calls in memory, and an edited
// line is found either way.
func TestAuditPackLineageFollowsTheChain(t *testing.T) {
	data, key := packRun(t)
	pack := makePack(t, data)
	files := readPack(t, pack)

	var chainOrder []string
	for _, line := range bytes.Split(bytes.TrimSuffix(files[evidence.FileChain], []byte("\n")), []byte("\n")) {
		rec, err := audit.ParseLine(line)
		if err != nil {
			t.Fatal(err)
		}
		if e := rec.Entry; e != nil && e.CallID != "" && !slices.Contains(chainOrder, e.CallID) {
			chainOrder = append(chainOrder, e.CallID)
		}
	}
	lines := bytes.Split(bytes.TrimSuffix(files[evidence.FileLineage], []byte("\n")), []byte("\n"))
	var lineageOrder []string
	for _, line := range lines {
		var l evidence.LineageLine
		if err := json.Unmarshal(line, &l); err != nil {
			t.Fatal(err)
		}
		lineageOrder = append(lineageOrder, l.CallID)
	}
	if len(lineageOrder) < 3 {
		t.Fatalf("the pack's lineage names %d calls, want several", len(lineageOrder))
	}
	var firsts []string
	for _, id := range chainOrder {
		if slices.Contains(lineageOrder, id) {
			firsts = append(firsts, id)
		}
	}
	if !slices.Equal(firsts, lineageOrder) {
		t.Errorf("lineage order %v, want the order of the calls' first entries %v", lineageOrder, firsts)
	}

	verifies := func(t *testing.T, files map[string][]byte, ok bool, want string) {
		t.Helper()
		bad := writePackFiles(t, files)
		code, out, _ := auditRun(t, "audit", "verify", bad, "--audit-key-fingerprint", fingerprintOf(key))
		if (code == 0) != ok || !strings.Contains(out, want) {
			t.Errorf("verify = %d\n%s\nwant ok %v and %q", code, out, ok, want)
		}
		code, out = pyVerify(t, nil, bad, "--audit-key-fingerprint", fingerprintOf(key))
		if (code == 0) != ok || !strings.Contains(out, want) {
			t.Errorf("python verify = %d\n%s\nwant ok %v and %q", code, out, ok, want)
		}
	}
	reversed := slices.Clone(lines)
	slices.Reverse(reversed)
	t.Run("reversed", func(t *testing.T) {
		f := readPack(t, pack)
		f[evidence.FileLineage] = append(bytes.Join(reversed, []byte("\n")), '\n')
		reseal(t, f, key)
		verifies(t, f, true, "lineage: "+itoa(len(lines))+" calls agree with the chain")
	})
	t.Run("reversed and edited", func(t *testing.T) {
		f := readPack(t, pack)
		edited := slices.Clone(reversed)
		var l map[string]any
		if err := json.Unmarshal(edited[1], &l); err != nil {
			t.Fatal(err)
		}
		l["lineage"].(map[string]any)["proposed"].(map[string]any)["digest"] = strings.Repeat("cd", 32)
		edited[1], _ = json.Marshal(l)
		f[evidence.FileLineage] = append(bytes.Join(edited, []byte("\n")), '\n')
		reseal(t, f, key)
		verifies(t, f, false, "the proposed digest differs from the chain")
	})
	t.Run("a line dropped", func(t *testing.T) {
		// A call the chain holds but the lineage leaves out is not damage
		// the lineage check can see; the manifest's signature covers it.
		f := readPack(t, pack)
		f[evidence.FileLineage] = append(bytes.Join(lines[1:], []byte("\n")), '\n')
		reseal(t, f, key)
		verifies(t, f, true, "lineage: "+itoa(len(lines)-1)+" calls agree with the chain")
	})
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// TestAuditPackForgettingCallsChangesNothing: a pass over the chain that
// remembers one call at a time, and asks the store again for every call
// it forgot, writes the same pack byte for byte as one that remembers
// them all.
func TestAuditPackForgettingCallsChangesNothing(t *testing.T) {
	data, key := packRun(t)
	makePack(t, data) // signs the checkpoint at the head, which both packs then share
	ctx := context.Background()
	d, keys := openPacked(t, ctx, data)
	now := time.Now().UTC()
	pack := func(recent int) []byte {
		t.Helper()
		var buf bytes.Buffer
		res, err := evidence.Write(ctx, &buf, packSource{storage: d.storage, calls: d.queue}, evidence.Options{
			Since: time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), Until: time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC),
			Signer: key, GrantKeys: keys.JWKS(), Verifiers: packVerifiers(), Now: now, TempDir: t.TempDir(), RecentCalls: recent})
		if err != nil {
			t.Fatal(err)
		}
		if res.Signed.Seq != 0 || res.Calls < 3 {
			t.Fatalf("pack = %+v, want several calls and no checkpoint signed", res)
		}
		return buf.Bytes()
	}
	all, one := untar(t, pack(0)), untar(t, pack(1))
	// The chain's header says when it was exported, and the manifest
	// holds the chain's SHA-256: the rest is compared whole.
	for _, f := range []map[string][]byte{all, one} {
		f[evidence.FileChain] = bytes.SplitN(f[evidence.FileChain], []byte("\n"), 2)[1]
		delete(f, evidence.FileManifest)
		delete(f, evidence.FileSignature)
	}
	if len(all) != len(one) {
		t.Fatalf("the packs hold %d and %d files", len(all), len(one))
	}
	for name, b := range all {
		if !bytes.Equal(one[name], b) {
			t.Errorf("%s differs when the pass remembers one call:\n%s\nwant\n%s", name, one[name], b)
		}
	}
}

// untar returns the files of a tar archive.
func untar(t *testing.T, b []byte) map[string][]byte {
	t.Helper()
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
		if files[h.Name], err = io.ReadAll(tr); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAuditPackRefusedAboveWhatAVerifierReads: a pack larger than
// Options.MaxBytes (by default what a verifier reads, MaxPackBytes) is
// refused before a byte of it is written, and the size checked is never
// below the archive's: a bound one byte under a written pack's size
// refuses the same pack.
func TestAuditPackRefusedAboveWhatAVerifierReads(t *testing.T) {
	data, key := packRun(t)
	ctx := context.Background()
	d, keys := openPacked(t, ctx, data)
	now := time.Now().UTC()
	pack := func(max int64) ([]byte, error) {
		var buf bytes.Buffer
		_, err := evidence.Write(ctx, &buf, packSource{storage: d.storage, calls: d.queue}, evidence.Options{
			Since: time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), Until: time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC),
			Signer: key, GrantKeys: keys.JWKS(), Verifiers: packVerifiers(), Now: now, TempDir: t.TempDir(), MaxBytes: max})
		return buf.Bytes(), err
	}
	whole, err := pack(0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := pack(int64(len(whole)) - 1)
	if !errors.Is(err, evidence.ErrTooLarge) || len(b) != 0 {
		t.Fatalf("a pack of %d bytes with a bound of one byte less: %d bytes written, error %v; want nothing written and ErrTooLarge", len(whole), len(b), err)
	}
	if !strings.Contains(err.Error(), "--since") {
		t.Errorf("the refusal %q does not say what to do", err)
	}
}

// openPacked opens the store and the keyring of the data directory a
// pack is written from, closing the store when the test ends.
func openPacked(t *testing.T, ctx context.Context, data string) (*engine, *grant.Keyring) {
	t.Helper()
	d, err := openExisting(ctx, data, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	keys, err := grant.OpenExistingKeyring(keysDir(data), Issuer, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	return d, keys
}
