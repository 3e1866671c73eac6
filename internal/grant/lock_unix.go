//go:build unix

package grant

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockMode says how to take the directory lock.
type lockMode int

const (
	lockShared       lockMode = iota // wait for a rotation to finish
	lockSharedNoWait                 // fail at once while a rotation runs
	lockExclusive                    // exclude every Mint and reload, in every process
)

// errLocked reports that a rotation holds the directory lock.
var errLocked = errors.New("grant: key directory is being rotated")

// lock takes an flock(2) on the directory's lock file. Each call opens its
// own file description, so that goroutines of one process exclude each
// other as separate processes do. The returned function releases it.
func (k *Keyring) lock(mode lockMode) (func(), error) {
	f, err := os.OpenFile(filepath.Join(k.dir, lockFile), os.O_RDONLY|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("grant: lock key directory: %w", err)
	}
	how := syscall.LOCK_SH
	switch mode {
	case lockSharedNoWait:
		how = syscall.LOCK_SH | syscall.LOCK_NB
	case lockExclusive:
		how = syscall.LOCK_EX
	}
	for {
		err = syscall.Flock(int(f.Fd()), how)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errLocked
		}
		return nil, fmt.Errorf("grant: lock key directory: %w", err)
	}
	return func() { f.Close() }, nil // closing the last descriptor releases the lock
}
