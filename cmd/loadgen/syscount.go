package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Syscall counting (--count-syncs).
//
// The syncs a flow costs happen inside SQLite's C code (the WAL's fsync at
// each commit, the database's and the WAL's at each checkpoint) and in the
// high-water mark (fdatasync), so they are counted from outside: `perf
// stat` on the server's process, with the kernel's syscall tracepoints,
// counts every fsync, fdatasync and pwrite64 of the process's threads while
// the flows run. A tracepoint counter does not stop the process as strace
// does, so the group commits under count are the same as without it. The
// WAL's writes are the pwrite64 calls of at least 512 bytes on the
// process's descriptors of the -wal file: one per frame where SQLite
// writes each frame itself (its 24-byte header, then the page), one per
// commit where the console gathers them (internal/db/walvfs), which then
// counts the frames itself (countersign_store_wal_frames_total).

// syscallCounts is what perf counted in the server while the flows ran.
type syscallCounts struct {
	Fsync     float64 `json:"fsync"`
	Fdatasync float64 `json:"fdatasync"`
	Pwrite    float64 `json:"pwrite64"`
	WALWrites float64 `json:"wal_writes"`
}

// Syncs is every sync counted.
func (c syscallCounts) Syncs() float64 { return c.Fsync + c.Fdatasync }

// syncCounter is a running `perf stat` on the server.
type syncCounter struct {
	cmd  *exec.Cmd
	out  string
	done chan error
}

// startSyncCount starts counting pid's syscalls; stop returns the counts.
func startSyncCount(pid int, dir string) (*syncCounter, error) {
	if pid <= 0 {
		return nil, errors.New("--count-syncs: the server's process was not found (give --server-pid)")
	}
	perf, err := exec.LookPath("perf")
	if err != nil {
		return nil, fmt.Errorf("--count-syncs needs perf: %w", err)
	}
	walFDs := openFDs(pid, "-wal")
	if len(walFDs) == 0 {
		return nil, errors.New("--count-syncs: the server holds no -wal file open (is it a SQLite console?)")
	}
	var fdTest []string
	for _, fd := range walFDs {
		fdTest = append(fdTest, "fd == "+strconv.Itoa(fd))
	}
	out := filepath.Join(dir, fmt.Sprintf("loadgen-perf-%d-%s.txt", pid, randomHex(3)))
	cmd := exec.Command(perf, "stat", "-x", ",", "-o", out, "-p", strconv.Itoa(pid),
		"-e", "syscalls:sys_enter_fsync", "-e", "syscalls:sys_enter_fdatasync", "-e", "syscalls:sys_enter_pwrite64",
		"-e", "syscalls:sys_enter_pwrite64", "--filter", "count >= 512 && ("+strings.Join(fdTest, " || ")+")")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	sc := &syncCounter{cmd: cmd, out: out, done: make(chan error, 1)}
	go func() {
		err := cmd.Wait()
		if err != nil && stderr.Len() > 0 {
			err = fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
		}
		sc.done <- err
	}()
	// perf prints nothing when its counters are attached; give it the time
	// to open them (a few milliseconds), and fail if it has already exited.
	select {
	case err := <-sc.done:
		return nil, fmt.Errorf("perf stat exited: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	return sc, nil
}

// stop ends the count and returns it.
func (sc *syncCounter) stop() (syscallCounts, error) {
	defer os.Remove(sc.out)
	sc.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-sc.done:
	case <-time.After(10 * time.Second):
		sc.cmd.Process.Kill()
		return syscallCounts{}, errors.New("perf stat did not stop")
	}
	b, err := os.ReadFile(sc.out)
	if err != nil {
		return syscallCounts{}, err
	}
	return parsePerfStat(b)
}

// parsePerfStat reads `perf stat -x ,` output: value,unit,event,... per
// line, the two pwrite64 lines in the order given (all, then the WAL's).
func parsePerfStat(b []byte) (syscallCounts, error) {
	var c syscallCounts
	pwrites := 0
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, ",")
		if len(f) < 3 || strings.HasPrefix(line, "#") {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return c, fmt.Errorf("perf stat: %q: %w", line, err)
		}
		switch f[2] {
		case "syscalls:sys_enter_fsync":
			c.Fsync = v
		case "syscalls:sys_enter_fdatasync":
			c.Fdatasync = v
		case "syscalls:sys_enter_pwrite64":
			if pwrites == 0 {
				c.Pwrite = v
			} else {
				c.WALWrites = v
			}
			pwrites++
		}
	}
	if pwrites != 2 {
		return c, fmt.Errorf("perf stat: %d pwrite64 counts, want 2", pwrites)
	}
	return c, nil
}

// openFDs lists pid's descriptors open on files whose name ends in suffix.
func openFDs(pid int, suffix string) []int {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, _ := os.ReadDir(dir)
	var fds []int
	for _, e := range ents {
		link, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil || !strings.HasSuffix(link, suffix) {
			continue
		}
		if fd, err := strconv.Atoi(e.Name()); err == nil {
			fds = append(fds, fd)
		}
	}
	return fds
}
