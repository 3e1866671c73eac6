package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestAuditDocumentsEveryKind: the table of docs/audit.md §1 names every
// kind of audit entry the code declares, so that a new kind cannot be
// written without saying when and with which details. The kinds are read
// from the code: the string constants named Kind… in a const block whose
// comment says it declares audit kinds ("Kinds of entries", "Audit kinds
// of …").
func TestAuditDocumentsEveryKind(t *testing.T) {
	doc, err := os.ReadFile("audit.md")
	if err != nil {
		t.Fatal(err)
	}
	table := auditTable(t, string(doc))
	kinds := auditKinds(t)
	if len(kinds) < 30 {
		t.Fatalf("found %d audit kinds in the code (%v); the search for them is broken", len(kinds), kinds)
	}
	for kind, where := range kinds {
		if !table[kind] {
			t.Errorf("docs/audit.md §1 does not list the entry kind %q (%s)", kind, where)
		}
	}
	for kind := range table {
		if _, ok := kinds[kind]; !ok {
			t.Errorf("docs/audit.md §1 lists %q, which no audit kind constant declares", kind)
		}
	}
}

// auditTable returns the kinds named in the first column of the table
// of §1.
func auditTable(t *testing.T, doc string) map[string]bool {
	start := strings.Index(doc, "## 1. What is recorded")
	end := strings.Index(doc, "## 2.")
	if start < 0 || end < start {
		t.Fatal("docs/audit.md has no section 1 followed by section 2")
	}
	names := regexp.MustCompile("`([a-z_]+)`")
	out := map[string]bool{}
	for _, line := range strings.Split(doc[start:end], "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 || !strings.HasPrefix(line, "| `") {
			continue
		}
		for _, m := range names.FindAllStringSubmatch(cells[1], -1) {
			out[m[1]] = true
		}
	}
	return out
}

// auditKinds returns every declared audit kind with the file declaring it.
func auditKinds(t *testing.T) map[string]string {
	out := map[string]string{}
	fset := token.NewFileSet()
	for _, root := range []string{"internal", "cmd"} {
		err := filepath.WalkDir(filepath.Join("..", root), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
			if err != nil {
				return err
			}
			for _, decl := range f.Decls {
				gd, ok := decl.(*ast.GenDecl)
				if !ok || gd.Tok != token.CONST || gd.Doc == nil {
					continue
				}
				c := strings.ToLower(gd.Doc.Text())
				if !strings.Contains(c, "kinds of entries") && !strings.Contains(c, "audit kinds") {
					continue
				}
				for _, spec := range gd.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, name := range vs.Names {
						if !strings.HasPrefix(name.Name, "Kind") || i >= len(vs.Values) {
							continue
						}
						lit, ok := vs.Values[i].(*ast.BasicLit)
						if !ok || lit.Kind != token.STRING {
							continue
						}
						v, err := strconv.Unquote(lit.Value)
						if err != nil {
							return err
						}
						out[v] = filepath.ToSlash(path) + " " + name.Name
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}
