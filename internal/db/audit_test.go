package db

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/grant"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/store/sqlq"
	"github.com/countersign/countersign/internal/testkit"
	"github.com/countersign/countersign/internal/tools"
)

const testTools = `
tools:
  test.pay:
    description: Pay an invoice
    audience: pay-host
    target: '^invoice:[0-9]+$'
    approvals: 1
    grant_ttl: 60s
    decide_within: 10m
    args:
      type: object
      additionalProperties: false
      required: [amount_minor]
      properties:
        amount_minor:
          type: integer
          minimum: 1
          maximum: 1000000
  test.dual:
    description: Deploy with two approvers
    audience: pay-host
    target: '^service:[a-z]+$'
    approvals: 2
    grant_ttl: 60s
    decide_within: 10m
    outcome_within: 2h
    args:
      type: object
      additionalProperties: false
      required: [version]
      properties:
        version:
          type: string
          maxLength: 20
`

type auditHarness struct {
	dir   string
	d     *DB
	q     *queue.Service
	clock *testkit.Clock
	agent queue.Principal
}

func newAuditHarness(tb testing.TB) *auditHarness {
	tb.Helper()
	dir := tb.TempDir()
	d, err := Open(filepath.Join(dir, "countersign.db"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { d.Close() })
	testkit.SeedUsers(tb, d.Accounts(), account.RoleOperator, deciders...)
	clk := testkit.NewClock(time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC))
	d.now = clk.Now
	reg, err := tools.Parse([]byte(testTools))
	if err != nil {
		tb.Fatal(err)
	}
	keys, err := grant.OpenKeyring(filepath.Join(dir, "keys"), "countersign", clk.Now)
	if err != nil {
		tb.Fatal(err)
	}
	q := queue.NewService(queue.Config{Store: d.Store(), Tools: reg, Signer: keys, Now: clk.Now,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	return &auditHarness{dir: dir, d: d, q: q, clock: clk, agent: queue.Principal{Actor: "agent:bot", Audience: "pay-host"}}
}

func (h *auditHarness) submit(tb testing.TB, who queue.Principal, body string) *queue.Call {
	tb.Helper()
	c, created, err := h.q.Submit(context.Background(), who, []byte(body))
	if err != nil || !created {
		tb.Fatalf("Submit(%s) = %v, created %v", body, err, created)
	}
	return c
}

func payBody(n int) string {
	return fmt.Sprintf(`{"tool":"test.pay","target":"invoice:%d","args":{"amount_minor":%d}}`, n, n)
}

func redeemBody(c *queue.Call) string {
	return fmt.Sprintf(`{"grant":%q,"call":{"tool":%q,"target":%q,"args":%s}}`, c.Grant, c.Tool, c.Target, mustJSON(c.Args))
}

func mustJSON(v interface{ MarshalJSON() ([]byte, error) }) string {
	b, err := v.MarshalJSON()
	if err != nil {
		panic(err)
	}
	return string(b)
}

func newSigner(tb testing.TB) *audit.Signer {
	tb.Helper()
	seed := sha256.Sum256([]byte(tb.Name()))
	return audit.NewSigner(ed25519.NewKeyFromSeed(seed[:]))
}

func (h *auditHarness) head(tb testing.TB) int64 {
	tb.Helper()
	seq, _, err := h.d.AuditHead(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return seq
}

// entriesAfter reads the audit entries after seq.
func (h *auditHarness) entriesAfter(tb testing.TB, seq int64) []audit.Entry {
	tb.Helper()
	rows, err := h.d.SQL().Query(`SELECT `+sqlq.EntryColumns+` FROM audit WHERE seq > ? ORDER BY seq`, seq)
	if err != nil {
		tb.Fatal(err)
	}
	defer rows.Close()
	var out []audit.Entry
	for rows.Next() {
		e, details, err := sqlq.ScanEntry(rows)
		if err != nil {
			tb.Fatal(err)
		}
		if e.Details, err = audit.ParseDetails(details); err != nil {
			tb.Fatal(err)
		}
		out = append(out, *e)
	}
	return out
}

// TestEveryStateChangeIsAudited drives every kind of state change through
// the real queue service and checks that each left exactly the entries it
// should, about the right call, and that the chain verifies.
func TestEveryStateChangeIsAudited(t *testing.T) {
	h := newAuditHarness(t)
	ctx := context.Background()
	var pay, dual, denied, cancelled, expired *queue.Call
	steps := []struct {
		name  string
		run   func(t *testing.T) string // returns the call id the entries must name
		kinds []string
	}{
		{"submit", func(t *testing.T) string {
			pay = h.submit(t, h.agent, payBody(1))
			return pay.ID
		}, []string{audit.KindSubmitted}},
		{"reject", func(t *testing.T) string {
			_, _, err := h.q.Submit(ctx, h.agent, []byte(`{"tool":"test.pay","target":"invoice:1","args":{"amount_minor":1,"sql":"drop"}}`))
			var pe *queue.ProposalError
			if !errors.As(err, &pe) {
				t.Fatalf("Submit = %v, want a ProposalError", err)
			}
			return ""
		}, []string{audit.KindRejected}},
		{"reject again", func(t *testing.T) string {
			_, _, _ = h.q.Submit(ctx, h.agent, []byte(`{"tool":"test.pay","target":"x","args":{}}`))
			return ""
		}, []string{audit.KindRejected}},
		{"third rejection blocks", func(t *testing.T) string {
			_, _, _ = h.q.Submit(ctx, h.agent, []byte(`{"tool":"test.pay","target":"y","args":{}}`))
			return ""
		}, []string{audit.KindRejected, audit.KindRetryBlocked}},
		{"clear block", func(t *testing.T) string {
			if err := h.q.ClearRetry(ctx, "op:ann", audit.ChannelWeb, h.agent.Actor, "test.pay"); err != nil {
				t.Fatal(err)
			}
			return ""
		}, []string{audit.KindRetryCleared}},
		{"approve and grant", func(t *testing.T) string {
			c, err := h.q.Approve(ctx, "op:ann", audit.ChannelWeb, pay.ID, pay.Digest)
			if err != nil || c.Status != queue.StatusApproved {
				t.Fatalf("Approve = %v, %v", c, err)
			}
			pay = c
			return pay.ID
		}, []string{audit.KindApproved, audit.KindGranted}},
		{"redeem", func(t *testing.T) string {
			r, err := h.q.Redeem(ctx, h.agent, []byte(redeemBody(pay)))
			if err != nil || !r.Accepted {
				t.Fatalf("Redeem = %+v, %v", r, err)
			}
			return pay.ID
		}, []string{audit.KindRedeemed}},
		{"replay refused", func(t *testing.T) string {
			r, err := h.q.Redeem(ctx, h.agent, []byte(redeemBody(pay)))
			if err != nil || r.Accepted {
				t.Fatalf("second Redeem = %+v, %v; want refused", r, err)
			}
			return pay.ID
		}, []string{audit.KindRedemptionRefused}},
		{"outcome", func(t *testing.T) string {
			if _, err := h.q.ReportOutcome(ctx, h.agent, pay.ID, "succeeded", "paid"); err != nil {
				t.Fatal(err)
			}
			return pay.ID
		}, []string{audit.KindOutcome}},
		{"submit two-approver call", func(t *testing.T) string {
			dual = h.submit(t, h.agent, `{"tool":"test.dual","target":"service:web","args":{"version":"v1"}}`)
			return dual.ID
		}, []string{audit.KindSubmitted}},
		{"first of two approvals", func(t *testing.T) string {
			c, err := h.q.Approve(ctx, "op:ann", audit.ChannelWeb, dual.ID, dual.Digest)
			if err != nil || c.Status != queue.StatusPending {
				t.Fatalf("Approve = %v, %v", c, err)
			}
			return dual.ID
		}, []string{audit.KindApproved}},
		{"second approval grants", func(t *testing.T) string {
			c, err := h.q.Approve(ctx, "op:bob", audit.ChannelCLI, dual.ID, dual.Digest)
			if err != nil || c.Status != queue.StatusApproved {
				t.Fatalf("Approve = %v, %v", c, err)
			}
			return dual.ID
		}, []string{audit.KindApproved, audit.KindGranted}},
		{"submit to deny", func(t *testing.T) string { denied = h.submit(t, h.agent, payBody(2)); return denied.ID }, []string{audit.KindSubmitted}},
		{"deny", func(t *testing.T) string {
			if _, err := h.q.Deny(ctx, "op:ann", audit.ChannelWeb, denied.ID, "not this invoice"); err != nil {
				t.Fatal(err)
			}
			return denied.ID
		}, []string{audit.KindDenied}},
		{"submit to cancel", func(t *testing.T) string {
			cancelled = h.submit(t, h.agent, payBody(3))
			return cancelled.ID
		}, []string{audit.KindSubmitted}},
		{"cancel", func(t *testing.T) string {
			if _, err := h.q.Cancel(ctx, h.agent, cancelled.ID); err != nil {
				t.Fatal(err)
			}
			return cancelled.ID
		}, []string{audit.KindCancelled}},
		{"submit to expire", func(t *testing.T) string { expired = h.submit(t, h.agent, payBody(4)); return expired.ID }, []string{audit.KindSubmitted}},
		{"expire", func(t *testing.T) string {
			h.clock.Advance(11 * time.Minute)
			if n, err := h.q.ExpireDue(ctx); err != nil || n != 1 {
				t.Fatalf("ExpireDue = %d, %v; want 1", n, err)
			}
			return expired.ID
		}, []string{audit.KindExpired}},
		{"token create", func(t *testing.T) string {
			if _, _, err := accountsOf(h.d).CreateToken(ctx, "agent:x", "pay-host", "", "cli:root", audit.ChannelCLI); err != nil {
				t.Fatal(err)
			}
			return ""
		}, []string{audit.KindTokenCreated}},
		{"token revoke", func(t *testing.T) string {
			ts, err := accountsOf(h.d).Tokens(ctx)
			if err != nil || len(ts) != 1 {
				t.Fatalf("Tokens = %v, %v", ts, err)
			}
			if err := accountsOf(h.d).RevokeToken(ctx, ts[0].ID, "cli:root", audit.ChannelCLI); err != nil {
				t.Fatal(err)
			}
			return ""
		}, []string{audit.KindTokenRevoked}},
		{"user add", func(t *testing.T) string {
			if _, err := accountsOf(h.d).AddUser(ctx, "ann", account.RoleOperator, testPasswordHash(t), "cli:root", audit.ChannelCLI); err != nil {
				t.Fatal(err)
			}
			return ""
		}, []string{audit.KindUserAdded}},
		{"user disable", func(t *testing.T) string {
			if err := accountsOf(h.d).DisableUser(ctx, "ann", "cli:root", audit.ChannelCLI); err != nil {
				t.Fatal(err)
			}
			return ""
		}, []string{audit.KindUserDisabled}},
	}
	covered := map[string]int{}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			before := h.head(t)
			h.clock.Advance(time.Second)
			id := st.run(t)
			got := h.entriesAfter(t, before)
			var kinds []string
			for _, e := range got {
				kinds = append(kinds, e.Kind)
				if e.CallID != id {
					t.Errorf("%s entry names call %q, want %q", e.Kind, e.CallID, id)
				}
				covered[e.Kind]++
			}
			if !slices.Equal(kinds, st.kinds) {
				t.Errorf("entries = %v, want %v", kinds, st.kinds)
			}
		})
	}
	for _, k := range []string{audit.KindSubmitted, audit.KindRejected, audit.KindApproved, audit.KindGranted,
		audit.KindDenied, audit.KindExpired, audit.KindCancelled, audit.KindRedeemed, audit.KindRedemptionRefused,
		audit.KindOutcome, audit.KindRetryBlocked, audit.KindRetryCleared, audit.KindTokenCreated, audit.KindTokenRevoked,
		audit.KindUserAdded, audit.KindUserDisabled} {
		if covered[k] == 0 {
			t.Errorf("no step produced a %s entry", k)
		}
	}
	res, err := h.d.VerifyChain(ctx)
	if err != nil || !res.OK {
		t.Fatalf("VerifyChain = %+v, %v", res, err)
	}
	if res.Count != h.head(t) {
		t.Errorf("verified %d entries, head is %d", res.Count, h.head(t))
	}
}

