//go:build !unix

package db

import (
	"errors"
	"os"
)

// Without shared memory, nothing is kept: every request reads.

func mapShared(*os.File, int) ([]byte, error) {
	return nil, errors.New("no shared memory on this system")
}

func unmapShared([]byte) {}

func lockShared(*os.File) (bool, error) { return false, nil }
