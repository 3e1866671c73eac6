package pgstore

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/countersign/countersign/internal/store/sqlq"
)

// shared runs the SQL written once in internal/store/sqlq on PostgreSQL:
// its ? placeholders become $1, $2, ..., pgx.ErrNoRows becomes
// sqlq.ErrNoRows, and other errors are classified as classify does.
type shared struct{ q querier }

func (s shared) QueryRow(ctx context.Context, query string, args ...any) sqlq.Row {
	return sharedRow{s.q.QueryRow(ctx, sqlq.Rebind(query), args...)}
}

func (s shared) Query(ctx context.Context, query string, args ...any) (sqlq.Rows, error) {
	rows, err := s.q.Query(ctx, sqlq.Rebind(query), args...)
	if err != nil {
		return nil, classify(err)
	}
	return sharedRows{rows}, nil
}

func (s shared) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := s.q.Exec(ctx, sqlq.Rebind(query), args...)
	if err != nil {
		return 0, classify(err)
	}
	return tag.RowsAffected(), nil
}

type sharedRow struct{ r pgx.Row }

func (r sharedRow) Scan(dest ...any) error {
	err := r.r.Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return sqlq.ErrNoRows
	}
	return classify(err)
}

type sharedRows struct{ r pgx.Rows }

func (r sharedRows) Next() bool             { return r.r.Next() }
func (r sharedRows) Scan(dest ...any) error { return classify(r.r.Scan(dest...)) }
func (r sharedRows) Err() error             { return classify(r.r.Err()) }
func (r sharedRows) Close()                 { r.r.Close() }
