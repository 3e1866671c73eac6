// Package reveal shows deceptive characters. What an operator sees is what
// they sign: every character that could make two different calls look
// alike, or hide part of one (bidirectional controls, invisible and tag
// characters, controls, unusual spaces, unassigned code points, invalid
// UTF-8), is shown as a visible escape, words that mix scripts are marked,
// and the text carries a warning. Nothing is dropped or truncated.
package reveal

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/mtibben/confusables"
	"golang.org/x/text/unicode/norm"
)

// SegKind says how a segment of revealed text is shown.
type SegKind int

// Segment kinds.
const (
	// SegText is ordinary text.
	SegText SegKind = iota
	// SegEscape is a character that could deceive, shown as a visible
	// escape such as [U+202E] or \n.
	SegEscape
	// SegBreak is a visible line break after an escaped newline.
	SegBreak
	// SegMixed is a word that mixes scripts, shown highlighted.
	SegMixed
)

// Seg is one piece of a Text.
type Seg struct {
	Kind SegKind
	S    string // the text, or the escape as shown
	Note string // what the escape stands for, or which scripts mix
}

// Text is a string from an agent, split so that nothing in it can hide.
type Text struct {
	Segs []Seg
	// Warnings name the kinds of deceptive characters found, in a fixed
	// order, each once.
	Warnings []string
}

// Deceptive reports whether the text holds anything that warrants a warning.
func (t Text) Deceptive() bool { return len(t.Warnings) > 0 }

// Of splits s into text, visible escapes and mixed-script words.
func Of(s string) Text { return reveal(s) }

// Kinds of deceptive content, in the order warnings list them.
const (
	KindBidi       = "bidirectional control"
	KindInvisible  = "invisible character"
	KindTag        = "tag character"
	KindControl    = "control character"
	KindSpace      = "unusual space"
	KindUnassigned = "unassigned or private-use character"
	KindInvalid    = "invalid UTF-8"
	KindMixed      = "mixed scripts"
	KindCombining  = "combining mark"
	KindLookAlike  = "look-alike characters"
)

const (
	kindBidi       = KindBidi
	kindInvisible  = KindInvisible
	kindTag        = KindTag
	kindControl    = KindControl
	kindSpace      = KindSpace
	kindUnassigned = KindUnassigned
	kindInvalid    = KindInvalid
	kindMixed      = KindMixed
	kindCombining  = KindCombining
	kindLookAlike  = KindLookAlike
)

var kindOrder = []string{kindBidi, kindInvisible, kindTag, kindControl, kindSpace, kindUnassigned, kindInvalid,
	kindCombining, kindMixed, kindLookAlike}

// runeNames names the characters people meet most often.
var runeNames = map[rune]string{
	0x00A0: "NO-BREAK SPACE", 0x00AD: "SOFT HYPHEN", 0x034F: "COMBINING GRAPHEME JOINER",
	0x061C: "ARABIC LETTER MARK", 0x180E: "MONGOLIAN VOWEL SEPARATOR",
	0x200B: "ZERO WIDTH SPACE", 0x200C: "ZERO WIDTH NON-JOINER", 0x200D: "ZERO WIDTH JOINER",
	0x200E: "LEFT-TO-RIGHT MARK", 0x200F: "RIGHT-TO-LEFT MARK",
	0x2028: "LINE SEPARATOR", 0x2029: "PARAGRAPH SEPARATOR",
	0x202A: "LEFT-TO-RIGHT EMBEDDING", 0x202B: "RIGHT-TO-LEFT EMBEDDING", 0x202C: "POP DIRECTIONAL FORMATTING",
	0x202D: "LEFT-TO-RIGHT OVERRIDE", 0x202E: "RIGHT-TO-LEFT OVERRIDE",
	0x2060: "WORD JOINER", 0x2066: "LEFT-TO-RIGHT ISOLATE", 0x2067: "RIGHT-TO-LEFT ISOLATE",
	0x2068: "FIRST STRONG ISOLATE", 0x2069: "POP DIRECTIONAL ISOLATE",
	0x3164: "HANGUL FILLER", 0xFEFF: "ZERO WIDTH NO-BREAK SPACE (BOM)",
}

