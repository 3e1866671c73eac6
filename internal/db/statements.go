package db

import (
	"context"
	"database/sql/driver"
	"reflect"
	"sync/atomic"

	sqlite3 "github.com/mattn/go-sqlite3"
)

// Statement counting.
//
// Every connection of a DB runs through countingConn, which counts each
// statement the connection is asked to run: every Exec and Query (one
// statement each; a string of several, as a migration is, counts once),
// and the BEGIN, COMMIT and ROLLBACK that database/sql asks for. A count
// costs one atomic addition, against the 3–10 µs SQLite spends on even the
// simplest statement, so it is always on: Statements reports it, the
// server exports it (countersign_store_statements_total), and a test can
// assert how many statements a whole flow takes, which fails when someone
// adds a read to the hot path.

// stmtCounter counts one DB's statements and, while a trace is set, hands
// each statement's text to it.
type stmtCounter struct {
	n     atomic.Int64
	rows  atomic.Int64 // rows handed to readers (countingRows)
	trace atomic.Pointer[func(query string)]
	// compiling is set by CountCompiles; compiles counts what the
	// connections opened since compiled (see Compiles).
	compiling atomic.Bool
	compiles  atomic.Int64
}

func (s *stmtCounter) count(query string) {
	s.n.Add(1)
	if fn := s.trace.Load(); fn != nil {
		(*fn)(query)
	}
}

// Statements returns how many SQL statements this handle's connections have
// run since it was opened (readers and the writer; migrations included).
func (d *DB) Statements() int64 { return d.stmts.n.Load() }

// RowsRead returns how many result rows this handle's queries have handed
// to their readers since it was opened: with Statements, it tells how much
// a page reads, which a test holds to one page however long the queue.
func (d *DB) RowsRead() int64 { return d.stmts.rows.Load() }

// TraceStatements calls fn with the text of every statement this handle's
// connections run from now on, on the goroutine that runs it (BEGIN,
// COMMIT and ROLLBACK as those words); nil stops it. fn must be safe for
// concurrent use and must not block. For tests and diagnosis: it tells
// which statements a flow runs.
func (d *DB) TraceStatements(fn func(query string)) {
	if fn == nil {
		d.stmts.trace.Store(nil)
		return
	}
	d.stmts.trace.Store(&fn)
}

// CountCompiles makes the connections opened from now on count what SQLite
// compiles (Compiles), and closes the idle connections and the writer's, so
// that every connection opened later counts. For tests and diagnosis: it
// costs a call into Go for each table and column a statement names each
// time one is compiled. Call it while no statement runs.
//
// A statement stays compiled between executions on its connection
// (_stmt_cache_size), unless SQLite marks it to be compiled again when a
// value is bound: a bound LIMIT, or a column compared with a bare ? in a
// query SQLite plans by that value (limitClause, SubmitChecks). Such a
// statement is compiled at every execution, which Compiles shows.
func (d *DB) CountCompiles() {
	d.stmts.compiling.Store(true)
	d.releaseWriter()
	d.sql.SetMaxIdleConns(0)
	d.sql.SetMaxIdleConns(8)
}

// Compiles returns how many SELECTs (subqueries included), INSERTs, DELETEs
// and updated columns SQLite compiled on the connections opened since
// CountCompiles: what its authorizer is asked about them as it compiles a
// statement, the first time on a connection or again. The transactions'
// own BEGIN, COMMIT, ROLLBACK and SAVEPOINT statements are not counted.
func (d *DB) Compiles() int64 { return d.stmts.compiles.Load() }

// connector opens SQLite connections that count their statements.
type connector struct {
	dsn   string
	drv   *sqlite3.SQLiteDriver
	stmts *stmtCounter
	// auth, when set, counts the writes to accounts, sessions and tokens
	// (authcache.go).
	auth *authEpoch
}

