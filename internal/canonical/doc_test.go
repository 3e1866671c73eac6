package canonical

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var updateDoc = flag.Bool("update-doc", false, "rewrite the worked example in docs/canonical.md from its proposal block")

const docPath = "../../docs/canonical.md"

// docBlock returns the start and end offsets of the contents of the fenced
// code block that follows the marker <!-- example:NAME --> in doc.
func docBlock(tb testing.TB, doc, name string) (start, end int) {
	tb.Helper()
	marker := "<!-- example:" + name + " -->\n"
	i := strings.Index(doc, marker)
	if i < 0 {
		tb.Fatalf("%s: no %q marker", docPath, marker)
	}
	i += len(marker)
	if !strings.HasPrefix(doc[i:], "```") {
		tb.Fatalf("%s: the %s marker is not followed by a code block", docPath, name)
	}
	start = i + strings.Index(doc[i:], "\n") + 1
	n := strings.Index(doc[start:], "```")
	if n < 0 {
		tb.Fatalf("%s: the %s block is not closed", docPath, name)
	}
	return start, start + n
}

// TestDocWorkedExample recomputes the worked example of docs/canonical.md:
// the canonical bytes and digest of its proposal under its context.
func TestDocWorkedExample(t *testing.T) {
	raw, err := os.ReadFile(filepath.FromSlash(docPath))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	block := func(name string) string {
		s, e := docBlock(t, doc, name)
		return doc[s:e]
	}
	var actor, audience string
	for _, line := range strings.Split(block("context"), "\n") {
		k, v, _ := strings.Cut(line, ":")
		switch k {
		case "actor":
			actor = strings.TrimSpace(v)
		case "audience":
			audience = strings.TrimSpace(v)
		}
	}
	if actor == "" || audience == "" {
		t.Fatalf("context block %q names no actor or audience", block("context"))
	}
	proposal := block("proposal")
	p, err := ParseProposal([]byte(proposal))
	if err != nil {
		t.Fatalf("the example proposal is refused: %v", err)
	}
	env := p.Envelope(actor, audience)
	canonical, err := env.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	digest, err := env.Digest()
	if err != nil {
		t.Fatal(err)
	}
	// The digest is SHA-256 over the prefix and the bytes the page shows.
	sum := sha256.Sum256([]byte("countersign/v1/call:" + string(canonical)))
	if got := hex.EncodeToString(sum[:]); got != digest {
		t.Fatalf("Digest() = %s, SHA-256 of prefix and canonical bytes = %s", digest, got)
	}
	if ref, err := refDigest([]byte(proposal), actor, audience); err != nil || ref != digest {
		t.Fatalf("reference digest %s (%v), want %s", ref, err, digest)
	}
	want := map[string]string{"canonical": string(canonical) + "\n", "digest": digest + "\n"}
	if *updateDoc {
		for _, name := range []string{"canonical", "digest"} {
			s, e := docBlock(t, doc, name)
			doc = doc[:s] + want[name] + doc[e:]
		}
		if err := os.WriteFile(filepath.FromSlash(docPath), []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	for _, name := range []string{"canonical", "digest"} {
		if got := block(name); got != want[name] {
			t.Errorf("%s block of %s =\n%s\nthe code gives\n%s(run with -update-doc after a deliberate change)", name, docPath, got, want[name])
		}
	}
	if !strings.Contains(doc, "`"+DigestPrefix+"`") {
		t.Errorf("%s does not state the prefix %q", docPath, DigestPrefix)
	}
}
