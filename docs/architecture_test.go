package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestArchitectureNamesEveryPackage: docs/architecture.md's package table
// names every Go package under internal/, cmd/ and web/, so a new package
// cannot be added without saying what it is for.
func TestArchitectureNamesEveryPackage(t *testing.T) {
	doc, err := os.ReadFile("architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, root := range []string{"internal", "cmd", "web"} {
		err := filepath.WalkDir(filepath.Join("..", root), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() || d.Name() == "testdata" {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			if !hasGoSource(t, path) {
				return nil
			}
			pkg := filepath.ToSlash(strings.TrimPrefix(path, ".."+string(filepath.Separator)))
			n++
			if !strings.Contains(string(doc), "| `"+pkg+"` |") {
				t.Errorf("docs/architecture.md does not name package %s in its package table", pkg)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if n < 20 {
		t.Fatalf("found only %d packages: is the walk looking in the right place?", n)
	}
}

// hasGoSource reports whether dir holds a Go file that is not a test.
func hasGoSource(t *testing.T, dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".go") && !strings.HasSuffix(e.Name(), "_test.go") {
			return true
		}
	}
	return false
}
