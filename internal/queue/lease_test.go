package queue_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/db"
	"github.com/countersign/countersign/internal/grant"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/testkit"
	"github.com/countersign/countersign/internal/tools"
)

// holder is agent's token that redeems; other is another token of the
// same actor and audience.
var (
	holder = queue.Principal{Actor: agent.Actor, Audience: agent.Audience, TokenID: "tok_holder"}
	other  = queue.Principal{Actor: agent.Actor, Audience: agent.Audience, TokenID: "tok_other"}
)

// refundLease is payments.refund's outcome_within: the default.
const refundLease = tools.DefaultOutcomeWithin

// MustRedeemed approves and redeems a refund with holder's token.
func MustRedeemed(tb testing.TB, e *env) *queue.Call {
	tb.Helper()
	c := MustApproved(tb, e)
	r, err := e.q.Redeem(context.Background(), holder, exactBody(c))
	if err != nil || !r.Accepted {
		tb.Fatalf("Redeem: %v, %+v", err, r)
	}
	return r.Call
}

// kinds lists the audit kinds of a call's entries, oldest first.
func kinds(tb testing.TB, e *env, id string) []string {
	tb.Helper()
	entries, err := e.db.Timeline(context.Background(), id)
	if err != nil {
		tb.Fatal(err)
	}
	var out []string
	for _, en := range entries {
		out = append(out, en.Kind)
	}
	return out
}

// record collects the service's committed events.
type record struct {
	mu     sync.Mutex
	events []queue.Event
}

func recordEvents(q *queue.Service) *record {
	r := &record{}
	q.Subscribe(func(ev queue.Event) {
		r.mu.Lock()
		r.events = append(r.events, ev)
		r.mu.Unlock()
	})
	return r
}

func (r *record) kinds() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, ev := range r.events {
		out = append(out, ev.Kind)
	}
	return out
}

func (e *env) advance(d time.Duration) { e.clock.Advance(d) }