func (c connector) Connect(context.Context) (driver.Conn, error) {
	conn, err := c.drv.Open(c.dsn)
	if err != nil {
		return nil, err
	}
	cc := &countingConn{c: conn.(*sqlite3.SQLiteConn), stmts: c.stmts, auth: c.auth}
	// The triggers on the tables the caches depend on call this function
	// (migration 240): a connection without it (the sqlite3 shell, a
	// script, a binary that does not count) has its write refused, and a
	// process whose counters were removed or replaced refuses its own.
	if err := cc.c.RegisterFunc(authWriteFunc, func() (int64, error) {
		if cc.auth != nil && !cc.auth.current() {
			return 0, cc.auth.errCountersReplaced()
		}
		return 0, nil
	}, false); err != nil {
		cc.c.Close()
		return nil, err
	}
	if c.stmts.compiling.Load() {
		cc.c.RegisterAuthorizer(func(op int, _, _, _ string) int {
			switch op {
			case sqlite3.SQLITE_SELECT, sqlite3.SQLITE_INSERT, sqlite3.SQLITE_DELETE, sqlite3.SQLITE_UPDATE:
				c.stmts.compiles.Add(1)
			}
			return sqlite3.SQLITE_OK
		})
	}
	if cc.auth != nil {
		cc.c.RegisterUpdateHook(func(_ int, _, table string, _ int64) {
			if authTables[table] && !cc.authWrite {
				cc.authWrite = true
				cc.auth.begun.Add(1)
			}
		})
	}
	return cc, nil
}

func (c connector) Driver() driver.Driver { return c.drv }

// authWriteFunc is the SQL function the triggers on users, sessions,
// tokens, freezes and passkeys call on every row they change.
const authWriteFunc = "countersign_auth_write"

// countingConn is a SQLite connection that counts its statements. It
// implements the interfaces of *sqlite3.SQLiteConn that database/sql uses,
// so database/sql treats it as it treats the driver's own connection.
type countingConn struct {
	c     *sqlite3.SQLiteConn
	stmts *stmtCounter
	// committing is true while a transaction this connection began commits
	// (countingTx.Commit), for guardCommits.
	committing atomic.Bool
	// auth counts the writes to accounts, sessions and tokens; authWrite
	// is true from a statement's first change to one of their rows until
	// the connection is out of that transaction (settle).
	auth      *authEpoch
	authWrite bool
}

// settle counts the end of a write to accounts, sessions or tokens once
// the connection is out of its transaction, committed or rolled back.
func (c *countingConn) settle() {
	if c.authWrite && c.c.AutoCommit() {
		c.authWrite = false
		c.auth.ended.Add(1)
	}
}

// guardCommits, on, makes the connection refuse every commit but that of
// a transaction database/sql began on it (countingTx.Commit): SQLite
// turns any other into a rollback, and the statement that would have
// committed fails. The writer's connection runs with it on: when SQLite
// has ended the shared transaction under a write (an I/O error, an
// interrupted statement, ON CONFLICT ROLLBACK) and the write goes on, each
// of its later statements would otherwise commit on its own, outside the
// group commit: a change answered with an error yet durable, and audit
// entries chained to entries that were rolled back.
func (c *countingConn) guardCommits(on bool) {
	if !on {
		c.c.RegisterCommitHook(nil)
		return
	}
	c.c.RegisterCommitHook(func() int {
		if c.committing.Load() {
			return 0
		}
		return 1 // a rollback instead
	})
}

var (
	_ driver.Conn               = (*countingConn)(nil)
	_ driver.ConnBeginTx        = (*countingConn)(nil)
	_ driver.ConnPrepareContext = (*countingConn)(nil)
	_ driver.ExecerContext      = (*countingConn)(nil)
	_ driver.QueryerContext     = (*countingConn)(nil)
	_ driver.Pinger             = (*countingConn)(nil)
)

func (c *countingConn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c *countingConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	s, err := c.c.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	return &countingStmt{s: s.(*sqlite3.SQLiteStmt), query: query, stmts: c.stmts, conn: c}, nil
}

func (c *countingConn) Close() error {
	err := c.c.Close() // a transaction still open is rolled back
	if c.authWrite {
		c.authWrite = false
		c.auth.ended.Add(1)
	}
	return err
}

