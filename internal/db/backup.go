package db

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"

	"github.com/countersign/countersign/internal/store/sqlq"
)

// Copy is a consistent copy of a database written by Backup: its identity
// and its audit chain head.
type Copy struct {
	Identity string
	Seq      int64
	Head     string
}

// Backup writes a consistent copy of the database to path, which must not
// exist, while the console goes on writing: VACUUM INTO reads one snapshot
// of the database (WAL lets writers commit meanwhile) and takes no write
// lock. The copy is synced to disk before Backup returns, and its identity
// and chain head are read from the copy itself, so they describe exactly
// what it holds.
func (d *DB) Backup(ctx context.Context, path string) (Copy, error) {
	if _, err := os.Lstat(path); err == nil {
		return Copy{}, fmt.Errorf("db: backup: %s exists", path)
	}
	if _, err := d.sql.ExecContext(ctx, `VACUUM INTO ?`, path); err != nil {
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

func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
