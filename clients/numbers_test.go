package clients

import (
	"errors"
	"flag"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/canonical"
)

var update = flag.Bool("update", false, "rewrite testdata/numbers.txt with the console's digests")

var numbersHeader = regexp.MustCompile(`^-- ([a-z0-9-]+) numbers=(\S+) (digest|refused)=(\S*) --$`)

// TestNumberCorpus checks that testdata/numbers.txt, which the client suites
// read, holds the console's own digests and refusals for bodies with
// numbers at number paths.
func TestNumberCorpus(t *testing.T) {
	const file = "testdata/numbers.txt"
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(data), "\n")
	var out strings.Builder
	sections := 0
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if !strings.HasPrefix(line, "-- ") {
			out.WriteString(line)
			continue
		}
		m := numbersHeader.FindStringSubmatch(strings.TrimSuffix(line, "\n"))
		if m == nil {
			t.Fatalf("bad section header %q", line)
		}
		var body strings.Builder
		for i+1 < len(lines) && !strings.HasPrefix(lines[i+1], "-- ") {
			i++
			body.WriteString(lines[i])
		}
		sections++
		kind, got := digestWithNumbers(t, body.String(), strings.Split(m[2], ","))
		if *update {
			out.WriteString("-- " + m[1] + " numbers=" + m[2] + " " + kind + "=" + got + " --\n")
		} else if kind != m[3] || got != m[4] {
			t.Errorf("%s: the console gives %s=%s, the file says %s=%s (run with -update after a deliberate change)", m[1], kind, got, m[3], m[4])
		}
		out.WriteString(body.String())
	}
	if sections < 12 {
		t.Errorf("%d sections, want at least 12", sections)
	}
	if *update {
		if err := os.WriteFile(file, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// digestWithNumbers digests body as the console does for a tool whose schema
// declares numbers at the pointers (from the body's root, "*" for every item
// of an array): ("digest", HEX) or ("refused", "CODE:POINTER").
func digestWithNumbers(t *testing.T, body string, pointers []string) (string, string) {
	t.Helper()
	paths := &canonical.NumberPaths{}
	for _, p := range pointers {
		n := paths
		for _, seg := range strings.Split(strings.TrimPrefix(p, "/"), "/") {
			if seg == "*" {
				n = n.Items()
			} else {
				n = n.Member(seg)
			}
		}
		n.Accept()
	}
	v, err := canonical.ParseWith([]byte(body), canonical.Options{Numbers: paths})
	if err != nil {
		var p *canonical.Problem
		if !errors.As(err, &p) {
			t.Fatal(err)
		}
		return "refused", p.Code + ":" + p.Path
	}
	prop, problems := canonical.ProposalFrom(v, "", true)
	if len(problems) > 0 {
		return "refused", problems[0].Code + ":" + problems[0].Path
	}
	d, err := prop.Envelope("agent:mcp-bot", "mcp-gateway").Digest()
	if err != nil {
		t.Fatal(err)
	}
	return "digest", d
}
