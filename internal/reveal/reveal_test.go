package reveal

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// shown is how a Text reads on the page: escapes in place, breaks as
// newlines, mixed words in braces.
func shown(t Text) string {
	var b strings.Builder
	for _, s := range t.Segs {
		switch s.Kind {
		case SegBreak:
			b.WriteString("⏎")
		case SegMixed:
			b.WriteString("{" + s.S + "}")
		default:
			b.WriteString(s.S)
		}
	}
	return b.String()
}

func TestRevealClasses(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
		warn []string
	}{
		{"plain", "invoice:INV-1", "invoice:INV-1", nil},
		{"newline tab cr", "a\nb\tc\rd", `a\n⏎b\tc\rd`, nil},
		{"nul and bell", "a\x00b\x07", "a[U+0000]b[U+0007]", []string{kindControl}},
		{"del and c1", "a\x7fb\u0085c\u009b", "a[U+007F]b[U+0085]c[U+009B]", []string{kindControl}},
		{"rlo", "invoice\u202Efdp.exe", "invoice[U+202E]fdp.exe", []string{kindBidi}},
		{"every bidi", "\u061C\u200E\u200F\u202A\u202B\u202C\u202D\u202E\u2066\u2067\u2068\u2069",
			"[U+061C][U+200E][U+200F][U+202A][U+202B][U+202C][U+202D][U+202E][U+2066][U+2067][U+2068][U+2069]", []string{kindBidi}},
		{"zero width", "pay\u200Bpal\u200C\u200D\u2060\uFEFF\u00AD", "pay[U+200B]pal[U+200C][U+200D][U+2060][U+FEFF][U+00AD]", []string{kindInvisible}},
		{"other Cf", "a\u2061b\u206Fc\U000110BD", "a[U+2061]b[U+206F]c[U+110BD]", []string{kindInvisible}},
		{"variation selector", "a\uFE0Fb\U000E0100", "a[U+FE0F]b[U+E0100]", []string{kindInvisible}},
		{"hangul filler", "a\u3164b", "a[U+3164]b", []string{kindInvisible}},
		{"tags", "ok\U000E0001\U000E0041\U000E007F", "ok[U+E0001][U+E0041][U+E007F]", []string{kindTag}},
		{"line separator", "a\u2028b", "a[U+2028]⏎b", []string{kindControl}},
		{"nbsp and em space", "a\u00A0b\u2003c", "a[U+00A0]b[U+2003]c", []string{kindSpace}},
		{"private use", "a\uE000b", "a[U+E000]b", []string{kindUnassigned}},
		{"noncharacter", "a\uFFFFb", "a[U+FFFF]b", []string{kindUnassigned}},
		{"invalid utf8", "a\xffb", "a[0xFF]b", []string{kindInvalid}},
		{"latin+cyrillic word", "pay\u0440al.com", "{payрal}.com", []string{kindMixed}},
		{"cyrillic a in admin", "\u0430dmin user", "{аdmin} user", []string{kindMixed}},
		{"greek omicron", "g\u03BFogle", "{gοogle}", []string{kindMixed}},
		{"separate words fine", "hello мир", "hello мир", nil},
		{"japanese mix fine", "東京タワーとJR", "東京タワーとJR", nil},
		{"digits do not count", "Привет123", "Привет123", nil},
		// The escape splits the words, but the string is one identifier
		// whose letters mix scripts.
		{"escape splits words", "pa\u200Bу", "pa[U+200B]у", []string{kindInvisible, kindMixed}},
		{"several kinds", "\u202E\u200B\x01", "[U+202E][U+200B][U+0001]", []string{kindBidi, kindInvisible, kindControl}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := reveal(tt.in)
			if s := shown(got); s != tt.want {
				t.Errorf("reveal(%q) shows %q, want %q", tt.in, s, tt.want)
			}
			if !slices.Equal(got.Warnings, tt.warn) {
				t.Errorf("reveal(%q) warnings = %q, want %q", tt.in, got.Warnings, tt.warn)
			}
		})
	}
}

