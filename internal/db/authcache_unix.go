//go:build unix

package db

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

// openCounters opens the counters' file at path, creating it owner-only,
// never through a symbolic link. A file another user owns is refused (it
// could count nothing, or count for someone else); one that others may
// read or write is made owner-only. uid is this process's user.
func openCounters(path string, uid int) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, err
	}
	if int(st.Uid) != uid {
		f.Close()
		return nil, fmt.Errorf("it belongs to user %d, not to this process's user %d: run Countersign as the user that owns its data directory, or remove the file while no Countersign process runs", st.Uid, uid)
	}
	if st.Mode&0o077 != 0 {
		if err := f.Chmod(0o600); err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}

// fileKey is the device and inode of the file f; ok is false when they
// cannot be read.
func fileKey(f *os.File) (dev, ino uint64, ok bool) {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return 0, 0, false
	}
	return uint64(st.Dev), uint64(st.Ino), true
}

// statKey is the device and inode of the file at the counters' path now;
// ok is false when there is none.
func (e *authEpoch) statKey() (dev, ino uint64, ok bool) {
	var st syscall.Stat_t
	if !statAt(e.pathz, &st) {
		return 0, 0, false
	}
	return uint64(st.Dev), uint64(st.Ino), true
}

func mapShared(f *os.File, size int) ([]byte, error) {
	return syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
}

// unmapShared lets go of the file behind mem but leaves memory at its
// address: an anonymous page, read as zeros, is mapped over it, so that a
// reader that loaded the counters' address before the database closed
// reads zeros instead of faulting. Where that fails, the mapping is kept.
func unmapShared(mem []byte) {
	if len(mem) == 0 {
		return
	}
	_, _, _ = syscall.Syscall6(syscall.SYS_MMAP, uintptr(unsafe.Pointer(&mem[0])), uintptr(len(mem)),
		syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_FIXED, ^uintptr(0), 0)
}

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

// haveSharedCounters is true where the counters can be shared: Open fails
// when they cannot be had.
const haveSharedCounters = true
