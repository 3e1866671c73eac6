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
	none := t.TempDir() // no /proc/self/cgroup under it
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

// tree writes files (path relative to a new root: content) and returns the
// root.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const (
	gib         = 1 << 30
	v1Unlimited = "9223372036854771712\n"
)

// TestTuneGCMemoryLimit: with GOMEMLIMIT unset, the soft memory limit is
// serveMemoryLimitPercent of the cgroup's limit when it has one, and left
// unset when there is none; GOMEMLIMIT set leaves it as the runtime read it.
func TestTuneGCMemoryLimit(t *testing.T) {
	prevGC := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prevGC)
	prev := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(prev)
	limited := tree(t, map[string]string{
		"proc/self/cgroup":         "0::/\n",
		"sys/fs/cgroup/memory.max": "1073741824\n",
	})
	unlimited := tree(t, map[string]string{
		"proc/self/cgroup":         "0::/\n",
		"sys/fs/cgroup/memory.max": "max\n",
	})
	env := func(vars map[string]string) func(string) string { return func(k string) string { return vars[k] } }
	tests := []struct {
		name string
		env  map[string]string
		root string
		want int64 // math.MaxInt64: no limit
	}{
		{"a cgroup limit", nil, limited, 858993440}, // 80 % of 1 GiB
		{"a cgroup limit, GOGC set", map[string]string{"GOGC": "100"}, limited, 858993440},
		{"GOMEMLIMIT set", map[string]string{"GOMEMLIMIT": "512MiB"}, limited, math.MaxInt64},
		{"no cgroup limit", nil, unlimited, math.MaxInt64},
		{"no cgroup at all", nil, t.TempDir(), math.MaxInt64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			debug.SetMemoryLimit(math.MaxInt64)
			set, from := tuneGC(env(tt.env), tt.root)
			if got := debug.SetMemoryLimit(-1); got != tt.want {
				t.Fatalf("memory limit %d, want %d", got, tt.want)
			}
			if want := tt.want; (want == math.MaxInt64 && set != 0) || (want != math.MaxInt64 && set != want) {
				t.Errorf("tuneGC says it set %d; the limit is %d", set, want)
			}
			if (set != 0) != (from != "") {
				t.Errorf("tuneGC set %d from %q", set, from)
			}
		})
	}
}

// TestCgroupMemoryLimit: the lowest limit of the process's cgroup and the
// cgroups above it, in the unified hierarchy and in cgroup v1's memory
// controller, and nothing when none is set.
func TestCgroupMemoryLimit(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  int64
		from  string // the file that states it, relative to the root
	}{
		{"v2, the process's own cgroup", map[string]string{
			"proc/self/cgroup": "0::/system.slice/countersign.service\n",
			"sys/fs/cgroup/system.slice/countersign.service/memory.max": "1073741824\n",
			"sys/fs/cgroup/system.slice/memory.max":                     "max\n",
		}, gib, "sys/fs/cgroup/system.slice/countersign.service/memory.max"},
		{"v2, a limit on the parent only", map[string]string{
			"proc/self/cgroup": "0::/system.slice/countersign.service\n",
			"sys/fs/cgroup/system.slice/countersign.service/memory.max": "max\n",
			"sys/fs/cgroup/system.slice/memory.max":                     "2147483648\n",
		}, 2 * gib, "sys/fs/cgroup/system.slice/memory.max"},
		{"v2, the lowest of several", map[string]string{
			"proc/self/cgroup":             "0::/a/b\n",
			"sys/fs/cgroup/a/b/memory.max": "3221225472\n",
			"sys/fs/cgroup/a/memory.max":   "1073741824\n",
			"sys/fs/cgroup/memory.max":     "max\n",
		}, gib, "sys/fs/cgroup/a/memory.max"},
		{"v2 in a cgroup namespace", map[string]string{
			"proc/self/cgroup":         "0::/\n",
			"sys/fs/cgroup/memory.max": "536870912\n",
		}, gib / 2, "sys/fs/cgroup/memory.max"},
		{"v2, a path from another namespace", map[string]string{
			"proc/self/cgroup":         "0::/elsewhere/not/mounted\n",
			"sys/fs/cgroup/memory.max": "536870912\n",
		}, gib / 2, "sys/fs/cgroup/memory.max"},
		{"v1, a limit on the parent", map[string]string{
			"proc/self/cgroup": "4:memory:/process_api/abc\n3:cpuset:/\n",
			"sys/fs/cgroup/memory/process_api/abc/memory.limit_in_bytes": v1Unlimited,
			"sys/fs/cgroup/memory/process_api/memory.limit_in_bytes":     "536870912\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes":                 v1Unlimited,
		}, gib / 2, "sys/fs/cgroup/memory/process_api/memory.limit_in_bytes"},
		{"v1, memory among other controllers", map[string]string{
			"proc/self/cgroup": "7:cpu,memory:/job\n",
			"sys/fs/cgroup/memory/job/memory.limit_in_bytes": "1073741824\n",
		}, gib, "sys/fs/cgroup/memory/job/memory.limit_in_bytes"},
		{"hybrid: v1 memory, unified without memory.max", map[string]string{
			"proc/self/cgroup": "4:memory:/job\n0::/\n",
			"sys/fs/cgroup/memory/job/memory.limit_in_bytes": "1073741824\n",
			"sys/fs/cgroup/unified/cgroup.procs":             "",
		}, gib, "sys/fs/cgroup/memory/job/memory.limit_in_bytes"},
		{"v1 unlimited everywhere", map[string]string{
			"proc/self/cgroup": "4:memory:/process_api/abc\n",
			"sys/fs/cgroup/memory/process_api/abc/memory.limit_in_bytes": v1Unlimited,
			"sys/fs/cgroup/memory/memory.limit_in_bytes":                 v1Unlimited,
		}, 0, ""},
		{"v2 max everywhere", map[string]string{
			"proc/self/cgroup":           "0::/a\n",
			"sys/fs/cgroup/a/memory.max": "max\n",
			"sys/fs/cgroup/memory.max":   "max\n",
		}, 0, ""},
		{"a limit file that says something else", map[string]string{
			"proc/self/cgroup":         "0::/\n",
			"sys/fs/cgroup/memory.max": "lots\n",
		}, 0, ""},
		{"no /proc/self/cgroup", map[string]string{
			"sys/fs/cgroup/memory.max": "1073741824\n",
		}, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := tree(t, tt.files)
			got, from := cgroupMemoryLimit(root)
			if got != tt.want {
				t.Errorf("limit %d, want %d", got, tt.want)
			}
			want := ""
			if tt.from != "" {
				want = filepath.Join(root, filepath.FromSlash(tt.from))
			}
			if from != want {
				t.Errorf("from %q, want %q", from, want)
			}
		})
	}
}
