package db

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/db/walvfs"
)

// TestConnectionsGatherWALWrites: every way this package opens a database
// names the gathering VFS, and a write through a DB makes one WAL write
// for its commit where SQLite asks for two per frame.
func TestConnectionsGatherWALWrites(t *testing.T) {
	if walvfs.Name() == "" {
		t.Skip("no gathering VFS on this platform")
	}
	for _, uri := range []string{DSN("/x/countersign.db"), fileURI("/x/copy.db", url.Values{"mode": {"ro"}})} {
		if !strings.Contains(uri, "vfs="+walvfs.Name()) {
			t.Errorf("%s: no vfs=%s", uri, walvfs.Name())
		}
	}
	d := openTestDB(t)
	ctx := context.Background()
	accounts := accountsOf(d)
	if _, _, err := accounts.CreateToken(ctx, "agent:a", "host", "", "first", audit.ChannelCLI); err != nil {
		t.Fatal(err)
	}
	r0, i0 := walvfs.Counts()
	c0, _ := d.WriteCounts()
	if _, _, err := accounts.CreateToken(ctx, "agent:b", "host", "", "second", audit.ChannelCLI); err != nil {
		t.Fatal(err)
	}
	r1, i1 := walvfs.Counts()
	c1, _ := d.WriteCounts()
	received, issued, commits := r1-r0, i1-i0, c1-c0
	if commits != 1 {
		t.Fatalf("%d commits, want 1", commits)
	}
	// The token, its indexes, its audit entry and the entry's indexes:
	// several frames, two writes asked for each.
	if received < 6 || issued != commits {
		t.Errorf("one commit: SQLite asked for %d WAL writes, %d made; want several and 1", received, issued)
	}
}
