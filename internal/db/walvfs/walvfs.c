//go:build unix

// A VFS that wraps SQLite's unix VFS and, for write-ahead log files only,
// gathers the writes SQLite makes one frame at a time into one write per
// commit. See doc.go for why it exists and why it keeps SQLite's
// guarantees; every other file, and every other call, goes straight to the
// unix VFS.

#include <stdlib.h>
#include <string.h>

#include "walvfs.h"

// A WAL frame is a 24-byte header followed by one page; the header's
// second 32-bit word is the database size after the commit the frame ends,
// zero for a frame that ends none.
#define FRAME_HEADER 24
#define MAX_PAGE 65536
// GATHER_MAX bounds what a WAL file holds back: the largest write the unix
// VFS makes in one call (seekAndWriteFd masks a write's length with
// 0x1ffff), 31 frames of 4 KiB pages. GATHER_FIRST is the buffer's first
// size; it doubles up to GATHER_MAX as transactions need.
#define GATHER_MAX 0x1ffff
#define GATHER_FIRST (32 << 10)

typedef struct walFile {
	sqlite3_file base;  // pMethods: walMethods
	sqlite3_file *real; // the unix VFS's file, in the same allocation
	char *buf;          // the writes held back, contiguous from off
	int len, cap;
	sqlite3_int64 off;
	// header is 1 when the last write held back is a frame's header whose
	// page has not come yet; commit when that frame ends a commit. page is
	// the size of the last page held back.
	int header, commit, page;
	// lastRead is the offset of the last read when the call before this
	// one was a read, else -1.
	sqlite3_int64 lastRead;
	// deferred is an error of a flush made by a method that cannot return
	// one (xSectorSize, xDeviceCharacteristics, xShmBarrier), returned by
	// the next method that can.
	int deferred;
} walFile;

static sqlite3_vfs *baseVfs;
static sqlite3_vfs gatherVfs;
static const sqlite3_io_methods walMethods;

// Process-wide counts, for tests and measurements: the writes SQLite asked
// for, those made, and the frames appended (a frame's header written other
// than right after a read of it, which rewrites a checksum in place).
static sqlite3_int64 writesReceived, writesIssued, framesAppended;

void countersign_walvfs_counts(sqlite3_int64 *received, sqlite3_int64 *issued) {
	*received = __atomic_load_n(&writesReceived, __ATOMIC_RELAXED);
	*issued = __atomic_load_n(&writesIssued, __ATOMIC_RELAXED);
}

sqlite3_int64 countersign_walvfs_frames(void) {
	return __atomic_load_n(&framesAppended, __ATOMIC_RELAXED);
}

static int issue(walFile *p, const void *data, int amt, sqlite3_int64 off) {
	__atomic_fetch_add(&writesIssued, 1, __ATOMIC_RELAXED);
	return p->real->pMethods->xWrite(p->real, data, amt, off);
}

// flush writes what is held back, in one write. Whatever its outcome, the
// buffer is emptied: a write that failed is reported once, to the call
// that flushed, and SQLite treats the transaction as failed (it never
// writes the same frames again expecting the old ones to be there).
static int flush(walFile *p) {
	int rc = p->deferred;
	p->deferred = SQLITE_OK;
	p->header = p->commit = 0;
	if (p->len > 0) {
		int len = p->len;
		p->len = 0;
		int wrc = issue(p, p->buf, len, p->off);
		if (rc == SQLITE_OK) rc = wrc;
	}
	return rc;
}

// before runs ahead of every method but xWrite and xRead: nothing held
// back outlives a call that is not a frame's write.
static int before(walFile *p) {
	p->lastRead = -1;
	return flush(p);
}

// hold appends data to the buffer, which must be empty or end at off. It
// returns 0 when the data would take the buffer past GATHER_MAX or it
// cannot grow (out of memory): the caller then writes through.
static int hold(walFile *p, const void *data, int amt, sqlite3_int64 off) {
	if (p->len + amt > GATHER_MAX) return 0;
	if (p->len + amt > p->cap) {
		int cap = p->cap ? p->cap : GATHER_FIRST;
		while (cap < p->len + amt) cap *= 2;
		char *buf = realloc(p->buf, cap);
		if (buf == NULL) return 0;
		p->buf = buf;
		p->cap = cap;
	}
	if (p->len == 0) p->off = off;
	memcpy(p->buf + p->len, data, amt);
	p->len += amt;
	return 1;
}