func (e *env) load(tb testing.TB, id string) *queue.Call {
	tb.Helper()
	c, err := e.q.Call(context.Background(), id)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

func TestRedemptionStartsLease(t *testing.T) {
	e := newEnv(t)
	c := MustApproved(t, e)
	now := e.clock.Now()
	r, err := e.q.Redeem(context.Background(), holder, exactBody(c))
	if err != nil || !r.Accepted {
		t.Fatalf("Redeem: %v %+v", err, r)
	}
	got := e.load(t, c.ID)
	if got.RedeemedBy != holder.TokenID || !got.LeaseUntil.Equal(now.Add(refundLease)) || got.OutcomeWithin != refundLease {
		t.Errorf("redeemed by %q lease until %v within %v; want %q, %v, %v", got.RedeemedBy, got.LeaseUntil, got.OutcomeWithin,
			holder.TokenID, now.Add(refundLease), refundLease)
	}
	if !got.OutcomeOpen() || got.Unresolved() {
		t.Errorf("open %t unresolved %t, want open and not unresolved", got.OutcomeOpen(), got.Unresolved())
	}
	// The executor gets the exact canonical bytes that were hashed.
	if !bytes.Equal(r.Call.Envelope, c.Envelope) || canonical.DigestOf(r.Call.Envelope) != c.Digest {
		t.Errorf("redemption envelope %s does not hash to the call's digest %s", r.Call.Envelope, c.Digest)
	}
	entries, err := e.db.Timeline(context.Background(), c.ID)
	if err != nil {
		t.Fatal(err)
	}
	last := entries[len(entries)-1]
	d := last.Details.(canonical.Object)
	if tok, _ := d.Get("token"); last.Kind != audit.KindRedeemed || tok != holder.TokenID {
		t.Errorf("redeemed entry %s names token %v, want %s", last.Kind, tok, holder.TokenID)
	}
	if until, _ := d.Get("lease_until"); until != got.LeaseUntil.Format(time.RFC3339Nano) {
		t.Errorf("redeemed entry lease_until %v, want %v", until, got.LeaseUntil)
	}
}

func TestLeaseExpiry(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	ev := recordEvents(e.q)
	c := MustRedeemed(t, e)
	e.advance(refundLease - time.Millisecond)
	if n, err := e.q.ExpireLeases(ctx); err != nil || n != 0 {
		t.Fatalf("before the lease ends: ExpireLeases = %d, %v; want 0", n, err)
	}
	if next, ok, err := e.store.NextLeaseEnd(ctx); err != nil || !ok || !next.Equal(c.LeaseUntil) {
		t.Fatalf("NextLeaseEnd = %v %t %v, want %v", next, ok, err, c.LeaseUntil)
	}
	e.advance(time.Millisecond)
	if n, err := e.q.ExpireLeases(ctx); err != nil || n != 1 {
		t.Fatalf("at the lease end: ExpireLeases = %d, %v; want 1", n, err)
	}
	got := e.load(t, c.ID)
	if got.Status != queue.StatusRedeemed || got.Outcome == nil || got.Outcome.Status != queue.OutcomeLeaseExpired ||
		!got.Outcome.At.Equal(e.clock.Now()) {
		t.Fatalf("after the lease: status %s outcome %+v; want redeemed, lease_expired now", got.Status, got.Outcome)
	}
	if !got.Unresolved() {
		t.Errorf("a lapsed lease does not wait for a person")
	}
	if w := []string{"submitted", "approved", "granted", "redeemed", "lease_expired"}; !slices.Equal(kinds(t, e, c.ID), w) {
		t.Errorf("timeline %v, want %v", kinds(t, e, c.ID), w)
	}
	if k := ev.kinds(); k[len(k)-1] != audit.KindLeaseExpired {
		t.Errorf("events %v: the expiry was not published", k)
	}
	if _, ok, err := e.store.NextLeaseEnd(ctx); err != nil || ok {
		t.Errorf("NextLeaseEnd after the expiry: %t, %v; want none", ok, err)
	}
	if n, err := e.q.ExpireLeases(ctx); err != nil || n != 0 {
		t.Errorf("a second sweep: %d, %v; want 0", n, err)
	}
	unresolved, err := e.store.UnresolvedCalls(ctx, 10)
	if err != nil || len(unresolved) != 1 || unresolved[0].ID != c.ID || len(unresolved[0].Approvals) != 1 {
		t.Errorf("UnresolvedCalls = %v, %v; want %s with its approval", unresolved, err, c.ID)
	}
}

// TestLeaseNeverTouchesOtherCalls: only redeemed calls have leases.
func TestLeaseNeverTouchesOtherCalls(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	approved := MustApproved(t, e)
	denied, _, err := e.q.Submit(ctx, agent, []byte(`{"tool":"payments.refund","target":"invoice:INV-77","args":`+refundArgs+`}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.q.Deny(ctx, "alice", audit.ChannelWeb, denied.ID, "no"); err != nil {
		t.Fatal(err)
	}
	e.advance(48 * time.Hour)
	if n, err := e.q.ExpireLeases(ctx); err != nil || n != 0 {
		t.Fatalf("ExpireLeases = %d, %v; want 0", n, err)
	}
	for _, id := range []string{approved.ID, denied.ID} {
		if c := e.load(t, id); c.Outcome != nil || !c.LeaseUntil.IsZero() {
			t.Errorf("%s (%s): outcome %+v lease %v; want neither", id, c.Status, c.Outcome, c.LeaseUntil)
		}
	}
}

func TestHeartbeat(t *testing.T) {
	ctx := context.Background()
	pe := func(err error) bool { var p *queue.ProposalError; return errors.As(err, &p) }
	tests := []struct {
		name    string
		prepare func(t *testing.T, e *env, c *queue.Call)
		who     queue.Principal
		extend  time.Duration
		after   time.Duration // clock moved before the heartbeat
		err     func(error) bool
		lease   time.Duration // the new lease end, from the heartbeat's time
	}{
		{name: "the redeeming token, by outcome_within", who: holder, after: time.Minute, lease: refundLease},
		{name: "a shorter extension past the current end", who: holder, after: 4 * time.Minute, extend: 2 * time.Minute, lease: 2 * time.Minute},
		{name: "a shorter extension never shortens", who: holder, after: time.Minute, extend: time.Second, lease: refundLease - time.Minute},
		{name: "longer than outcome_within", who: holder, extend: refundLease + time.Second, err: pe},
		{name: "negative", who: holder, extend: -time.Second, err: pe},
		{name: "another token of the actor", who: other, err: is(queue.ErrNotLeaseHolder)},
		{name: "another actor", who: queue.Principal{Actor: "agent:b", Audience: agent.Audience, TokenID: holder.TokenID},
			err: is(queue.ErrNotFound)},
		{name: "after the outcome", who: holder, err: is(queue.ErrOutcomeReported),
			prepare: func(t *testing.T, e *env, c *queue.Call) {
				if _, err := e.q.ReportOutcome(ctx, holder, c.ID, queue.OutcomeSucceeded, ""); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "after lease_expired", who: holder, err: is(queue.ErrLeaseExpired),
			prepare: func(t *testing.T, e *env, c *queue.Call) {
				e.advance(refundLease)
				if n, err := e.q.ExpireLeases(ctx); n != 1 || err != nil {
					t.Fatal(n, err)
				}
			}},
		{name: "a lapsed lease not swept yet", who: holder, after: refundLease, err: is(queue.ErrLeaseExpired)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			c := MustRedeemed(t, e)
			if tt.prepare != nil {
				tt.prepare(t, e, c)
			}
			e.advance(tt.after)
			before := e.load(t, c.ID)
			entries := len(kinds(t, e, c.ID))
			got, err := e.q.Heartbeat(ctx, tt.who, c.ID, tt.extend)
			if tt.err != nil {
				if !tt.err(err) {
					t.Fatalf("Heartbeat = %v", err)
				}
				after := e.load(t, c.ID)
				if errors.Is(err, queue.ErrLeaseExpired) {
					// Found lapsed: expired on the spot, not revived.
					if after.Outcome == nil || after.Outcome.Status != queue.OutcomeLeaseExpired || !after.LeaseUntil.Equal(before.LeaseUntil) {
						t.Errorf("after a refused heartbeat: outcome %+v lease %v", after.Outcome, after.LeaseUntil)
					}
					return
				}
				if !after.LeaseUntil.Equal(before.LeaseUntil) || len(kinds(t, e, c.ID)) != entries {
					t.Errorf("a refused heartbeat changed the lease to %v or wrote an entry", after.LeaseUntil)
				}
				return
			}
			if err != nil {
				t.Fatalf("Heartbeat: %v", err)
			}
			want := e.clock.Now().Add(tt.lease)
			if !got.LeaseUntil.Equal(want) || !e.load(t, c.ID).LeaseUntil.Equal(want) {
				t.Errorf("lease until %v, want %v", got.LeaseUntil, want)
			}
			k := kinds(t, e, c.ID)
			extended := !want.Equal(before.LeaseUntil)
			if extended != (k[len(k)-1] == audit.KindLeaseExtended) {
				t.Errorf("timeline %v: extended %t", k, extended)
			}
		})
	}
}

func is(target error) func(error) bool { return func(err error) bool { return errors.Is(err, target) } }

// TestHeartbeatKeepsLease: an executor that keeps heartbeating is never
// expired, and one that stops is, one outcome_within after its last beat.
func TestHeartbeatKeepsLease(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	c := MustRedeemed(t, e)
	for range 10 {
		e.advance(refundLease - time.Second)
		if n, err := e.q.ExpireLeases(ctx); n != 0 || err != nil {
			t.Fatalf("ExpireLeases while heartbeating = %d, %v", n, err)
		}
		if _, err := e.q.Heartbeat(ctx, holder, c.ID, 0); err != nil {
			t.Fatal(err)
		}
	}
	last := e.clock.Now()
	e.advance(refundLease - time.Millisecond)
	if n, _ := e.q.ExpireLeases(ctx); n != 0 {
		t.Fatal("expired before the last heartbeat's lease ended")
	}
	e.clock.Set(last.Add(refundLease))
	if n, _ := e.q.ExpireLeases(ctx); n != 1 {
		t.Fatal("not expired when the last heartbeat's lease ended")
	}
}

func TestReportOutcomeAfterLease(t *testing.T) {
	ctx := context.Background()
	type step struct {
		status string
		err    error
	}
	tests := []struct {
		name    string
		expire  bool // the sweeper ran after the lease ended
		lapse   bool // the lease ended before the first report
		reports []step
		want    string // the outcome that stands
		details map[string]any
	}{
		{name: "in time", reports: []step{{queue.OutcomeSucceeded, nil}, {queue.OutcomeFailed, queue.ErrOutcomeReported}},
			want: queue.OutcomeSucceeded},
		{name: "late, after lease_expired: replaces it", expire: true, lapse: true,
			reports: []step{{queue.OutcomeFailed, nil}, {queue.OutcomeSucceeded, queue.ErrOutcomeReported}},
			want:    queue.OutcomeFailed, details: map[string]any{"replaces": queue.OutcomeLeaseExpired}},
		{name: "late, before the sweep", lapse: true, reports: []step{{queue.OutcomeSucceeded, nil}},
			want: queue.OutcomeSucceeded, details: map[string]any{"late": true}},
		{name: "unknown is a real report", reports: []step{{queue.OutcomeUnknown, nil}, {queue.OutcomeSucceeded, queue.ErrOutcomeReported}},
			want: queue.OutcomeUnknown},
		{name: "unknown after lease_expired", expire: true, lapse: true,
			reports: []step{{queue.OutcomeUnknown, nil}, {queue.OutcomeFailed, queue.ErrOutcomeReported}}, want: queue.OutcomeUnknown,
			details: map[string]any{"replaces": queue.OutcomeLeaseExpired}},
		{name: "lease_expired is not for executors", reports: []step{{queue.OutcomeLeaseExpired, queue.ErrInvalidOutcome}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			c := MustRedeemed(t, e)
			if tt.lapse {
				e.advance(refundLease + time.Second)
			}
			if tt.expire {
				if n, err := e.q.ExpireLeases(ctx); n != 1 || err != nil {
					t.Fatal(n, err)
				}
			}
			for i, s := range tt.reports {
				_, err := e.q.ReportOutcome(ctx, holder, c.ID, s.status, "d")
				if !errors.Is(err, s.err) {
					t.Fatalf("report %d (%s) = %v, want %v", i, s.status, err, s.err)
				}
			}
			got := e.load(t, c.ID)
			if tt.want == "" {
				if got.Outcome != nil {
					t.Errorf("outcome %+v, want none", got.Outcome)
				}
				return
			}
			if got.Outcome == nil || got.Outcome.Status != tt.want {
				t.Fatalf("outcome %+v, want %s", got.Outcome, tt.want)
			}
			// The sweeper never overwrites a report.
			e.advance(time.Hour)
			if n, err := e.q.ExpireLeases(ctx); n != 0 || err != nil {
				t.Errorf("ExpireLeases after the report = %d, %v", n, err)
			}
			entries, err := e.db.Timeline(ctx, c.ID)
			if err != nil {
				t.Fatal(err)
			}
			var outcome canonical.Object
			for _, en := range entries {
				if en.Kind == audit.KindOutcome {
					outcome = en.Details.(canonical.Object)
				}
			}
			for k, v := range tt.details {
				if got, _ := outcome.Get(k); got != v {
					t.Errorf("outcome entry %s = %v, want %v", k, got, v)
				}
			}
			if _, found := outcome.Get("replaces"); found != (tt.details["replaces"] != nil) {
				t.Errorf("outcome entry %v: replaces present %t", outcome, found)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	ctx := context.Background()
	leaseExpired := func(t *testing.T, e *env, c *queue.Call) {
		e.advance(refundLease)
		if n, err := e.q.ExpireLeases(ctx); n != 1 || err != nil {
			t.Fatal(n, err)
		}
	}
	reported := func(status string) func(t *testing.T, e *env, c *queue.Call) {
		return func(t *testing.T, e *env, c *queue.Call) {
			if _, err := e.q.ReportOutcome(ctx, holder, c.ID, status, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	resolved := func(t *testing.T, e *env, c *queue.Call) {
		reported(queue.OutcomeUnknown)(t, e, c)
		if _, err := e.q.Resolve(ctx, "bob", audit.ChannelWeb, c.ID, queue.VerdictExecuted, "seen", ""); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name     string
		prepare  func(t *testing.T, e *env, c *queue.Call)
		operator string
		verdict  string
		note     string
		evidence string
		err      error
	}{
		{name: "lease_expired, executed with evidence", prepare: leaseExpired, verdict: queue.VerdictExecuted,
			note: "the refund is in the ledger", evidence: "https://ledger.example.com/refunds/re_1?x=1#y"},
		{name: "unknown, not executed", prepare: reported(queue.OutcomeUnknown), verdict: queue.VerdictNotExecuted,
			note: "no refund in the ledger", evidence: "http://ledger.internal:8080/r"},
		{name: "note trimmed, evidence optional", prepare: leaseExpired, verdict: queue.VerdictExecuted, note: "  found  "},
		{name: "the lease still runs", verdict: queue.VerdictExecuted, note: "x", err: queue.ErrNotUnresolved},
		{name: "succeeded needs nobody", prepare: reported(queue.OutcomeSucceeded), verdict: queue.VerdictExecuted, note: "x",
			err: queue.ErrNotUnresolved},
		{name: "failed needs nobody", prepare: reported(queue.OutcomeFailed), verdict: queue.VerdictNotExecuted, note: "x",
			err: queue.ErrNotUnresolved},
		{name: "resolved once", prepare: resolved, verdict: queue.VerdictNotExecuted, note: "x", err: queue.ErrAlreadyResolved},
		{name: "the call's actor", prepare: leaseExpired, operator: agent.Actor, verdict: queue.VerdictExecuted, note: "x",
			err: queue.ErrResolveOwnCall},
		{name: "no operator", prepare: leaseExpired, operator: "-", verdict: queue.VerdictExecuted, note: "x", err: queue.ErrOperatorRequired},
		{name: "not an account", prepare: leaseExpired, operator: "mallory", verdict: queue.VerdictExecuted, note: "x", err: queue.ErrNotADecider},
		{name: "another verdict", prepare: leaseExpired, verdict: "maybe", note: "x", err: queue.ErrInvalidVerdict},
		{name: "no note", prepare: leaseExpired, verdict: queue.VerdictExecuted, note: " \n", err: queue.ErrNoteRequired},
		{name: "a long note", prepare: leaseExpired, verdict: queue.VerdictExecuted, note: strings.Repeat("a", queue.MaxReasonBytes+1),
			err: queue.ErrNoteTooLong},
		{name: "javascript evidence", prepare: leaseExpired, verdict: queue.VerdictExecuted, note: "x",
			evidence: "javascript:alert(1)", err: queue.ErrInvalidEvidence},
		{name: "data evidence", prepare: leaseExpired, verdict: queue.VerdictExecuted, note: "x",
			evidence: "data:text/html,<script>alert(1)</script>", err: queue.ErrInvalidEvidence},
		{name: "ftp evidence", prepare: leaseExpired, verdict: queue.VerdictExecuted, note: "x", evidence: "ftp://x/y", err: queue.ErrInvalidEvidence},
		{name: "relative evidence", prepare: leaseExpired, verdict: queue.VerdictExecuted, note: "x", evidence: "/admin", err: queue.ErrInvalidEvidence},
		{name: "evidence without host", prepare: leaseExpired, verdict: queue.VerdictExecuted, note: "x", evidence: "https:foo", err: queue.ErrInvalidEvidence},
		{name: "evidence with credentials", prepare: leaseExpired, verdict: queue.VerdictExecuted, note: "x",
			evidence: "https://user:pw@ledger.example/", err: queue.ErrInvalidEvidence},
		{name: "evidence with a space", prepare: leaseExpired, verdict: queue.VerdictExecuted, note: "x",
			evidence: "https://ledger.example/a b", err: queue.ErrInvalidEvidence},
		{name: "evidence with a bidi control", prepare: leaseExpired, verdict: queue.VerdictExecuted, note: "x",
			evidence: "https://ledger.example/\u202egpj", err: queue.ErrInvalidEvidence},
		{name: "evidence too long", prepare: leaseExpired, verdict: queue.VerdictExecuted, note: "x",
			evidence: "https://ledger.example/" + strings.Repeat("a", queue.MaxEvidenceBytes), err: queue.ErrInvalidEvidence},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			ev := recordEvents(e.q)
			c := MustRedeemed(t, e)
			if tt.prepare != nil {
				tt.prepare(t, e, c)
			}
			op := tt.operator
			switch op {
			case "":
				op = "carol"
			case "-":
				op = ""
			}
			before := e.load(t, c.ID)
			entries := len(kinds(t, e, c.ID))
			got, err := e.q.Resolve(ctx, op, audit.ChannelWeb, c.ID, tt.verdict, tt.note, tt.evidence)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("Resolve = %v, want %v", err, tt.err)
				}
				after := e.load(t, c.ID)
				if (after.Resolution == nil) != (before.Resolution == nil) || len(kinds(t, e, c.ID)) != entries {
					t.Errorf("a refused resolution changed the call: %+v", after.Resolution)
				}
				return
			}
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			want := queue.Resolution{Verdict: tt.verdict, By: op, Channel: audit.ChannelWeb, Note: strings.TrimSpace(tt.note),
				Evidence: tt.evidence, At: e.clock.Now()}
			stored := e.load(t, c.ID)
			if *got.Resolution != want || *stored.Resolution != want {
				t.Fatalf("resolution %+v stored %+v, want %+v", *got.Resolution, *stored.Resolution, want)
			}
			if stored.Unresolved() || stored.Outcome.Status != before.Outcome.Status {
				t.Errorf("after the resolution: unresolved %t, outcome %+v", stored.Unresolved(), stored.Outcome)
			}
			entries2, _ := e.db.Timeline(ctx, c.ID)
			last := entries2[len(entries2)-1]
			d := last.Details.(canonical.Object)
			verdict, _ := d.Get("verdict")
			note, _ := d.Get("note")
			outcome, _ := d.Get("outcome")
			if last.Kind != audit.KindResolved || last.Principal != op || verdict != tt.verdict || note != want.Note ||
				outcome != before.Outcome.Status {
				t.Errorf("audit entry %+v", last)
			}
			if k := ev.kinds(); k[len(k)-1] != audit.KindResolved {
				t.Errorf("events %v: the resolution was not published", k)
			}
			if list, err := e.store.UnresolvedCalls(ctx, 10); err != nil || len(list) != 0 {
				t.Errorf("UnresolvedCalls after the resolution = %d, %v", len(list), err)
			}
		})
	}
}

// TestLateReportAfterResolution: the executor's late word is recorded
// beside the person's; neither erases the other.
func TestLateReportAfterResolution(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	c := MustRedeemed(t, e)
	e.advance(refundLease)
	if _, err := e.q.ExpireLeases(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.q.Resolve(ctx, "carol", audit.ChannelWeb, c.ID, queue.VerdictNotExecuted, "nothing in the ledger", ""); err != nil {
		t.Fatal(err)
	}
	got, err := e.q.ReportOutcome(ctx, holder, c.ID, queue.OutcomeSucceeded, "it did run")
	if err != nil {
		t.Fatal(err)
	}
	if got.Outcome.Status != queue.OutcomeSucceeded || got.Resolution == nil || got.Resolution.Verdict != queue.VerdictNotExecuted {
		t.Errorf("outcome %+v resolution %+v", got.Outcome, got.Resolution)
	}
	w := []string{"submitted", "approved", "granted", "redeemed", "lease_expired", "resolved", "outcome"}
	if k := kinds(t, e, c.ID); !slices.Equal(k, w) {
		t.Errorf("timeline %v, want %v", k, w)
	}
}

// TestStoredOutcomesAreFinal: below the service, the database refuses to
// change a reported outcome or a resolution.
func TestStoredOutcomesAreFinal(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	c := MustRedeemed(t, e)
	if _, err := e.q.ReportOutcome(ctx, holder, c.ID, queue.OutcomeUnknown, "?"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.q.Resolve(ctx, "carol", audit.ChannelWeb, c.ID, queue.VerdictExecuted, "seen", ""); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		`UPDATE calls SET outcome_status = 'succeeded' WHERE id = ?`,
		`UPDATE calls SET outcome_detail = 'edited' WHERE id = ?`,
		`UPDATE calls SET resolution = 'not_executed' WHERE id = ?`,
		`UPDATE calls SET resolution_note = 'edited' WHERE id = ?`,
		`UPDATE calls SET resolved_by = 'mallory' WHERE id = ?`,
		`UPDATE calls SET resolution = NULL WHERE id = ?`,
	} {
		if _, err := e.db.SQL().Exec(stmt, c.ID); err == nil || !strings.Contains(err.Error(), "cannot change") {
			t.Errorf("%s: %v, want refused", stmt, err)
		}
	}
}

// TestRunExpiresLeases runs the loop on the real clock with a one-second
// lease: the expiry arrives as an event, with nothing polling.
func TestRunExpiresLeases(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	d, err := db.Open(filepath.Join(dir, "countersign.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	keys, err := grant.OpenKeyring(filepath.Join(dir, "keys"), "countersign", time.Now)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.Parse([]byte(`tools:
  quick.job:
    audience: payments-host
    target: '.+'
    outcome_within: 1s
    args: {type: object, additionalProperties: false}
`))
	if err != nil {
		t.Fatal(err)
	}
	testkit.SeedUsers(t, d.Accounts(), account.RoleOperator, "alice")
	q := queue.NewService(queue.Config{Store: d.Store(), Tools: reg, Signer: keys,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	expired := make(chan string, 4)
	q.Subscribe(func(ev queue.Event) {
		if ev.Kind == audit.KindLeaseExpired {
			expired <- ev.Call.ID
		}
	})
	done := make(chan struct{})
	go func() { defer close(done); q.Run(ctx) }()
	defer func() { cancel(); <-done }()
	c, _, err := q.Submit(ctx, holder, []byte(`{"tool":"quick.job","target":"x","args":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	if c, err = q.Approve(ctx, "alice", audit.ChannelCLI, c.ID, c.Digest); err != nil {
		t.Fatal(err)
	}
	r, err := q.Redeem(ctx, holder, body(c.Grant, c.Tool, c.Target, c.Args))
	if err != nil || !r.Accepted {
		t.Fatal(err, r)
	}
	select {
	case id := <-expired:
		if id != c.ID {
			t.Fatalf("expired %s, want %s", id, c.ID)
		}
	case <-time.After(time.Minute):
		t.Fatal("the lease loop did not expire a one-second lease within a minute")
	}
	got, err := q.Call(ctx, c.ID)
	if err != nil || got.Outcome == nil || got.Outcome.Status != queue.OutcomeLeaseExpired || time.Now().Before(got.LeaseUntil) {
		t.Fatalf("after the loop: %+v, %v", got.Outcome, err)
	}
}