func (c *countingConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *countingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	c.stmts.count("BEGIN")
	tx, err := c.c.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return countingTx{tx: tx, conn: c}, nil
}

func (c *countingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	c.stmts.count(query)
	defer c.settle()
	return c.c.ExecContext(ctx, query, args)
}

func (c *countingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	c.stmts.count(query)
	defer c.settle()
	return c.countRows(c.c.QueryContext(ctx, query, args))
}

func (c *countingConn) Ping(ctx context.Context) error { return c.c.Ping(ctx) }

type countingTx struct {
	tx   driver.Tx
	conn *countingConn
}

func (t countingTx) Commit() error {
	t.conn.stmts.count("COMMIT")
	t.conn.committing.Store(true)
	defer t.conn.committing.Store(false)
	defer t.conn.settle()
	return t.tx.Commit()
}

func (t countingTx) Rollback() error {
	t.conn.stmts.count("ROLLBACK")
	defer t.conn.settle()
	return t.tx.Rollback()
}

// countingStmt is a prepared statement that counts its executions.
type countingStmt struct {
	s     *sqlite3.SQLiteStmt
	query string
	stmts *stmtCounter
	conn  *countingConn
}

var (
	_ driver.StmtExecContext  = (*countingStmt)(nil)
	_ driver.StmtQueryContext = (*countingStmt)(nil)
)

func (s *countingStmt) Close() error  { return s.s.Close() }
func (s *countingStmt) NumInput() int { return s.s.NumInput() }

func (s *countingStmt) Exec(args []driver.Value) (driver.Result, error) {
	s.stmts.count(s.query)
	defer s.conn.settle()
	return s.s.Exec(args)
}

func (s *countingStmt) Query(args []driver.Value) (driver.Rows, error) {
	s.stmts.count(s.query)
	return s.conn.countRows(s.s.Query(args))
}

func (s *countingStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	s.stmts.count(s.query)
	defer s.conn.settle()
	return s.s.ExecContext(ctx, args)
}

func (s *countingStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.stmts.count(s.query)
	return s.conn.countRows(s.s.QueryContext(ctx, args))
}

// countRows wraps a query's rows so that each one read is counted, and
// the connection settles when they are closed (a statement that writes
// and returns rows ends its own transaction then).
func (c *countingConn) countRows(r driver.Rows, err error) (driver.Rows, error) {
	if err != nil {
		return r, err
	}
	return &countingRows{Rows: r, n: &c.stmts.rows, conn: c}, nil
}

// countingRows counts the rows read from a result: one atomic addition a
// row. It passes on the column types SQLite's rows describe.
type countingRows struct {
	driver.Rows
	n    *atomic.Int64
	conn *countingConn
}

func (r *countingRows) Close() error {
	err := r.Rows.Close()
	r.conn.settle()
	return err
}

var (
	_ driver.RowsColumnTypeDatabaseTypeName = (*countingRows)(nil)
	_ driver.RowsColumnTypeScanType         = (*countingRows)(nil)
	_ driver.RowsColumnTypeNullable         = (*countingRows)(nil)
)

func (r *countingRows) Next(dest []driver.Value) error {
	err := r.Rows.Next(dest)
	if err == nil {
		r.n.Add(1)
	}
	return err
}

func (r *countingRows) ColumnTypeDatabaseTypeName(i int) string {
	if t, ok := r.Rows.(driver.RowsColumnTypeDatabaseTypeName); ok {
		return t.ColumnTypeDatabaseTypeName(i)
	}
	return ""
}

func (r *countingRows) ColumnTypeScanType(i int) reflect.Type {
	if t, ok := r.Rows.(driver.RowsColumnTypeScanType); ok {
		return t.ColumnTypeScanType(i)
	}
	return reflect.TypeFor[any]()
}

func (r *countingRows) ColumnTypeNullable(i int) (nullable, ok bool) {
	if t, ok := r.Rows.(driver.RowsColumnTypeNullable); ok {
		return t.ColumnTypeNullable(i)
	}
	return false, false
}
