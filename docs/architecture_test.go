package docs

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
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

// A citation is one name the walk tables of docs/architecture.md give for a
// step: a function or method declared in a file.
type citation struct {
	line int    // in architecture.md
	file string // relative to the repository's root
	name string // Func, (*T).Method or (T).Method; a plain name in a .js file
}

var (
	// group is one file and its names: `internal/x/file.go` (`A`, `(*T).B`).
	group = regexp.MustCompile("^`([A-Za-z0-9_./-]+\\.(?:go|js))` \\(([^()]*(?:\\([^()]*\\)[^()]*)*)\\)$")
	// citedName is one backticked name inside a group's parentheses.
	citedName = regexp.MustCompile("^`((?:\\(\\*?[A-Za-z_][A-Za-z0-9_]*\\)\\.)?[A-Za-z_][A-Za-z0-9_]*)`$")
)

// walkCitations reads every table of doc whose last column is headed
// "code" and returns what its code cells cite. A code cell is one or more
// groups separated by "; ", each a backticked file and, in parentheses,
// its backticked names separated by ", ". A cell that does not read so is
// an error, so that a citation cannot escape the check by its spelling.
func walkCitations(doc string) ([]citation, []error) {
	var out []citation
	var errs []error
	inWalk := false
	for i, line := range strings.Split(doc, "\n") {
		n := i + 1
		if !strings.HasPrefix(line, "|") {
			inWalk = false
			continue
		}
		cells := splitRow(line)
		last := strings.TrimSpace(cells[len(cells)-1])
		switch {
		case !inWalk && last == "code":
			inWalk = true
			continue
		case !inWalk || strings.Trim(last, "- ") == "":
			continue
		}
		for _, g := range strings.Split(last, "; ") {
			m := group.FindStringSubmatch(g)
			if m == nil {
				errs = append(errs, fmt.Errorf("line %d: %q is not `file` (`Name`, ...)", n, g))
				continue
			}
			for _, name := range strings.Split(m[2], ", ") {
				nm := citedName.FindStringSubmatch(name)
				if nm == nil {
					errs = append(errs, fmt.Errorf("line %d: %q in %s is not `Func`, `(*T).Method` or `(T).Method`", n, name, m[1]))
					continue
				}
				out = append(out, citation{line: n, file: m[1], name: nm[1]})
			}
		}
	}
	return out, errs
}

// splitRow splits a table row into its cells; an escaped \| stays in its
// cell.
func splitRow(line string) []string {
	line = strings.TrimSpace(line)
	line = strings.TrimPrefix(strings.TrimSuffix(line, "|"), "|")
	var cells []string
	var cur strings.Builder
	for i := 0; i < len(line); i++ {
		switch {
		case line[i] == '\\' && i+1 < len(line) && line[i+1] == '|':
			cur.WriteString("\\|")
			i++
		case line[i] == '|':
			cells = append(cells, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(line[i])
		}
	}
	return append(cells, cur.String())
}

// goDecls returns the functions and methods declared in a Go file, spelt
// as the walk cites them: Func, (*T).Method, (T).Method (a generic
// receiver without its type parameters).
func goDecls(path string) (map[string]bool, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok {
			continue
		}
		if fd.Recv == nil || len(fd.Recv.List) == 0 {
			out[fd.Name.Name] = true
			continue
		}
		typ := fd.Recv.List[0].Type
		star := ""
		if s, ok := typ.(*ast.StarExpr); ok {
			star, typ = "*", s.X
		}
		switch t := typ.(type) {
		case *ast.IndexExpr:
			typ = t.X
		case *ast.IndexListExpr:
			typ = t.X
		}
		var b bytes.Buffer
		if err := printer.Fprint(&b, fset, typ); err != nil {
			return nil, err
		}
		out["("+star+b.String()+")."+fd.Name.Name] = true
	}
	return out, nil
}

// jsFunction matches a function declaration in a script.
var jsFunction = regexp.MustCompile(`(?m)^\s*function ([A-Za-z_$][A-Za-z0-9_$]*)\s*\(`)

// jsDecls returns the names of the functions a script declares.
func jsDecls(path string) (map[string]bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, m := range jsFunction.FindAllStringSubmatch(string(b), -1) {
		out[m[1]] = true
	}
	return out, nil
}

// TestArchitectureWalkNamesExist: every function and method the walk
// tables of docs/architecture.md cite is declared in the file the table
// names, so that a rename or a move cannot leave the walk pointing at
// nothing. Go files are parsed, not searched.
func TestArchitectureWalkNamesExist(t *testing.T) {
	doc, err := os.ReadFile("architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	cites, errs := walkCitations(string(doc))
	for _, err := range errs {
		t.Errorf("docs/architecture.md %v", err)
	}
	decls := map[string]map[string]bool{}
	files := map[string]bool{}
	for _, c := range cites {
		files[c.file] = true
		d, ok := decls[c.file]
		if !ok {
			path := filepath.Join("..", filepath.FromSlash(c.file))
			if strings.HasSuffix(c.file, ".go") {
				d, err = goDecls(path)
			} else {
				d, err = jsDecls(path)
			}
			if err != nil {
				t.Errorf("docs/architecture.md:%d cites %s: %v", c.line, c.file, err)
			}
			decls[c.file] = d
		}
		if d != nil && !d[c.name] {
			t.Errorf("docs/architecture.md:%d cites %s in %s, which declares no such function", c.line, c.name, c.file)
		}
	}
	// The walks are many rows long: finding few citations means the tables
	// were not recognised, not that there is little to check.
	if len(cites) < 60 || len(files) < 20 {
		t.Fatalf("found %d citations in %d files: are the walk tables' last columns headed \"code\"?", len(cites), len(files))
	}
}

// TestWalkCitations: the reader of the walk tables takes what the
// convention allows and refuses what it does not.
func TestWalkCitations(t *testing.T) {
	doc := "| step | what | code |\n| --- | --- | --- |\n" +
		"| 1 | a \\| b | `internal/q/s.go` (`Submit`, `(*Service).submit`); `web/static/app.js` (`carryFields`) |\n" +
		"| 2 | value receiver | `internal/db/store.go` (`(Store).Update`) |\n" +
		"| 3 | no parentheses | `internal/q/s.go` |\n" +
		"| 4 | unquoted name | `internal/q/s.go` (Submit) |\n" +
		"| 5 | qualified name | `internal/q/s.go` (`queue.Submit`) |\n" +
		"\n| other | file |\n| --- | --- |\n| x | `not/checked.go` (`Nothing`) |\n"
	cites, errs := walkCitations(doc)
	var got []string
	for _, c := range cites {
		got = append(got, c.file+" "+c.name)
	}
	want := []string{"internal/q/s.go Submit", "internal/q/s.go (*Service).submit", "web/static/app.js carryFields", "internal/db/store.go (Store).Update"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("citations %q, want %q", got, want)
	}
	if len(errs) != 3 {
		t.Errorf("%d errors, want 3 (rows 3, 4 and 5): %v", len(errs), errs)
	}
}
