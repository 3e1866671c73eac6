package db

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
)

// TestPruneNeedsACheckpointAndLeavesAVerifiableChain: Prune refuses to end
// anywhere but at a signed checkpoint, or to remove the head; it removes
// the entries and appends the pruned entry in one transaction, after which
// the stored chain verifies; the audit table refuses deletes again.
func TestPruneNeedsACheckpointAndLeavesAVerifiableChain(t *testing.T) {
	h := newAuditHarness(t)
	ctx := context.Background()
	svc := account.NewService(h.d.Accounts(), nil)
	for range 6 {
		if _, _, err := svc.CreateToken(ctx, "agent:a", "host", "", "cli:root", audit.ChannelCLI); err != nil {
			t.Fatal(err)
		}
	}
	signer := newSigner(t)
	if _, err := h.d.Prune(ctx, 3, "root", nil); !errors.Is(err, ErrPruneUnanchored) {
		t.Fatalf("Prune without a checkpoint = %v, want ErrPruneUnanchored", err)
	}
	cp, err := h.d.Checkpoint(ctx, signer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.d.Prune(ctx, cp.Seq, "root", nil); !errors.Is(err, ErrNothingToPrune) {
		t.Fatalf("Prune of the head = %v, want ErrNothingToPrune", err)
	}
	if _, _, err := svc.CreateToken(ctx, "agent:a", "host", "", "cli:root", audit.ChannelCLI); err != nil {
		t.Fatal(err)
	}
	e, err := h.d.Prune(ctx, cp.Seq, "root", map[string]any{"archive": "a.tar"})
	if err != nil {
		t.Fatal(err)
	}
	if oldest, _ := h.d.OldestEntry(ctx); oldest != cp.Seq+1 {
		t.Errorf("oldest entry = %d, want %d", oldest, cp.Seq+1)
	}
	if e.Kind != audit.KindPruned || e.Seq != cp.Seq+2 {
		t.Errorf("pruned entry = %s at %d, want pruned at %d", e.Kind, e.Seq, cp.Seq+2)
	}
	// Until a checkpoint covers the pruned entry, anyone could have
	// written it.
	res, err := h.d.Verify(ctx, audit.VerifyOptions{TrustedKeys: []string{signer.PublicKey()}})
	if err != nil || res.OK || !strings.Contains(audit.ReasonOf(res.Err), "covered by no signed checkpoint") {
		t.Fatalf("Verify after Prune, before a checkpoint = %+v, %v", res, err)
	}
	if _, err := h.d.Checkpoint(ctx, signer); err != nil {
		t.Fatal(err)
	}
	res, err = h.d.Verify(ctx, audit.VerifyOptions{TrustedKeys: []string{signer.PublicKey()}})
	if err != nil || !res.OK || res.FromSeq != cp.Seq+1 {
		t.Fatalf("Verify after Prune = %+v, %v", res, err)
	}
	if _, err := h.d.SQL().Exec(`DELETE FROM audit WHERE seq = ?`, cp.Seq+1); err == nil {
		t.Error("a delete succeeded after the prune")
	}
	if _, err := h.d.Prune(ctx, cp.Seq, "root", nil); !errors.Is(err, ErrNothingToPrune) {
		t.Errorf("Prune again = %v, want ErrNothingToPrune", err)
	}
}
