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
	return storetest.Stores{Queue: d.Store(), History: d.Store(), Accounts: d.Accounts(), Audit: d, Outbox: d.Outbox(), Push: d.Outbox(), Retention: d,
		Reopen: func(t *testing.T) storetest.Stores { return conformanceStores(t, path) },
		FillPush: func(t *testing.T, account string, n int) {
			if _, err := d.sql.Exec(`WITH RECURSIVE i(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM i WHERE n < ?)
				INSERT INTO push_subscriptions (endpoint, p256dh, auth, account, created_at)
				SELECT 'https://push.example/fill/' || n, 'p', 'a', ?, 0 FROM i`, n, account); err != nil {
				t.Fatal(err)
			}
		}}
}
