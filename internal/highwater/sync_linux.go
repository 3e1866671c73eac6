package highwater

import (
	"os"

	"golang.org/x/sys/unix"
)

// datasync makes what was written to f durable with fdatasync: the mark is
// rewritten in place, two fixed slots, so after the first writes the file
// never changes size and only its data needs the disk. fsync would also
// write the inode's modification time at every commit, a journal commit
// of the file system's own that nothing here reads back.
func datasync(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err != unix.EINTR {
			return err
		}
	}
}