// classify says whether r must be escaped, and as what kind. Escaped
// newlines, tabs and carriage returns are shown but are not deceptive.
func classifyRune(r rune) (escape bool, kind string) {
	switch {
	case r == '\n' || r == '\t' || r == '\r':
		return true, ""
	case r < 0x20 || r == 0x7F || (r >= 0x80 && r <= 0x9F):
		return true, kindControl
	case r == 0x061C || r == 0x200E || r == 0x200F || (r >= 0x202A && r <= 0x202E) || (r >= 0x2066 && r <= 0x2069):
		return true, kindBidi
	case r >= 0xE0000 && r <= 0xE007F:
		return true, kindTag
	case r == 0x2028 || r == 0x2029:
		return true, kindControl
	case r >= 0x200B && r <= 0x200D, r == 0x2060, r == 0xFEFF, r == 0x00AD,
		r == 0x034F, r == 0x115F, r == 0x1160, r == 0x17B4, r == 0x17B5, r == 0x180E,
		r == 0x2800, r == 0x3164, r == 0xFFA0,
		r >= 0xFE00 && r <= 0xFE0F, r >= 0xE0100 && r <= 0xE01EF,
		unicode.Is(unicode.Cf, r),
		// Every default-ignorable code point renders as nothing.
		unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r), unicode.Is(unicode.Variation_Selector, r):
		return true, kindInvisible
	case r != ' ' && unicode.Is(unicode.Zs, r):
		return true, kindSpace
	case !unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Zs):
		return true, kindUnassigned
	}
	return false, ""
}

func escapeRune(r rune) (string, string) {
	switch r {
	case '\n':
		return `\n`, "LINE FEED"
	case '\t':
		return `\t`, "CHARACTER TABULATION"
	case '\r':
		return `\r`, "CARRIAGE RETURN"
	}
	code := fmt.Sprintf("U+%04X", r)
	name := runeNames[r]
	switch {
	case name != "":
	case r < 0x20 || r == 0x7F || (r >= 0x80 && r <= 0x9F):
		name = "control character"
	case r >= 0xE0000 && r <= 0xE007F:
		name = "TAG"
		if t := r - 0xE0000; t >= 0x20 && t < 0x7F {
			name = fmt.Sprintf("TAG %q", rune(t))
		}
	case r >= 0xFE00 && r <= 0xFE0F, r >= 0xE0100 && r <= 0xE01EF:
		name = "VARIATION SELECTOR"
	case unicode.Is(unicode.Me, r):
		name = "ENCLOSING MARK"
	case unicode.Is(unicode.Mn, r):
		name = "COMBINING MARK"
	}
	if name == "" {
		return "[" + code + "]", code
	}
	return "[" + code + "]", code + " " + name
}

// String is the revealer for plain text (messages, the command
// line): every character that reveal escapes is written as its visible
// escape, such as [U+202E]; the rest is unchanged. It never returns a bidi
// control, an invisible or a control character.
func String(s string) string {
	var b strings.Builder
	for _, seg := range reveal(s).Segs {
		if seg.Kind != SegBreak {
			b.WriteString(seg.S)
		}
	}
	return b.String()
}

// reveal splits s into text, escapes and mixed-script words.
func reveal(s string) Text {
	if printableASCII(s) {
		// Nothing to escape, and no word can mix scripts or look like
		// another: the text as it is, with no warning.
		if s == "" {
			return Text{}
		}
		return Text{Segs: []Seg{{Kind: SegText, S: s}}}
	}
	return revealAll(s)
}

// revealAll is reveal for any text.
func revealAll(s string) Text {
	var t Text
	found := map[string]bool{}
	var plain strings.Builder
	flush := func() {
		if plain.Len() > 0 {
			t.Segs = appendWords(t.Segs, plain.String(), found)
			plain.Reset()
		}
	}
	base := rune(-1) // the last character that is not a mark; -1 before any
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			flush()
			t.Segs = append(t.Segs, Seg{Kind: SegEscape, S: fmt.Sprintf("[0x%02X]", s[i]), Note: "a byte that is not UTF-8"})
			found[kindInvalid] = true
			i++
			base = -1
			continue
		}
		i += size
		esc, kind := classifyRune(r)
		if !esc && combiningToEscape(r, base) {
			esc, kind = true, kindCombining
		}
		if !unicode.Is(unicode.Mn, r) && !unicode.Is(unicode.Me, r) {
			base = r
		}
		if !esc {
			plain.WriteRune(r)
			continue
		}
		flush()
		shown, note := escapeRune(r)
		t.Segs = append(t.Segs, Seg{Kind: SegEscape, S: shown, Note: note})
		if kind != "" {
			found[kind] = true
		}
		if r == '\n' || r == 0x2028 || r == 0x2029 {
			t.Segs = append(t.Segs, Seg{Kind: SegBreak})
		}
	}
	flush()
	// Each run without white space is an identifier (a host, a path, an
	// account): its letters must not mix scripts even across separators,
	// as in an all-Cyrillic look-alike of "paypal" before ".com".
	if !found[kindMixed] {
		for _, token := range strings.FieldsFunc(s, unicode.IsSpace) {
			if scripts := wordScripts(token); len(scripts) > 1 && !allowedMix(scripts) {
				found[kindMixed] = true
				break
			}
		}
	}
	if !found[kindMixed] {
		if note, ok := wholeScriptLookAlike(s); ok {
			found[kindLookAlike] = true
			for i, seg := range t.Segs {
				if seg.Kind == SegText {
					t.Segs[i] = Seg{Kind: SegMixed, S: seg.S, Note: "looks like " + note}
				}
			}
		}
	}
	for _, k := range kindOrder {
		if found[k] {
			t.Warnings = append(t.Warnings, k)
		}
	}
	return t
}

