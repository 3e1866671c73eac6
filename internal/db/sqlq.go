package db

import (
	"context"
	"database/sql"

	"github.com/countersign/countersign/internal/store/sqlq"
)

// shared runs the SQL written once in internal/store/sqlq on SQLite, whose
// placeholders are already ?, classifying errors as classify does.
type shared struct{ q querier }

func (s shared) QueryRow(ctx context.Context, query string, args ...any) sqlq.Row {
	return sharedRow{s.q.QueryRowContext(ctx, query, args...)}
}

func (s shared) Query(ctx context.Context, query string, args ...any) (sqlq.Rows, error) {
	rows, err := s.q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, classify(err)
	}
	return sharedRows{rows}, nil
}

func (s shared) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := s.q.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, classify(err)
	}
	return res.RowsAffected()
}

// sharedRow's no row is sql.ErrNoRows, which is sqlq.ErrNoRows.
type sharedRow struct{ r *sql.Row }

func (r sharedRow) Scan(dest ...any) error { return classify(r.r.Scan(dest...)) }

type sharedRows struct{ r *sql.Rows }

func (r sharedRows) Next() bool             { return r.r.Next() }
func (r sharedRows) Scan(dest ...any) error { return classify(r.r.Scan(dest...)) }
func (r sharedRows) Err() error             { return classify(r.r.Err()) }
func (r sharedRows) Close()                 { r.r.Close() }
