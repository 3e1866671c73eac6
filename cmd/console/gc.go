package main

import (
	"bufio"
	"bytes"
	"os"
	"path"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
)

// serveGCPercent is the garbage collector's target when GOGC is not set.
// The console's live heap is a few MiB, so at Go's default of 100 it
// collects every few MiB allocated, several times per hundred flows. At 300
// a whole flow costs about 0.9× the server CPU (docs/performance.md, "The
// garbage collector's target"), for about 7 MiB more resident memory under
// load and 34 KiB instead of 32 KiB per idle long-poll.
const serveGCPercent = 300

// serveMemoryLimitPercent is the soft memory limit, in percent of the
// cgroup's memory limit, that console serve sets when GOMEMLIMIT is not
// set: at the higher GC target the heap may grow to four times the live
// heap between collections, and near the limit the collector runs more
// often instead of the process being killed.
const serveMemoryLimitPercent = 80

// tuneGC sets serveGCPercent unless GOGC says otherwise, and, unless
// GOMEMLIMIT says otherwise, a soft memory limit of serveMemoryLimitPercent
// of the memory limit of the process's cgroup (cgroupMemoryLimit under
// root, which is "/" outside tests). It returns the limit it set, 0 for
// none, and the file that stated the cgroup's.
func tuneGC(getenv func(string) string, root string) (limit int64, from string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(serveGCPercent)
	}
	if getenv("GOMEMLIMIT") != "" {
		return 0, ""
	}
	n, from := cgroupMemoryLimit(root)
	if n <= 0 {
		return 0, ""
	}
	limit = n / 100 * serveMemoryLimitPercent
	debug.SetMemoryLimit(limit)
	return limit, from
}

// cgroupMemoryLimit returns the lowest memory limit set on the process's
// cgroup or any cgroup above it, and the file that sets it; 0 when none
// does. The cgroups are the ones /proc/self/cgroup names: the unified
// hierarchy's (memory.max under /sys/fs/cgroup, or /sys/fs/cgroup/unified
// on a hybrid host) and cgroup v1's memory controller
// (memory.limit_in_bytes under /sys/fs/cgroup/memory). A limit set only
// on a parent (a systemd slice's MemoryMax=, a container's limit seen
// without a cgroup namespace) is found by walking up to the hierarchy's
// root. Inside a cgroup namespace /proc/self/cgroup names "/", and the
// limit is the one at the mount's root.
func cgroupMemoryLimit(root string) (limit int64, from string) {
	b, err := os.ReadFile(filepath.Join(root, "proc/self/cgroup"))
	if err != nil {
		return 0, ""
	}
	consider := func(n int64, file string) {
		if n > 0 && (limit == 0 || n < limit) {
			limit, from = n, file
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// hierarchy-ID:controller-list:cgroup-path
		id, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		controllers, cgroup, ok := strings.Cut(rest, ":")
		if !ok || !strings.HasPrefix(cgroup, "/") {
			continue
		}
		switch {
		case id == "0" && controllers == "":
			for _, mount := range []string{"sys/fs/cgroup", "sys/fs/cgroup/unified"} {
				consider(walkUp(filepath.Join(root, mount), cgroup, "memory.max"))
			}
		case slices.Contains(strings.Split(controllers, ","), "memory"):
			consider(walkUp(filepath.Join(root, "sys/fs/cgroup/memory"), cgroup, "memory.limit_in_bytes"))
		}
	}
	return limit, from
}

// walkUp reads the limit file name in the cgroup directory mount+cgroup
// and in each directory above it up to mount, and returns the lowest
// limit found and its file. A directory that does not exist (the path is
// another namespace's) is skipped.
func walkUp(mount, cgroup, name string) (limit int64, from string) {
	for dir := path.Clean(cgroup); ; dir = path.Dir(dir) {
		file := filepath.Join(mount, filepath.FromSlash(dir), name)
		if n := readLimit(file); n > 0 && (limit == 0 || n < limit) {
			limit, from = n, file
		}
		if dir == "/" {
			return limit, from
		}
	}
}

// unlimitedV1 is where cgroup v1's "no limit" starts: it is stated as the
// largest page-aligned int64 (9223372036854771712), not as a word.
const unlimitedV1 = 1 << 62

// readLimit reads a memory limit file: a number of bytes, or "max" (cgroup
// v2) or a number of at least unlimitedV1 (cgroup v1) for none, which is
// 0 like a file that is missing or says anything else.
func readLimit(file string) int64 {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n <= 0 || n >= unlimitedV1 {
		return 0
	}
	return n
}
