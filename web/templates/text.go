package templates

import (
	"context"
	"io"
	"strings"
	"time"

	"github.com/a-h/templ"
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

// When shows a time for people: in UTC as rendered, and in the viewer's
// own time zone once app.js has read the datetime attribute, with the UTC
// time on hover; "—" for the zero time. It writes
//
//	<time datetime="2006-01-02T15:04:05Z" data-local title="2006-01-02 15:04:05 UTC">2006-01-02 15:04:05 UTC</time>
//
// formatting into a buffer on the stack, where a templ component would
// format three strings and copy them twice more.
type When time.Time

// Render writes the time element.
func (t When) Render(_ context.Context, w io.Writer) error {
	tt := time.Time(t)
	if tt.IsZero() {
		_, err := io.WriteString(w, "—")
		return err
	}
	tt = tt.UTC()
	var buf [160]byte
	b := append(buf[:0], `<time datetime="`...)
	b = tt.AppendFormat(b, time.RFC3339)
	b = append(b, `" data-local title="`...)
	b = appendWhen(b, tt)
	b = append(b, `">`...)
	b = appendWhen(b, tt)
	b = append(b, `</time>`...)
	_, err := w.Write(b)
	return err
}

// whenLayout is how when formats a time.
const whenLayout = "2006-01-02 15:04:05 UTC"

// StatusPill is a call's status as people read it:
//
//	<span class="status-pill STATUS[ wraps]"[ data-testid="TESTID"]>LABEL</span>
//
// A label longer than the status word (StatusLabel) may wrap; a status
// word may not. testID "" leaves data-testid out.
func StatusPill(status, grantState, testID string) statusPill {
	return statusPill{status: status, grantState: grantState, testID: testID}
}

type statusPill struct{ status, grantState, testID string }

// Render writes the pill, its class as templ's class list writes
// `class={ "status-pill", status, templ.KV("wraps", …) }`: in order, each
// name once.
func (p statusPill) Render(_ context.Context, w io.Writer) error {
	label := StatusLabel(p.status, p.grantState)
	sw := seqWriter{w: w}
	sw.raw(`<span class="status-pill`)
	if p.status != "status-pill" {
		sw.raw(" ")
		sw.text(p.status)
	}
	if label != p.status && p.status != "wraps" {
		sw.raw(" wraps")
	}
	sw.raw(`"`)
	if p.testID != "" {
		sw.raw(` data-testid="`)
		sw.text(p.testID)
		sw.raw(`"`)
	}
	sw.raw(`>`)
	sw.text(label)
	sw.raw(`</span>`)
	return sw.err
}

// seqWriter writes one piece after another to w until a write fails, and
// keeps that error: markup written in pieces, checked once.
type seqWriter struct {
	w   io.Writer
	err error
}

// raw writes s as it is.
func (s *seqWriter) raw(v string) {
	if s.err == nil {
		_, s.err = io.WriteString(s.w, v)
	}
}

// text writes v escaped (writeEscaped).
func (s *seqWriter) text(v string) {
	if s.err == nil {
		s.err = writeEscaped(s.w, v)
	}
}

// prerendered is markup that a component rendered once, at start, from
// constants alone (no argument, nothing from a request), written as is on
// every page where rendering the component again would allocate for each
// of its attribute values.
type prerendered string

// prerender renders c, which must depend on nothing but constants.
func prerender(c templ.Component) prerendered {
	var b strings.Builder
	if err := c.Render(context.Background(), &b); err != nil {
		panic("templates: prerender: " + err.Error())
	}
	return prerendered(b.String())
}

// Render writes the markup.
func (p prerendered) Render(_ context.Context, w io.Writer) error {
	_, err := io.WriteString(w, string(p))
	return err
}

// headMeta and headAssets open every page's head.
var (
	headMeta   = prerender(headMetaTags())
	headAssets = prerender(headAssetTags())
)

// countdown is the time left until at, which app.js counts down:
//
//	<time data-countdown datetime="2006-01-02T15:04:05Z"[ title="decide by 2006-01-02 15:04:05 UTC"][ data-testid="TESTID"]>5 min 12 s left</time>
//
// title adds the deadline on hover ("decide by …"); testID "" leaves
// data-testid out. The text reads as left(now, at).
func countdown(now, at time.Time, title bool, testID string) countdownTag {
	return countdownTag{now: now, at: at, title: title, testID: testID}
}

type countdownTag struct {
	now, at time.Time
	title   bool
	testID  string
}

// Render writes the time element, formatted into a buffer on the stack.
func (c countdownTag) Render(_ context.Context, w io.Writer) error {
	at := c.at.UTC()
	var buf [192]byte
	b := append(buf[:0], `<time data-countdown datetime="`...)
	b = at.AppendFormat(b, time.RFC3339)
	b = append(b, '"')
	if c.title {
		b = append(b, ` title="decide by `...)
		b = appendWhen(b, c.at)
		b = append(b, '"')
	}
	if c.testID != "" {
		b = append(b, ` data-testid="`...)
		b = append(b, templ.EscapeString(c.testID)...)
		b = append(b, '"')
	}
	b = append(b, '>')
	if d := c.at.Sub(c.now); d <= 0 {
		b = append(b, "deadline passed"...)
	} else {
		b = append(appendSpan(b, d), " left"...)
	}
	b = append(b, `</time>`...)
	_, err := w.Write(b)
	return err
}

// appendWhen appends when(t).
func appendWhen(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return append(b, "—"...)
	}
	return t.UTC().AppendFormat(b, whenLayout)
}
