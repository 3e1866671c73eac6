package db

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/testkit"
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

// floor is a database opened with DSN, as Open opens Countersign's, with
// one table whose primary key is random text like a jti.
type floor struct {
	sql  *sql.DB
	keys []string
}

func newFloor(b *testing.B, n int) *floor {
	path := filepath.Join(b.TempDir(), "floor.db")
	sqldb, err := sql.Open("sqlite3", DSN(path))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sqldb.Close() })
	sqldb.SetMaxOpenConns(8) // as Open does
	sqldb.SetMaxIdleConns(8)
	if _, err := sqldb.Exec(`CREATE TABLE floor (k TEXT PRIMARY KEY) STRICT`); err != nil {
		b.Fatal(err)
	}
	f := &floor{sql: sqldb, keys: make([]string, n)}
	for i := range f.keys {
		var k [16]byte
		rand.Read(k[:])
		f.keys[i] = hex.EncodeToString(k[:])
	}
	return f
}

// insert is the floor's operation: BEGIN IMMEDIATE (the DSN's _txlock);
// INSERT; COMMIT.
func (f *floor) insert(ctx context.Context, i int) error {
	tx, err := f.sql.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO floor (k) VALUES (?)`, f.keys[i]); err != nil {
		return err
	}
	return tx.Commit()
}

func (f *floor) check(b *testing.B, want int) {
	if got := countRows(b, f.sql, `SELECT COUNT(*) FROM floor`); got != want {
		b.Fatalf("floor rows = %d, want %d", got, want)
	}
}

// redemptions are n approved calls ready to redeem.
type redemptions struct {
	l      *ledger
	bodies [][]byte
}

func newRedemptions(b *testing.B, n int) *redemptions {
	l := newLedger(b, testkit.NewClock(epoch).Now) // a still clock: no grant expires during setup
	r := &redemptions{l: l, bodies: make([][]byte, n)}
	for i := range r.bodies {
		r.bodies[i] = redemptionBody(MustApprove(b, l))
	}
	return r
}

func (r *redemptions) redeem(ctx context.Context, i int) error {
	res, err := r.l.q.Redeem(ctx, agent, r.bodies[i])
	if err != nil {
		return err
	}
	if !res.Accepted {
		return fmt.Errorf("redemption %d refused: %s", i, res.Reason)
	}
	return nil
}

func (r *redemptions) check(b *testing.B, want int) {
	if got := countRows(b, r.l.db.SQL(), `SELECT COUNT(*) FROM redemptions`); got != want {
		b.Fatalf("redemptions = %d, want %d", got, want)
	}
}

func benchFloor(b *testing.B, writers int) {
	f := newFloor(b, b.N)
	runConcurrently(b, writers, func(i int) error { return f.insert(context.Background(), i) })
	f.check(b, b.N)
}

func benchRedeem(b *testing.B, redeemers int) {
	r := newRedemptions(b, b.N)
	runConcurrently(b, redeemers, func(i int) error { return r.redeem(context.Background(), i) })
	r.check(b, b.N)
}

// BenchmarkLedgerPaired measures one redeemer against the floor with the
// two alternating operation by operation, so that both see the same disk
// at the same moment, and reports both rates, their ratio, and the ratio
// of their median latencies (which disregards bursts of other I/O).
func BenchmarkLedgerPaired(b *testing.B) {
	ctx := context.Background()
	f := newFloor(b, b.N)
	r := newRedemptions(b, b.N)
	floorTimes := make([]time.Duration, b.N)
	redeemTimes := make([]time.Duration, b.N)
	var floorCPU, redeemCPU time.Duration
	b.ResetTimer()
	for i := range b.N {
		c0, t0 := cpuTime(b), time.Now()
		if err := f.insert(ctx, i); err != nil {
			b.Fatal(err)
		}
		c1, t1 := cpuTime(b), time.Now()
		if err := r.redeem(ctx, i); err != nil {
			b.Fatal(err)
		}
		c2, t2 := cpuTime(b), time.Now()
		floorTimes[i], redeemTimes[i] = t1.Sub(t0), t2.Sub(t1)
		floorCPU += c1 - c0
		redeemCPU += c2 - c1
	}
	b.StopTimer()
	f.check(b, b.N)
	r.check(b, b.N)
	floorRate := float64(b.N) / sum(floorTimes).Seconds()
	redeemRate := float64(b.N) / sum(redeemTimes).Seconds()
	b.ReportMetric(floorRate, "floor-ops/s")
	b.ReportMetric(redeemRate, "redeem-ops/s")
	b.ReportMetric(redeemRate/floorRate, "ratio")
	b.ReportMetric(float64(median(floorTimes))/float64(median(redeemTimes)), "p50-ratio")
	b.ReportMetric(float64(floorCPU.Microseconds())/float64(b.N), "floor-cpu-µs/op")
	b.ReportMetric(float64(redeemCPU.Microseconds())/float64(b.N), "redeem-cpu-µs/op")
}

// cpuTime is the CPU time the process has used, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func sum(ds []time.Duration) time.Duration {
	var t time.Duration
	for _, d := range ds {
		t += d
	}
	return t
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
