package sqlq

import "testing"

func TestRebind(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`SELECT 1`, `SELECT 1`},
		{`SELECT hash FROM audit WHERE seq = ?`, `SELECT hash FROM audit WHERE seq = $1`},
		{`WHERE seq BETWEEN ? AND ? ORDER BY seq`, `WHERE seq BETWEEN $1 AND $2 ORDER BY seq`},
		{`INSERT INTO t (a,b,c) VALUES (?,?,?)`, `INSERT INTO t (a,b,c) VALUES ($1,$2,$3)`},
		{`WHERE a = '?' AND b = ? AND "c?" = ?`, `WHERE a = '?' AND b = $1 AND "c?" = $2`},
		{`WHERE a = 'it''s ?' AND b = ?`, `WHERE a = 'it''s ?' AND b = $1`},
	} {
		if got := Rebind(tc.in); got != tc.want {
			t.Errorf("Rebind(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
