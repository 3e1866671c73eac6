package reveal

import (
	"slices"
	"strings"
	"testing"
)

// TestRevealCombiningMarks: a combining mark on a Latin, Greek, Cyrillic or
// script-less character, and every enclosing mark, is a visible escape with
// a warning; marks of scripts written with them are shown as they are.
func TestRevealCombiningMarks(t *testing.T) {
	for _, tc := range []struct{ in, shown string }{
		{"paypa\u0301l.com", "paypa[U+0301]l.com"},
		{"cafe\u0301", "cafe[U+0301]"},                 // NFD: another call than the precomposed "café"
		{"\u0301start", "[U+0301]start"},               // a mark on nothing
		{"1\u20DD", "1[U+20DD]"},                       // enclosing circle
		{"i\u0307\u0307d", "i[U+0307][U+0307]d"},       // stacked dots
		{"\u043e\u0308\u043a", "\u043e[U+0308]\u043a"}, // Cyrillic o with diaeresis
	} {
		got := reveal(tc.in)
		if s := shown(got); s != tc.shown {
			t.Errorf("reveal(%+q) shows %q, want %q", tc.in, s, tc.shown)
		}
		if !slices.Contains(got.Warnings, kindCombining) {
			t.Errorf("reveal(%+q) warnings %v, want %q", tc.in, got.Warnings, kindCombining)
		}
	}
	for _, ok := range []string{"café", "नमस्ते", "שָׁלוֹם", "مُحَمَّد", "ภาษาไทย"} {
		if w := reveal(ok).Warnings; len(w) != 0 {
			t.Errorf("reveal(%q) warnings %v, want none", ok, w)
		}
	}
}

// TestRevealWholeScriptConfusables: an identifier written entirely with
// letters of one script that look like Latin ones (Unicode TS #39
// skeletons) is marked with what it looks like, as are Latin words holding
// look-alike characters; prose and ordinary accented words are not.
func TestRevealWholeScriptConfusables(t *testing.T) {
	for _, tc := range []struct{ in, like string }{
		{"\u0430\u0440\u0440\u04CF\u0435", "Cyrillic letters"},       // "apple"
		{"\u0440\u0430\u0443\u0440\u0430\u04CF", "Cyrillic letters"}, // "paypal"
		{"\u0391\u0392\u0395", "Greek letters"},                      // "ABE"
		{"\u212Fxample.com", `"ℯ" is a look-alike of "e"`},
		{"\uFB01le", `"ﬁ" is a look-alike of "fi"`},
		{"\uFF50\uFF41\uFF59\uFF50\uFF41\uFF4C", `"ｐ" is a look-alike of "p"`},
	} {
		got := reveal(tc.in)
		if !slices.Contains(got.Warnings, kindLookAlike) {
			t.Errorf("reveal(%+q) warnings %v, want %q", tc.in, got.Warnings, kindLookAlike)
			continue
		}
		var note string
		for _, s := range got.Segs {
			if s.Kind == SegMixed {
				note = s.Note
			}
		}
		if !strings.Contains(note, tc.like) {
			t.Errorf("reveal(%+q) note %q, want it to say %s", tc.in, note, tc.like)
		}
	}
	for _, ok := range []string{"apple", "Привет", "ООО Ромашка", "сор и мусор", "naïve façade", "Ελληνικά", "東京"} {
		if w := reveal(ok).Warnings; slices.Contains(w, kindLookAlike) {
			t.Errorf("reveal(%q) warnings %v, want no look-alike", ok, w)
		}
	}
}
