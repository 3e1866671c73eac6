package db

import (
	"path/filepath"
	"testing"

	"github.com/countersign/countersign/internal/store/storetest"
)

// TestConformance runs the store conformance suite on SQLite (the same
// suite runs on PostgreSQL in internal/pgstore).
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Stores {
		return conformanceStores(t, filepath.Join(t.TempDir(), "countersign.db"))
	})
}

// conformanceStores opens a handle on the database file; Reopen opens
// another on the same file, as another process would.
func conformanceStores(t *testing.T, path string) storetest.Stores {
	d, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return storetest.Stores{Queue: d.Store(), History: d.Store(), Accounts: d.Accounts(), Audit: d, Outbox: d.Outbox(), Push: d.Outbox(),
		Reopen: func(t *testing.T) storetest.Stores { return conformanceStores(t, path) }}
}