static int walWrite(sqlite3_file *f, const void *data, int amt, sqlite3_int64 off) {
	walFile *p = (walFile *)f;
	__atomic_fetch_add(&writesReceived, 1, __ATOMIC_RELAXED);
	sqlite3_int64 lastRead = p->lastRead;
	p->lastRead = -1;
	int rc;
	if (amt == FRAME_HEADER && off != lastRead) __atomic_fetch_add(&framesAppended, 1, __ATOMIC_RELAXED);
	// A frame's header appended to the log. A header written right after a
	// read of its frame is a checksum rewritten in place (walRewriteChecksums):
	// it has no page to wait for, so it goes through.
	if (amt == FRAME_HEADER && off != lastRead && p->deferred == SQLITE_OK) {
		int contiguous = p->len == 0 || off == p->off + p->len;
		if (!contiguous || p->header || p->len + FRAME_HEADER + p->page > GATHER_MAX) {
			if ((rc = flush(p)) != SQLITE_OK) return rc;
		}
		if (hold(p, data, amt, off)) {
			const unsigned char *h = data;
			p->header = 1;
			p->commit = (h[4] | h[5] | h[6] | h[7]) != 0;
			return SQLITE_OK;
		}
	} else if (p->header && off == p->off + p->len && amt <= MAX_PAGE) {
		// The page of the header held back last.
		int commit = p->commit;
		p->header = p->commit = 0;
		if (hold(p, data, amt, off)) {
			p->page = amt;
			// A commit's last frame goes out at once, whatever the
			// synchronous setting: no reader is told of a frame before it
			// is in the file.
			return commit ? flush(p) : SQLITE_OK;
		}
	}
	// Anything else (the log's own header, a page rewritten in place, a
	// write the buffer cannot take): what is held back first, then this.
	if ((rc = flush(p)) != SQLITE_OK) return rc;
	return issue(p, data, amt, off);
}

static int walRead(sqlite3_file *f, void *out, int amt, sqlite3_int64 off) {
	walFile *p = (walFile *)f;
	int rc = before(p);
	if (rc != SQLITE_OK) return rc;
	p->lastRead = off;
	return p->real->pMethods->xRead(p->real, out, amt, off);
}

static int walClose(sqlite3_file *f) {
	walFile *p = (walFile *)f;
	int rc = before(p);
	int crc = p->real->pMethods->xClose(p->real);
	free(p->buf);
	p->buf = NULL;
	p->cap = 0;
	return rc != SQLITE_OK ? rc : crc;
}

static int walTruncate(sqlite3_file *f, sqlite3_int64 size) {
	walFile *p = (walFile *)f;
	int rc = before(p);
	return rc != SQLITE_OK ? rc : p->real->pMethods->xTruncate(p->real, size);
}

static int walSync(sqlite3_file *f, int flags) {
	walFile *p = (walFile *)f;
	int rc = before(p);
	return rc != SQLITE_OK ? rc : p->real->pMethods->xSync(p->real, flags);
}

static int walFileSize(sqlite3_file *f, sqlite3_int64 *size) {
	walFile *p = (walFile *)f;
	int rc = before(p);
	return rc != SQLITE_OK ? rc : p->real->pMethods->xFileSize(p->real, size);
}

static int walLock(sqlite3_file *f, int level) {
	walFile *p = (walFile *)f;
	int rc = before(p);
	return rc != SQLITE_OK ? rc : p->real->pMethods->xLock(p->real, level);
}

static int walUnlock(sqlite3_file *f, int level) {
	walFile *p = (walFile *)f;
	int rc = before(p);
	return rc != SQLITE_OK ? rc : p->real->pMethods->xUnlock(p->real, level);
}

static int walCheckReservedLock(sqlite3_file *f, int *out) {
	walFile *p = (walFile *)f;
	int rc = before(p);
	return rc != SQLITE_OK ? rc : p->real->pMethods->xCheckReservedLock(p->real, out);
}

static int walFileControl(sqlite3_file *f, int op, void *arg) {
	walFile *p = (walFile *)f;
	int rc = before(p);
	return rc != SQLITE_OK ? rc : p->real->pMethods->xFileControl(p->real, op, arg);
}

