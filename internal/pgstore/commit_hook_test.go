package pgstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/pgtest"
	"github.com/countersign/countersign/internal/queue"
)

// TestOnCommitOnlyWhereTheMarkMustCover: as on SQLite, a commit whose
// entries all may wait for the high-water mark (a submission, an approval,
// a grant, an outcome) runs no commit hook; one entry of another kind, or
// a change that uses something up or records a bound, makes it run.
func TestOnCommitOnlyWhereTheMarkMustCover(t *testing.T) {
	d := mustOpen(t, pgtest.Database(t))
	ctx := context.Background()
	var hooked []int64
	d.OnCommit(func(seq int64, head string) error { hooked = append(hooked, seq); return nil })
	entry := func(kind string) *audit.Entry {
		e := &audit.Entry{Time: audit.FormatTime(time.Now()), Kind: kind, CallID: "call_m", Principal: "test", Channel: "cli"}
		if kind == audit.KindOutcome {
			e.Details = map[string]any{"status": "succeeded"}
		}
		return e
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
		c := &queue.Call{ID: "call_m", Actor: "agent:a", Audience: "h", Tool: "t.x", Target: "x", Args: canonical.Object{},
			Envelope: []byte("{}"), Digest: fmt.Sprintf("%064d", 1), Status: queue.StatusPending, ApprovalsRequired: 1,
			CreatedAt: time.Now(), DecideBy: time.Now().Add(time.Hour)}
		if err := tx.InsertCall(c); err != nil {
			return err
		}
		return appending(audit.KindSubmitted)(tx)
	})
	write(appending(audit.KindApproved, audit.KindGranted, audit.KindOutcome))
	if len(hooked) != 0 {
		t.Fatalf("commits of a submission, an approval and an outcome ran the hook: %v", hooked)
	}
	write(appending(audit.KindSubmitted, audit.KindRedeemed))
	if len(hooked) != 1 || hooked[0] != 6 {
		t.Fatalf("a redemption's commit ran the hook with %v, want once with head 6", hooked)
	}
	for name, change := range map[string]func(tx queue.Tx) error{
		"a failed outcome": func(tx queue.Tx) error {
			return tx.Append(&audit.Entry{Time: audit.FormatTime(time.Now()), Kind: audit.KindOutcome, CallID: "call_m",
				Principal: "test", Channel: "cli", Details: map[string]any{"status": "failed"}})
		},
		"a nonce consumed": func(tx queue.Tx) error {
			_, err := tx.ConsumeNonce(fmt.Sprint("jti-", time.Now().UnixNano()), "call_m", time.Now())
			return err
		},
		"a retry recorded": func(tx queue.Tx) error { return tx.SetRetry("agent:a", "t", queue.RetryState{Count: 1}) },
		"a revocation": func(tx queue.Tx) error {
			return tx.InsertRevocation(queue.Revocation{CallID: "call_m", JTI: fmt.Sprint("j", time.Now().UnixNano()), By: "o", Channel: "cli", At: time.Now()})
		},
		"a freeze": func(tx queue.Tx) error {
			return tx.InsertFreeze(&queue.Freeze{Tool: "*", Actor: "*", By: "o", At: time.Now()})
		},
		"a freeze lifted": func(tx queue.Tx) error { _, err := tx.LiftFreezes("*", "*", "o", time.Now()); return err },
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
