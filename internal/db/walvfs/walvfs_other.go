//go:build !unix

package walvfs

// Name returns "": without the unix VFS there is nothing to wrap, and
// SQLite's default VFS is used.
func Name() string { return "" }

// Counts returns zeros: no VFS is registered.
func Counts() (received, issued int64) { return 0, 0 }

// Frames returns zero: no VFS is registered.
func Frames() int64 { return 0 }
