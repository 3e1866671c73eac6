package storetest

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
)

// Entries are chained in commit order, each transaction's entries in the
// order it appended them, with no gap and no fork however many writers
// race; the chain verifies.
var _ = add("audit/append order under concurrent writers", func(t *testing.T, s Stores) {
	ctx := context.Background()
	if seq, head, err := s.Audit.AuditHead(ctx); err != nil || seq != 0 || head != audit.GenesisHash {
		t.Fatalf("AuditHead of an empty trail = %d, %s, %v; want 0 and the genesis hash", seq, head, err)
	}
	c := newCall("agent:a", "t.x", t0)
	insert(t, s, c)
	const writers, each = 8, 5
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				err := s.Queue.Update(ctx, func(tx queue.Tx) error {
					// Two entries in one transaction stay adjacent.
					at := t0.Add(time.Duration(w*each+i) * time.Millisecond)
					if err := tx.Append(entry(audit.KindApproved, c.ID, at)); err != nil {
						return err
					}
					return tx.Append(entry(audit.KindGranted, c.ID, at))
				})
				if err != nil {
					t.Errorf("Update: %v", err)
				}
			}
		})
	}
	wg.Wait()
	entries, err := s.Audit.Timeline(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2*writers*each {
		t.Fatalf("Timeline has %d entries, want %d", len(entries), 2*writers*each)
	}
	prev := audit.GenesisHash
	for i, e := range entries {
		if e.Seq != int64(i+1) {
			t.Fatalf("entry %d has seq %d, want %d", i, e.Seq, i+1)
		}
		if e.PrevHash != prev {
			t.Fatalf("entry %d: prev_hash %s, want %s (the chain forked)", e.Seq, e.PrevHash, prev)
		}
		if want := audit.KindApproved; i%2 == 0 && e.Kind != want || i%2 == 1 && (e.Kind != audit.KindGranted || e.Time != entries[i-1].Time) {
			t.Fatalf("entry %d: kind %s at %s; one transaction's entries must stay together and in order", e.Seq, e.Kind, e.Time)
		}
		prev = e.Hash
	}
	seq, head, err := s.Audit.AuditHead(ctx)
	if err != nil || seq != int64(len(entries)) || head != prev {
		t.Errorf("AuditHead = %d, %s, %v; want %d, %s", seq, head, err, len(entries), prev)
	}
	res, err := s.Audit.VerifyChain(ctx)
	if err != nil || !res.OK || res.Count != seq || res.Head != head {
		t.Errorf("VerifyChain = %+v, %v; want OK with %d entries", res, err, seq)
	}
})

