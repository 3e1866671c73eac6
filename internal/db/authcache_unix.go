//go:build unix

package db

import (
	"errors"
	"os"
	"syscall"
)

func mapShared(f *os.File, size int) ([]byte, error) {
	return syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
}

func unmapShared(mem []byte) { _ = syscall.Munmap(mem) }

// lockShared takes a shared lock on f, and reports whether it was the only
// process with f open: it tried an exclusive lock first.
func lockShared(f *os.File) (alone bool, err error) {
	fd := int(f.Fd())
	err = syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB)
	switch {
	case err == nil:
		alone = true
	case !errors.Is(err, syscall.EWOULDBLOCK):
		return false, err
	}
	// From exclusive to shared, or wait for one who holds it exclusive for
	// a moment (levelling the counters) to let go.
	return alone, syscall.Flock(fd, syscall.LOCK_SH)
}
