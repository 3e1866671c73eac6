package db

import (
	"context"
	"testing"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/retention"
)

// TestAuditDeleteRefusedAfterAPrune: the audit table's delete trigger
// lets rows go only inside the prune's transaction; after it, a delete
// is refused again. (What a prune removes, refuses and leaves is the
// conformance suite's, on both engines.)
func TestAuditDeleteRefusedAfterAPrune(t *testing.T) {
	h := newAuditHarness(t)
	ctx := context.Background()
	svc := account.NewService(h.d.Accounts(), nil)
	create := func() {
		if _, _, err := svc.CreateToken(ctx, "agent:a", "host", "", "cli:root", audit.ChannelCLI); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		create()
	}
	if _, err := h.d.SQL().Exec(`DELETE FROM audit WHERE seq = 1`); err == nil {
		t.Fatal("a delete succeeded before any prune")
	}
	signer := newSigner(t)
	cp, err := h.d.Checkpoint(ctx, signer)
	if err != nil {
		t.Fatal(err)
	}
	create()
	if _, err := h.d.Prune(ctx, retention.Removal{FromSeq: 1, ToSeq: cp.Seq, By: "root", Signer: signer}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.d.SQL().Exec(`DELETE FROM audit WHERE seq = ?`, cp.Seq+1); err == nil {
		t.Error("a delete succeeded after the prune")
	}
}
