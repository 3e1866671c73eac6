//go:build !linux

package account

import (
	"errors"
	"os"
)

// IsTerminal reports whether f is a terminal; on this platform the console
// cannot tell, and reads passwords only from standard input.
func IsTerminal(f *os.File) bool { return false }

func withoutEcho(f *os.File, fn func() error) error {
	return errors.New("account: cannot turn off terminal echo here; use --password-stdin")
}
