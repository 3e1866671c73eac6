package db

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
)

// BenchmarkStatementShapes times, on one connection outside any
// transaction, the statements a write transaction and a read of a call
// used to run against the ones that replaced them (statements.go,
// writer.go readTxState, store.go loadCall):
//
//	go test -run '^$' -bench BenchmarkStatementShapes -count 3 ./internal/db/
func BenchmarkStatementShapes(b *testing.B) {
	d, err := Open(filepath.Join(b.TempDir(), "countersign.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	ctx := context.Background()
	for range 50 {
		if err := d.AppendAudit(ctx, &audit.Entry{Time: audit.FormatTime(time.Now()), Kind: audit.KindSubmitted, CallID: "call_b",
			Principal: "agent:a", Channel: audit.ChannelAPI}); err != nil {
			b.Fatal(err)
		}
	}
	if err := d.Store().Update(ctx, func(tx queue.Tx) error {
		if err := tx.InsertCall(groupCall("call_b")); err != nil {
			return err
		}
		return tx.AddApproval("call_b", queue.Approval{Operator: "alice", Channel: "web", At: time.Now()})
	}); err != nil {
		b.Fatal(err)
	}
	conn, err := d.SQL().Conn(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	run := func(b *testing.B, qs ...string) {
		for b.Loop() {
			for _, q := range qs {
				rows, err := conn.QueryContext(ctx, q, "call_b")
				if err != nil {
					b.Fatal(err)
				}
				cols, _ := rows.Columns()
				dest := make([]any, len(cols))
				for i := range dest {
					dest[i] = new(sql.RawBytes)
				}
				for rows.Next() {
					if err := rows.Scan(dest...); err != nil {
						b.Fatal(err)
					}
				}
				rows.Close()
			}
		}
	}
	// The identity, the audit head, whether a freeze is in force and the
	// latest rollback: four statements of the writes before, one now.
	// (The statements take the call id as an argument they ignore.)
	b.Run("tx-state/four", func(b *testing.B) {
		run(b, `SELECT value FROM meta WHERE key = 'identity' AND ? IS NOT NULL`,
			`SELECT seq, hash FROM audit WHERE ? IS NOT NULL ORDER BY seq DESC LIMIT 1`,
			`SELECT EXISTS (SELECT 1 FROM freezes INDEXED BY freezes_active WHERE lifted_at IS NULL) WHERE ? IS NOT NULL`,
			`SELECT MAX(accepted_at) FROM rollbacks WHERE ? IS NOT NULL`)
	})
	b.Run("tx-state/one", func(b *testing.B) {
		run(b, `SELECT (SELECT value FROM meta WHERE key = 'identity'),
			(SELECT seq FROM audit ORDER BY seq DESC LIMIT 1), (SELECT hash FROM audit ORDER BY seq DESC LIMIT 1),
			EXISTS (SELECT 1 FROM freezes INDEXED BY freezes_active WHERE lifted_at IS NULL),
			(SELECT MAX(accepted_at) FROM rollbacks) WHERE ? IS NOT NULL`)
	})
	// A call with one approval: the call and its approvals by two
	// statements, joined, and by correlated subqueries (loadCall).
	b.Run("call/two-statements", func(b *testing.B) {
		run(b, `SELECT `+callColumns+` FROM calls WHERE id = ?`,
			`SELECT operator, channel, at, comment, passkey_id, passkey_name, evidence FROM approvals WHERE call_id = ?`)
	})
	b.Run("call/joined", func(b *testing.B) {
		run(b, `SELECT `+qualified+`, a.operator, a.channel, a.at, a.comment, a.passkey_id, a.passkey_name, a.evidence
			FROM calls c LEFT JOIN approvals a ON a.call_id = c.id WHERE c.id = ?`)
	})
	b.Run("call/subqueries", func(b *testing.B) {
		run(b, `SELECT `+callReadColumns+` FROM calls c WHERE c.id = ?`)
	})
}
