package main

import (
	"bufio"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// clockTicks is the unit of the CPU times in /proc/PID/stat (USER_HZ,
// 100 on every Linux this runs on).
const clockTicks = 100

// processCPU returns the user + system CPU time of process pid in seconds,
// from /proc/PID/stat, or -1 when it cannot be read.
func processCPU(pid int) float64 {
	if pid <= 0 {
		return -1
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// The command name (field 2) is in parentheses and may hold spaces;
	// the fields after it start at field 3 (state). utime and stime are
	// fields 14 and 15.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return -1
	}
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return (utime + stime) / clockTicks
}

// loadAverage is the machine's one-minute load average.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// listenerPID finds the process listening on the TCP port of base: the
// socket's inode from /proc/net/tcp (and tcp6), then the process holding
// it among /proc/*/fd. It returns 0 when none is found (another user's
// process, or not this machine).
func listenerPID(base string) int {
	u, err := url.Parse(base)
	if err != nil {
		return 0
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		return 0
	}
	inodes := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // header
		for sc.Scan() {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != "0A" { // 0A: LISTEN
				continue
			}
			_, hexPort, ok := strings.Cut(fields[1], ":")
			if p, err := strconv.ParseInt(hexPort, 16, 32); ok && err == nil && int(p) == port {
				inodes["socket:["+fields[9]+"]"] = true
			}
		}
		f.Close()
	}
	if len(inodes) == 0 {
		return 0
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		pid, err := strconv.Atoi(filepath.Base(p))
		if err != nil {
			continue
		}
		fds, _ := os.ReadDir(p + "/fd")
		for _, fd := range fds {
			if link, err := os.Readlink(p + "/fd/" + fd.Name()); err == nil && inodes[link] {
				return pid
			}
		}
	}
	return 0
}