static int walSectorSize(sqlite3_file *f) {
	walFile *p = (walFile *)f;
	p->deferred = before(p);
	return p->real->pMethods->xSectorSize(p->real);
}

static int walDeviceCharacteristics(sqlite3_file *f) {
	walFile *p = (walFile *)f;
	p->deferred = before(p);
	return p->real->pMethods->xDeviceCharacteristics(p->real);
}

static int walShmMap(sqlite3_file *f, int pg, int pgsz, int extend, void volatile **pp) {
	walFile *p = (walFile *)f;
	int rc = before(p);
	if (rc != SQLITE_OK) return rc;
	if (p->real->pMethods->iVersion < 2) return SQLITE_IOERR;
	return p->real->pMethods->xShmMap(p->real, pg, pgsz, extend, pp);
}

static int walShmLock(sqlite3_file *f, int offset, int n, int flags) {
	walFile *p = (walFile *)f;
	int rc = before(p);
	if (rc != SQLITE_OK) return rc;
	if (p->real->pMethods->iVersion < 2) return SQLITE_IOERR;
	return p->real->pMethods->xShmLock(p->real, offset, n, flags);
}

static void walShmBarrier(sqlite3_file *f) {
	walFile *p = (walFile *)f;
	p->deferred = before(p);
	if (p->real->pMethods->iVersion >= 2) p->real->pMethods->xShmBarrier(p->real);
}

static int walShmUnmap(sqlite3_file *f, int deleteFlag) {
	walFile *p = (walFile *)f;
	int rc = before(p);
	if (rc != SQLITE_OK) return rc;
	if (p->real->pMethods->iVersion < 2) return SQLITE_OK;
	return p->real->pMethods->xShmUnmap(p->real, deleteFlag);
}

static int walFetch(sqlite3_file *f, sqlite3_int64 off, int amt, void **pp) {
	walFile *p = (walFile *)f;
	*pp = NULL;
	int rc = before(p);
	if (rc != SQLITE_OK) return rc;
	if (p->real->pMethods->iVersion < 3) return SQLITE_OK;
	return p->real->pMethods->xFetch(p->real, off, amt, pp);
}

static int walUnfetch(sqlite3_file *f, sqlite3_int64 off, void *ptr) {
	walFile *p = (walFile *)f;
	int rc = before(p);
	if (rc != SQLITE_OK) return rc;
	if (p->real->pMethods->iVersion < 3) return SQLITE_OK;
	return p->real->pMethods->xUnfetch(p->real, off, ptr);
}

static const sqlite3_io_methods walMethods = {
	3,
	walClose,
	walRead,
	walWrite,
	walTruncate,
	walSync,
	walFileSize,
	walLock,
	walUnlock,
	walCheckReservedLock,
	walFileControl,
	walSectorSize,
	walDeviceCharacteristics,
	walShmMap,
	walShmLock,
	walShmBarrier,
	walShmUnmap,
	walFetch,
	walUnfetch,
};

// The real file sits after the walFile, aligned as a pointer is.
#define REAL_OFFSET ((sizeof(walFile) + sizeof(void *) - 1) / sizeof(void *) * sizeof(void *))

static int gatherOpen(sqlite3_vfs *vfs, sqlite3_filename name, sqlite3_file *f, int flags, int *outFlags) {
	(void)vfs;
	if ((flags & SQLITE_OPEN_WAL) == 0) {
		// Not a log: the unix VFS's own file, its own methods.
		return baseVfs->xOpen(baseVfs, name, f, flags, outFlags);
	}
	walFile *p = (walFile *)f;
	memset(p, 0, sizeof(*p));
	p->lastRead = -1;
	p->real = (sqlite3_file *)((char *)f + REAL_OFFSET);
	int rc = baseVfs->xOpen(baseVfs, name, p->real, flags, outFlags);
	// SQLite closes a file whose pMethods is set, even when xOpen failed.
	p->base.pMethods = p->real->pMethods != NULL ? &walMethods : NULL;
	return rc;
}

static int gatherDelete(sqlite3_vfs *vfs, const char *name, int syncDir) {
	(void)vfs;
	return baseVfs->xDelete(baseVfs, name, syncDir);
}

