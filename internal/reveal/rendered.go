package reveal

import (
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/bidi"
)

// Rendered is s as a reader sees it on screen, for a preview beside its
// escaped form: its characters in the order the Unicode bidirectional
// algorithm displays them in a left-to-right paragraph (each line its own
// paragraph, lines joined by a space), with every character that String
// escapes left out, as nothing of them shows. ok is false when s holds no
// bidirectional control: then it reads as its escaped form does, less the
// escapes, and needs no preview.
//
// The result holds no bidirectional control and is already in display
// order: it must be shown with a left-to-right override (<bdo dir="ltr">)
// so that the browser does not reorder it again. It is cut to max
// characters (with "…") when max > 0.
func Rendered(s string, max int) (out string, ok bool) {
	if !hasBidi(s) {
		return "", false
	}
	var b strings.Builder
	for i, line := range strings.Split(strings.ReplaceAll(s, "\r\n", "\n"), "\n") {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(visible(displayOrder(line)))
	}
	out = b.String()
	if max > 0 && utf8.RuneCountInString(out) > max {
		out = string([]rune(out)[:max]) + "…"
	}
	return out, true
}

// hasBidi reports whether s holds a bidirectional control.
func hasBidi(s string) bool {
	for _, r := range s {
		if _, kind := classifyRune(r); kind == KindBidi {
			return true
		}
	}
	return false
}

// displayOrder is one paragraph's characters in display order; the
// paragraph as it is if the algorithm fails on it.
func displayOrder(line string) string {
	var p bidi.Paragraph
	if _, err := p.SetString(line, bidi.DefaultDirection(bidi.LeftToRight)); err != nil {
		return line
	}
	o, err := p.Order()
	if err != nil {
		return line
	}
	var b strings.Builder
	for i := 0; i < o.NumRuns(); i++ {
		r := o.Run(i)
		if r.Direction() == bidi.RightToLeft {
			b.WriteString(bidi.ReverseString(r.String()))
		} else {
			b.WriteString(r.String())
		}
	}
	return b.String()
}

// visible leaves out what reveal would escape: nothing of it shows.
func visible(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\t' {
			return ' '
		}
		if escape, _ := classifyRune(r); escape {
			return -1
		}
		return r
	}, s)
}
