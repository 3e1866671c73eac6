package main

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/evidence"
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
