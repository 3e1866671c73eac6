package db

import "testing"

// RowsRead counts the rows every query hands to its reader, through
// database/sql and a prepared statement alike, and nothing else.
func TestRowsRead(t *testing.T) {
	d := openTestDB(t)
	count := func(q string, args ...any) int64 {
		t.Helper()
		before := d.RowsRead()
		rows, err := d.SQL().Query(q, args...)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
		return d.RowsRead() - before
	}
	series := `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) SELECT i FROM n`
	if got := count(series, 37); got != 37 {
		t.Errorf("a query of 37 rows read %d", got)
	}
	if got := count(`SELECT 1 WHERE 0`); got != 0 {
		t.Errorf("a query of no rows read %d", got)
	}
	stmt, err := d.SQL().Prepare(series)
	if err != nil {
		t.Fatal(err)
	}
	defer stmt.Close()
	before := d.RowsRead()
	var n int
	if err := stmt.QueryRow(5).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if got := d.RowsRead() - before; got != 1 {
		t.Errorf("a prepared QueryRow read %d rows, want 1", got)
	}
	before = d.RowsRead()
	if _, err := d.SQL().Exec(`CREATE TABLE IF NOT EXISTS rows_read_probe (x)`); err != nil {
		t.Fatal(err)
	}
	if got := d.RowsRead() - before; got != 0 {
		t.Errorf("an Exec read %d rows", got)
	}
}