var _ = add("audit/timeline holds one call's entries", func(t *testing.T, s Stores) {
	ctx := context.Background()
	a, b := newCall("agent:a", "t.x", t0), newCall("agent:a", "t.x", t0)
	insert(t, s, a, b)
	update(t, s, func(tx queue.Tx) error {
		for _, e := range []*audit.Entry{entry(audit.KindSubmitted, a.ID, t0), entry(audit.KindSubmitted, b.ID, t0),
			entry(audit.KindDenied, a.ID, t0.Add(time.Second))} {
			if err := tx.Append(e); err != nil {
				return err
			}
		}
		return nil
	})
	got, err := s.Audit.Timeline(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Kind != audit.KindSubmitted || got[1].Kind != audit.KindDenied {
		t.Errorf("Timeline(a) = %+v; want submitted then denied", got)
	}
	if _, err := s.Audit.Timeline(ctx, "call_none"); !errors.Is(err, queue.ErrNotFound) {
		t.Errorf("Timeline of an unknown call: %v, want queue.ErrNotFound", err)
	}
})

var _ = add("audit/export verifies offline", func(t *testing.T, s Stores) {
	ctx := context.Background()
	c := newCall("agent:a", "t.x", t0)
	insert(t, s, c)
	for i := range 5 {
		update(t, s, func(tx queue.Tx) error {
			return tx.Append(entry(audit.KindApproved, c.ID, t0.Add(time.Duration(i)*time.Second)))
		})
	}
	if _, err := s.Audit.LatestCheckpoint(ctx); !errors.Is(err, audit.ErrNoCheckpoint) {
		t.Errorf("LatestCheckpoint before any = %v, want audit.ErrNoCheckpoint", err)
	}
	var buf bytes.Buffer
	res, err := s.Audit.ExportAudit(ctx, &buf, audit.ExportOptions{Format: "jsonl"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Count != 5 || res.FromSeq != 1 || res.ToSeq != 5 {
		t.Errorf("ExportAudit = %+v, want entries 1 to 5", res)
	}
	rep, err := audit.VerifyExport(&buf, audit.VerifyOptions{})
	if err != nil || rep.Count != 5 {
		t.Errorf("VerifyExport = %+v, %v; want 5 entries verified", rep, err)
	}
	if _, err := s.Audit.ExportAudit(ctx, &buf, audit.ExportOptions{Format: "xml"}); !errors.Is(err, audit.ErrFormat) {
		t.Errorf("ExportAudit as xml = %v, want audit.ErrFormat", err)
	}
})

// The checkpoint scheduler counts from the newest checkpoint in the
// database, whoever signed it: a scheduler on another handle does not sign
// again before five more entries.
var _ = add("audit/checkpoint schedulers share the newest checkpoint", func(t *testing.T, s Stores) {
	ctx := context.Background()
	store, ok := s.Audit.(audit.CheckpointStore)
	if !ok {
		t.Fatalf("%T does not sign checkpoints", s.Audit)
	}
	other, ok := s.Reopen(t).Audit.(audit.CheckpointStore)
	if !ok {
		t.Fatalf("%T does not sign checkpoints", s.Audit)
	}
	seed := sha256.Sum256([]byte(t.Name()))
	signer := audit.NewSigner(ed25519.NewKeyFromSeed(seed[:]))
	a := &audit.Scheduler{Store: store, Signer: signer, Interval: time.Hour, Every: 5}
	b := &audit.Scheduler{Store: other, Signer: signer, Interval: time.Hour, Every: 5}
	c := newCall("agent:a", "t.x", t0)
	insert(t, s, c)
	appendN := func(n int) {
		for range n {
			update(t, s, func(tx queue.Tx) error { return tx.Append(entry(audit.KindApproved, c.ID, t0)) })
		}
	}
	latest := func() int64 {
		t.Helper()
		cp, err := store.LatestCheckpoint(ctx)
		if errors.Is(err, audit.ErrNoCheckpoint) {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		return cp.Seq
	}
	appendN(3)
	a.Tick(ctx) // no checkpoint yet: sign at once
	if got := latest(); got != 3 {
		t.Fatalf("newest checkpoint at %d, want 3", got)
	}
	appendN(3)
	b.Tick(ctx) // three since 3, an hour not passed
	if got := latest(); got != 3 {
		t.Fatalf("other handle signed at %d, three entries after the newest checkpoint", got)
	}
	appendN(2)
	b.Tick(ctx)
	if got := latest(); got != 8 {
		t.Fatalf("newest checkpoint at %d, want 8 (five entries since 3)", got)
	}
	appendN(1)
	a.Tick(ctx) // one since 8, though nine since a's own checkpoint
	if got := latest(); got != 8 {
		t.Errorf("signed at %d, one entry after the newest checkpoint", got)
	}
	b.Final(ctx)
	if got := latest(); got != 9 {
		t.Errorf("after Final: newest checkpoint at %d, want 9", got)
	}
	if res, err := s.Audit.VerifyChain(ctx); err != nil || !res.OK || res.Checkpoints != 3 {
		t.Errorf("VerifyChain = %+v, %v; want OK with 3 checkpoints", res, err)
	}
})
