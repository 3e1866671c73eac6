package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
)

func refund(n uint32, notes string) []byte {
	return []byte(fmt.Sprintf(`{"tool":"payments.refund","target":"invoice:INV-%d","args":{"amount_minor":1299,"currency":"EUR","notes":%s},"rationale":"customer asked"}`, n, jsonString(notes)))
}

func jsonString(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func deploy(service string) []byte {
	return []byte(fmt.Sprintf(`{"tool":"releases.deploy","target":"service:%s","args":{"version":"v1.2.3"}}`, service))
}

func mustSubmit(tb testing.TB, h *handle, who queue.Principal, body []byte) *queue.Call {
	tb.Helper()
	c, created, err := h.q.Submit(context.Background(), who, body)
	if err != nil || !created {
		tb.Fatalf("Submit: created %t, %v", created, err)
	}
	return c
}

func redeemBody(c *queue.Call) []byte {
	return []byte(fmt.Sprintf(`{"grant":%q,"call":{"tool":"payments.refund","target":%q,"args":{"amount_minor":1299,"currency":"EUR","notes":"n"}}}`,
		c.Grant, c.Target))
}

// testLifecycle walks one call from submission to outcome and reads it
// back through every read of the stores.
var _ = add("service/a call from submission to outcome, read back through every read", func(t *testing.T, s Stores) {
	ctx := context.Background()
	w := newWorld(t, s)
	h := w.open(t)
	c := mustSubmit(t, h, payer, refund(1, "n"))
	if c.Seq == 0 || c.Status != queue.StatusPending {
		t.Fatalf("submitted: seq %d status %s", c.Seq, c.Status)
	}
	again, created, err := h.q.Submit(ctx, payer, refund(1, "n"))
	if err != nil || created || again.ID != c.ID {
		t.Fatalf("resubmit: created %t id %s err %v, want the existing call %s", created, again.ID, err, c.ID)
	}
	got, err := h.Queue.Call(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Digest != c.Digest || !bytes.Equal(got.Envelope, c.Envelope) || got.Rationale != "customer asked" ||
		!got.CreatedAt.Equal(c.CreatedAt) || !got.DecideBy.Equal(c.DecideBy) || got.GrantTTL != 60*time.Second {
		t.Fatalf("Call reads back %+v, want %+v", got, c)
	}
	if _, err := h.Queue.Call(ctx, "nope"); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("Call(nope) = %v, want queue.ErrNotFound", err)
	}
	pending, err := h.Queue.PendingCalls(ctx, 10)
	if err != nil || len(pending) != 1 || pending[0].ID != c.ID {
		t.Fatalf("PendingCalls = %d calls, %v; want %s", len(pending), err, c.ID)
	}
	next, ok, err := h.Queue.NextDeadline(ctx)
	if err != nil || !ok || !next.Equal(c.DecideBy) {
		t.Fatalf("NextDeadline = %v %t %v, want %v", next, ok, err, c.DecideBy)
	}
	if due, err := h.Queue.DueCalls(ctx, w.clock.Now(), 10); err != nil || len(due) != 0 {
		t.Fatalf("DueCalls now = %v %v, want none", due, err)
	}
	if due, err := h.Queue.DueCalls(ctx, c.DecideBy, 10); err != nil || len(due) != 1 || due[0] != c.ID {
		t.Fatalf("DueCalls at the deadline = %v %v, want [%s]", due, err, c.ID)
	}

	if _, err := h.q.Approve(ctx, "alice", audit.ChannelWeb, c.ID, strings.Repeat("0", 64)); !errors.Is(err, queue.ErrDigestMismatch) {
		t.Fatalf("Approve with another digest = %v, want ErrDigestMismatch", err)
	}
	w.clock.Advance(time.Second)
	c, err = h.q.Approve(ctx, "alice", audit.ChannelWeb, c.ID, c.Digest)
	if err != nil || c.Status != queue.StatusApproved || c.Grant == "" {
		t.Fatalf("Approve: %v (status %s)", err, c.Status)
	}
	got, err = h.Queue.Call(ctx, c.ID)
	if err != nil || got.Status != queue.StatusApproved || got.Grant != c.Grant || got.GrantJTI != c.GrantJTI ||
		got.GrantKID != c.GrantKID || !got.GrantExpiresAt.Equal(c.GrantExpiresAt) || len(got.Approvals) != 1 ||
		got.Approvals[0].Operator != "alice" || got.Approvals[0].Channel != audit.ChannelWeb || !got.DecidedAt.Equal(c.DecidedAt) {
		t.Fatalf("approved call reads back %+v (%v), want %+v", got, err, c)
	}
	if _, ok, _ := h.Queue.NextDeadline(ctx); ok {
		t.Fatal("NextDeadline: a deadline with nothing pending")
	}
	r, err := h.q.Redeem(ctx, payer, redeemBody(c))
	if err != nil || !r.Accepted {
		t.Fatalf("Redeem: %+v, %v", r, err)
	}
	r, err = h.q.Redeem(ctx, payer, redeemBody(c))
	if err != nil || r.Accepted || r.Reason != "replayed" {
		t.Fatalf("second Redeem: %+v, %v; want replayed", r, err)
	}
	if _, err := h.q.ReportOutcome(ctx, payer, c.ID, "succeeded", "done"); err != nil {
		t.Fatal(err)
	}
	got, err = h.Queue.Call(ctx, c.ID)
	if err != nil || got.Status != queue.StatusRedeemed || got.RedeemedAt.IsZero() || got.Outcome == nil ||
		got.Outcome.Status != "succeeded" || got.Outcome.Detail != "done" {
		t.Fatalf("redeemed call reads back %+v (%v)", got, err)
	}
	tl, err := h.Audit.Timeline(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range tl {
		kinds = append(kinds, e.Kind)
	}
	want := []string{audit.KindSubmitted, audit.KindApproved, audit.KindGranted, audit.KindRedeemed, audit.KindRedemptionRefused, audit.KindOutcome}
	if strings.Join(kinds, ",") != strings.Join(want, ",") {
		t.Fatalf("Timeline kinds %v, want %v", kinds, want)
	}
	if _, err := h.Audit.Timeline(ctx, "nope"); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("Timeline(nope) = %v, want queue.ErrNotFound", err)
	}
	res := mustVerify(t, h.Audit, int64(len(want)))
	seq, head, err := h.Audit.AuditHead(ctx)
	if err != nil || seq != res.Count || head != res.Head {
		t.Fatalf("AuditHead = %d %s %v, want %d %s", seq, head, err, res.Count, res.Head)
	}
	if _, err := h.Audit.LatestCheckpoint(ctx); !errors.Is(err, audit.ErrNoCheckpoint) {
		t.Fatalf("LatestCheckpoint on a fresh trail = %v, want ErrNoCheckpoint", err)
	}
	var buf bytes.Buffer
	ex, err := h.Audit.ExportAudit(ctx, &buf, audit.ExportOptions{Format: "jsonl"})
	if err != nil || ex.Count != res.Count || ex.Head != res.Head {
		t.Fatalf("ExportAudit: %+v %v", ex, err)
	}
	if rep, err := audit.VerifyExport(&buf, audit.VerifyOptions{}); err != nil || rep.Count != res.Count {
		t.Fatalf("VerifyExport of the store's export: %+v %v", rep, err)
	}
	signer, err := audit.LoadOrCreateKey(filepath.Join(t.TempDir(), "audit-key"))
	if err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	if _, err := h.Audit.ExportAudit(ctx, &buf, audit.ExportOptions{Format: "jsonl", Signer: signer}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `"format":"`+audit.ExportFormat+`"`) {
		t.Fatalf("a signed export's header names another format: %.300s", buf.String())
	}
	if rep, err := audit.VerifyExport(&buf, audit.VerifyOptions{}); err != nil || rep.Count != res.Count {
		t.Fatalf("VerifyExport of the store's signed export: %+v %v", rep, err)
	}
})

// testFreeText stores what agents and operators may write, U+0000 and
// invisible characters included, and reads it back byte for byte.
var _ = add("service/free text with NUL and invisible characters reads back byte for byte", func(t *testing.T, s Stores) {
	ctx := context.Background()
	w := newWorld(t, s)
	h := w.open(t)
	odd := "nul\x00 bidi\u202e tag\U000e0041 zw\u200b é"
	body := []byte(fmt.Sprintf(`{"tool":"payments.refund","target":"invoice:INV-7","args":{"amount_minor":5,"currency":"USD","notes":%s},"rationale":%s}`,
		jsonString(odd), jsonString(odd)))
	c := mustSubmit(t, h, payer, body)
	got, err := h.Queue.Call(ctx, c.ID)
	if err != nil || got.Rationale != odd {
		t.Fatalf("rationale reads back %q (%v), want %q", got.Rationale, err, odd)
	}
	if n, _ := got.Args.Get("notes"); n != odd {
		t.Fatalf("notes read back %q, want %q", n, odd)
	}
	if _, err := h.q.Deny(ctx, "bob", audit.ChannelWeb, c.ID, odd); err != nil {
		t.Fatal(err)
	}
	got, err = h.Queue.Call(ctx, c.ID)
	if err != nil || got.Denial == nil || got.Denial.Reason != odd || got.Denial.By != "bob" {
		t.Fatalf("denial reads back %+v (%v)", got.Denial, err)
	}
	tok, _, err := h.a.CreateToken(ctx, "agent:x", "payments-host", odd, "admin", audit.ChannelCLI)
	if err != nil {
		t.Fatal(err)
	}
	ts, err := h.a.Tokens(ctx)
	if err != nil || len(ts) != 1 || ts[0].Note != odd || ts[0].ID != tok.ID {
		t.Fatalf("Tokens = %+v %v", ts, err)
	}
	var buf bytes.Buffer
	if err := h.History.ExportCalls(ctx, queue.HistoryFilter{}, &buf, "jsonl"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `\u0000`) {
		t.Fatalf("export lost the NUL: %s", buf.String())
	}
	mustVerify(t, h.Audit, 3)
})

// testHistory pages through calls with every filter.
var _ = add("service/history pages with every filter", func(t *testing.T, s Stores) {
	ctx := context.Background()
	w := newWorld(t, s)
	h := w.open(t)
	var ids []string
	var grant string
	for i := 0; i < 7; i++ {
		c := mustSubmit(t, h, payer, refund(uint32(100+i), "n"))
		ids = append(ids, c.ID)
		w.clock.Advance(time.Millisecond)
		switch i % 3 {
		case 1:
			a, err := h.q.Approve(ctx, "alice", audit.ChannelWeb, c.ID, c.Digest)
			if err != nil {
				t.Fatal(err)
			}
			grant = a.Grant
		case 2:
			if _, err := h.q.Deny(ctx, "bob", audit.ChannelCLI, c.ID, "no"); err != nil {
				t.Fatal(err)
			}
		}
	}
	d := mustSubmit(t, h, deployer, deploy("web"))
	w.clock.Advance(time.Millisecond)
	if _, err := h.q.Approve(ctx, "bob", audit.ChannelWeb, d.ID, d.Digest); err != nil {
		t.Fatal(err)
	}

	list := func(f queue.HistoryFilter) []string {
		t.Helper()
		var out []string
		for page := 0; ; page++ {
			calls, next, err := h.History.History(ctx, f)
			if err != nil {
				t.Fatalf("History(%+v): %v", f, err)
			}
			for _, c := range calls {
				out = append(out, c.ID)
			}
			if next == 0 {
				return out
			}
			f.After = next
			if page > 20 {
				t.Fatal("History does not end")
			}
		}
	}
	rev := func(xs ...string) []string {
		out := make([]string, len(xs))
		for i, x := range xs {
			out[len(xs)-1-i] = x
		}
		return out
	}
	cases := []struct {
		name string
		f    queue.HistoryFilter
		want []string
	}{
		{"all in pages of 2", queue.HistoryFilter{Limit: 2}, append([]string{d.ID}, rev(ids...)...)},
		{"actor", queue.HistoryFilter{Actor: deployer.Actor}, []string{d.ID}},
		{"tool", queue.HistoryFilter{Tool: "payments.refund", Limit: 3}, rev(ids...)},
		{"status", queue.HistoryFilter{Status: "denied"}, rev(ids[2], ids[5])},
		{"operator", queue.HistoryFilter{Operator: "alice"}, rev(ids[1], ids[4])},
		{"operator and channel", queue.HistoryFilter{Operator: "bob", Channel: audit.ChannelWeb}, []string{d.ID}},
		{"channel", queue.HistoryFilter{Channel: audit.ChannelCLI}, rev(ids[2], ids[5])},
		{"digest", queue.HistoryFilter{DigestPrefix: d.Digest[:4] + " " + d.Digest[4:8]}, []string{d.ID}},
		{"actor and status", queue.HistoryFilter{Actor: payer.Actor, Status: "pending"}, rev(ids[0], ids[3], ids[6])},
		{"nothing", queue.HistoryFilter{Actor: "agent:nobody"}, nil},
	}
	for _, tc := range cases {
		got := list(tc.f)
		// A digest prefix of 8 digits may, rarely, match another call too.
		if tc.name == "digest" && len(got) > 1 {
			continue
		}
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%s: History = %v, want %v", tc.name, got, tc.want)
		}
	}
	if _, _, err := h.History.History(ctx, queue.HistoryFilter{After: 1 << 40}); !errors.Is(err, queue.ErrFilter) {
		t.Errorf("History with a cursor that names no call = %v, want ErrFilter", err)
	}
	if _, _, err := h.History.History(ctx, queue.HistoryFilter{Status: "lost"}); !errors.Is(err, queue.ErrFilter) {
		t.Errorf("History with an unknown status = %v, want ErrFilter", err)
	}
	var buf bytes.Buffer
	if err := h.History.ExportCalls(ctx, queue.HistoryFilter{Status: "denied"}, &buf, "csv"); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(buf.String(), "\n"); lines != 3 {
		t.Errorf("CSV export of 2 denied calls has %d lines, want 3:\n%s", lines, buf.String())
	}
	buf.Reset()
	if err := h.History.ExportCalls(ctx, queue.HistoryFilter{}, &buf, "jsonl"); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(buf.String(), "\n"); lines != 8 {
		t.Errorf("JSONL export of 8 calls has %d lines", lines)
	}
	if grant == "" || strings.Contains(buf.String(), grant) {
		t.Error("the export carries a grant token")
	}
})

