package main

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/testkit"
)

// TestRestoredCopyRefusedAfterEachChange: a copy of the database taken just
// before a change, restored after it, is refused at start for every kind of
// change whose loss could let something happen again: the commit that held
// the change advanced the data directory's high-water mark before it was
// acknowledged. A copy from before a submission or a person's approval is
// accepted, and so is one from before an executor's `succeeded` (a failed
// one halts a plan, so it is refused): losing those
// takes something away and gives nothing back, so their commits leave the
// mark for the next one that must move it (highwater.MayWait), and cost no
// sync of it.
func TestRestoredCopyRefusedAfterEachChange(t *testing.T) {
	ctx := context.Background()
	refund := func(invoice string) []byte {
		return []byte(`{"tool":"payments.refund","target":"invoice:` + invoice +
			`","args":{"amount_minor":1299,"currency":"USD","reason_code":"duplicate"}}`)
	}
	submitted := func(t *testing.T, a *app) *queue.Call {
		t.Helper()
		c, _, err := a.queue.Submit(ctx, rollbackAgent, refund("INV-9"))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	must := func(t *testing.T, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name       string
		allowances bool // the data directory of allowanceData
		refused    bool
		// prepare runs before the copy is taken and returns the change,
		// made after it.
		prepare func(t *testing.T, a *app) func(t *testing.T, a *app)
	}{
		{name: "redemption", refused: true, prepare: func(t *testing.T, a *app) func(*testing.T, *app) {
			c := approvedRefund(t, a, "INV-1")
			return func(t *testing.T, a *app) {
				if r := redeemOf(t, a, c); !r.Accepted {
					t.Fatalf("redemption refused: %s", r.Reason)
				}
			}
		}},
		{name: "grant revoked", refused: true, prepare: func(t *testing.T, a *app) func(*testing.T, *app) {
			c := approvedRefund(t, a, "INV-1")
			return func(t *testing.T, a *app) {
				_, err := a.queue.RevokeGrant(ctx, "olivia", audit.ChannelCLI, c.ID, "wrong invoice")
				must(t, err)
			}
		}},
		{name: "denial", refused: true, prepare: func(t *testing.T, a *app) func(*testing.T, *app) {
			c := submitted(t, a)
			return func(t *testing.T, a *app) {
				_, err := a.queue.Deny(ctx, "olivia", audit.ChannelCLI, c.ID, "not ours")
				must(t, err)
			}
		}},
		{name: "freeze", refused: true, prepare: func(t *testing.T, a *app) func(*testing.T, *app) {
			submitted(t, a)
			return func(t *testing.T, a *app) {
				_, err := a.queue.Freeze(ctx, "olivia", audit.ChannelCLI, "payments.refund", "", "incident")
				must(t, err)
			}
		}},
		{name: "user disabled", refused: true, prepare: func(t *testing.T, a *app) func(*testing.T, *app) {
			return func(t *testing.T, a *app) { must(t, a.accounts.DisableUser(ctx, "olivia", "adam", audit.ChannelCLI)) }
		}},
		{name: "token revoked", refused: true, prepare: func(t *testing.T, a *app) func(*testing.T, *app) {
			tok, _, err := a.accounts.CreateToken(ctx, "agent:billing-bot", "payments-host", "test", "adam", audit.ChannelCLI)
			must(t, err)
			return func(t *testing.T, a *app) { must(t, a.accounts.RevokeToken(ctx, tok.ID, "adam", audit.ChannelCLI)) }
		}},
		{name: "allowance used", allowances: true, refused: true, prepare: func(t *testing.T, a *app) func(*testing.T, *app) {
			return func(t *testing.T, a *app) {
				c, _, err := a.queue.Submit(ctx, queue.Principal{Actor: "agent:billing", Audience: "payments-host"},
					[]byte(`{"tool":"payments.refund","target":"invoice:INV-3","args":{"amount_minor":2500,"currency":"EUR"}}`))
				if err != nil || c.Status != queue.StatusApproved {
					t.Fatalf("covered call: %v, %v", c, err)
				}
			}
		}},
		{name: "allowance revoked", allowances: true, refused: true, prepare: func(t *testing.T, a *app) func(*testing.T, *app) {
			as, err := a.queue.Allowances(ctx, queue.AllowanceFilter{})
			if err != nil || len(as) != 1 {
				t.Fatalf("allowances = %v, %v", as, err)
			}
			return func(t *testing.T, a *app) {
				_, err := a.queue.RevokeAllowance(ctx, queue.RevokeInput{Operator: "bob", Channel: audit.ChannelCLI, AllowanceID: as[0].ID, Reason: "stop"})
				must(t, err)
			}
		}},
		{name: "submission", refused: false, prepare: func(t *testing.T, a *app) func(*testing.T, *app) {
			return func(t *testing.T, a *app) { submitted(t, a) }
		}},
		{name: "outcome", refused: false, prepare: func(t *testing.T, a *app) func(*testing.T, *app) {
			c := approvedRefund(t, a, "INV-1")
			if r := redeemOf(t, a, c); !r.Accepted {
				t.Fatalf("redemption refused: %s", r.Reason)
			}
			return func(t *testing.T, a *app) {
				_, err := a.queue.ReportOutcome(ctx, rollbackAgent, c.ID, "succeeded", "")
				must(t, err)
			}
		}},
		{name: "failed outcome", refused: true, prepare: func(t *testing.T, a *app) func(*testing.T, *app) {
			c := approvedRefund(t, a, "INV-2")
			if r := redeemOf(t, a, c); !r.Accepted {
				t.Fatalf("redemption refused: %s", r.Reason)
			}
			return func(t *testing.T, a *app) {
				_, err := a.queue.ReportOutcome(ctx, rollbackAgent, c.ID, "failed", "upstream refused")
				must(t, err)
			}
		}},
		{name: "approval by a person", refused: false, prepare: func(t *testing.T, a *app) func(*testing.T, *app) {
			c := submitted(t, a)
			return func(t *testing.T, a *app) {
				_, err := a.queue.Approve(ctx, "olivia", audit.ChannelCLI, c.ID, c.Digest)
				must(t, err)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			data, toolsFile := t.TempDir(), rollbackTools
			if tc.allowances {
				data, _, _ = allowanceData(t)
				toolsFile = filepath.Join(data, "tools.yaml")
			}
			open := func() (*app, error) {
				return openApp(data, "", toolsFile, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
			}
			a, err := open()
			must(t, err)
			if !tc.allowances {
				testkit.SeedUsers(t, a.db.accounts, account.RoleOperator, "olivia")
				testkit.SeedUsers(t, a.db.accounts, account.RoleAdmin, "adam")
			}
			change := tc.prepare(t, a)
			// The copy is taken from the running console, between two
			// writes: everything committed is in the file and its WAL.
			backup := filepath.Join(t.TempDir(), "backup.db")
			copyDB(t, dbPath(data), backup)
			change(t, a)
			a.Close()

			copyDB(t, backup, dbPath(data))
			a, err = open()
			switch {
			case tc.refused && err == nil:
				a.Close()
				t.Fatalf("a copy from before the %s was accepted", tc.name)
			case tc.refused && !strings.Contains(err.Error(), "behind this data directory's high-water mark"):
				t.Fatalf("a copy from before the %s: %v, want the high-water mark's refusal", tc.name, err)
			case !tc.refused && err != nil:
				t.Fatalf("a copy from before the %s was refused: %v", tc.name, err)
			case !tc.refused:
				a.Close()
			}
		})
	}
}
