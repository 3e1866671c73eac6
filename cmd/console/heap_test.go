package main

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync"
	"time"
)

// heapObjects is the runtime metric peakHeap samples: the bytes of heap
// objects, live or not yet swept.
const heapObjects = "/memory/classes/heap/objects:bytes"

// peakHeap runs f and returns the most heap its objects took while it ran,
// above what they took when it started (after a collection), sampled every
// millisecond and once more at the end. The collector runs at GOGC=5
// meanwhile, so that the peak is what f holds rather than garbage waiting
// for a collection, whose amount follows the run's length.
func peakHeap(f func()) uint64 {
	defer debug.SetGCPercent(debug.SetGCPercent(5))
	runtime.GC()
	sample := []metrics.Sample{{Name: heapObjects}}
	read := func() uint64 {
		metrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	base := read()
	var (
		mu   sync.Mutex
		peak = base
	)
	note := func() {
		v := read()
		mu.Lock()
		peak = max(peak, v)
		mu.Unlock()
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				note()
			}
		}
	}()
	f()
	note()
	close(done)
	wg.Wait()
	return peak - base
}

// loadAverage is the first three fields of /proc/loadavg ("" where there
// is none).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
