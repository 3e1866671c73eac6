package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/countersign/countersign/internal/queue"
)

const freezeColumns = `id, tool, actor, reason, created_by, created_at`

func scanFreeze(r rowScanner) (queue.Freeze, error) {
	var f queue.Freeze
	var reason []byte
	var at int64
	if err := r.Scan(&f.ID, &f.Tool, &f.Actor, &reason, &f.By, &at); err != nil {
		return f, err
	}
	f.Reason, f.At = string(reason), time.UnixMilli(at).UTC()
	return f, nil
}

func (t *txn) Frozen(tool, actor string) (*queue.Freeze, error) {
	f, err := scanFreeze(t.tx.QueryRow(t.ctx, `SELECT `+freezeColumns+` FROM freezes
		WHERE lifted_at IS NULL AND tool IN ('', $1) AND actor IN ('', $2) ORDER BY id LIMIT 1`, tool, actor))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, queue.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("pgstore: read freezes: %w", err)
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
) SELECT x FROM v WHERE x IS NOT NULL LIMIT $1`

func (t *txn) KnownNames(limit int) (actors, tools []string, err error) {
	for _, q := range []struct {
		sql string
		out *[]string
	}{
		{`SELECT DISTINCT actor FROM tokens LIMIT $1`, &actors},
		{fmt.Sprintf(distinctCalls, "actor"), &actors},
		{fmt.Sprintf(distinctCalls, "tool"), &tools},
	} {
		rows, err := t.tx.Query(t.ctx, q.sql, limit)
		if err != nil {
			return nil, nil, fmt.Errorf("pgstore: known names: %w", err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, nil, fmt.Errorf("pgstore: known names: %w", err)
		}
		*q.out = append(*q.out, names...)
	}
	return actors, tools, nil
}

func (t *txn) InsertFreeze(f *queue.Freeze) error {
	t.advance = true // the high-water mark covers it before it is acknowledged
	if err := t.tx.QueryRow(t.ctx, `INSERT INTO freezes (tool, actor, reason, created_by, created_at) VALUES ($1,$2,$3,$4,$5)
		RETURNING id`, f.Tool, f.Actor, []byte(f.Reason), f.By, ms(f.At)).Scan(&f.ID); err != nil {
		return fmt.Errorf("pgstore: insert freeze: %w", err)
	}
	return nil
}

func (t *txn) LiftFreezes(tool, actor, by string, at time.Time) ([]queue.Freeze, error) {
	t.advance = true // the high-water mark covers it before it is acknowledged
	rows, err := t.tx.Query(t.ctx, `UPDATE freezes SET lifted_by = $1, lifted_at = $2
		WHERE lifted_at IS NULL AND tool = $3 AND actor = $4 RETURNING `+freezeColumns, by, ms(at), tool, actor)
	if err != nil {
		return nil, fmt.Errorf("pgstore: lift freezes: %w", err)
	}
	defer rows.Close()
	var out []queue.Freeze
	for rows.Next() {
		f, err := scanFreeze(rows)
		if err != nil {
			return nil, fmt.Errorf("pgstore: lift freezes: %w", err)
		}
		out = append(out, f)
	}
	return out, rows.Err()
}

// Freezes lists the freezes in force, oldest first.
func (s Store) Freezes(ctx context.Context) ([]queue.Freeze, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+freezeColumns+` FROM freezes WHERE lifted_at IS NULL ORDER BY id`)
	if err != nil {
		return nil, classify(fmt.Errorf("pgstore: list freezes: %w", err))
	}
	defer rows.Close()
	var out []queue.Freeze
	for rows.Next() {
		f, err := scanFreeze(rows)
		if err != nil {
			return nil, classify(fmt.Errorf("pgstore: list freezes: %w", err))
		}
		out = append(out, f)
	}
	return out, classify(rows.Err())
}
