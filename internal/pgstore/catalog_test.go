package pgstore_test

import (
	"context"
	"testing"

	"github.com/countersign/countersign/internal/mcp/catalog/catalogtest"
	"github.com/countersign/countersign/internal/pgtest"
)

// TestCatalogConformance runs the MCP catalog's suite (the same as
// SQLite's) on a fresh PostgreSQL database.
func TestCatalogConformance(t *testing.T) {
	catalogtest.Run(t, func(t *testing.T) catalogtest.Harness {
		d := mustOpen(t, pgtest.Database(t))
		return catalogtest.Harness{Store: d.Catalog(), Outbox: d.Outbox(), AuditKinds: func(t testing.TB) []string {
			t.Helper()
			rows, err := d.Pool().Query(context.Background(), `SELECT kind FROM audit ORDER BY seq`)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			var kinds []string
			for rows.Next() {
				var k string
				if err := rows.Scan(&k); err != nil {
					t.Fatal(err)
				}
				kinds = append(kinds, k)
			}
			return kinds
		}}
	})
}
