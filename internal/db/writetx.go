package db

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
)

// writeTx is the writer's transaction: BEGIN IMMEDIATE … COMMIT on the
// writer's connection, d.writer, run through that *sql.Conn rather than
// through a *sql.Tx.
//
// database/sql starts a goroutine for every *sql.Tx, to roll it back when
// its context ends, and one for every query run in a *sql.Tx (its context
// is the transaction's, which can end), and the commit wakes the first of
// them. On two cores each goroutine started or woken while a core is idle
// costs a thread woken from its futex and the scheduler's spinning
// (nanosleep) to hand it over: two to four goroutines per write, each
// worth more system calls than the write's own statements. The writer's
// transaction never ends by its context (runBatch runs it under
// context.Background, and the writes' functions get contexts that do not
// end), so none of that is needed: on the connection, with contexts that
// cannot end, database/sql and the driver run every statement on the
// caller's goroutine and start none.
//
// BEGIN, COMMIT and ROLLBACK are the driver's own (countingConn.BeginTx,
// countingTx), as database/sql would ask for them: counted as statements,
// the BEGIN from the DSN's _txlock (IMMEDIATE), and the commit the only
// one the connection's guard lets through (guardCommits). A writeTx is
// used by the holder of the writer's token alone.
type writeTx struct {
	conn *sql.Conn
	dtx  driver.Tx
	done bool
}

// beginOn begins a write transaction on conn, a connection of a DB.
func beginOn(conn *sql.Conn) (*writeTx, error) {
	t := &writeTx{conn: conn}
	err := conn.Raw(func(dc any) error {
		cc, ok := dc.(*countingConn)
		if !ok {
			return fmt.Errorf("db: the writer's connection is a %T", dc)
		}
		var err error
		t.dtx, err = cc.BeginTx(context.Background(), driver.TxOptions{})
		return err
	})
	if err != nil {
		return nil, err
	}
	return t, nil
}

// ExecContext runs a statement in the transaction. ctx must not end
// (runBatch's contexts do not): a statement whose context can end runs
// on a goroutine of its own.
func (t *writeTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if t.done {
		return nil, sql.ErrTxDone
	}
	return t.conn.ExecContext(ctx, query, args...)
}

// QueryContext runs a query in the transaction; ctx as for ExecContext.
func (t *writeTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if t.done {
		return nil, sql.ErrTxDone
	}
	return t.conn.QueryContext(ctx, query, args...)
}

// QueryRowContext runs a query of one row in the transaction; ctx as for
// ExecContext.
func (t *writeTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if t.done {
		// A *sql.Row carries its error only from database/sql; a query
		// that cannot be made reads as the transaction's end there too.
		return t.conn.QueryRowContext(canceled, query, args...)
	}
	return t.conn.QueryRowContext(ctx, query, args...)
}

// Commit commits the transaction. After Commit or Rollback the
// transaction is done: every later call returns sql.ErrTxDone.
func (t *writeTx) Commit() error {
	if t.done {
		return sql.ErrTxDone
	}
	t.done = true
	return t.conn.Raw(func(any) error { return t.dtx.Commit() })
}

// Rollback rolls the transaction back, unless it is done (sql.ErrTxDone).
// An error means the connection may still be inside a transaction.
func (t *writeTx) Rollback() error {
	if t.done {
		return sql.ErrTxDone
	}
	t.done = true
	return t.conn.Raw(func(any) error { return t.dtx.Rollback() })
}

// canceled is a context that has ended.
var canceled = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()
