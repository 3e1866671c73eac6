package pgstore_test

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/countersign/countersign/internal/pgstore"
	"github.com/countersign/countersign/internal/pgtest"
	"github.com/countersign/countersign/internal/store/storetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func mustOpen(tb testing.TB, url string) *pgstore.DB {
	tb.Helper()
	d, err := pgstore.Open(context.Background(), url, pgstore.Options{MaxConns: 8})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { d.Close() })
	return d
}

// TestConformance runs the store conformance suite on PostgreSQL, a fresh
// database per case (the same suite runs on SQLite in internal/db).
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Stores { return conformanceStores(t, pgtest.Database(t)) })
}

// conformanceStores opens a pool on the database; Reopen opens another
// pool on the same database, as another replica would.
func conformanceStores(t *testing.T, url string) storetest.Stores {
	d := mustOpen(t, url)
	return storetest.Stores{Queue: d.Store(), History: d.Store(), Accounts: d.Accounts(), Audit: d, Outbox: d.Outbox(), Push: d.Outbox(), Retention: d,
		Reopen: func(t *testing.T) storetest.Stores { return conformanceStores(t, url) },
		FillPush: func(t *testing.T, account string, n int) {
			conn, err := pgx.Connect(context.Background(), url)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(context.Background())
			if _, err := conn.Exec(context.Background(), `INSERT INTO push_subscriptions (endpoint, p256dh, auth, account, created_at)
				SELECT 'https://push.example/fill/' || n, 'p', 'a', $2, 0 FROM generate_series(1, $1::int) AS n`, n, account); err != nil {
				t.Fatal(err)
			}
		}}
}
