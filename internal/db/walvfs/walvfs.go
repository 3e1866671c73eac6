//go:build unix

package walvfs

/*
#cgo linux LDFLAGS: -Wl,--unresolved-symbols=ignore-in-object-files
#cgo darwin LDFLAGS: -Wl,-undefined,dynamic_lookup
#include "walvfs.h"
*/
import "C"

import (
	"fmt"
	"sync"
)

const name = "countersign-wal"

var register = sync.OnceValue(func() error {
	if rc := C.countersign_walvfs_register(C.CString(name), C.CString("unix")); rc != C.SQLITE_OK {
		return fmt.Errorf("walvfs: register the VFS: SQLite result %d", int(rc))
	}
	return nil
})

// Name registers the VFS with SQLite, the first time it is called, and
// returns its name, for the vfs parameter of a database URI. It panics if
// SQLite has no unix VFS to wrap, which a unix build always has.
func Name() string {
	if err := register(); err != nil {
		panic(err)
	}
	return name
}

// Counts returns how many writes SQLite has asked of WAL files opened
// through the VFS in this process, and how many writes the VFS made to
// them: without the gathering the two are equal.
func Counts() (received, issued int64) {
	var r, i C.sqlite3_int64
	C.countersign_walvfs_counts(&r, &i)
	return int64(r), int64(i)
}

// Frames returns how many frames SQLite has appended to WAL files opened
// through the VFS in this process: each is one page written at a commit
// (or at a transaction's spill), whether or not the VFS gathered it with
// others into one write.
func Frames() int64 { return int64(C.countersign_walvfs_frames()) }