var passwordHash = sync.OnceValues(func() (string, error) { return account.Hash("correct horse battery") })

func testPasswordHash(tb testing.TB) string {
	tb.Helper()
	h, err := passwordHash()
	if err != nil {
		tb.Fatal(err)
	}
	return h
}

// dumpState renders every row of the tables a state change may touch.
func dumpState(tb testing.TB, d *DB) string {
	tb.Helper()
	var b strings.Builder
	for _, table := range []string{"calls", "approvals", "redemptions", "retries", "tokens", "users", "audit", "call_deciders", "checkpoints"} {
		for _, vals := range rowValues(tb, d, `SELECT * FROM `+table+` ORDER BY 1, 2`) {
			fmt.Fprintf(&b, "%s %v\n", table, vals)
		}
	}
	return b.String()
}

// rowValues runs query and returns every row's column values.
func rowValues(tb testing.TB, d *DB, query string) [][]any {
	tb.Helper()
	rows, err := d.SQL().Query(query)
	if err != nil {
		tb.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var out [][]any
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			tb.Fatal(err)
		}
		out = append(out, vals)
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

// TestFailedAuditRollsBackTheChange makes the audit insert of one kind fail
// and shows that the change it would have recorded did not happen either.
func TestFailedAuditRollsBackTheChange(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		kind string
		// setup prepares a state and returns the change to attempt.
		setup func(t *testing.T, h *auditHarness) func() error
	}{
		{audit.KindSubmitted, func(t *testing.T, h *auditHarness) func() error {
			return func() error { _, _, err := h.q.Submit(ctx, h.agent, []byte(payBody(9))); return err }
		}},
		{audit.KindApproved, func(t *testing.T, h *auditHarness) func() error {
			c := h.submit(t, h.agent, `{"tool":"test.dual","target":"service:api","args":{"version":"v2"}}`)
			return func() error { _, err := h.q.Approve(ctx, "op:ann", audit.ChannelWeb, c.ID, c.Digest); return err }
		}},
		{audit.KindGranted, func(t *testing.T, h *auditHarness) func() error {
			c := h.submit(t, h.agent, payBody(9))
			return func() error { _, err := h.q.Approve(ctx, "op:ann", audit.ChannelWeb, c.ID, c.Digest); return err }
		}},
		{audit.KindDenied, func(t *testing.T, h *auditHarness) func() error {
			c := h.submit(t, h.agent, payBody(9))
			return func() error { _, err := h.q.Deny(ctx, "op:ann", audit.ChannelWeb, c.ID, "no"); return err }
		}},
		{audit.KindCancelled, func(t *testing.T, h *auditHarness) func() error {
			c := h.submit(t, h.agent, payBody(9))
			return func() error { _, err := h.q.Cancel(ctx, h.agent, c.ID); return err }
		}},
		{audit.KindExpired, func(t *testing.T, h *auditHarness) func() error {
			h.submit(t, h.agent, payBody(9))
			h.clock.Advance(time.Hour)
			return func() error { _, err := h.q.ExpireDue(ctx); return err }
		}},
		{audit.KindRedeemed, func(t *testing.T, h *auditHarness) func() error {
			c := h.submit(t, h.agent, payBody(9))
			c, err := h.q.Approve(ctx, "op:ann", audit.ChannelWeb, c.ID, c.Digest)
			if err != nil {
				t.Fatal(err)
			}
			return func() error { _, err := h.q.Redeem(ctx, h.agent, []byte(redeemBody(c))); return err }
		}},
		{audit.KindOutcome, func(t *testing.T, h *auditHarness) func() error {
			c := h.submit(t, h.agent, payBody(9))
			c, err := h.q.Approve(ctx, "op:ann", audit.ChannelWeb, c.ID, c.Digest)
			if err != nil {
				t.Fatal(err)
			}
			if r, err := h.q.Redeem(ctx, h.agent, []byte(redeemBody(c))); err != nil || !r.Accepted {
				t.Fatalf("Redeem = %+v, %v", r, err)
			}
			return func() error { _, err := h.q.ReportOutcome(ctx, h.agent, c.ID, "failed", "x"); return err }
		}},
		{audit.KindRetryBlocked, func(t *testing.T, h *auditHarness) func() error {
			for range queue.RetryLimit - 1 {
				_, _, _ = h.q.Submit(ctx, h.agent, []byte(`{"tool":"test.pay","target":"x","args":{}}`))
			}
			return func() error {
				_, _, err := h.q.Submit(ctx, h.agent, []byte(`{"tool":"test.pay","target":"x","args":{}}`))
				var pe *queue.ProposalError
				if errors.As(err, &pe) {
					return nil // the rejection was recorded: not what this case expects
				}
				return err
			}
		}},
		{audit.KindUserAdded, func(t *testing.T, h *auditHarness) func() error {
			hash := testPasswordHash(t)
			return func() error {
				_, err := accountsOf(h.d).AddUser(ctx, "bea", account.RoleAuditor, hash, "cli:root", audit.ChannelCLI)
				return err
			}
		}},
		{audit.KindTokenCreated, func(t *testing.T, h *auditHarness) func() error {
			return func() error {
				_, _, err := accountsOf(h.d).CreateToken(ctx, "agent:y", "pay-host", "", "cli:root", audit.ChannelCLI)
				return err
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			h := newAuditHarness(t)
			change := tt.setup(t, h)
			if _, err := h.d.SQL().Exec(`CREATE TRIGGER refuse_kind BEFORE INSERT ON audit WHEN NEW.kind = '` + tt.kind + `'
				BEGIN SELECT RAISE(ABORT, 'audit insert refused'); END`); err != nil {
				t.Fatal(err)
			}
			before := dumpState(t, h.d)
			err := change()
			if err == nil || !strings.Contains(err.Error(), "audit insert refused") {
				t.Fatalf("change error = %v, want the refused audit insert", err)
			}
			if after := dumpState(t, h.d); after != before {
				t.Errorf("the change survived a failed audit insert:\nbefore:\n%s\nafter:\n%s", before, after)
			}
			// With the audit working again, the same change goes through
			// and is recorded: nothing was half-consumed.
			if _, err := h.d.SQL().Exec(`DROP TRIGGER refuse_kind`); err != nil {
				t.Fatal(err)
			}
			if err := change(); err != nil {
				t.Fatalf("change after the audit recovered: %v", err)
			}
			var n int
			if err := h.d.SQL().QueryRow(`SELECT COUNT(*) FROM audit WHERE kind = ?`, tt.kind).Scan(&n); err != nil || n != 1 {
				t.Errorf("%s entries = %d, %v; want 1", tt.kind, n, err)
			}
		})
	}
}

// buildTrail makes a database with a varied chain of n calls' worth of entries.
func buildTrail(tb testing.TB, calls int) *auditHarness {
	tb.Helper()
	h := newAuditHarness(tb)
	ctx := context.Background()
	for i := range calls {
		h.clock.Advance(time.Second)
		c := h.submit(tb, h.agent, payBody(100+i))
		h.clock.Advance(time.Second)
		switch i % 3 {
		case 0:
			c, err := h.q.Approve(ctx, "op:ann", audit.ChannelWeb, c.ID, c.Digest)
			if err != nil {
				tb.Fatal(err)
			}
			if _, err := h.q.Redeem(ctx, h.agent, []byte(redeemBody(c))); err != nil {
				tb.Fatal(err)
			}
		case 1:
			if _, err := h.q.Deny(ctx, "op:bob", audit.ChannelCLI, c.ID, "no: \"quoted\" \u2028 reason"); err != nil {
				tb.Fatal(err)
			}
		}
	}
	return h
}

// tamperable drops the append-only triggers, as someone editing the file
// directly could.
func tamperable(tb testing.TB, d *DB) {
	tb.Helper()
	for _, trig := range []string{"audit_no_update", "audit_no_delete", "checkpoints_no_update", "checkpoints_no_delete"} {
		if _, err := d.SQL().Exec(`DROP TRIGGER ` + trig); err != nil {
			tb.Fatal(err)
		}
	}
}

func mustExec(tb testing.TB, d *DB, query string, args ...any) {
	tb.Helper()
	if _, err := d.SQL().Exec(query, args...); err != nil {
		tb.Fatalf("%s: %v", query, err)
	}
}

func TestAppendOnlyTriggers(t *testing.T) {
	h := buildTrail(t, 2)
	if _, err := h.d.Checkpoint(context.Background(), newSigner(t)); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`UPDATE audit SET kind = 'x' WHERE seq = 1`, `DELETE FROM audit WHERE seq = 1`,
		`UPDATE checkpoints SET head = 'x'`, `DELETE FROM checkpoints`} {
		if _, err := h.d.SQL().Exec(q); err == nil {
			t.Errorf("%s succeeded on an append-only table", q)
		}
	}
}

