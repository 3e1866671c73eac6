package reveal

import (
	"strings"
	"testing"
)

// Rendered shows what a reader sees: a right-to-left override turns the
// rest of its run around, isolates and embeddings are ended by their
// pops, nothing invisible is left, and no bidirectional control reaches
// the result. Text without such a control needs no preview.
func TestRendered(t *testing.T) {
	cases := []struct {
		in, want string
		ok       bool
	}{
		{"report\u202Efdp.exe", "reportexe.pdf", true},
		{"Invoice 7100 attached: report\u202Efdp.exe", "Invoice 7100 attached: reportexe.pdf", true},
		{"pay \u202E001\u202C to alice", "pay 100 to alice", true},
		{"abc\u2067def\u2069 ghi", "abcdef ghi", true}, // an isolate turns no Latin letter around
		{"a\u200b\u202Ebc", "acb", true},               // the zero-width space is not seen
		{"line one\u202Eab\nline two", "line oneba line two", true},
		{"plain text", "", false},
		{"zero\u200bwidth only", "", false},
	}
	for _, c := range cases {
		got, ok := Rendered(c.in, 0)
		if got != c.want || ok != c.ok {
			t.Errorf("Rendered(%q) = %q, %v; want %q, %v", c.in, got, ok, c.want, c.ok)
		}
		for _, r := range got {
			if _, kind := classifyRune(r); kind != "" {
				t.Errorf("Rendered(%q) holds %U (%s)", c.in, r, kind)
			}
		}
	}
	long := strings.Repeat("x", 50) + "\u202Eabc"
	if got, _ := Rendered(long, 10); got != strings.Repeat("x", 10)+"…" {
		t.Errorf("cut to 10: %q", got)
	}
}

func FuzzRendered(f *testing.F) {
	for _, s := range []string{"report\u202Efdp.exe", "\u2067\u2066\u202A(x)\u202C", "שלום\u202Eabc"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, _ := Rendered(s, 200)
		for _, r := range got {
			if _, kind := classifyRune(r); kind != "" {
				t.Fatalf("Rendered(%q) holds %U (%s)", s, r, kind)
			}
		}
	})
}
