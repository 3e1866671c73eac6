//go:build linux && (amd64 || arm64 || riscv64)

package db

import (
	"syscall"
	"unsafe"
)

// statAt stats the file at the NUL-terminated path p without allocating:
// every kept row's use runs one (authEpoch.current).
func statAt(p []byte, st *syscall.Stat_t) bool {
	const atFDCWD = -100
	fd := atFDCWD
	_, _, errno := syscall.Syscall6(sysFstatat, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(unsafe.Pointer(st)), 0, 0, 0)
	return errno == 0
}
