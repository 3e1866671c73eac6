package pgstore_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/pgstore"
	"github.com/countersign/countersign/internal/pgtest"
)

// TestAuditDeleteNeedsThePrunePermit: the audit table refuses updates,
// TRUNCATE and deletes; a delete passes only inside a transaction that
// holds the prune permit row, as a prune does.
func TestAuditDeleteNeedsThePrunePermit(t *testing.T) {
	url := pgtest.Database(t)
	ctx := context.Background()
	d, err := pgstore.Open(ctx, url, pgstore.Options{MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for range 2 {
		if _, _, err := account.NewService(d.Accounts(), nil).CreateToken(ctx, "agent:a", "host", "", "cli:root", audit.ChannelCLI); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, q := range []string{`UPDATE audit SET kind = 'x' WHERE seq = 1`, `DELETE FROM audit WHERE seq = 1`, `TRUNCATE audit`} {
		if _, err := conn.Exec(ctx, q); err == nil {
			t.Errorf("%s succeeded without the prune permit", q)
		}
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`INSERT INTO audit_prune_permit (id) VALUES (1)`, `DELETE FROM audit WHERE seq = 1`, `DELETE FROM audit_prune_permit`} {
		if _, err := tx.Exec(ctx, q); err != nil {
			t.Fatalf("%s inside the prune's transaction: %v", q, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `DELETE FROM audit WHERE seq = 2`); err == nil {
		t.Error("a delete succeeded after the permit was removed")
	}
	if _, err := conn.Exec(ctx, `UPDATE audit SET kind = 'x' WHERE seq = 2`); err == nil {
		t.Error("an update succeeded")
	}
}
