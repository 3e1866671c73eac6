package db

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
)

// TestOnCommitOncePerCommit: the commit hook runs once per write that
// appended audit entries, after the commit, with the chain's new head; its
// error is the write's, while what was written stays committed.
func TestOnCommitOncePerCommit(t *testing.T) {
	d, err := Open(filepath.Join(t.TempDir(), "countersign.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := context.Background()
	type call struct {
		seq  int64
		head string
	}
	var calls []call
	var fail error
	d.OnCommit(func(seq int64, head string) error {
		calls = append(calls, call{seq, head})
		return fail
	})
	entry := func() *audit.Entry {
		return &audit.Entry{Time: audit.FormatTime(d.now()), Kind: audit.KindTokenCreated, Principal: "test", Channel: "cli"}
	}
	if err := d.Store().Update(ctx, func(tx queue.Tx) error {
		for range 3 {
			if err := tx.Append(entry()); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	seq, head, _ := d.AuditHead(ctx)
	if len(calls) != 1 || calls[0] != (call{seq, head}) || seq != 3 {
		t.Fatalf("hook calls = %v, want one with (%d, %s)", calls, seq, head)
	}
	if err := d.Store().Update(ctx, func(tx queue.Tx) error { return tx.SetRetry("a", "t", queue.RetryState{Count: 1}) }); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 1 {
		t.Errorf("a write without audit entries ran the hook: %v", calls)
	}
	fail = errors.New("disk full")
	err = d.Store().Update(ctx, func(tx queue.Tx) error { return tx.Append(entry()) })
	if !errors.Is(err, fail) {
		t.Errorf("write whose hook failed = %v, want the hook's error", err)
	}
	if seq, _, _ := d.AuditHead(ctx); seq != 4 {
		t.Errorf("head after the failed hook = %d, want 4 (committed, not acknowledged)", seq)
	}
}
