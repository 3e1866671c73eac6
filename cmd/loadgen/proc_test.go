package main

import (
	"net"
	"os"
	"slices"
	"testing"
)

// TestListenerPID: the process listening on a port is found from the
// port alone, and its CPU time reads.
func TestListenerPID(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if got := listenerPID("http://" + ln.Addr().String()); got != os.Getpid() {
		t.Fatalf("listenerPID = %d, want this process, %d", got, os.Getpid())
	}
	if cpu := processCPU(os.Getpid()); cpu < 0 {
		t.Fatalf("processCPU = %v, want a time", cpu)
	}
	if cpu := processCPU(0); cpu != -1 {
		t.Fatalf("processCPU(0) = %v, want -1", cpu)
	}
}

func TestShortBin(t *testing.T) {
	bins := []string{"/tmp/a/old/console", "/tmp/a/new/console"}
	if got := shortBin(bins, bins[1]); got != "new/console" {
		t.Fatalf("shortBin = %q, want new/console", got)
	}
	if got := median([]float64{3, 1, 2, 10}); got != 2.5 {
		t.Fatalf("median = %v, want 2.5", got)
	}
}

// TestABOrder: the binaries change places every round, so that each runs
// second in half of them.
func TestABOrder(t *testing.T) {
	bins := []string{"old", "new"}
	want := [][]string{{"old", "new"}, {"new", "old"}, {"old", "new"}, {"new", "old"}}
	for round := 1; round <= 4; round++ {
		if got := abOrder(bins, round); !slices.Equal(got, want[round-1]) {
			t.Errorf("round %d: %v, want %v", round, got, want[round-1])
		}
	}
	if !slices.Equal(bins, []string{"old", "new"}) {
		t.Errorf("abOrder changed its argument: %v", bins)
	}
}
