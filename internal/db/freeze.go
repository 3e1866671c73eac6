package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/countersign/countersign/internal/queue"
)

const freezeColumns = `id, tool, actor, reason, created_by, created_at`

func scanFreeze(r rowScanner) (queue.Freeze, error) {
	var f queue.Freeze
	var at int64
	if err := r.Scan(&f.ID, &f.Tool, &f.Actor, &f.Reason, &f.By, &at); err != nil {
		return f, err
	}
	f.At = time.UnixMilli(at).UTC()
	return f, nil
}

func (t *storeTx) Frozen(tool, actor string) (*queue.Freeze, error) {
	// Almost always no freeze is in force: the probe of the partial index
	// that the transaction's state holds says so (needTxState),
	// where matching the freezes (IN lists are temporary tables in SQLite)
	// costs 20-40 µs inside a write transaction, on every approval and
	// redemption. The probe holds for the whole transaction: it was made
	// under the write lock, so a freeze committed elsewhere commits before
	// it or after this transaction; one inserted by this transaction sets
	// mayBeFrozen (InsertFreeze).
	if err := t.db.needTxState(t.ctx, t.tx); err != nil {
		return nil, err
	}
	if !t.db.txKnown.mayBeFrozen {
		return nil, queue.ErrNotFound
	}
	// MIN(id) rather than ORDER BY id LIMIT 1, which sorts in a temporary
	// b-tree.
	f, err := scanFreeze(t.tx.QueryRowContext(t.ctx, `SELECT `+freezeColumns+` FROM freezes WHERE id = (
		SELECT MIN(id) FROM freezes WHERE lifted_at IS NULL AND tool IN ('', ?) AND actor IN ('', ?))`, tool, actor))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, queue.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("db: read freezes: %w", err)
	}
	return &f, nil
}

// distinctCalls reads the distinct values of an indexed column of calls by
// skipping from one value to the next in the index, without reading every
// call.
const distinctCalls = `WITH RECURSIVE v(x) AS (
	SELECT MIN(%[1]s) FROM calls
	UNION ALL
	SELECT (SELECT MIN(%[1]s) FROM calls WHERE %[1]s > v.x) FROM v WHERE v.x IS NOT NULL
) SELECT x FROM v WHERE x IS NOT NULL LIMIT ?`

func (t *storeTx) KnownNames(limit int) (actors, tools []string, err error) {
	for _, q := range []struct {
		sql string
		out *[]string
	}{
		{`SELECT actor FROM (SELECT DISTINCT actor FROM tokens) LIMIT ?`, &actors},
		{fmt.Sprintf(distinctCalls, "actor"), &actors},
		{fmt.Sprintf(distinctCalls, "tool"), &tools},
	} {
		if err := t.strings(q.out, q.sql, limit); err != nil {
			return nil, nil, fmt.Errorf("db: known names: %w", err)
		}
	}
	return actors, tools, nil
}

func (t *storeTx) strings(out *[]string, query string, args ...any) error {
	rows, err := t.tx.QueryContext(t.ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return err
		}
		*out = append(*out, s)
	}
	return rows.Err()
}

func (t *storeTx) InsertFreeze(f *queue.Freeze) error {
	t.db.mustAdvance() // the high-water mark covers it before it is acknowledged
	if err := t.db.needTxState(t.ctx, t.tx); err != nil {
		return err
	}
	t.db.txKnown.mayBeFrozen = true // before the insert: a failed one may still have written
	res, err := t.tx.ExecContext(t.ctx, `INSERT INTO freezes (tool, actor, reason, created_by, created_at) VALUES (?,?,?,?,?)`,
		f.Tool, f.Actor, f.Reason, f.By, ms(f.At))
	if err != nil {
		return fmt.Errorf("db: insert freeze: %w", err)
	}
	f.ID, _ = res.LastInsertId()
	return nil
}

func (t *storeTx) LiftFreezes(tool, actor, by string, at time.Time) ([]queue.Freeze, error) {
	t.db.mustAdvance() // the high-water mark covers it before it is acknowledged
	rows, err := t.tx.QueryContext(t.ctx, `UPDATE freezes SET lifted_by = ?, lifted_at = ?
		WHERE lifted_at IS NULL AND tool = ? AND actor = ? RETURNING `+freezeColumns, by, ms(at), tool, actor)
	if err != nil {
		return nil, fmt.Errorf("db: lift freezes: %w", err)
	}
	defer rows.Close()
	var out []queue.Freeze
	for rows.Next() {
		f, err := scanFreeze(rows)
		if err != nil {
			return nil, fmt.Errorf("db: lift freezes: %w", err)
		}
		out = append(out, f)
	}
	return out, rows.Err()
}

// Freezes lists the freezes in force, oldest first: from memory while no
// freeze, account, session or token has been written since they were read
// (authcache.go).
func (s Store) Freezes(ctx context.Context) ([]queue.Freeze, error) {
	return s.DB.cached.freezes.through(s.DB.auth, "", slices.Clone,
		func() ([]queue.Freeze, error) { return s.readFreezes(ctx) }, nil)
}

func (s Store) readFreezes(ctx context.Context) ([]queue.Freeze, error) {
	rows, err := s.DB.sql.QueryContext(ctx, `SELECT `+freezeColumns+` FROM freezes WHERE lifted_at IS NULL ORDER BY id`)
	if err != nil {
		return nil, classify(fmt.Errorf("db: list freezes: %w", err))
	}
	defer rows.Close()
	var out []queue.Freeze
	for rows.Next() {
		f, err := scanFreeze(rows)
		if err != nil {
			return nil, fmt.Errorf("db: list freezes: %w", err)
		}
		out = append(out, f)
	}
	return out, classify(rows.Err())
}
