package db

import (
	"context"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/queue"
)

// TestPendingCallsOneStatement: the pending calls are listed with their
// approvals by one statement, each call with the approvals a page of the
// queue reads for it (PendingPage reads them by a statement of their own),
// in the same order.
func TestPendingCallsOneStatement(t *testing.T) {
	d, err := Open(filepath.Join(t.TempDir(), "countersign.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := context.Background()
	at := time.Now().UTC().Truncate(time.Millisecond)
	if err := d.Store().Update(ctx, func(tx queue.Tx) error {
		for i, id := range []string{"call_1", "call_2", "call_3"} {
			c := groupCall(id)
			c.ApprovalsRequired = 3
			if err := tx.InsertCall(c); err != nil {
				return err
			}
			// Two approvals on call_1 and call_3, whose time order is not
			// their names' (the primary key's), none on call_2.
			for j, op := range []string{"zed", "amy"}[:2*((i+1)%2)] {
				a := queue.Approval{Operator: op, Channel: "web", At: at.Add(time.Duration(j) * time.Second), Comment: "ok " + op,
					Method: queue.MethodClick, Digest: c.Digest, Presented: &queue.Presented{Page: "call", At: at}}
				if j == 1 {
					a.For, a.Presented = "bob", nil
				}
				if err := tx.AddApproval(id, a); err != nil {
					return err
				}
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	before := d.Statements()
	listed, err := d.Store().PendingCalls(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if n := d.Statements() - before; n != 1 {
		t.Errorf("PendingCalls ran %d statements, want 1", n)
	}
	page, err := d.Store().PendingPage(ctx, queue.PageKey{}, 10)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string][]queue.Approval{}
	for _, c := range page {
		byID[c.ID] = c.Approvals
	}
	if len(listed) != 3 {
		t.Fatalf("PendingCalls listed %d calls, want 3", len(listed))
	}
	withApprovals := 0
	for _, c := range listed {
		if !reflect.DeepEqual(c.Approvals, byID[c.ID]) {
			t.Errorf("%s: PendingCalls read approvals %+v, a page of the queue %+v", c.ID, c.Approvals, byID[c.ID])
		}
		if len(c.Approvals) > 0 {
			withApprovals++
			if c.Approvals[0].Operator != "zed" {
				t.Errorf("%s: approvals not in time order: %+v", c.ID, c.Approvals)
			}
		}
	}
	if withApprovals != 2 {
		t.Errorf("%d calls listed with approvals, want 2", withApprovals)
	}
}
