package canonical

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// TestDocNumbers checks every example of the number rule in
// docs/canonical.md: the literal at a number path, and the canonical text
// or the problem code it gives.
func TestDocNumbers(t *testing.T) {
	raw, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	start, end := docBlock(t, doc, "numbers")
	lines := strings.Split(strings.TrimSpace(doc[start:end]), "\n")
	if len(lines) < 10 {
		t.Fatalf("only %d examples", len(lines))
	}
	opt := Options{Numbers: numbersAt("x")}
	for _, line := range lines {
		f := strings.Fields(line)
		if len(f) != 2 {
			t.Fatalf("example %q: want a literal and a result", line)
		}
		lit, want := f[0], f[1]
		v, err := ParseWith([]byte(`{"x":`+lit+`}`), opt)
		if strings.Contains(want, "_") {
			var p *Problem
			if !errors.As(err, &p) || p.Code != want {
				t.Errorf("%s: %v, want %s", lit, err, want)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v, want %s", lit, err, want)
			continue
		}
		x, _ := v.(Object).Get("x")
		b, err := Encode(x)
		if err != nil || string(b) != want {
			t.Errorf("%s: canonical %s (%v), want %s", lit, b, err, want)
		}
	}
}