static int gatherAccess(sqlite3_vfs *vfs, const char *name, int flags, int *out) {
	(void)vfs;
	return baseVfs->xAccess(baseVfs, name, flags, out);
}

static int gatherFullPathname(sqlite3_vfs *vfs, const char *name, int n, char *out) {
	(void)vfs;
	return baseVfs->xFullPathname(baseVfs, name, n, out);
}

static void *gatherDlOpen(sqlite3_vfs *vfs, const char *name) {
	(void)vfs;
	return baseVfs->xDlOpen(baseVfs, name);
}

static void gatherDlError(sqlite3_vfs *vfs, int n, char *msg) {
	(void)vfs;
	baseVfs->xDlError(baseVfs, n, msg);
}

static void (*gatherDlSym(sqlite3_vfs *vfs, void *h, const char *sym))(void) {
	(void)vfs;
	return baseVfs->xDlSym(baseVfs, h, sym);
}

static void gatherDlClose(sqlite3_vfs *vfs, void *h) {
	(void)vfs;
	baseVfs->xDlClose(baseVfs, h);
}

static int gatherRandomness(sqlite3_vfs *vfs, int n, char *out) {
	(void)vfs;
	return baseVfs->xRandomness(baseVfs, n, out);
}

static int gatherSleep(sqlite3_vfs *vfs, int us) {
	(void)vfs;
	return baseVfs->xSleep(baseVfs, us);
}

static int gatherCurrentTime(sqlite3_vfs *vfs, double *now) {
	(void)vfs;
	return baseVfs->xCurrentTime(baseVfs, now);
}

static int gatherGetLastError(sqlite3_vfs *vfs, int n, char *msg) {
	(void)vfs;
	return baseVfs->xGetLastError(baseVfs, n, msg);
}

static int gatherCurrentTimeInt64(sqlite3_vfs *vfs, sqlite3_int64 *now) {
	(void)vfs;
	return baseVfs->xCurrentTimeInt64(baseVfs, now);
}

static int gatherSetSystemCall(sqlite3_vfs *vfs, const char *name, sqlite3_syscall_ptr fn) {
	(void)vfs;
	return baseVfs->xSetSystemCall(baseVfs, name, fn);
}

static sqlite3_syscall_ptr gatherGetSystemCall(sqlite3_vfs *vfs, const char *name) {
	(void)vfs;
	return baseVfs->xGetSystemCall(baseVfs, name);
}

static const char *gatherNextSystemCall(sqlite3_vfs *vfs, const char *name) {
	(void)vfs;
	return baseVfs->xNextSystemCall(baseVfs, name);
}

int countersign_walvfs_register(const char *name, const char *base) {
	if (gatherVfs.zName != NULL) return SQLITE_OK;
	sqlite3_vfs *b = sqlite3_vfs_find(base);
	if (b == NULL) return SQLITE_ERROR;
	if (b->iVersion < 3) return SQLITE_ERROR; // the unix VFS is version 3
	baseVfs = b;
	gatherVfs.iVersion = 3;
	gatherVfs.szOsFile = (int)REAL_OFFSET + b->szOsFile;
	gatherVfs.mxPathname = b->mxPathname;
	gatherVfs.zName = name;
	gatherVfs.xOpen = gatherOpen;
	gatherVfs.xDelete = gatherDelete;
	gatherVfs.xAccess = gatherAccess;
	gatherVfs.xFullPathname = gatherFullPathname;
	gatherVfs.xDlOpen = gatherDlOpen;
	gatherVfs.xDlError = gatherDlError;
	gatherVfs.xDlSym = gatherDlSym;
	gatherVfs.xDlClose = gatherDlClose;
	gatherVfs.xRandomness = gatherRandomness;
	gatherVfs.xSleep = gatherSleep;
	gatherVfs.xCurrentTime = gatherCurrentTime;
	gatherVfs.xGetLastError = gatherGetLastError;
	gatherVfs.xCurrentTimeInt64 = gatherCurrentTimeInt64;
	gatherVfs.xSetSystemCall = gatherSetSystemCall;
	gatherVfs.xGetSystemCall = gatherGetSystemCall;
	gatherVfs.xNextSystemCall = gatherNextSystemCall;
	int rc = sqlite3_vfs_register(&gatherVfs, 0);
	if (rc != SQLITE_OK) gatherVfs.zName = NULL;
	return rc;
}
