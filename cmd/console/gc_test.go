package main

import (
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
)

func TestTuneGC(t *testing.T) {
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)
	none := filepath.Join(t.TempDir(), "memory.max") // no such file
	tuneGC(func(string) string { return "" }, none)
	if got := debug.SetGCPercent(100); got != serveGCPercent {
		t.Errorf("GOGC unset: GC percent %d, want %d", got, serveGCPercent)
	}
	tuneGC(func(k string) string {
		if k == "GOGC" {
			return "100"
		}
		return ""
	}, none)
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GOGC=100: GC percent %d, want the environment's 100", got)
	}
}

// TestTuneGCMemoryLimit: with GOMEMLIMIT unset, the soft memory limit is
// serveMemoryLimitPercent of the cgroup's limit when it has one, and left
// unset when the cgroup says "max", the file is missing or unreadable;
// GOMEMLIMIT set leaves it as the runtime read it.
func TestTuneGCMemoryLimit(t *testing.T) {
	prevGC := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prevGC)
	prev := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(prev)
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	limited := file("limited", "1073741824\n") // 1 GiB
	env := func(vars map[string]string) func(string) string { return func(k string) string { return vars[k] } }
	tests := []struct {
		name      string
		env       map[string]string
		memoryMax string
		want      int64 // math.MaxInt64: no limit
	}{
		{"a cgroup limit", nil, limited, 858993440}, // 80 % of 1 GiB
		{"a cgroup limit, GOGC set", map[string]string{"GOGC": "100"}, limited, 858993440},
		{"GOMEMLIMIT set", map[string]string{"GOMEMLIMIT": "512MiB"}, limited, math.MaxInt64},
		{"no cgroup limit", nil, file("max", "max\n"), math.MaxInt64},
		{"no cgroup v2 file", nil, filepath.Join(dir, "absent"), math.MaxInt64},
		{"an unreadable limit", nil, file("garbage", "lots\n"), math.MaxInt64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			debug.SetMemoryLimit(math.MaxInt64)
			set := tuneGC(env(tt.env), tt.memoryMax)
			if got := debug.SetMemoryLimit(-1); got != tt.want {
				t.Fatalf("memory limit %d, want %d", got, tt.want)
			}
			if want := tt.want; (want == math.MaxInt64 && set != 0) || (want != math.MaxInt64 && set != want) {
				t.Errorf("tuneGC says it set %d; the limit is %d", set, want)
			}
		})
	}
}