// printableASCII reports whether s holds only the characters from space
// to '~'.
func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// appendWords appends plain text, marking each word whose letters come
// from scripts that are not normally written together.
func appendWords(segs []Seg, s string, found map[string]bool) []Seg {
	start := 0 // start of pending ordinary text
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if !isWordRune(r) {
			i += size
			continue
		}
		j := i
		for j < len(s) {
			r, size := utf8.DecodeRuneInString(s[j:])
			if !isWordRune(r) {
				break
			}
			j += size
		}
		if scripts := wordScripts(s[i:j]); len(scripts) > 1 && !allowedMix(scripts) {
			if start < i {
				segs = append(segs, Seg{Kind: SegText, S: s[start:i]})
			}
			segs = append(segs, Seg{Kind: SegMixed, S: s[i:j], Note: "mixes " + strings.Join(scripts, " and ")})
			found[kindMixed] = true
			start = j
		} else if like, ok := lookAlike(s[i:j], scripts); ok {
			if start < i {
				segs = append(segs, Seg{Kind: SegText, S: s[start:i]})
			}
			segs = append(segs, Seg{Kind: SegMixed, S: s[i:j], Note: "looks like " + like})
			found[kindLookAlike] = true
			start = j
		}
		i = j
	}
	if start < len(s) {
		segs = append(segs, Seg{Kind: SegText, S: s[start:]})
	}
	return segs
}

// combiningToEscape reports whether the combining mark r, after base, is
// shown as an escape: every enclosing mark, and a nonspacing mark on a
// Latin, Greek, Cyrillic or script-less character (or on nothing). Those
// scripts are written precomposed; a separate mark there adds or changes
// an accent that a font may hide or place on the wrong letter, and makes a
// different call (NFD) look the same. Marks of scripts written with them
// (Devanagari, Arabic, Hebrew, Thai and the rest) are shown as they are.
func combiningToEscape(r, base rune) bool {
	if unicode.Is(unicode.Me, r) {
		return true
	}
	if !unicode.Is(unicode.Mn, r) {
		return false
	}
	if base < 0 {
		return true
	}
	switch scriptOf(base) {
	case "", "Latin", "Greek", "Cyrillic":
		return true
	}
	return false
}

// lookAlike reports whether a Latin word holds a character, other than an
// accented letter, that Unicode TS #39 lists as confusable with ASCII (the
// ligature in "ﬁle", the script e of "ℯxample", full-width letters), and
// what the word looks like.
func lookAlike(word string, scripts []string) (string, bool) {
	ascii := func(x string) bool {
		for i := 0; i < len(x); i++ {
			if x[i] >= utf8.RuneSelf {
				return false
			}
		}
		return true
	}
	if ascii(word) {
		return "", false
	}
	switch {
	case len(scripts) == 0 || (len(scripts) == 1 && scripts[0] == "Latin"):
		for _, r := range word {
			if r < utf8.RuneSelf || unicode.IsMark(r) {
				continue
			}
			if d := norm.NFD.String(string(r)); ascii(strings.TrimFunc(d, unicode.IsMark)) && strings.IndexFunc(d, unicode.IsMark) > 0 {
				continue // an accented letter, precomposed
			}
			if sk := confusables.Skeleton(string(r)); ascii(sk) {
				return fmt.Sprintf("plain letters: %q is a look-alike of %q (Unicode TS #39)", string(r), sk), true
			}
		}
	}
	return "", false
}

