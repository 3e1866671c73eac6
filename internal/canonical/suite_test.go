package canonical

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// vectors returns the folder of the public test vectors kept in testdata
// (their sources and licences are in testdata/README.md).
func vectors(tb testing.TB, name string) string {
	tb.Helper()
	dir := filepath.Join("testdata", name)
	if _, err := os.Stat(dir); err != nil {
		tb.Fatalf("test vectors not found at %s: %v", dir, err)
	}
	return dir
}

func TestJSONTestSuite(t *testing.T) {
	dir := filepath.Join(vectors(t, "jsontestsuite"), "test_parsing")
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no suite files in %s: %v", dir, err)
	}
	var yesAccepted, yesRefused int
	for _, f := range files {
		name := filepath.Base(f)
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		v, perr := ParseWith(data, Options{MaxDepth: 64})
		switch name[0] {
		case 'n':
			if perr == nil {
				t.Errorf("%s: accepted, want rejected", name)
			}
		case 'y':
			if perr == nil {
				yesAccepted++
				assertRoundTrip(t, name, v)
				continue
			}
			var p *Problem
			if !errors.As(perr, &p) {
				t.Fatalf("%s: error %T is not a *Problem", name, perr)
			}
			switch {
			case p.Code == CodeFloatNotAllowed:
			case p.Code == CodeDuplicateKey && strings.HasPrefix(name, "y_object_duplicated_key"):
			default:
				t.Errorf("%s: refused with %v, want accepted", name, perr)
			}
			yesRefused++
		case 'i':
			if perr == nil {
				assertRoundTrip(t, name, v)
			}
		}
	}
	if yesAccepted != 78 || yesRefused != 17 {
		t.Errorf("y_ files: %d accepted and %d refused, want 78 and 17", yesAccepted, yesRefused)
	}
}

// assertRoundTrip checks that an accepted value encodes, re-parses and
// encodes to the same bytes.
func assertRoundTrip(t *testing.T, name string, v any) {
	t.Helper()
	b, err := Encode(v)
	if err != nil {
		t.Errorf("%s: encode: %v", name, err)
		return
	}
	v2, err := ParseWith(b, Options{MaxDepth: 64})
	if err != nil {
		t.Errorf("%s: re-parse of %q: %v", name, b, err)
		return
	}
	b2, err := Encode(v2)
	if err != nil || !bytes.Equal(b, b2) {
		t.Errorf("%s: round trip changed %q to %q (%v)", name, b, b2, err)
	}
}

func TestJCSVectors(t *testing.T) {
	dir := vectors(t, "jcs")
	for _, name := range []string{"arrays", "french", "unicode", "weird", "values", "structures"} {
		t.Run(name, func(t *testing.T) {
			in, err := os.ReadFile(filepath.Join(dir, "input", name+".json"))
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(filepath.Join(dir, "output", name+".json"))
			if err != nil {
				t.Fatal(err)
			}
			v, err := Parse(in)
			if name == "values" || name == "structures" {
				var p *Problem
				if !errors.As(err, &p) || p.Code != CodeFloatNotAllowed {
					t.Fatalf("Parse error = %v, want %s", err, CodeFloatNotAllowed)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			got, err := Encode(v)
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("Encode =\n%s\nwant\n%s", got, want)
			}
		})
	}
}