// Every character in the ranges the console promises to reveal is escaped.
func TestRevealRanges(t *testing.T) {
	var rs []rune
	add := func(lo, hi rune) {
		for r := lo; r <= hi; r++ {
			rs = append(rs, r)
		}
	}
	add(0x00, 0x08)
	add(0x0B, 0x0C)
	add(0x0E, 0x1F)
	add(0x7F, 0x9F)
	add(0x200B, 0x200F)
	add(0x202A, 0x202E)
	add(0x2060, 0x2069)
	add(0xE0000, 0xE007F)
	rs = append(rs, 0x061C, 0xFEFF, 0x00AD)
	for _, r := range rs {
		got := reveal("x" + string(r) + "y")
		if len(got.Segs) != 3 || got.Segs[1].Kind != SegEscape || len(got.Warnings) == 0 {
			t.Errorf("U+%04X: segments %+v warnings %q; want x, an escape, y and a warning", r, got.Segs, got.Warnings)
		}
	}
}

// Nothing is lost: removing the escapes' markers gives back every
// ordinary character, and a long value stays whole.
func TestRevealKeepsEverything(t *testing.T) {
	long := strings.Repeat("0123456789abcdef", 640) // 10 KiB
	got := reveal(long)
	if shown(got) != long {
		t.Errorf("a 10 KiB value was changed or cut: %d bytes shown", len(shown(got)))
	}
	in := "a<b>&\"c'd"
	if s := shown(reveal(in)); s != in {
		t.Errorf("reveal(%q) = %q; markup characters must pass through as text", in, s)
	}
}

func FuzzReveal(f *testing.F) {
	for _, s := range []string{"", "a\u202Eb", "pay\u0440al", "\xff\xfe", "a\nb", "東京"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := reveal(s)
		for _, seg := range got.Segs {
			if seg.Kind == SegText || seg.Kind == SegMixed {
				for _, r := range seg.S {
					if esc, _ := classifyRune(r); esc {
						t.Fatalf("reveal(%q): %U left unescaped in %q", s, r, seg.S)
					}
				}
			}
		}
	})
}

// TestWordScriptsOfASCIIWords: an ASCII word's scripts are Latin when it
// has letters and none otherwise, found without allocating; other words
// are read rune by rune as before.
func TestWordScriptsOfASCIIWords(t *testing.T) {
	for w, want := range map[string][]string{
		"refund": {"Latin"}, "a1-b2": {"Latin"}, "1234": nil, "": nil, "--": nil,
		"pаypal": {"Latin", "Cyrillic"}, "১২3": {"ASCII digits", "Bengali"},
	} {
		if got := wordScripts(w); !slices.Equal(got, want) {
			t.Errorf("wordScripts(%q) = %q, want %q", w, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { wordScripts("invoice") }); n != 0 {
		t.Errorf("wordScripts of an ASCII word allocated %v times, want 0", n)
	}
}

// TestPrintableASCIIAsTheGeneralPath: text of printable ASCII alone is
// revealed as the general path reveals it (one segment of text, no
// warning), with one allocation, the segment's slice.
func TestPrintableASCIIAsTheGeneralPath(t *testing.T) {
	var every []byte
	for c := byte(' '); c <= '~'; c++ {
		every = append(every, c)
	}
	texts := []string{"", " ", "flow 12", "weather:forecast", "INV-10042 refund 12.50 USD", string(every),
		"paypal.com", "  two  spaces  ", "a1-b2_c3", "\x7f", "tab\there", "line\nbreak", "pаypal"}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		b := make([]byte, r.IntN(40))
		for i := range b {
			b[i] = every[r.IntN(len(every))]
		}
		texts = append(texts, string(b))
	}
	for _, s := range texts {
		if got, want := reveal(s), revealAll(s); !reflect.DeepEqual(got, want) {
			t.Fatalf("reveal(%q) = %+v, want %+v", s, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { reveal("INV-10042 refund 12.50 USD") }); n > 1 {
		t.Errorf("revealing printable ASCII allocated %v times, want at most 1", n)
	}
}
