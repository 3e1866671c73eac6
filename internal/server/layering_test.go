package server

import (
	"os/exec"
	"strings"
	"testing"
)

// The import rule: the server depends on the domain's services and
// interfaces, never on a storage engine, and the domain packages import
// neither a store nor the server. cmd/console alone wires the concrete
// store. A second store (PostgreSQL) slots in only while this holds.
func TestImportRule(t *testing.T) {
	const mod = "github.com/countersign/countersign/"
	engines := []string{mod + "internal/db", mod + "internal/pgstore", "github.com/mattn/go-sqlite3", "github.com/jackc/pgx", "github.com/lib/pq"}
	rules := []struct {
		pkg       string
		forbidden []string
	}{
		{"./", engines},
	}
	for _, domain := range []string{"canonical", "queue", "grant", "account", "audit", "tools", "store", "notify", "mcp", "reveal"} {
		rules = append(rules, struct {
			pkg       string
			forbidden []string
		}{"../" + domain, append([]string{mod + "internal/server", "github.com/labstack/echo"}, engines...)})
	}
	for _, r := range rules {
		out, err := exec.Command("go", "list", "-deps", r.pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", r.pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, f := range r.forbidden {
				if dep == f || strings.HasPrefix(dep, f+"/") {
					t.Errorf("%s depends on %s; it must reach storage through the domain's interfaces (docs/architecture.md)", r.pkg, dep)
				}
			}
		}
	}
}
