package storetest

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/retention"
)

// retentionSigner is a checkpoint key of the test's own.
func retentionSigner(t *testing.T, name string) *audit.Signer {
	seed := sha256.Sum256([]byte(t.Name() + name))
	return audit.NewSigner(ed25519.NewKeyFromSeed(seed[:]))
}

func createTokens(t *testing.T, s Stores, n int) {
	t.Helper()
	svc := account.NewService(s.Accounts, nil)
	for range n {
		if _, _, err := svc.CreateToken(context.Background(), "agent:a", "host", "", "cli:root", audit.ChannelCLI); err != nil {
			t.Fatal(err)
		}
	}
}

// A prune ends at a signed checkpoint before the head and starts at the
// oldest entry kept; in one transaction it appends the pruned entry,
// removes the entries and signs a checkpoint at the pruned entry, after
// which the stored chain verifies against the key, and against no other.
// What was removed is gone: the horizon only moves forward.
var _ = add("retention/a prune ends at a checkpoint and leaves a chain that verifies", func(t *testing.T, s Stores) {
	ctx := context.Background()
	r := s.Retention
	createTokens(t, s, 6)
	signer := retentionSigner(t, "audit")
	prune := func(from, to int64) (*audit.Entry, error) {
		return r.Prune(ctx, retention.Removal{FromSeq: from, ToSeq: to, By: "root", Details: map[string]any{"archive": "a.tar"}, Signer: signer})
	}
	if _, err := prune(1, 3); !errors.Is(err, retention.ErrPruneUnanchored) {
		t.Fatalf("Prune without a checkpoint = %v, want ErrPruneUnanchored", err)
	}
	cp, err := r.Checkpoint(ctx, signer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := prune(1, cp.Seq); !errors.Is(err, retention.ErrNothingToPrune) {
		t.Fatalf("Prune of the head = %v, want ErrNothingToPrune", err)
	}
	createTokens(t, s, 1)
	if _, err := prune(2, cp.Seq); !errors.Is(err, retention.ErrPruneMoved) {
		t.Fatalf("Prune from an entry that is not the oldest = %v, want ErrPruneMoved", err)
	}
	e, err := prune(1, cp.Seq)
	if err != nil {
		t.Fatal(err)
	}
	if e.Kind != audit.KindPruned || e.Seq != cp.Seq+2 || e.Principal != "root" {
		t.Errorf("pruned entry = %s at %d by %s, want pruned at %d by root", e.Kind, e.Seq, e.Principal, cp.Seq+2)
	}
	d := e.Details.(map[string]any)
	if d["from_seq"] != int64(1) || d["to_seq"] != cp.Seq || d["count"] != cp.Seq || d["last_hash"] != cp.Head || d["archive"] != "a.tar" {
		t.Errorf("pruned entry's details = %v", d)
	}
	if oldest, err := r.OldestEntry(ctx); err != nil || oldest != cp.Seq+1 {
		t.Errorf("OldestEntry = %d, %v; want %d", oldest, err, cp.Seq+1)
	}
	// The checkpoint signed in the same transaction covers the pruned
	// entry: no reader sees it unvouched for.
	res, err := r.Verify(ctx, audit.VerifyOptions{TrustedKeys: []string{signer.PublicKey()}})
	if err != nil || !res.OK || res.FromSeq != cp.Seq+1 || res.Count != 2 {
		t.Fatalf("Verify after Prune = %+v, %v", res, err)
	}
	if latest, err := s.Audit.LatestCheckpoint(ctx); err != nil || latest.Seq != e.Seq {
		t.Errorf("LatestCheckpoint after Prune = %d, %v; want the pruned entry %d", latest.Seq, err, e.Seq)
	}
	other := retentionSigner(t, "other")
	if res, err := r.Verify(ctx, audit.VerifyOptions{TrustedKeys: []string{other.PublicKey()}}); err != nil || res.OK {
		t.Errorf("Verify of the gap with another key trusted = %+v, %v; want damage", res, err)
	}
	if _, err := prune(1, cp.Seq); !errors.Is(err, retention.ErrNothingToPrune) {
		t.Errorf("Prune again = %v, want ErrNothingToPrune", err)
	}
	if _, err := prune(cp.Seq+1, cp.Seq); !errors.Is(err, retention.ErrNothingToPrune) {
		t.Errorf("Prune ending before the oldest entry = %v, want ErrNothingToPrune", err)
	}
})

// The horizon's bounds: the first entry of a call still open (pending,
// approved with a live grant, redeemed without an outcome, of unknown
// outcome and unresolved), of a tool's calls proposed since a time, of
// the calls a legal hold covers; the first entry at or after a time.
var _ = add("retention/the horizon stops at open, kept and held calls", func(t *testing.T, s Stores) {
	ctx := context.Background()
	w := newWorld(t, s)
	h := w.open(t)
	r := s.Retention
	first := func(c *queue.Call) int64 {
		t.Helper()
		tl, err := h.Audit.Timeline(ctx, c.ID)
		if err != nil || len(tl) == 0 {
			t.Fatalf("Timeline(%s) = %d entries, %v", c.ID, len(tl), err)
		}
		return tl[0].Seq
	}
	open := func(at time.Time, want int64, what string) {
		t.Helper()
		if got, err := r.OldestOpenEntry(ctx, at); err != nil || got != want {
			t.Fatalf("OldestOpenEntry with %s = %d, %v; want %d", what, got, err, want)
		}
	}
	approve := func(c *queue.Call) *queue.Call {
		t.Helper()
		c, err := h.q.Approve(ctx, "alice", audit.ChannelCLI, c.ID, c.Digest)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	redeem := func(c *queue.Call) {
		t.Helper()
		if red, err := h.q.Redeem(ctx, payer, redeemBody(c)); err != nil || !red.Accepted {
			t.Fatalf("Redeem = %+v, %v", red, err)
		}
	}
	start := w.clock.Now()
	done := mustSubmit(t, h, payer, refund(1, "n"))
	redeem(approve(done))
	if _, err := h.q.ReportOutcome(ctx, payer, done.ID, "succeeded", "ok"); err != nil {
		t.Fatal(err)
	}
	open(w.clock.Now(), 0, "every call finished")

	pending := mustSubmit(t, h, payer, refund(2, "n"))
	open(w.clock.Now(), first(pending), "a pending call")
	approved := approve(pending)
	open(w.clock.Now(), first(pending), "an approved call with a live grant")
	open(approved.GrantExpiresAt.Add(time.Millisecond), 0, "an approved call whose grant ended")

	running := approve(mustSubmit(t, h, payer, refund(3, "n")))
	redeem(running)
	open(w.clock.Now(), first(pending), "a live grant and a running call")
	open(approved.GrantExpiresAt.Add(time.Millisecond), first(running), "a running call")
	if _, err := h.q.ReportOutcome(ctx, payer, running.ID, "unknown", "timed out"); err != nil {
		t.Fatal(err)
	}
	open(approved.GrantExpiresAt.Add(time.Millisecond), first(running), "an outcome unknown and unresolved")

	w.clock.Advance(time.Hour)
	later := mustSubmit(t, h, deployer, deploy("web"))
	if got, err := r.OldestKeptForTool(ctx, "payments.refund", start); err != nil || got != first(done) {
		t.Errorf("OldestKeptForTool(payments.refund, start) = %d, %v; want %d", got, err, first(done))
	}
	if got, err := r.OldestKeptForTool(ctx, "payments.refund", w.clock.Now()); err != nil || got != 0 {
		t.Errorf("OldestKeptForTool(payments.refund, now) = %d, %v; want 0", got, err)
	}
	if got, err := r.OldestKeptForTool(ctx, "releases.deploy", start); err != nil || got != first(later) {
		t.Errorf("OldestKeptForTool(releases.deploy) = %d, %v; want %d", got, err, first(later))
	}
	if got, err := r.FirstEntryFrom(ctx, w.clock.Now()); err != nil || got != first(later) {
		t.Errorf("FirstEntryFrom(now) = %d, %v; want %d", got, err, first(later))
	}
	if got, err := r.FirstEntryFrom(ctx, w.clock.Now().Add(time.Hour)); err != nil || got != 0 {
		t.Errorf("FirstEntryFrom(later) = %d, %v; want 0", got, err)
	}

	held := func(want int64, what string) {
		t.Helper()
		if got, err := r.OldestHeldEntry(ctx); err != nil || got != want {
			t.Fatalf("OldestHeldEntry with %s = %d, %v; want %d", what, got, err, want)
		}
	}
	held(0, "no hold")
	byCall, err := r.AddHold(ctx, "call", running.ID, "case 7", "admin")
	if err != nil {
		t.Fatal(err)
	}
	held(first(running), "a hold on a call")
	byTool, err := r.AddHold(ctx, "tool", "releases.deploy", "case 8", "admin")
	if err != nil {
		t.Fatal(err)
	}
	held(first(running), "holds on a call and a later tool")
	if err := r.RemoveHold(ctx, byCall.ID, "admin"); err != nil {
		t.Fatal(err)
	}
	held(first(later), "a hold on a tool")
	if _, err := r.AddHold(ctx, "actor", payer.Actor, "case 9", "admin"); err != nil {
		t.Fatal(err)
	}
	held(first(done), "a hold on an actor")
	if _, err := r.AddHold(ctx, "tool", "releases.deploy", "again", "admin"); !errors.Is(err, retention.ErrHoldExists) {
		t.Errorf("a second hold on the same tool = %v, want ErrHoldExists", err)
	}
	if err := r.RemoveHold(ctx, byCall.ID, "admin"); !errors.Is(err, retention.ErrNoSuchHold) {
		t.Errorf("removing a removed hold = %v, want ErrNoSuchHold", err)
	}
	// Holds are listed oldest first; two made in the same millisecond
	// come in the order of their random ids, so the check finds each.
	holds, err := r.Holds(ctx)
	if err == nil && len(holds) == 2 && holds[0].Kind == "actor" {
		holds[0], holds[1] = holds[1], holds[0]
	}
	if err != nil || len(holds) != 2 || holds[0].ID != byTool.ID || holds[0].Reason != "case 8" || holds[0].By != "admin" || holds[1].Kind != "actor" {
		t.Errorf("Holds = %+v, %v", holds, err)
	}
	// Each add and remove is audited, by whom.
	var out bytes.Buffer
	if _, err := s.Audit.ExportAudit(ctx, &out, audit.ExportOptions{Format: "jsonl"}); err != nil {
		t.Fatal(err)
	}
	if a, rm := strings.Count(out.String(), `"kind":"hold_added"`), strings.Count(out.String(), `"kind":"hold_removed"`); a != 3 || rm != 1 {
		t.Errorf("the trail holds %d hold_added and %d hold_removed entries, want 3 and 1", a, rm)
	}
})

// At most retention.MaxHolds legal holds.
var _ = add("retention/at most a thousand legal holds", func(t *testing.T, s Stores) {
	ctx := context.Background()
	r := s.Retention
	for i := range retention.MaxHolds {
		if _, err := r.AddHold(ctx, "call", fmt.Sprintf("call_%d", i), "case", "admin"); err != nil {
			t.Fatalf("hold %d: %v", i+1, err)
		}
	}
	if _, err := r.AddHold(ctx, "tool", "t.x", "case", "admin"); !errors.Is(err, retention.ErrTooManyHolds) {
		t.Fatalf("hold %d = %v, want ErrTooManyHolds", retention.MaxHolds+1, err)
	}
	holds, err := r.Holds(ctx)
	if err != nil || len(holds) != retention.MaxHolds {
		t.Fatalf("Holds = %d, %v", len(holds), err)
	}
	if err := r.RemoveHold(ctx, holds[0].ID, "admin"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.AddHold(ctx, "tool", "t.x", "case", "admin"); err != nil {
		t.Fatalf("a hold after one was removed: %v", err)
	}
})

// A prune on one handle (a replica, or the prune command's own process)
// while another serves: the other's writes go on and chain after the
// pruned entry; its reads of the trail, taken while the prune runs, see
// it whole or pruned and always verify; afterwards a removed call's
// timeline is empty and the call itself is still there.
var _ = add("retention/a prune on one replica while another serves", func(t *testing.T, s Stores) {
	ctx := context.Background()
	w := newWorld(t, s)
	a := w.open(t)
	b := w.open(t)
	signer := retentionSigner(t, "audit")
	var old []*queue.Call
	for i := range 20 {
		c := mustSubmit(t, a, payer, refund(uint32(i), "n"))
		if _, err := a.q.Deny(ctx, "alice", audit.ChannelCLI, c.ID, "no"); err != nil {
			t.Fatal(err)
		}
		old = append(old, c)
	}
	cp, err := a.Retention.Checkpoint(ctx, signer)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	// The other replica writes and verifies until stopped (at most 30
	// seconds).
	var stop atomic.Bool
	var writes, verifies atomic.Int64
	until := time.Now().Add(30 * time.Second)
	wg.Go(func() {
		for i := 0; !stop.Load() && time.Now().Before(until); i++ {
			c, _, err := b.q.Submit(ctx, payer, refund(uint32(1000+i), "n"))
			if err == nil {
				_, err = b.q.Approve(ctx, "bob", audit.ChannelCLI, c.ID, c.Digest)
			}
			if err != nil {
				t.Errorf("a write on the other replica during the prune: %v", err)
				return
			}
			writes.Add(1)
		}
	})
	wg.Go(func() {
		for !stop.Load() && time.Now().Before(until) {
			res, err := b.Retention.Verify(ctx, audit.VerifyOptions{TrustedKeys: []string{signer.PublicKey()}})
			if err != nil || !res.OK {
				t.Errorf("a verification on the other replica during the prune = %+v, %v", res, err)
				return
			}
			verifies.Add(1)
		}
	})
	// waitFor waits until n is at least want, the other replica failed, or
	// ten seconds went by.
	waitFor := func(n *atomic.Int64, want int64) {
		for deadline := time.Now().Add(10 * time.Second); n.Load() < want && !t.Failed() && time.Now().Before(deadline); {
			time.Sleep(2 * time.Millisecond)
		}
	}
	// Let the other replica get going, then prune; then let it write and
	// verify some more.
	waitFor(&writes, 3)
	waitFor(&verifies, 1)
	e, err := a.Retention.Prune(ctx, retention.Removal{FromSeq: 1, ToSeq: cp.Seq, By: "root", Signer: signer})
	if err != nil {
		stop.Store(true)
		wg.Wait()
		t.Fatal(err)
	}
	wroteBefore, verifiedBefore := writes.Load(), verifies.Load()
	waitFor(&writes, wroteBefore+3)
	waitFor(&verifies, verifiedBefore+2)
	stop.Store(true)
	wg.Wait()
	if writes.Load() < wroteBefore+3 || verifies.Load() < verifiedBefore+2 || wroteBefore == 0 || verifiedBefore == 0 {
		t.Fatalf("the other replica wrote %d times and verified %d times before the prune's commit was seen, %d and %d in all",
			wroteBefore, verifiedBefore, writes.Load(), verifies.Load())
	}
	if _, err := b.Retention.Checkpoint(ctx, signer); err != nil {
		t.Fatal(err)
	}
	res, err := b.Retention.Verify(ctx, audit.VerifyOptions{TrustedKeys: []string{signer.PublicKey()}})
	if err != nil || !res.OK || res.FromSeq != cp.Seq+1 {
		t.Fatalf("Verify on the other replica after the prune = %+v, %v", res, err)
	}
	tl, err := b.Audit.Timeline(ctx, old[0].ID)
	if err != nil || len(tl) != 0 {
		t.Errorf("a removed call's timeline on the other replica = %d entries, %v; want none", len(tl), err)
	}
	if c, err := b.Queue.Call(ctx, old[0].ID); err != nil || c.Status != queue.StatusDenied {
		t.Errorf("a removed call on the other replica = %+v, %v; want it there, denied", c, err)
	}
	if seq, _, err := b.Audit.AuditHead(ctx); err != nil || seq <= e.Seq {
		t.Errorf("AuditHead on the other replica = %d, %v; want past the pruned entry %d", seq, err, e.Seq)
	}
})