func flipByte(s string, i int) string {
	b := []byte(s)
	b[i] ^= 0x01
	return string(b)
}

func TestVerifyChainFindsTampering(t *testing.T) {
	ctx := context.Background()
	const k = 7 // the entry tampered with
	tests := []struct {
		name   string
		tamper func(t *testing.T, h *auditHarness)
		want   int64
	}{
		{"details byte", func(t *testing.T, h *auditHarness) {
			var details string
			_ = h.d.SQL().QueryRow(`SELECT details FROM audit WHERE seq = ?`, k).Scan(&details)
			i := strings.Index(details, `"digest":"`) + len(`"digest":"`) + 3
			mustExec(t, h.d, `UPDATE audit SET details = ? WHERE seq = ?`, flipByte(details, i), k)
		}, k},
		{"details syntax byte", func(t *testing.T, h *auditHarness) {
			mustExec(t, h.d, `UPDATE audit SET details = substr(details, 1, length(details) - 1) || ']' WHERE seq = ?`, k)
		}, k},
		{"details re-spaced", func(t *testing.T, h *auditHarness) {
			mustExec(t, h.d, `UPDATE audit SET details = replace(details, ',"', ', "') WHERE seq = ?`, k)
		}, k},
		{"kind", func(t *testing.T, h *auditHarness) {
			mustExec(t, h.d, `UPDATE audit SET kind = 'approved' WHERE seq = ?`, k)
		}, k},
		{"time byte", func(t *testing.T, h *auditHarness) {
			mustExec(t, h.d, `UPDATE audit SET time = replace(time, ':0', ':1') WHERE seq = ?`, k)
		}, k},
		{"principal", func(t *testing.T, h *auditHarness) {
			mustExec(t, h.d, `UPDATE audit SET principal = 'op:eve' WHERE seq = ?`, k)
		}, k},
		{"channel", func(t *testing.T, h *auditHarness) {
			mustExec(t, h.d, `UPDATE audit SET channel = 'cli' WHERE seq = ?`, k)
		}, k},
		{"call id", func(t *testing.T, h *auditHarness) {
			mustExec(t, h.d, `UPDATE audit SET call_id = 'call_x' WHERE seq = ?`, k)
		}, k},
		{"hash", func(t *testing.T, h *auditHarness) {
			mustExec(t, h.d, `UPDATE audit SET hash = (SELECT hash FROM audit WHERE seq = 1) WHERE seq = ?`, k)
		}, k},
		{"deleted", func(t *testing.T, h *auditHarness) { mustExec(t, h.d, `DELETE FROM audit WHERE seq = ?`, k) }, k},
		{"reordered", func(t *testing.T, h *auditHarness) {
			// Swap every column but seq between k and k+1.
			mustExec(t, h.d, `UPDATE audit SET seq = -1 WHERE seq = ?`, k)
			mustExec(t, h.d, `UPDATE audit SET seq = ? WHERE seq = ?`, k, k+1)
			mustExec(t, h.d, `UPDATE audit SET seq = ? WHERE seq = -1`, k+1)
		}, k},
		{"tail after checkpoint", func(t *testing.T, h *auditHarness) {
			mustExec(t, h.d, `DELETE FROM audit WHERE seq >= ?`, 15)
		}, 15},
		{"checkpoint head", func(t *testing.T, h *auditHarness) {
			mustExec(t, h.d, `UPDATE checkpoints SET head = (SELECT hash FROM audit WHERE seq = 3) WHERE seq = 20`)
		}, 20},
		{"rewritten and resealed", func(t *testing.T, h *auditHarness) {
			// Rewrite entry k and reseal every entry after it, as a forger
			// who knows the hash rule would: only the checkpoint exposes it.
			entries := h.entriesAfter(t, 0)
			mustExec(t, h.d, `DELETE FROM audit`)
			prevSeq, prev := int64(0), ""
			for i := range entries {
				e := entries[i]
				if e.Seq == k {
					e.Details = map[string]any{"forged": true}
				}
				if err := e.Seal(prevSeq, prev); err != nil {
					t.Fatal(err)
				}
				mustExec(t, h.d, `INSERT INTO audit (`+sqlq.EntryColumns+`) VALUES (?,?,?,?,?,?,?,?,?)`, e.Seq, e.Time, e.Kind,
					e.CallID, e.Principal, e.Channel, mustEncode(t, e.Details), e.PrevHash, e.Hash)
				prevSeq, prev = e.Seq, e.Hash
			}
		}, 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := buildTrail(t, 12)
			if h.head(t) < 25 {
				t.Fatal("the test chain is too short")
			}
			// A checkpoint at entry 20, as taken before more entries came.
			cp := checkpointAt(t, h, 20)
			if res, err := h.d.VerifyChain(ctx); err != nil || !res.OK || res.CheckpointSeq != cp.Seq {
				t.Fatalf("before tampering: %+v, %v", res, err)
			}
			tamperable(t, h.d)
			tt.tamper(t, h)
			res, err := h.d.VerifyChain(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var be *audit.BreakError
			if res.OK || !errors.As(res.Err, &be) {
				t.Fatalf("VerifyChain = %+v, want a break", res)
			}
			if be.Seq != tt.want {
				t.Errorf("first bad entry = %d, want %d (%v)", be.Seq, tt.want, be)
			}
		})
	}
}

