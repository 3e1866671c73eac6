// Package walvfs registers an SQLite VFS that writes each commit's
// write-ahead log frames to the file in one write instead of two per frame.
//
// SQLite in WAL mode writes a frame as two calls, its 24-byte header and
// then its page (walWriteOneFrame), so a commit of fifteen pages makes
// thirty pwrite calls; on a virtual machine that charges every entry into
// the kernel, those calls cost more CPU than the rest of the commit but
// its sync. The VFS wraps the unix VFS and, for WAL files only, holds the
// frames a transaction appends in a buffer and writes them together: when
// the commit's last frame is written, before any other call on that file
// (a read, truncate, size, sync, lock, file control, close, shared-memory
// call), before a write that does not append the next frame, and before
// the buffer reaches 128 KiB (the largest write the unix VFS makes in one call). The database file, the shared-memory index and
// every other call go straight to the unix VFS. Every connection opened
// with Name in its URI's vfs parameter uses it; processes that open the
// same database without it interoperate, since the files, their contents
// and their locks are exactly the unix VFS's.
//
// Why it keeps SQLite's guarantees (synchronous=FULL, WAL mode):
//
//   - A commit's frames reach the file before its sync: the commit frame's
//     write flushes the buffer, and so would the sync itself; SQLite
//     syncs the log before it writes the wal-index header that makes
//     those frames visible, and returns from COMMIT after both. So what a
//     committed transaction wrote is on disk, in the same order of syncs,
//     as without the VFS. The commit frame is recognised by its header
//     (a non-zero database size) and flushed at once, so even at a lower
//     synchronous setting no frame is announced before it is written.
//   - Other connections, in this process or another, read only frames up
//     to the wal-index header's last commit, which was written after those
//     frames reached the file; what is held back lies beyond it, and is
//     never read by anyone else.
//   - The writer reads its own frames that are not yet committed (a page
//     spilled from its cache, checksums recomputed at commit) only through
//     the same file handle, and a read flushes first.
//   - A frame whose write fails is reported to the call that flushed it
//     (the commit's last write, the sync, a read), so the transaction
//     fails as a failed write would have failed it. A process killed with
//     frames held back loses only frames of a transaction that had not
//     committed, which recovery discards anyway (their checksums chain
//     would not reach a commit frame).
//
// It is written here because nothing maintained does this for
// github.com/mattn/go-sqlite3: SQLite's own VFS shims (multiplex, vfstrace,
// the kvvfs) trace or split files, the Go VFS libraries (psanford/sqlite3vfs
// and the like) implement a whole file system in Go behind a cgo call per
// operation, and the unix VFS's batch-atomic writes need F2FS. The C code
// calls sqlite3_vfs_find and sqlite3_vfs_register from the amalgamation that
// github.com/mattn/go-sqlite3 compiles into the same binary (or from the
// system library under its libsqlite3 build tag); the structures it uses are
// declared in walvfs.h, copied from sqlite3.h.
package walvfs
