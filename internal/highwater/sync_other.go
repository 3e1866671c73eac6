//go:build !linux

package highwater

import "os"

// datasync makes what was written to f durable; elsewhere than Linux with
// fsync, as os.File.Sync does it.
func datasync(f *os.File) error { return f.Sync() }
