package templates

import (
	"context"
	"io"
	"strings"
)

// T renders agent text: ordinary characters as text, deceptive ones as
// visible escapes (seg), mixed-script words highlighted. It is a type
// with a Render method rather than a templ component so that `@T(x)`
// costs no allocation: templ calls Render on the value itself, and the
// plain segments, nearly all of them, are written escaped by str.
type T Text

// Render writes t's segments.
func (t T) Render(ctx context.Context, w io.Writer) error {
	for _, s := range t.Segs {
		var err error
		if s.Kind == SegText {
			err = str(s.S).Render(ctx, w)
		} else {
			err = seg(s).Render(ctx, w)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// str is trusted text written as `{ s }` writes it, escaped the way
// templ.EscapeString (html.EscapeString) escapes, without the two
// allocations a string expression makes (templ formats every `{ s }`
// with fmt.Sprint). For the pages read on every decision.
type str string

// Render writes s escaped.
func (s str) Render(_ context.Context, w io.Writer) error {
	return writeEscaped(w, string(s))
}

// htmlSpecial is what html.EscapeString replaces.
const htmlSpecial = `&'<>"`

// writeEscaped writes s as html.EscapeString(s) reads, a run at a time.
func writeEscaped(w io.Writer, s string) error {
	for {
		i := strings.IndexAny(s, htmlSpecial)
		if i < 0 {
			_, err := io.WriteString(w, s)
			return err
		}
		if _, err := io.WriteString(w, s[:i]); err != nil {
			return err
		}
		var rep string
		switch s[i] {
		case '&':
			rep = "&amp;"
		case '\'':
			rep = "&#39;"
		case '<':
			rep = "&lt;"
		case '>':
			rep = "&gt;"
		default:
			rep = "&#34;"
		}
		if _, err := io.WriteString(w, rep); err != nil {
			return err
		}
		s = s[i+1:]
	}
}

// space is one space between elements, as `{ " " }` writes it.
const space = str(" ")
