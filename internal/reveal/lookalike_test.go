package reveal

import (
	"slices"
	"strings"
	"testing"
)

// TestRevealLookAlikes covers characters and mixes that a per-character
// list misses: every default-ignorable code point, look-alike letters among
// digits, other scripts' digits, and identifiers written wholly in a
// look-alike script.
func TestRevealLookAlikes(t *testing.T) {
	cases := []struct {
		in      string
		escaped string // a visible escape that must appear, or ""
		warning string
	}{
		{"old copy\u180B", "[U+180B]", kindInvisible},
		{"x\u180Fy", "[U+180F]", kindInvisible},
		{"a\uFE0Fb", "[U+FE0F]", kindInvisible},
		{"ACCT-1\u041E00", "", kindMixed},
		{"1\u09E60", "", kindMixed},
		{"\u0440\u0430\u0443\u0440\u0430\u04CF.com", "", kindMixed},
		{"file:/srv/shared/\u0440eport.csv", "", kindMixed},
		{"\u0440\u0430\u0443\u0440\u0430\u04CF.com ", "", kindMixed},
		{"pay \u0440\u0430\u0443\u0440\u0430\u04CF.com now", "", kindMixed},
	}
	for _, tc := range cases {
		got := reveal(tc.in)
		var shown strings.Builder
		for _, s := range got.Segs {
			shown.WriteString(s.S)
		}
		if tc.escaped != "" && !strings.Contains(shown.String(), tc.escaped) {
			t.Errorf("reveal(%+q) shows %q, want the escape %s", tc.in, shown.String(), tc.escaped)
		}
		if !slices.Contains(got.Warnings, tc.warning) {
			t.Errorf("reveal(%+q) warnings %v, want %q", tc.in, got.Warnings, tc.warning)
		}
	}
	// Ordinary text in one script, and words of several scripts separated
	// by spaces, are not flagged.
	for _, ok := range []string{"Invoice 1042", "Привет мир", "Москва 2024", "東京 Tokyo", "refund INV-1042 for ООО Ромашка"} {
		if w := reveal(ok).Warnings; len(w) != 0 {
			t.Errorf("reveal(%q) warnings %v, want none", ok, w)
		}
	}
}
