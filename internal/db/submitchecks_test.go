package db

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/queue"
)

// errRollback ends a write without committing it.
var errRollback = errors.New("rolled back on purpose")

// TestSubmitChecksReadAsTheChecksDo: SubmitChecks reads a submission's
// checks in one statement, and the Retry, LatestByDigest and PendingBy
// that follow must return what they return when they read on their own,
// whatever the retries, calls and pending counts hold; a write to the
// calls table in between makes them read again.
func TestSubmitChecksReadAsTheChecksDo(t *testing.T) {
	d, err := Open(filepath.Join(t.TempDir(), "countersign.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := context.Background()
	const actor, tool, token = "agent:group", "payments.refund", "tok_1"
	blockedAt := time.Now().UTC().Truncate(time.Millisecond)

	mine := groupCall("call_mine")
	mine.SubmittedBy = token
	other := groupCall("call_other")
	other.SubmittedBy = "tok_2"
	other.Status = queue.StatusDenied
	if err := d.Store().Update(ctx, func(tx queue.Tx) error {
		plain := groupCall("call_plain")
		plain.SubmittedBy = token
		for _, c := range []*queue.Call{mine, other, plain} {
			if err := tx.InsertCall(c); err != nil {
				return err
			}
		}
		if err := tx.SetRetry(actor, tool, queue.RetryState{Count: 2}); err != nil {
			return err
		}
		return tx.SetRetry(actor, queue.AnyTool, queue.RetryState{Count: 5, BlockedAt: blockedAt})
	}); err != nil {
		t.Fatal(err)
	}

	type answers struct {
		Retry, Any   queue.RetryState
		Latest       string
		LatestErr    error
		Pending      int
		Statements   int64
		PendingAfter int
	}
	read := func(digest, tk, tl string, limit int, checks bool) answers {
		var a answers
		if err := d.Store().Update(ctx, func(tx queue.Tx) error {
			before := d.Statements()
			if checks {
				if err := tx.(*storeTx).SubmitChecks(actor, tl, digest, tk, limit); err != nil {
					return err
				}
			}
			var err error
			if a.Retry, err = tx.Retry(actor, tl); err != nil {
				return err
			}
			if a.Any, err = tx.Retry(actor, queue.AnyTool); err != nil {
				return err
			}
			c, err := tx.LatestByDigest(actor, digest, tk)
			a.LatestErr = err
			if c != nil {
				a.Latest = c.ID
			}
			if a.Pending, err = tx.PendingBy(tk, limit); err != nil {
				return err
			}
			a.Statements = d.Statements() - before
			// A call inserted now is counted by the next PendingBy.
			n := groupCall("call_new_" + tl + digest[:4] + tk)
			n.SubmittedBy = tk
			if err := tx.InsertCall(n); err != nil {
				return err
			}
			if a.PendingAfter, err = tx.PendingBy(tk, limit); err != nil {
				return err
			}
			return errRollback
		}); err != errRollback {
			t.Fatal(err)
		}
		return a
	}
	cases := map[string]struct {
		digest, token, tool string
		limit               int
	}{
		"own identical call":         {mine.Digest, token, tool, 10},
		"another token's denial":     {other.Digest, token, tool, 10},
		"no such digest":             {"00000000", token, tool, 10},
		"pending count at its limit": {"00000000", token, tool, 1},
		"a tool without retries":     {mine.Digest, token, "weather.search", 10},
		"another token":              {mine.Digest, "tok_3", tool, 10},
	}
	for name, c := range cases {
		alone := read(c.digest, c.token, c.tool, c.limit, false)
		checked := read(c.digest, c.token, c.tool, c.limit, true)
		alone.Statements, checked.Statements = 0, 0
		if !reflect.DeepEqual(alone, checked) {
			t.Errorf("%s: with SubmitChecks %+v, read alone %+v", name, checked, alone)
		}
	}
	// The checks then cost one statement, and one more to load a call
	// found by digest.
	if a := read("00000000", token, tool, 10, true); a.Statements != 1 {
		t.Errorf("a submission's checks ran %d statements, want 1", a.Statements)
	}
	if a := read(mine.Digest, token, tool, 10, true); a.Statements != 2 {
		t.Errorf("a submission's checks finding a call ran %d statements, want 2", a.Statements)
	}
}

// TestMutableColumnsMatchValues: every column UpdateCall may write has its
// value in a call's mutable row, in the same order.
func TestMutableColumnsMatchValues(t *testing.T) {
	if len(mutableColumns) != len(mutableRow{}) {
		t.Fatalf("%d mutable columns, %d values in a mutable row", len(mutableColumns), len(mutableRow{}))
	}
}

// TestUpdateCallWritesWhatChanged: a call read by the transaction has only
// the columns that changed written (each index on a named column is
// rewritten); one not read has every mutable column written.
func TestUpdateCallWritesWhatChanged(t *testing.T) {
	d, err := Open(filepath.Join(t.TempDir(), "countersign.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := context.Background()
	c, whole := groupCall("call_narrow"), groupCall("call_whole")
	if err := d.Store().Update(ctx, func(tx queue.Tx) error {
		if err := tx.InsertCall(c); err != nil {
			return err
		}
		return tx.InsertCall(whole)
	}); err != nil {
		t.Fatal(err)
	}
	var updates []string
	d.TraceStatements(func(q string) {
		if strings.HasPrefix(q, "UPDATE calls") {
			updates = append(updates, q)
		}
	})
	defer d.TraceStatements(nil)
	if err := d.Store().Update(ctx, func(tx queue.Tx) error {
		got, err := tx.Call(c.ID)
		if err != nil {
			return err
		}
		got.Status, got.DecidedAt = queue.StatusDenied, time.Now()
		got.Denial = &queue.Denial{By: "olga", Channel: "web", Reason: "no"}
		return tx.UpdateCall(got)
	}); err != nil {
		t.Fatal(err)
	}
	want := "UPDATE calls SET status = ?, decided_at = ?, denied_by = ?, denied_channel = ?, deny_reason = ? WHERE id = ?"
	if len(updates) != 1 || updates[0] != want {
		t.Errorf("update of a call read in the transaction: %q, want %q", updates, want)
	}
	updates = nil
	whole.GrantKID = "k1"
	if err := d.Store().Update(ctx, func(tx queue.Tx) error { return tx.UpdateCall(whole) }); err != nil {
		t.Fatal(err)
	}
	if len(updates) != 1 || strings.Count(updates[0], " = ?") != len(mutableColumns)+1 {
		t.Errorf("update of a call not read: %q, want every mutable column", updates)
	}
	if got, err := d.Store().Call(ctx, whole.ID); err != nil || got.Status != whole.Status || got.GrantKID != "k1" || got.Denial != nil {
		t.Errorf("after the full update: %+v, %v; want the call as written", got, err)
	}
}
