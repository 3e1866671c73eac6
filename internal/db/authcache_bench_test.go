package db

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkTokenRead: a token answered from memory (two counter loads and
// one stat of the counters file) against one read from the database (the
// counters file's removal then makes every read go to the database).
func BenchmarkTokenRead(b *testing.B) {
	for _, kept := range []bool{true, false} {
		name := "kept"
		if !kept {
			name = "read"
		}
		b.Run(name, func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "countersign.db")
			d, err := Open(path)
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			authFixture(b, d)
			ctx := context.Background()
			if _, err := d.Accounts().TokenByHash(ctx, "hash-a"); err != nil {
				b.Fatal(err)
			}
			if !kept {
				if err := os.Remove(path + authEpochSuffix); err != nil {
					b.Fatal(err)
				}
			}
			before := d.Statements()
			b.ResetTimer()
			for range b.N {
				if _, err := d.Accounts().TokenByHash(ctx, "hash-a"); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(d.Statements()-before)/float64(b.N), "stmts/op")
		})
	}
}
