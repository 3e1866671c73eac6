package db

import (
	"path/filepath"
	"testing"

	"github.com/countersign/countersign/internal/mcp/catalog/catalogtest"
)

// TestCatalogConformance runs the catalog store's conformance suite on a
// fresh SQLite file.
func TestCatalogConformance(t *testing.T) {
	catalogtest.Run(t, func(t *testing.T) catalogtest.Harness {
		d, err := Open(filepath.Join(t.TempDir(), "countersign.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return catalogtest.Harness{Store: d.Catalog(), Outbox: d.Outbox(), AuditKinds: func(t testing.TB) []string {
			t.Helper()
			rows, err := d.SQL().Query(`SELECT kind FROM audit ORDER BY seq`)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			var out []string
			for rows.Next() {
				var k string
				if err := rows.Scan(&k); err != nil {
					t.Fatal(err)
				}
				out = append(out, k)
			}
			return out
		}}
	})
}
