package db

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/countersign/countersign/internal/audit"
)

// TestFilesAreOwnerOnly: the database and the WAL and shared-memory files
// SQLite creates beside it are readable by the owner alone, even under a
// permissive umask, from the first write on.
func TestFilesAreOwnerOnly(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	path := filepath.Join(t.TempDir(), "countersign.db")
	d, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, _, err := accountsOf(d).CreateToken(context.Background(), "agent:a", "host", "", "test", audit.ChannelCLI); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm", path + authEpochSuffix} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if perm := fi.Mode().Perm(); perm != 0o600 {
			t.Errorf("%s: mode %v, want 0600", filepath.Base(p), perm)
		}
	}
}
