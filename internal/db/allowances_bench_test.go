package db

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/store/sqlq"
)

// BenchmarkAllowancesFor times the read of a tool's open allowances that
// every submission of a tool with an allowance block runs, on one
// connection outside any transaction: as sqlq.AllowancesFor makes it,
// against the same rows read with ORDER BY and a bound LIMIT
// (sqlq/allowances.go says why the read has neither):
//
//	go test -run '^$' -bench BenchmarkAllowancesFor -count 3 ./internal/db/
func BenchmarkAllowancesFor(b *testing.B) {
	d, err := Open(filepath.Join(b.TempDir(), "countersign.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	ctx := context.Background()
	if err := d.Store().Update(ctx, func(tx queue.Tx) error { return tx.InsertCall(groupCall("call_b")) }); err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	if _, err := d.SQL().ExecContext(ctx, `INSERT INTO allowances (id, actor, audience, tool, tool_digest, base_call,
		base_digest, scope, scope_digest, uses, used, once_per_call, until, giver, confirmers, confirmers_needed, given_at)
		VALUES ('alw_b', 'agent:a', 'host', 'pay.refund', 'td', 'call_b', 'bd', ?, 'sd', 1000, 0, 0, ?, 'olga', '["olga"]', 1, ?)`,
		[]byte(strings.Repeat("s", 600)), now.Add(time.Hour).UnixMilli(), now.UnixMilli()); err != nil {
		b.Fatal(err)
	}
	conn, err := d.SQL().Conn(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	b.Run("read", func(b *testing.B) {
		for b.Loop() {
			if got, err := sqlq.AllowancesFor(ctx, shared{conn}, "agent:a", "host", "pay.refund", 64); err != nil || len(got) != 1 {
				b.Fatalf("AllowancesFor = %d, %v; want 1", len(got), err)
			}
		}
	})
	b.Run("ordered-bound-limit", func(b *testing.B) {
		for b.Loop() {
			rows, err := conn.QueryContext(ctx, `SELECT `+sqlq.AllowanceColumns+` FROM allowances
				WHERE actor = ? AND audience = ? AND tool = ? AND ended_at IS NULL ORDER BY given_at, id LIMIT ?`,
				"agent:a", "host", "pay.refund", int64(64))
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			for rows.Next() {
				n++
			}
			if err := rows.Close(); err != nil || n != 1 {
				b.Fatalf("%d rows, %v; want 1", n, err)
			}
		}
	})
}
