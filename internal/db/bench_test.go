package db

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
)

// benchWriters are the numbers of concurrent redeemers (and floor writers)
// measured.
var benchWriters = []int{1, 4, 16}

// BenchmarkLedger measures redemption end to end through Service.Redeem
// (strict parse, grant verification, then one BEGIN IMMEDIATE transaction
// that re-checks time and status, consumes the nonce, marks the call
// redeemed and appends the audit entry) beside a floor: a bare BEGIN
// IMMEDIATE; INSERT of a random primary key; COMMIT on a database opened
// with the same DSN, in the same run.
func BenchmarkLedger(b *testing.B) {
	for _, n := range benchWriters {
		b.Run(fmt.Sprintf("floor/writers=%d", n), func(b *testing.B) { benchFloor(b, n) })
		b.Run(fmt.Sprintf("redeem/writers=%d", n), func(b *testing.B) { benchRedeem(b, n) })
	}
}

// runConcurrently runs op b.N times, spread over n goroutines, and reports
// the rate.
func runConcurrently(b *testing.B, n int, op func(i int) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	b.ResetTimer()
	for range n {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= b.N || failed.Load() != nil {
					return
				}
				if err := op(i); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

func benchFloor(b *testing.B, writers int) {
	path := filepath.Join(b.TempDir(), "floor.db")
	sqldb, err := sql.Open("sqlite3", DSN(path))
	if err != nil {
		b.Fatal(err)
	}
	defer sqldb.Close()
	sqldb.SetMaxOpenConns(8) // as Open does
	sqldb.SetMaxIdleConns(8)
	if _, err := sqldb.Exec(`CREATE TABLE floor (k TEXT PRIMARY KEY) STRICT`); err != nil {
		b.Fatal(err)
	}
	keys := make([]string, b.N)
	for i := range keys {
		var k [16]byte
		rand.Read(k[:])
		keys[i] = hex.EncodeToString(k[:])
	}
	ctx := context.Background()
	runConcurrently(b, writers, func(i int) error {
		tx, err := sqldb.BeginTx(ctx, nil) // BEGIN IMMEDIATE via the DSN's _txlock
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, `INSERT INTO floor (k) VALUES (?)`, keys[i]); err != nil {
			return err
		}
		return tx.Commit()
	})
	if got := countRows(b, sqldb, `SELECT COUNT(*) FROM floor`); got != b.N {
		b.Fatalf("floor rows = %d, want %d", got, b.N)
	}
}

func benchRedeem(b *testing.B, redeemers int) {
	l := newLedger(b, newTestClock().Now) // a still clock: no grant expires during setup
	bodies := make([][]byte, b.N)
	for i := range bodies {
		bodies[i] = redemptionBody(MustApprove(b, l))
	}
	ctx := context.Background()
	runConcurrently(b, redeemers, func(i int) error {
		r, err := l.q.Redeem(ctx, agent, bodies[i])
		if err != nil {
			return err
		}
		if !r.Accepted {
			return fmt.Errorf("redemption %d refused: %s", i, r.Reason)
		}
		return nil
	})
	if got := countRows(b, l.db.SQL(), `SELECT COUNT(*) FROM redemptions`); got != b.N {
		b.Fatalf("redemptions = %d, want %d", got, b.N)
	}
}
