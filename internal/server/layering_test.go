package server

import (
	"os/exec"
	"strings"
	"testing"
)

// The import rule: the server and the console depend on the domain's
// services and interfaces, never on a storage engine; the server never on
// the console (the console mounts on it); the domain packages import
// neither a store nor a transport; the control socket and the error
// vocabulary import no HTTP framework, socket or identity library.
// cmd/console alone wires the concrete store and the console. A second
// store (PostgreSQL) slots in only while this holds.
func TestImportRule(t *testing.T) {
	const mod = "github.com/countersign/countersign/"
	engines := []string{mod + "internal/db", mod + "internal/pgstore", "github.com/mattn/go-sqlite3", "github.com/jackc/pgx", "github.com/lib/pq"}
	rules := []struct {
		pkg       string
		forbidden []string
	}{
		{"./", append([]string{mod + "internal/console", "github.com/gorilla/websocket", "github.com/go-webauthn", "github.com/coreos/go-oidc"}, engines...)},
		{"../console", engines},
	}
	transports := []string{mod + "internal/server", mod + "internal/console", "github.com/labstack/echo", "github.com/gorilla/websocket",
		"github.com/go-webauthn", "github.com/coreos/go-oidc", "github.com/a-h/templ"}
	for _, p := range []string{"../control", "../problem", "../answer", "../wire"} {
		rules = append(rules, struct {
			pkg       string
			forbidden []string
		}{p, append(transports, engines...)})
	}
	for _, domain := range []string{"canonical", "queue", "grant", "account", "audit", "tools", "store", "notify", "mcp", "reveal"} {
		rules = append(rules, struct {
			pkg       string
			forbidden []string
		}{"../" + domain, append([]string{mod + "internal/server", mod + "internal/console", "github.com/labstack/echo"}, engines...)})
	}
	// The answers' shapes import only the standard library, and the public
	// client only them besides: an agent that imports the client does not
	// carry the console's domain (rules engine, keys, stores) with it.
	leaves := []struct{ dir, self, allowed string }{
		{"../wire", mod + "internal/wire", ""},
		{"../../client", mod + "client", mod + "internal/wire"},
	}
	for _, l := range leaves {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", l.dir).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", l.dir, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if dep != l.self && dep != l.allowed {
				t.Errorf("%s depends on %s: it may import only the standard library (and %q)", l.self, dep, l.allowed)
			}
		}
	}
	for _, r := range rules {
		out, err := exec.Command("go", "list", "-deps", r.pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", r.pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, f := range r.forbidden {
				if dep == f || strings.HasPrefix(dep, f+"/") {
					t.Errorf("%s depends on %s, which the import rule forbids it (docs/architecture.md)", r.pkg, dep)
				}
			}
		}
	}
}
