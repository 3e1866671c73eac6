package db

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/queue"
)

// abChunk is how many operations each side runs before the other takes
// its turn, so that both see the disk in the same state.
const abChunk = 100

// side is one of the things a paired benchmark compares: op(i) for i in
// [0, n), spread over writers goroutines.
type side struct {
	name    string
	writers int
	op      func(i int) error
}

// pairedSides runs the sides' operations in alternating chunks until every
// side has done n, and returns each side's wall time and process CPU time.
func pairedSides(b *testing.B, n int, sides []side) (wall, cpu []time.Duration) {
	wall, cpu = make([]time.Duration, len(sides)), make([]time.Duration, len(sides))
	for start := 0; start < n; start += abChunk {
		end := min(start+abChunk, n)
		for s, sd := range sides {
			op := sd.op
			var next atomic.Int64
			next.Store(int64(start))
			var wg sync.WaitGroup
			var failed atomic.Pointer[error]
			c0, t0 := cpuTime(b), time.Now()
			for range sd.writers {
				wg.Go(func() {
					for {
						i := int(next.Add(1)) - 1
						if i >= end || failed.Load() != nil {
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
			wall[s] += time.Since(t0)
			cpu[s] += cpuTime(b) - c0
			if err := failed.Load(); err != nil {
				b.Fatal(*err)
			}
		}
	}
	return wall, cpu
}

// BenchmarkGroupCommit runs the same writes (a call and its audit entry,
// as a submission stores them) on two databases on the same disk, one
// with a transaction per write (the writer's batch limit at 1) and one
// with group commit, beside the floor (BEGIN IMMEDIATE; INSERT; COMMIT,
// one writer), the three alternating every 100 writes, and reports each
// side's rate and CPU per write:
//
//	go test -run '^$' -bench BenchmarkGroupCommit -benchtime 2000x -count 3 ./internal/db/
func BenchmarkGroupCommit(b *testing.B) {
	for _, writers := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			single, group := newLedger(b, nil), newLedger(b, nil)
			single.db.batchLimit = 1
			f := newFloor(b, b.N)
			write := func(d *DB, prefix string) func(int) error {
				return func(i int) error {
					return d.Store().Update(context.Background(), func(tx queue.Tx) error {
						return submitLike(tx, fmt.Sprintf("call_%s_%d", prefix, i))
					})
				}
			}
			b.ResetTimer()
			sides := []side{
				{"floor", 1, func(i int) error { return f.insert(context.Background(), i) }},
				{"single", writers, write(single.db, "single")},
				{"group", writers, write(group.db, "group")},
			}
			wall, cpu := pairedSides(b, b.N, sides)
			b.StopTimer()
			reportSides(b, sides, wall, cpu)
			b.ReportMetric(wall[1].Seconds()/wall[2].Seconds(), "group/single")
			b.ReportMetric(wall[0].Seconds()/wall[2].Seconds(), "group/floor")
		})
	}
}

// BenchmarkGroupCommitFlows runs whole flows in the process, through
// queue.Service on real database files (submit, approve by a person,
// redeem: three write transactions each), by 8 agents at once, with a
// transaction per write against group commit, beside the floor (three
// single-row commits per flow, one writer: the naive floor ÷ 3),
// alternating every 100 flows:
//
//	go test -run '^$' -bench BenchmarkGroupCommitFlows -benchtime 1000x -count 3 ./internal/db/
func BenchmarkGroupCommitFlows(b *testing.B) {
	const agents = 8
	single, group := newLedger(b, nil), newLedger(b, nil)
	single.db.batchLimit = 1
	f := newFloor(b, 3*b.N)
	flow := func(l *ledger) func(int) error {
		return func(int) error {
			c, err := l.approve(context.Background())
			if err != nil {
				return err
			}
			r, err := l.q.Redeem(context.Background(), agent, redemptionBody(c))
			if err != nil {
				return err
			}
			if !r.Accepted {
				return fmt.Errorf("redemption refused: %s", r.Reason)
			}
			return nil
		}
	}
	floorFlow := func(i int) error { // three commits, one after the other, as a flow's
		for k := range 3 {
			if err := f.insert(context.Background(), 3*i+k); err != nil {
				return err
			}
		}
		return nil
	}
	b.ResetTimer()
	sides := []side{{"floor", 1, floorFlow}, {"single", agents, flow(single)}, {"group", agents, flow(group)}}
	wall, cpu := pairedSides(b, b.N, sides)
	b.StopTimer()
	reportSides(b, sides, wall, cpu)
	b.ReportMetric(wall[0].Seconds()/wall[2].Seconds(), "group/floor")
	b.ReportMetric(wall[0].Seconds()/wall[1].Seconds(), "single/floor")
}

func reportSides(b *testing.B, sides []side, wall, cpu []time.Duration) {
	for s, sd := range sides {
		b.ReportMetric(float64(b.N)/wall[s].Seconds(), sd.name+"-ops/s")
		b.ReportMetric(float64(cpu[s].Microseconds())/float64(b.N), sd.name+"-cpu-µs/op")
	}
}
