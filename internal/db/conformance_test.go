package db

import (
	"path/filepath"
	"testing"

	"github.com/countersign/countersign/internal/store/storetest"
)

// TestConformance runs the store conformance suite on SQLite.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Stores {
		d, err := Open(filepath.Join(t.TempDir(), "countersign.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return storetest.Stores{Queue: d.Store(), History: d.Store(), Accounts: d.Accounts(), Audit: d}
	})
}
