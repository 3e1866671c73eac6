package templates

import (
	"bytes"
	"context"
	"html"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/a-h/templ"
)

// TestStrEscapesAsTempl checks str against templ's own escaping of
// `{ s }` on strings with every character it escapes, and random ones.
func TestStrEscapesAsTempl(t *testing.T) {
	cases := []string{"", "plain", `a <b> & 'c' "d"`, "&&", "<", `"`, "tail&", "Привет \u202e world"}
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []rune("ab <>&'\"é\u202e\n")
	for range 2000 {
		n := r.IntN(12)
		var b strings.Builder
		for range n {
			b.WriteRune(alphabet[r.IntN(len(alphabet))])
		}
		cases = append(cases, b.String())
	}
	for _, s := range cases {
		var got bytes.Buffer
		if err := str(s).Render(context.Background(), &got); err != nil {
			t.Fatal(err)
		}
		if want := templ.EscapeString(s); got.String() != want {
			t.Fatalf("str(%q) wrote %q, want %q", s, got.String(), want)
		}
		if want := html.EscapeString(s); got.String() != want {
			t.Fatalf("str(%q) wrote %q, want %q", s, got.String(), want)
		}
	}
}

// TestLeavesRenderWithoutAllocating holds the components the call page
// renders once per field (agent text, plain strings, times, the status
// pill) to no allocation each, a time to one (its formatting buffer, which
// the writer's interface makes escape): as templ components they cost
// three or more each (the component's closure and its context,
// fmt.Sprint's two per string, one per attribute value), ten for a time,
// dozens per page.
func TestLeavesRenderWithoutAllocating(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	text := Text{Segs: []Seg{{Kind: SegText, S: "refund <duplicate>"}, {Kind: SegText, S: " & more"}}}
	w := bufioDiscard()
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		budget float64
		render func() error
	}{
		{"T", 0, func() error { return T(text).Render(ctx, w) }},
		{"str", 0, func() error { return str(`a "quoted" & <tagged> word`).Render(ctx, w) }},
		{"space", 0, func() error { return space.Render(ctx, w) }},
		{"When", 1, func() error { return When(at).Render(ctx, w) }},
		{"countdown", 1, func() error {
			return countdown(at, at.Add(312*time.Second), true, "countdown").Render(ctx, w)
		}},
		{"StatusPill", 0, func() error {
			return StatusPill("approved", "expired", "status-value").Render(ctx, w)
		}},
	} {
		if n := testing.AllocsPerRun(100, func() {
			if err := tc.render(); err != nil {
				t.Fatal(err)
			}
		}); n > tc.budget {
			t.Errorf("%s: %.1f allocations per render, want at most %.0f", tc.name, n, tc.budget)
		}
	}
}

// bufioDiscard is a writer like the templ buffer a page renders into.
func bufioDiscard() io.Writer { return &discard{} }

type discard struct{}

func (*discard) Write(p []byte) (int, error)       { return len(p), nil }
func (*discard) WriteString(s string) (int, error) { return len(s), nil }

// TestLeavesRenderAsBefore checks the markup of When, countdown and
// StatusPill, which were templ components, byte for byte.
func TestLeavesRenderAsBefore(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.FixedZone("X", 3600))
	for _, tc := range []struct {
		c interface {
			Render(context.Context, io.Writer) error
		}
		want string
	}{
		{When(at), `<time datetime="2026-03-04T04:06:07Z" data-local title="2026-03-04 04:06:07 UTC">2026-03-04 04:06:07 UTC</time>`},
		{When(time.Time{}), `—`},
		{countdown(at, at.Add(312*time.Second), true, ""),
			`<time data-countdown datetime="2026-03-04T04:11:19Z" title="decide by 2026-03-04 04:11:19 UTC">5 min 12 s left</time>`},
		{countdown(at, at.Add(50*time.Hour), false, "countdown"),
			`<time data-countdown datetime="2026-03-06T06:06:07Z" data-testid="countdown">2 days left</time>`},
		{countdown(at, at.Add(-time.Second), false, ""), `<time data-countdown datetime="2026-03-04T04:06:06Z">deadline passed</time>`},
		{StatusPill("pending", "", ""), `<span class="status-pill pending">pending</span>`},
		{StatusPill("approved", "expired", "status-value"), `<span class="status-pill approved wraps" data-testid="status-value">approved — grant expired unredeemed</span>`},
		{StatusPill("", "", ""), `<span class="status-pill ">` + `</span>`},
		{T(Text{Segs: []Seg{{Kind: SegText, S: "a<b"}, {Kind: SegEscape, S: "[U+202E]", Note: `right-to-left "override"`}, {Kind: SegBreak}, {Kind: SegMixed, S: "pаypal", Note: "mixed"}}}),
			`a&lt;b<span class="esc" title="right-to-left &#34;override&#34;" data-testid="escape">[U+202E]</span><br><span class="mixed" title="mixed" data-testid="mixed-script">pаypal</span>`},
	} {
		var b bytes.Buffer
		if err := tc.c.Render(context.Background(), &b); err != nil {
			t.Fatal(err)
		}
		if b.String() != tc.want {
			t.Errorf("rendered %s\nwant     %s", b.String(), tc.want)
		}
	}
}
