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
// as long as the step took, so it takes at most about half of one core and
// of the disk from the console's writes.
const backupStep = 256

// Backup writes a consistent copy of the database to path, which must not
// exist, while the console goes on writing. It holds one read transaction
// for the whole copy (WAL lets writers commit meanwhile; no write lock is
// taken) and copies pages with SQLite's online backup API, paced
// (backupStep), so the copy is the database as it was when the transaction
// began. The copy is synced to disk before Backup returns, and its identity
// and chain head are read from the copy itself, so they describe exactly
// what it holds.
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
	if err := syncFile(path); err != nil {
		return Copy{}, fmt.Errorf("db: backup: sync %s: %w", path, err)
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
	// The copy's own commit does not sync: each step's pages are synced
	// as they are written (below), so no large flush at the end stalls
	// the console's commits on the same disk.
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
			for {
				start := time.Now()
				done, err := b.Step(backupStep)
				if err != nil {
					b.Finish()
					return err
				}
				if done {
					return b.Finish()
				}
				if err := datasync(path); err != nil {
					b.Finish()
					return err
				}
				select {
				case <-ctx.Done():
					b.Finish()
					return ctx.Err()
				case <-time.After(time.Since(start)):
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

// datasync flushes the file at path's data to disk.
func datasync(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
