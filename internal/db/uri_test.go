package db

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/countersign/countersign/internal/audit"
)

// TestOddPaths: a database path holding a space, "?", "#" and "%" opens
// that very file, for the writer, the readers and a read-only opening;
// unescaped, SQLite would take "?" and "#" as the end of the path and open
// (and write) a file of another name.
func TestOddPaths(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "a dir #1")
	name := "count ersign?x=1#frag%41.db"
	path := filepath.Join(dir, name)
	d, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := accountsOf(d).CreateToken(ctx, "agent:a", "host", "", "test", audit.ChannelCLI); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if n := e.Name(); n != name && n != name+"-wal" && n != name+"-shm" && n != name+authEpochSuffix {
			t.Errorf("SQLite made %q beside %q", n, name)
		}
	}
	d.Close()
	if entries, err := os.ReadDir(filepath.Dir(dir)); err != nil || len(entries) != 1 {
		t.Errorf("beside %q: %v, %v; want nothing else", filepath.Base(dir), entries, err)
	}
	ro, err := OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	var n int
	if err := ro.SQL().QueryRow(`SELECT COUNT(*) FROM tokens`).Scan(&n); err != nil || n != 1 {
		t.Errorf("read-only %q: %d tokens, %v; want the one written", name, n, err)
	}
}
