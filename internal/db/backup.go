package db

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"

	"github.com/countersign/countersign/internal/store/sqlq"
)

// Copy is a consistent copy of a database written by Backup: its identity
// and its audit chain head.
type Copy struct {
	Identity string
	Seq      int64
	Head     string
}

// Backup pacing: the copy moves backupStep pages at a time and then rests
// BackupRest times as long as the step took, so it takes at most about a
// fifth of one core and of the disk from the console's writes.
const (
	backupStep = 64
	BackupRest = 4
	// backupBusyFor bounds how long steps may find the database busy
	// before the backup gives up.
	backupBusyFor = 30 * time.Second
)

// Backup writes a consistent copy of the database to path, which must not
// exist, while the console goes on writing. It holds one read transaction
// for the whole copy (WAL lets writers commit meanwhile; no write lock is
// taken) and copies pages with SQLite's online backup API, paced
// (backupStep), so the copy is the database as it was when the transaction
// began. The copy is not synced to disk: a caller that keeps it syncs it.
// Its identity and chain head are read from the copy itself, so they
// describe exactly what it holds.
func (d *DB) Backup(ctx context.Context, path string) (Copy, error) {
	if _, err := os.Lstat(path); err == nil {
		return Copy{}, fmt.Errorf("db: backup: %s exists", path)
	}
	err := d.readSnapshot(ctx, func(q querier) error {
		// The read transaction begins at its first read.
		var n int64
		if err := q.QueryRowContext(ctx, `SELECT COUNT(*) FROM meta`).Scan(&n); err != nil {
			return err
		}
		return copyPages(ctx, q.(*sql.Conn), path)
	})
	if err != nil {
		os.Remove(path)
		return Copy{}, classify(fmt.Errorf("db: backup into %s: %w", path, err))
	}
	if err := os.Chmod(path, 0o600); err != nil {
		return Copy{}, fmt.Errorf("db: backup: restrict %s: %w", path, err)
	}
	return ReadCopy(ctx, path)
}

// copyPages copies the database that src reads, in the read transaction
// src holds, to a new database file at path.
func copyPages(ctx context.Context, src *sql.Conn, path string) error {
	if f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600); err != nil {
		return err
	} else {
		f.Close()
	}
	// The copy is not synced: whoever keeps it syncs it (console backup
	// writes it into its archive, synced a chunk at a time, and removes
	// it), so the disk is asked for no flush it does not need.
	q := url.Values{}
	q.Set("_journal_mode", "OFF")
	q.Set("_synchronous", "OFF")
	dst, err := sql.Open("sqlite3", fileURI(path, q))
	if err != nil {
		return err
	}
	defer dst.Close()
	dconn, err := dst.Conn(ctx)
	if err != nil {
		return err
	}
	defer dconn.Close()
	return src.Raw(func(s any) error {
		from, ok := s.(*sqlite3.SQLiteConn)
		if !ok {
			cc, isCounting := s.(*countingConn)
			if !isCounting {
				return fmt.Errorf("not a SQLite connection: %T", s)
			}
			from = cc.c
		}
		return dconn.Raw(func(d any) error {
			b, err := d.(*sqlite3.SQLiteConn).Backup("main", from, "main")
			if err != nil {
				return err
			}
			busySince := time.Time{}
			for {
				start := time.Now()
				before := b.Remaining()
				done, err := b.Step(backupStep)
				if err != nil {
					b.Finish()
					return err
				}
				if done {
					return b.Finish()
				}
				// A step that copied nothing was refused busy or locked:
				// try again, but not for ever.
				switch {
				case b.Remaining() < before || before == 0:
					busySince = time.Time{}
				case busySince.IsZero():
					busySince = start
				case time.Since(busySince) > backupBusyFor:
					b.Finish()
					return fmt.Errorf("the database stayed busy for %v", backupBusyFor)
				}
				select {
				case <-ctx.Done():
					b.Finish()
					return ctx.Err()
				case <-time.After(BackupRest * time.Since(start)):
				}
			}
		})
	})
}

// ReadCopy reads the identity and audit chain head of the database file at
// path without changing it.
func ReadCopy(ctx context.Context, path string) (Copy, error) {
	if _, err := os.Stat(path); err != nil {
		return Copy{}, fmt.Errorf("db: open %s: %w", path, err)
	}
	q := url.Values{}
	q.Set("mode", "ro")
	q.Set("immutable", "1")
	sqldb, err := sql.Open("sqlite3", fileURI(path, q))
	if err != nil {
		return Copy{}, fmt.Errorf("db: open %s: %w", path, err)
	}
	defer sqldb.Close()
	var c Copy
	if err := sqldb.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'identity'`).Scan(&c.Identity); err != nil {
		return Copy{}, fmt.Errorf("db: %s is not a Countersign database: %w", path, err)
	}
	c.Seq, c.Head, err = sqlq.AuditHead(ctx, shared{sqldb})
	if err != nil {
		return Copy{}, fmt.Errorf("db: read the audit chain of %s: %w", path, err)
	}
	if c.Seq == 0 {
		c.Head = ""
	}
	return c, nil
}
