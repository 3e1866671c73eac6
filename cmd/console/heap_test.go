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

// heapLive is the runtime metric peakHeap samples: the bytes of the heap
// objects the last collection found live.
const heapLive = "/gc/heap/live:bytes"

// peakHeap runs f and returns the most heap found live while it ran,
// above what was live when it started: the metric after each collection,
// sampled every millisecond and after a last collection at the end. The
// collector runs at GOGC=5 meanwhile, so that collections come often and
// the peak is what f holds; objects allocated while a collection marks,
// whose amount follows the machine's load, are not counted.
func peakHeap(f func()) uint64 {
	defer debug.SetGCPercent(debug.SetGCPercent(5))
	runtime.GC()
	sample := []metrics.Sample{{Name: heapLive}}
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
	close(done)
	wg.Wait()
	note()
	return peak - min(peak, base)
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
