//go:build !unix

package db

import (
	"errors"
	"os"
)

// Without shared memory, nothing is kept: every request reads.

func openCounters(string, int) (*os.File, error) {
	return nil, errors.New("no shared memory on this system")
}

func fileKey(*os.File) (uint64, uint64, bool) { return 0, 0, false }

func (e *authEpoch) statKey() (uint64, uint64, bool) { return 0, 0, false }

func mapShared(*os.File, int) ([]byte, error) {
	return nil, errors.New("no shared memory on this system")
}

func unmapShared([]byte) {}

func lockShared(*os.File) (bool, error) { return false, nil }

// haveSharedCounters is false: Open runs without counters, and keeps
// nothing.
const haveSharedCounters = false