// wholeScriptLookAlike reports whether s, a value without white space (an
// identifier), is written in one script other than Latin entirely with
// letters that Unicode TS #39 lists as confusable with ASCII: a
// whole-script confusable, as Cyrillic "аррӏе" for "apple". Words in prose
// are not held to this: Russian text is full of such letters.
func wholeScriptLookAlike(s string) (string, bool) {
	if s == "" || strings.IndexFunc(s, unicode.IsSpace) >= 0 {
		return "", false
	}
	scripts := wordScripts(s)
	if len(scripts) != 1 || scripts[0] == "Latin" || scripts[0] == "ASCII digits" {
		return "", false
	}
	sk := confusables.Skeleton(s)
	for i := 0; i < len(sk); i++ {
		if sk[i] >= utf8.RuneSelf {
			return "", false
		}
	}
	return fmt.Sprintf("Latin: written entirely in %s letters that look like Latin ones (Unicode TS #39 whole-script confusable)", scripts[0]), true
}

func isWordRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r)
}

// namedScript is a Unicode script and its table.
type namedScript struct {
	name  string
	table *unicode.RangeTable
}

// scriptTables are the scripts checked for letters, most common first.
// It is built once and only read.
var scriptTables = func() []namedScript {
	first := []string{"Latin", "Cyrillic", "Greek", "Han", "Arabic", "Hebrew", "Hiragana", "Katakana", "Hangul", "Armenian", "Cherokee"}
	out := make([]namedScript, 0, len(unicode.Scripts))
	seen := map[string]bool{"Common": true, "Inherited": true}
	for _, n := range first {
		out = append(out, namedScript{n, unicode.Scripts[n]})
		seen[n] = true
	}
	for n, t := range unicode.Scripts {
		if !seen[n] {
			out = append(out, namedScript{n, t})
		}
	}
	return out
}()

func scriptOf(r rune) string {
	if r < 0x80 {
		if (r|0x20) >= 'a' && (r|0x20) <= 'z' {
			return "Latin"
		}
		return ""
	}
	// Decimal digits of other scripts (a Bengali zero) count in their
	// script; other marks and symbols belong to none.
	if !unicode.IsLetter(r) && !unicode.Is(unicode.Nd, r) {
		return ""
	}
	for _, s := range scriptTables {
		if unicode.Is(s.table, r) {
			return s.name
		}
	}
	return ""
}

// latinOnly is wordScripts of an ASCII word with letters.
var latinOnly = []string{"Latin"}

// asciiWord reports whether w is all ASCII, and whether it has letters.
func asciiWord(w string) (ascii, letters bool) {
	for i := 0; i < len(w); i++ {
		b := w[i]
		if b >= 0x80 {
			return false, false
		}
		if (b|0x20) >= 'a' && (b|0x20) <= 'z' {
			letters = true
		}
	}
	return true, letters
}

// wordScripts lists the scripts of a word's letters in order of first use.
// ASCII digits belong to no script, except beside another script's digits:
// "1\u09E60" mixes a Bengali zero into an ASCII number.
func wordScripts(w string) []string {
	if ascii, letters := asciiWord(w); ascii {
		// Most words: no script but Latin, nothing to allocate. The list
		// is shared; callers only read it.
		if letters {
			return latinOnly
		}
		return nil
	}
	var out []string
	asciiDigit, otherDigit := false, false
	for _, r := range w {
		if r >= '0' && r <= '9' {
			asciiDigit = true
		} else if r >= 0x80 && unicode.Is(unicode.Nd, r) {
			otherDigit = true
		}
	}
	if asciiDigit && otherDigit {
		out = append(out, "ASCII digits")
	}
	for _, r := range w {
		sc := scriptOf(r)
		if sc == "" {
			continue
		}
		known := false
		for _, o := range out {
			if o == sc {
				known = true
				break
			}
		}
		if !known {
			out = append(out, sc)
		}
	}
	return out
}

// allowedMixes are the script sets that one word may legitimately combine
// (Unicode TS #39, "highly restrictive").
var allowedMixes = [][]string{
	{"Latin", "Han", "Hiragana", "Katakana"},
	{"Latin", "Han", "Bopomofo"},
	{"Latin", "Han", "Hangul"},
}

func allowedMix(scripts []string) bool {
next:
	for _, set := range allowedMixes {
		for _, s := range scripts {
			found := false
			for _, a := range set {
				if a == s {
					found = true
					break
				}
			}
			if !found {
				continue next
			}
		}
		return true
	}
	return false
}