// testTerminal checks that the store itself refuses to move a call out of
// a terminal state, whatever the code above it does.
var _ = add("service/terminal states refused by the store itself", func(t *testing.T, s Stores) {
	ctx := context.Background()
	w := newWorld(t, s)
	h := w.open(t)
	c := mustSubmit(t, h, payer, refund(9, "n"))
	if _, err := h.q.Deny(ctx, "bob", audit.ChannelWeb, c.ID, "no"); err != nil {
		t.Fatal(err)
	}
	err := h.Queue.Update(ctx, func(tx queue.Tx) error {
		c, err := tx.Call(c.ID)
		if err != nil {
			return err
		}
		c.Status = queue.StatusApproved
		return tx.UpdateCall(c)
	})
	if err == nil {
		t.Fatal("a denied call was made approved")
	}
	got, _ := h.Queue.Call(ctx, c.ID)
	if got.Status != queue.StatusDenied {
		t.Fatalf("status %s, want denied", got.Status)
	}
	// A failed transaction leaves nothing behind, its audit entries included.
	before, _, _ := h.Audit.AuditHead(ctx)
	boom := errors.New("boom")
	err = h.Queue.Update(ctx, func(tx queue.Tx) error {
		if err := tx.Append(&audit.Entry{Time: audit.FormatTime(w.clock.Now()), Kind: audit.KindRejected, Details: map[string]any{}}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Update = %v, want the function's error", err)
	}
	if after, _, _ := h.Audit.AuditHead(ctx); after != before {
		t.Fatalf("a rolled back transaction moved the audit head from %d to %d", before, after)
	}
})

// testAccounts covers users, sessions, tokens and secrets.
var _ = add("service/accounts, sessions, tokens and secrets across handles", func(t *testing.T, s Stores) {
	ctx := context.Background()
	w := newBareWorld(t, s)
	h := w.open(t)
	other := w.open(t)
	pw, err := account.HashWith("correct horse battery", account.MinParams)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.a.AddUser(ctx, "alice", account.RoleOperator, pw, "admin", audit.ChannelCLI); err != nil {
		t.Fatal(err)
	}
	if _, err := other.a.AddUser(ctx, "alice", account.RoleAdmin, pw, "admin", audit.ChannelCLI); !errors.Is(err, account.ErrUserExists) {
		t.Fatalf("AddUser of a taken name = %v, want ErrUserExists", err)
	}
	if _, err := h.a.AddUser(ctx, "Bob", account.RoleAuditor, pw, "admin", audit.ChannelCLI); err != nil {
		t.Fatal(err)
	}
	users, err := other.a.Users(ctx)
	if err != nil || len(users) != 2 || users[0].Name != "Bob" || users[1].Name != "alice" {
		t.Fatalf("Users = %+v %v, want Bob then alice (byte order)", users, err)
	}
	now := w.clock.Now()
	if _, err := h.a.CreateSession(ctx, "s1", "alice", "csrf1", now); err != nil {
		t.Fatal(err)
	}
	// A session made on one handle is read on another, as replicas do.
	sess, err := other.a.Session(ctx, "s1")
	if err != nil || sess.User.Name != "alice" || sess.CSRF != "csrf1" || !sess.LastSeen.Equal(now) {
		t.Fatalf("Session = %+v %v", sess, err)
	}
	if err := other.a.TouchSession(ctx, "s1", now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := h.a.TouchSession(ctx, "s1", now.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if sess, _ := h.a.Session(ctx, "s1"); !sess.LastSeen.Equal(now.Add(time.Minute)) {
		t.Fatalf("LastSeen %v moved back, want %v", sess.LastSeen, now.Add(time.Minute))
	}
	ss, err := h.a.Sessions(ctx, []string{"s1", "nope"})
	if err != nil || len(ss) != 1 {
		t.Fatalf("Sessions = %v %v", ss, err)
	}
	if err := h.a.DisableUser(ctx, "alice", "admin", audit.ChannelCLI); err != nil {
		t.Fatal(err)
	}
	if sess, _ := other.a.Session(ctx, "s1"); sess.RevokedAt.IsZero() {
		t.Fatal("disabling a user left its session live")
	}
	if err := h.a.DisableUser(ctx, "alice", "admin", audit.ChannelCLI); !errors.Is(err, account.ErrUserDisabled) {
		t.Fatalf("DisableUser twice = %v, want ErrUserDisabled", err)
	}
	if err := h.a.DisableUser(ctx, "carol", "admin", audit.ChannelCLI); !errors.Is(err, account.ErrUserNotFound) {
		t.Fatalf("DisableUser(carol) = %v, want ErrUserNotFound", err)
	}
	tok, secret, err := h.a.CreateToken(ctx, "agent:a", "payments-host", "", "admin", audit.ChannelCLI)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := other.a.TokenBySecret(ctx, secret); err != nil || got.ID != tok.ID || got.Actor != "agent:a" {
		t.Fatalf("TokenBySecret = %+v %v", got, err)
	}
	if err := other.a.RevokeToken(ctx, tok.ID, "admin", audit.ChannelCLI); err != nil {
		t.Fatal(err)
	}
	if _, err := h.a.TokenBySecret(ctx, secret); !errors.Is(err, account.ErrTokenNotFound) {
		t.Fatalf("a revoked token = %v, want ErrTokenNotFound", err)
	}
	if err := h.a.RevokeToken(ctx, tok.ID, "admin", audit.ChannelCLI); !errors.Is(err, account.ErrTokenNotFound) {
		t.Fatalf("RevokeToken twice = %v, want ErrTokenNotFound", err)
	}
	// Every handle gets the same console secret, created once.
	s1, err := h.a.ConsoleSecret(ctx, "cookie", 32)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := other.a.ConsoleSecret(ctx, "cookie", 32)
	if err != nil || !bytes.Equal(s1, s2) || len(s1) != 32 {
		t.Fatalf("ConsoleSecret differs between handles: %x %x %v", s1, s2, err)
	}
	if n, err := h.a.PruneSessions(ctx, now.Add(time.Hour)); err != nil || n != 1 {
		t.Fatalf("PruneSessions = %d %v, want 1", n, err)
	}
	mustVerify(t, h.Audit, 1)
})

func randomInvoice() uint32 { return 1_000_000 + rand.Uint32N(1_000_000_000) }

// testFreeze freezes a tool on one handle and finds approvals and
// redemptions refused on every other at once, until it is lifted.
var _ = add("service/a freeze holds at once on every handle", func(t *testing.T, s Stores) {
	ctx := context.Background()
	w := newWorld(t, s)
	hs := []*handle{w.open(t), w.open(t), w.open(t)}
	approved := mustSubmit(t, hs[0], payer, refund(20, "n"))
	approved, err := hs[0].q.Approve(ctx, "alice", audit.ChannelWeb, approved.ID, approved.Digest)
	if err != nil {
		t.Fatal(err)
	}
	c := mustSubmit(t, hs[0], payer, refund(21, "n"))
	reason := "incident\x00 42"
	f, err := hs[0].q.Freeze(ctx, "admin", audit.ChannelWeb, "payments.refund", "", reason)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := hs[1].Queue.Freezes(ctx)
	if err != nil || len(fs) != 1 || fs[0].ID != f.ID || fs[0].Reason != reason || fs[0].Tool != "payments.refund" {
		t.Fatalf("Freezes on another handle = %+v %v", fs, err)
	}
	var fe *queue.FrozenError
	if _, err := hs[1].q.Approve(ctx, "alice", audit.ChannelWeb, c.ID, c.Digest); !errors.As(err, &fe) {
		t.Fatalf("Approve under a freeze = %v, want a FrozenError", err)
	}
	if r, err := hs[2].q.Redeem(ctx, payer, redeemBody(approved)); err != nil || r.Accepted || r.Reason != "frozen" {
		t.Fatalf("Redeem under a freeze = %+v %v, want refused as frozen", r, err)
	}
	if _, err := hs[2].q.Unfreeze(ctx, "admin", audit.ChannelWeb, "payments.refund", "agent:other"); !errors.Is(err, queue.ErrFreezeScope) {
		t.Fatalf("Unfreeze of another scope = %v, want ErrFreezeScope", err)
	}
	lifted, err := hs[2].q.Unfreeze(ctx, "admin", audit.ChannelWeb, "payments.refund", "")
	if err != nil || len(lifted) != 1 {
		t.Fatalf("Unfreeze = %v %v", lifted, err)
	}
	if fs, _ := hs[0].Queue.Freezes(ctx); len(fs) != 0 {
		t.Fatalf("Freezes after the lift = %+v", fs)
	}
	if _, err := hs[1].q.Approve(ctx, "alice", audit.ChannelWeb, c.ID, c.Digest); err != nil {
		t.Fatalf("Approve after the lift: %v", err)
	}
	if r, err := hs[0].q.Redeem(ctx, payer, redeemBody(approved)); err != nil || !r.Accepted {
		t.Fatalf("Redeem after the lift = %+v %v", r, err)
	}
	mustVerify(t, hs[0].Audit, 6)
})

// The names a freeze is checked against: the actors of tokens and of
// calls, and the tools of calls, each once, at most limit of each.
var _ = add("queue/known names", func(t *testing.T, s Stores) {
	ctx := context.Background()
	w := newWorld(t, s)
	h := w.open(t)
	if _, _, err := h.a.CreateToken(ctx, "agent:token-only", "payments-host", "", "admin", audit.ChannelCLI); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		mustSubmit(t, h, payer, refund(uint32(30+i), "n"))
	}
	mustSubmit(t, h, queue.Principal{Actor: "agent:zed", Audience: "payments-host"}, refund(40, "n"))
	mustSubmit(t, h, deployer, deploy("web"))
	names := func(limit int) (actors, tools []string) {
		err := s.Queue.Update(ctx, func(tx queue.Tx) error {
			var err error
			actors, tools, err = tx.KnownNames(limit)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(actors)
		return slices.Compact(actors), tools
	}
	actors, tools := names(100)
	if want := []string{"agent:billing", "agent:release", "agent:token-only", "agent:zed"}; !slices.Equal(actors, want) {
		t.Errorf("actors = %q, want %q", actors, want)
	}
	if want := []string{"payments.refund", "releases.deploy"}; !slices.Equal(tools, want) {
		t.Errorf("tools = %q, want %q", tools, want)
	}
	if _, tools := names(1); len(tools) != 1 {
		t.Errorf("tools with limit 1 = %q", tools)
	}
})