func mustEncode(tb testing.TB, v any) string {
	tb.Helper()
	b, err := canonical.Encode(v)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

// checkpointAt signs a checkpoint over entry seq as the checkpointer would
// have when the head was there, and stores it.
func checkpointAt(tb testing.TB, h *auditHarness, seq int64) audit.Checkpoint {
	tb.Helper()
	var hash string
	if err := h.d.SQL().QueryRow(`SELECT hash FROM audit WHERE seq = ?`, seq).Scan(&hash); err != nil {
		tb.Fatal(err)
	}
	c, err := newSigner(tb).Sign(seq, hash, h.clock.Now())
	if err != nil {
		tb.Fatal(err)
	}
	mustExec(tb, h.d, `INSERT INTO checkpoints (`+sqlq.CheckpointColumns+`) VALUES (?,?,?,?,?,?)`, c.Seq, c.Head, c.Time, c.KID, c.PublicKey, c.Signature)
	return c
}

// TestOlderCopyExposedByOutsideCheckpoint replaces the database with an
// older copy of itself; the chain in the copy is intact, and only a newer
// checkpoint kept outside shows that entries are gone.
func TestOlderCopyExposedByOutsideCheckpoint(t *testing.T) {
	ctx := context.Background()
	h := buildTrail(t, 4)
	signer := newSigner(t)
	if _, err := h.d.Checkpoint(ctx, signer); err != nil {
		t.Fatal(err)
	}
	oldCount := h.head(t)
	mustExec(t, h.d, `PRAGMA wal_checkpoint(TRUNCATE)`)
	old, err := os.ReadFile(h.d.Path())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		h.submit(t, h.agent, payBody(900+i))
	}
	outside, err := h.d.Checkpoint(ctx, signer)
	if err != nil {
		t.Fatal(err)
	}
	if outside.Seq != oldCount+3 {
		t.Fatalf("outside checkpoint at %d, want %d", outside.Seq, oldCount+3)
	}
	h.d.Close()
	path := filepath.Join(h.dir, "countersign.db")
	for _, suffix := range []string{"-wal", "-shm"} {
		os.Remove(path + suffix)
	}
	if err := os.WriteFile(path, old, 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	res, err := d.VerifyChain(ctx)
	if err != nil || !res.OK || res.Count != oldCount {
		t.Fatalf("the old copy on its own: %+v, %v; want an intact chain of %d", res, err, oldCount)
	}
	res, err = d.Verify(ctx, audit.VerifyOptions{Checkpoints: []audit.Checkpoint{outside}, TrustedKeys: []string{signer.PublicKey()}})
	if err != nil {
		t.Fatal(err)
	}
	var be *audit.BreakError
	if res.OK || !errors.As(res.Err, &be) || be.Seq != oldCount+1 {
		t.Errorf("with the outside checkpoint: %+v, want a break at %d", res, oldCount+1)
	}

	// A forger who also re-signs with a key of their own is refused when
	// the verifier pins the published key.
	forger := audit.NewSigner(ed25519.NewKeyFromSeed(make([]byte, 32)))
	c, _ := forger.Sign(1, firstHash(t, d), time.Now())
	res, err = d.Verify(ctx, audit.VerifyOptions{Checkpoints: []audit.Checkpoint{c}, TrustedKeys: []string{signer.PublicKey()}})
	if err != nil || res.OK {
		t.Errorf("checkpoint from an untrusted key: %+v, %v; want a break", res, err)
	}
}

// firstHash returns entry 1's hash.
func firstHash(tb testing.TB, d *DB) string {
	tb.Helper()
	var h string
	if err := d.SQL().QueryRow(`SELECT hash FROM audit WHERE seq = 1`).Scan(&h); err != nil {
		tb.Fatal(err)
	}
	return h
}

func TestCheckpoint(t *testing.T) {
	ctx := context.Background()
	h := newAuditHarness(t)
	signer := newSigner(t)
	if _, err := h.d.Checkpoint(ctx, signer); !errors.Is(err, audit.ErrNoCheckpoint) {
		t.Fatalf("Checkpoint of an empty trail = %v, want audit.ErrNoCheckpoint", err)
	}
	if _, err := h.d.LatestCheckpoint(ctx); !errors.Is(err, audit.ErrNoCheckpoint) {
		t.Fatalf("LatestCheckpoint = %v, want audit.ErrNoCheckpoint", err)
	}
	h.submit(t, h.agent, payBody(1))
	c1, err := h.d.Checkpoint(ctx, signer)
	if err != nil {
		t.Fatal(err)
	}
	seq, head, _ := h.d.AuditHead(ctx)
	if c1.Seq != seq || c1.Head != head || c1.KID != signer.KID() || c1.Verify() != nil {
		t.Errorf("checkpoint = %+v, want seq %d head %s signed by %s", c1, seq, head, signer.KID())
	}
	// Without new entries no new checkpoint is made.
	h.clock.Advance(time.Hour)
	again, err := h.d.Checkpoint(ctx, signer)
	if err != nil || again != c1 {
		t.Errorf("second Checkpoint = %+v, %v; want the first", again, err)
	}
	h.submit(t, h.agent, payBody(2))
	c2, err := h.d.Checkpoint(ctx, signer)
	if err != nil || c2.Seq != c1.Seq+1 {
		t.Fatalf("Checkpoint after one more entry = %+v, %v", c2, err)
	}
	latest, err := h.d.LatestCheckpoint(ctx)
	if err != nil || latest != c2 {
		t.Errorf("LatestCheckpoint = %+v, %v; want %+v", latest, err, c2)
	}
	res, err := h.d.VerifyChain(ctx)
	if err != nil || !res.OK || res.Checkpoints != 2 || res.CheckpointSeq != c2.Seq {
		t.Errorf("VerifyChain = %+v, %v", res, err)
	}
}

// TestConcurrentCheckpoints races checkpointers and writers: every stored
// checkpoint must match the chain.
func TestConcurrentCheckpoints(t *testing.T) {
	ctx := context.Background()
	h := newAuditHarness(t)
	signer := newSigner(t)
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := range 15 {
				if _, _, err := h.q.Submit(ctx, h.agent, []byte(payBody(1000*w+i+1))); err != nil {
					t.Error(err)
				}
			}
		}()
		go func() {
			defer wg.Done()
			for range 15 {
				if _, err := h.d.Checkpoint(ctx, signer); err != nil && !errors.Is(err, audit.ErrNoCheckpoint) {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	res, err := h.d.VerifyChain(ctx)
	if err != nil || !res.OK || res.Count != 45 || res.Checkpoints == 0 {
		t.Fatalf("VerifyChain = %+v, %v", res, err)
	}
}

func TestRunCheckpointsSQLite(t *testing.T) {
	h := newAuditHarness(t)
	h.d.now = time.Now
	signer := newSigner(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		audit.RunCheckpoints(ctx, h.d, signer, time.Hour, 5, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	for i := range 6 {
		h.submit(t, h.agent, payBody(i+1))
	}
	// Six entries are more than five: a checkpoint follows within a poll.
	deadline := time.Now().Add(30 * time.Second)
	var c audit.Checkpoint
	var err error
	for time.Now().Before(deadline) {
		if c, err = h.d.LatestCheckpoint(context.Background()); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil || c.Seq < 5 {
		t.Fatalf("no checkpoint after 6 entries: %+v, %v", c, err)
	}
	// Two more entries are fewer than five and the interval is an hour:
	// no checkpoint.
	h.submit(t, h.agent, payBody(7))
	h.submit(t, h.agent, payBody(8))
	time.Sleep(1200 * time.Millisecond)
	if c2, _ := h.d.LatestCheckpoint(context.Background()); c2.Seq != c.Seq {
		t.Errorf("checkpoint at %d before the count or interval was reached, want still %d", c2.Seq, c.Seq)
	}
	// Three more make five since the last checkpoint.
	for i := range 3 {
		h.submit(t, h.agent, payBody(10+i))
	}
	seq, _, _ := h.d.AuditHead(context.Background())
	waitFor := func(what string, seq int64) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if c, err := h.d.LatestCheckpoint(context.Background()); err == nil && c.Seq == seq {
				return
			}
		}
		t.Errorf("%s: no checkpoint of entry %d", what, seq)
	}
	waitFor("five new entries", seq)
	// One more, then stop: the loop signs the head on its way out.
	h.submit(t, h.agent, payBody(20))
	cancel()
	<-done
	seq, _, _ = h.d.AuditHead(context.Background())
	if c3, err := h.d.LatestCheckpoint(context.Background()); err != nil || c3.Seq != seq {
		t.Errorf("after stopping: checkpoint %+v, %v; want the head %d", c3, err, seq)
	}

	// With a short interval, a moved head is signed soon.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	go audit.RunCheckpoints(ctx, h.d, signer, 50*time.Millisecond, 1000, nil)
	h.submit(t, h.agent, payBody(30))
	seq, _, _ = h.d.AuditHead(context.Background())
	waitFor("interval", seq)
}

func TestExportRoundTrip(t *testing.T) {
	ctx := context.Background()
	h := buildTrail(t, 9)
	signer := newSigner(t)
	if _, err := h.d.Checkpoint(ctx, signer); err != nil {
		t.Fatal(err)
	}
	mid := h.head(t)
	for i := range 4 {
		h.clock.Advance(time.Second)
		h.submit(t, h.agent, payBody(500+i))
	}
	if _, err := h.d.Checkpoint(ctx, signer); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(time.Second)
	h.submit(t, h.agent, payBody(600))

	var buf bytes.Buffer
	res, err := h.d.ExportAudit(ctx, &buf, audit.ExportOptions{Format: "jsonl", Signer: signer})
	if err != nil {
		t.Fatal(err)
	}
	chain, err := h.d.VerifyChain(ctx)
	if err != nil || !chain.OK {
		t.Fatalf("VerifyChain = %+v, %v", chain, err)
	}
	rep, err := audit.VerifyExport(bytes.NewReader(buf.Bytes()), audit.VerifyOptions{TrustedKeys: []string{signer.PublicKey()}})
	if err != nil {
		t.Fatalf("VerifyExport: %v", err)
	}
	if rep.Count != chain.Count || rep.Head != chain.Head || res.Count != chain.Count || res.Head != chain.Head {
		t.Errorf("export %+v / offline %+v, database count %d head %s", res, rep, chain.Count, chain.Head)
	}
	if rep.Checkpoints != 2 || res.Checkpoints != 2 || rep.Header == nil || rep.Header.Database != h.d.Identity() {
		t.Errorf("export checkpoints %d/%d, header %+v", res.Checkpoints, rep.Checkpoints, rep.Header)
	}

	// A range from the middle verifies from its first entry's prev_hash,
	// which is the hash of the entry before it in the database.
	var since string
	if err := h.d.SQL().QueryRow(`SELECT time FROM audit WHERE seq = ?`, mid+1).Scan(&since); err != nil {
		t.Fatal(err)
	}
	sinceT, _ := time.Parse(time.RFC3339Nano, since)
	buf.Reset()
	res, err = h.d.ExportAudit(ctx, &buf, audit.ExportOptions{Format: "jsonl", Since: sinceT, Until: h.clock.Now()})
	if err != nil {
		t.Fatal(err)
	}
	rep, err = audit.VerifyExport(bytes.NewReader(buf.Bytes()), audit.VerifyOptions{})
	if err != nil {
		t.Fatalf("VerifyExport of a range: %v", err)
	}
	var prev string
	_ = h.d.SQL().QueryRow(`SELECT hash FROM audit WHERE seq = ?`, mid).Scan(&prev)
	if rep.FromSeq != mid+1 || rep.PrevHash != prev || res.FromSeq != mid+1 || rep.Checkpoints != 1 {
		t.Errorf("range export from %d (prev %s, %d checkpoints); want from %d prev %s and 1 checkpoint", rep.FromSeq, rep.PrevHash, rep.Checkpoints, mid+1, prev)
	}
	if res.ToSeq != chain.Count-1 {
		t.Errorf("range export ends at %d, want %d (the last entry is at the until time)", res.ToSeq, chain.Count-1)
	}

	// Nothing in range: a valid, empty export.
	buf.Reset()
	res, err = h.d.ExportAudit(ctx, &buf, audit.ExportOptions{Format: "jsonl", Since: h.clock.Now().Add(time.Hour)})
	if err != nil || res.Count != 0 {
		t.Fatalf("empty export = %+v, %v", res, err)
	}
	if rep, err := audit.VerifyExport(bytes.NewReader(buf.Bytes()), audit.VerifyOptions{}); err != nil || rep.Count != 0 {
		t.Errorf("VerifyExport of an empty export = %+v, %v", rep, err)
	}

	if _, err := h.d.ExportAudit(ctx, io.Discard, audit.ExportOptions{Format: "xml"}); !errors.Is(err, audit.ErrFormat) {
		t.Errorf("format xml: %v, want audit.ErrFormat", err)
	}
}

// TestExportCSV recomputes every entry's hash from the CSV cells.
func TestExportCSV(t *testing.T) {
	ctx := context.Background()
	h := buildTrail(t, 5)
	var buf bytes.Buffer
	if _, err := h.d.ExportAudit(ctx, &buf, audit.ExportOptions{Format: "csv"}); err != nil {
		t.Fatal(err)
	}
	records, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"seq", "time", "kind", "call_id", "principal", "channel", "details", "prev_hash", "hash"}; !slices.Equal(records[0], want) {
		t.Fatalf("header = %v, want %v", records[0], want)
	}
	if int64(len(records)-1) != h.head(t) {
		t.Fatalf("%d rows, want %d", len(records)-1, h.head(t))
	}
	v := audit.NewVerifier()
	for _, r := range records[1:] {
		var e audit.Entry
		fmt.Sscan(r[0], &e.Seq)
		e.Time, e.Kind, e.CallID, e.Principal, e.Channel, e.PrevHash, e.Hash = r[1], r[2], r[3], r[4], r[5], r[7], r[8]
		if e.Details, err = audit.ParseDetails([]byte(r[6])); err != nil {
			t.Fatalf("row %d details: %v", e.Seq, err)
		}
		if err := v.Add(&e); err != nil {
			t.Fatalf("row %d: %v", e.Seq, err)
		}
	}
}

// appendMany seals n entries onto the chain in Go and inserts them in one
// transaction: a quick way to make a long trail.
func appendMany(tb testing.TB, d *DB, n int, detailBytes int) {
	tb.Helper()
	tx, err := d.SQL().Begin()
	if err != nil {
		tb.Fatal(err)
	}
	defer tx.Rollback()
	var seq int64
	var prev string
	err = tx.QueryRow(`SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1`).Scan(&seq, &prev)
	if err != nil && !strings.Contains(err.Error(), "no rows") {
		tb.Fatal(err)
	}
	stmt, err := tx.Prepare(`INSERT INTO audit (` + sqlq.EntryColumns + `) VALUES (?,?,?,?,?,?,?,?,?)`)
	if err != nil {
		tb.Fatal(err)
	}
	defer stmt.Close()
	pad := strings.Repeat("x", detailBytes)
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range n {
		e := &audit.Entry{Time: audit.FormatTime(t0.Add(time.Duration(seq) * time.Millisecond)), Kind: audit.KindOutcome,
			CallID: fmt.Sprintf("call_%d", i), Principal: "agent:bulk", Channel: audit.ChannelAPI,
			Details: map[string]any{"pad": pad, "i": int64(i)}}
		if err := e.Seal(seq, prev); err != nil {
			tb.Fatal(err)
		}
		if _, err := stmt.Exec(e.Seq, e.Time, e.Kind, e.CallID, e.Principal, e.Channel, mustEncode(tb, e.Details), e.PrevHash, e.Hash); err != nil {
			tb.Fatal(err)
		}
		seq, prev = e.Seq, e.Hash
	}
	if err := tx.Commit(); err != nil {
		tb.Fatal(err)
	}
}

// TestExportIsOneSnapshot appends entries while an export streams (the
// export is far larger than its write buffer, so it is mid-way through its
// rows): the export still verifies and holds exactly the entries there were
// when it began.
func TestExportIsOneSnapshot(t *testing.T) {
	ctx := context.Background()
	h := newAuditHarness(t)
	appendMany(t, h.d, 3000, 1000)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := h.d.ExportAudit(ctx, pw, audit.ExportOptions{Format: "jsonl"})
		pw.CloseWithError(err)
		done <- err
	}()
	first := make([]byte, 100<<10)
	if _, err := io.ReadFull(pr, first); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		h.submit(t, h.agent, payBody(7000+i))
	}
	rest, err := io.ReadAll(pr)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	rep, err := audit.VerifyExport(bytes.NewReader(append(first, rest...)), audit.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Count != 3000 || h.head(t) != 3005 {
		t.Errorf("export holds %d entries (head now %d), want the 3000 there were when it began", rep.Count, h.head(t))
	}
}

func TestOpenReadOnly(t *testing.T) {
	h := buildTrail(t, 2)
	d, err := OpenReadOnly(h.d.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Identity() != h.d.Identity() {
		t.Errorf("identity = %s, want %s", d.Identity(), h.d.Identity())
	}
	if _, err := d.SQL().Exec(`INSERT INTO meta (key, value) VALUES ('x', 'y')`); err == nil {
		t.Error("a read-only database accepted a write")
	}
	if _, err := OpenReadOnly(filepath.Join(t.TempDir(), "missing.db")); err == nil {
		t.Error("OpenReadOnly of a missing file succeeded")
	}
	var n int
	if err := d.SQL().QueryRow(`SELECT COUNT(*) FROM audit`).Scan(&n); err != nil || int64(n) != h.head(t) {
		t.Errorf("read %d entries, %v; want %d", n, err, h.head(t))
	}
}
