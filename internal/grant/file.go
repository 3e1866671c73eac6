package grant

import (
	"fmt"
	"os"
	"path/filepath"
)

// tempPrefix starts the name of a file being written; a crash may leave one
// behind, and the next rotation removes it.
const tempPrefix = ".tmp-"

// writeFileAtomic replaces dir/name with data: a temporary file (mode
// 0600) is written and synced, then renamed over name, then the directory
// is synced, so a reader sees the old file or the new one, never a part.
func writeFileAtomic(dir, name string, data []byte) (err error) {
	f, err := os.CreateTemp(dir, tempPrefix+name+"-*")
	if err != nil {
		return fmt.Errorf("grant: write %s: %w", name, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err = f.Chmod(0o600); err != nil {
		return fmt.Errorf("grant: write %s: %w", name, err)
	}
	if _, err = f.Write(data); err != nil {
		return fmt.Errorf("grant: write %s: %w", name, err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("grant: write %s: %w", name, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("grant: write %s: %w", name, err)
	}
	if err = os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("grant: write %s: %w", name, err)
	}
	return syncDir(dir)
}

// syncDir makes the directory's entries (renames, removals) durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("grant: sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("grant: sync %s: %w", dir, err)
	}
	return nil
}
