// Package sqlq holds the reads and writes that are the same on both
// storage engines but for their spelling: SQL written once with ?
// placeholders, run through a Querier that each engine adapts (SQLite's
// database/sql, whose placeholders are ?; PostgreSQL's pgx, whose
// placeholders Rebind turns into $1, $2, ...). A Querier reports no row as
// ErrNoRows and classifies every other error the engine's way, so the code
// here never sees a driver's own errors.
//
// What really differs between the engines (the group-commit writer, the
// change listener, presence, the history planners, locking) stays in
// internal/db and internal/pgstore.
package sqlq

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
)

// ErrNoRows is what Row.Scan returns when the query matched no row, on
// either engine.
var ErrNoRows = sql.ErrNoRows

// Querier runs SQL with ? placeholders on one engine's pool, connection or
// transaction.
type Querier interface {
	QueryRow(ctx context.Context, query string, args ...any) Row
	Query(ctx context.Context, query string, args ...any) (Rows, error)
	// Exec returns the number of rows the statement changed.
	Exec(ctx context.Context, query string, args ...any) (int64, error)
}

// Row is the result of QueryRow.
type Row interface{ Scan(dest ...any) error }

// Rows is the result of Query; Close may be called more than once.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// Rebind turns ? placeholders into PostgreSQL's $1, $2, ... in order. A ?
// inside a quoted string or identifier is left alone.
func Rebind(query string) string {
	if !strings.Contains(query, "?") {
		return query
	}
	var b strings.Builder
	b.Grow(len(query) + 8)
	n := 0
	var quote byte
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '?':
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}
