//go:build unix && !(linux && (amd64 || arm64 || riscv64))

package db

import "syscall"

// statAt stats the file at the NUL-terminated path p.
func statAt(p []byte, st *syscall.Stat_t) bool {
	return syscall.Stat(string(p[:len(p)-1]), st) == nil
}
