package db

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

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

// TestOnCommitOnlyWhereTheMarkMustCover: a commit whose entries are all of
// the kinds that may wait for the mark (a submission, an approval, a
// grant) runs no hook, and costs no sync of the mark; one entry of another
// kind, or a change that uses something up or records a bound, makes its
// commit run it, with the head that covers the commits before it.
func TestOnCommitOnlyWhereTheMarkMustCover(t *testing.T) {
	d, err := Open(filepath.Join(t.TempDir(), "countersign.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := context.Background()
	var hooked []int64
	d.OnCommit(func(seq int64, head string) error { hooked = append(hooked, seq); return nil })
	entry := func(kind string) *audit.Entry {
		return &audit.Entry{Time: audit.FormatTime(d.now()), Kind: kind, CallID: "call_m", Principal: "test", Channel: "cli"}
	}
	write := func(fn func(tx queue.Tx) error) {
		t.Helper()
		if err := d.Store().Update(ctx, fn); err != nil {
			t.Fatal(err)
		}
	}
	appending := func(kinds ...string) func(tx queue.Tx) error {
		return func(tx queue.Tx) error {
			for _, k := range kinds {
				if err := tx.Append(entry(k)); err != nil {
					return err
				}
			}
			return nil
		}
	}
	write(func(tx queue.Tx) error {
		if err := tx.InsertCall(groupCall("call_m")); err != nil {
			return err
		}
		return appending(audit.KindSubmitted)(tx)
	})
	write(appending(audit.KindApproved, audit.KindGranted))
	if len(hooked) != 0 {
		t.Fatalf("commits of a submission and an approval ran the hook: %v", hooked)
	}
	write(appending(audit.KindSubmitted, audit.KindRedeemed))
	if len(hooked) != 1 || hooked[0] != 5 {
		t.Fatalf("a redemption's commit ran the hook with %v, want once with head 5", hooked)
	}
	// Changes that use something up or record a bound, beside entries that
	// alone may wait.
	for name, change := range map[string]func(tx queue.Tx) error{
		"a nonce consumed": func(tx queue.Tx) error {
			_, err := tx.ConsumeNonce(fmt.Sprint("jti-", time.Now().UnixNano()), "call_m", d.now())
			return err
		},
		"a retry recorded": func(tx queue.Tx) error { return tx.SetRetry("agent:a", "t", queue.RetryState{Count: 1}) },
		"a revocation": func(tx queue.Tx) error {
			return tx.InsertRevocation(queue.Revocation{CallID: "call_m", JTI: fmt.Sprint("j", time.Now().UnixNano()), By: "o", Channel: "cli", At: d.now()})
		},
		"a freeze": func(tx queue.Tx) error {
			return tx.InsertFreeze(&queue.Freeze{Tool: "*", Actor: "*", By: "o", At: d.now()})
		},
		"a freeze lifted": func(tx queue.Tx) error { _, err := tx.LiftFreezes("*", "*", "o", d.now()); return err },
		"an allowance used": func(tx queue.Tx) error {
			_, err := tx.UseAllowance(queue.AllowanceUse{AllowanceID: "al_none", CallID: "call_m", At: d.now()})
			return err
		},
	} {
		before := len(hooked)
		write(func(tx queue.Tx) error {
			if err := appending(audit.KindApproved)(tx); err != nil {
				return err
			}
			return change(tx)
		})
		if len(hooked) != before+1 {
			t.Errorf("a commit with %s ran the hook %d times, want once", name, len(hooked)-before)
		}
	}
}
