package pgstore_test

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/pgtest"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/retention"
)

// TestPruneLockIsOnePerDatabase: while one handle (a replica's host
// running a prune) holds the prune lock, another cannot take it; it can
// once the first lets go.
func TestPruneLockIsOnePerDatabase(t *testing.T) {
	url := pgtest.Database(t)
	ctx := context.Background()
	a, b := mustOpen(t, url), mustOpen(t, url)
	unlock, err := a.LockPrune(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if unlock != nil {
			unlock()
		}
	}()
	if u, err := b.LockPrune(ctx); !errors.Is(err, retention.ErrPruneUnderWay) {
		if u != nil {
			u()
		}
		t.Fatalf("a second prune lock = %v, want ErrPruneUnderWay", err)
	}
	if u, err := a.LockPrune(ctx); !errors.Is(err, retention.ErrPruneUnderWay) {
		if u != nil {
			u()
		}
		t.Fatalf("a second prune lock on the same handle = %v, want ErrPruneUnderWay", err)
	}
	unlock()
	unlock = nil
	unlockB, err := b.LockPrune(ctx)
	if err != nil {
		t.Fatalf("the prune lock after it was let go: %v", err)
	}
	unlockB()
}

// TestCompactMakesPrunedSpaceReusable: after a prune, Compact (VACUUM)
// lets new entries take the pruned entries' space: the audit table does
// not grow while fewer entries than were removed are appended.
func TestCompactMakesPrunedSpaceReusable(t *testing.T) {
	url := pgtest.Database(t)
	ctx := context.Background()
	d := mustOpen(t, url)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// So that only Compact vacuums the table while the test runs.
	if _, err := conn.Exec(ctx, `ALTER TABLE audit SET (autovacuum_enabled = false)`); err != nil {
		t.Fatal(err)
	}
	heap := func() int64 {
		t.Helper()
		var n int64
		if err := conn.QueryRow(ctx, `SELECT pg_relation_size('audit')`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	appendN := func(n int) {
		t.Helper()
		err := d.Store().Update(ctx, func(tx queue.Tx) error {
			for range n {
				if err := tx.Append(&audit.Entry{Time: audit.FormatTime(time.Now()), Kind: audit.KindTokenCreated, Principal: "cli:root",
					Channel: audit.ChannelCLI, Details: map[string]any{"pad": strings.Repeat("x", 300)}}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	appendN(3000)
	seed := sha256.Sum256([]byte(t.Name()))
	signer := audit.NewSigner(ed25519.NewKeyFromSeed(seed[:]))
	cp, err := d.Checkpoint(ctx, signer)
	if err != nil {
		t.Fatal(err)
	}
	appendN(1)
	if _, err := d.Prune(ctx, retention.Removal{FromSeq: 1, ToSeq: cp.Seq, By: "root", Signer: signer}); err != nil {
		t.Fatal(err)
	}
	before, after, err := d.Compact(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if before.Bytes == 0 || after.Pages == 0 || after.Bytes != after.Pages*8192 {
		t.Errorf("Compact reports %+v before and %+v after", before, after)
	}
	vacuumed := heap()
	// Nearly the whole heap held the 3,000 entries removed: about that
	// much is reported free.
	if free := after.FreePages * 8192; free < vacuumed*9/10 || free > vacuumed {
		t.Errorf("Compact reports %d bytes free of a %d-byte heap whose entries but one were removed", free, vacuumed)
	}
	appendN(2500)
	if grown := heap() - vacuumed; grown > 4*8192 {
		t.Errorf("the audit table grew by %d bytes after a prune and Compact while 2,500 of the 3,000 entries' room was free", grown)
	}
	// The new entries took most of that room.
	if _, again, err := d.Compact(ctx); err != nil || again.FreePages*8192 > heap()/3 {
		t.Errorf("Compact after 2,500 entries took the room reports %d pages free of a %d-byte heap, %v", again.FreePages, heap(), err)
	}
	res, err := d.Verify(ctx, audit.VerifyOptions{TrustedKeys: []string{signer.PublicKey()}})
	if err != nil || !res.OK {
		t.Fatalf("Verify = %+v, %v", res, err)
	}
}

// TestVerifyRefusesAGapNoPrunedEntryRecords: entries removed with the
// permit but without the pruned entry (as someone with the database's
// owner rights could) are damage at entry 1, though a signed checkpoint
// stands at the last one removed.
func TestVerifyRefusesAGapNoPrunedEntryRecords(t *testing.T) {
	url := pgtest.Database(t)
	ctx := context.Background()
	d := mustOpen(t, url)
	for range 4 {
		if err := d.AppendAudit(ctx, &audit.Entry{Time: audit.FormatTime(time.Now()), Kind: audit.KindTokenCreated, Principal: "cli:root", Channel: audit.ChannelCLI}); err != nil {
			t.Fatal(err)
		}
	}
	seed := sha256.Sum256([]byte(t.Name()))
	signer := audit.NewSigner(ed25519.NewKeyFromSeed(seed[:]))
	cp, err := d.Checkpoint(ctx, signer)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.AppendAudit(ctx, &audit.Entry{Time: audit.FormatTime(time.Now()), Kind: audit.KindTokenCreated, Principal: "cli:root", Channel: audit.ChannelCLI}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Checkpoint(ctx, signer); err != nil {
		t.Fatal(err)
	}
	tx, err := d.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`INSERT INTO audit_prune_permit (id) VALUES (1)`, `DELETE FROM audit WHERE seq <= 4`, `DELETE FROM audit_prune_permit`} {
		if _, err := tx.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := d.Verify(ctx, audit.VerifyOptions{TrustedKeys: []string{signer.PublicKey()}})
	if err != nil || res.OK || !strings.Contains(audit.ReasonOf(res.Err), "no pruned entry records their removal") {
		t.Fatalf("Verify of a gap at checkpoint %d with no pruned entry = %+v, %v", cp.Seq, res, err)
	}
}
