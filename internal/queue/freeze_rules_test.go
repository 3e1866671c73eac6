package queue_test

import (
	"context"
	"errors"
	"testing"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/testkit"
)

// freezeEnv is newEnv with an admin, an auditor, and a disabled operator
// and admin beside the operators.
func freezeEnv(t *testing.T) *env {
	t.Helper()
	ctx := context.Background()
	e := newEnv(t)
	testkit.SeedUsers(t, e.db.Accounts(), account.RoleAdmin, "root", "old-root")
	testkit.SeedUsers(t, e.db.Accounts(), account.RoleAuditor, "audrey")
	testkit.SeedUsers(t, e.db.Accounts(), account.RoleOperator, "old-op")
	accounts := account.NewService(e.db.Accounts(), nil)
	for _, n := range []string{"old-root", "old-op"} {
		if err := accounts.DisableUser(ctx, n, "test", audit.ChannelCLI); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// TestWhoMayFreeze: the queue itself decides who freezes (an enabled
// operator or admin) and who lifts a freeze (an enabled admin only), for
// the command line and the admin page alike; a refusal stores and audits
// nothing.
func TestWhoMayFreeze(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name   string
		by     string
		freeze bool // else unfreeze a freeze root made
		want   error
	}{
		{"an operator freezes", "alice", true, nil},
		{"an admin freezes", "root", true, nil},
		{"an auditor does not freeze", "audrey", true, queue.ErrNotADecider},
		{"an unknown name does not freeze", "mallory", true, queue.ErrNotADecider},
		{"a disabled operator does not freeze", "old-op", true, queue.ErrNotADecider},
		{"a disabled admin does not freeze", "old-root", true, queue.ErrNotADecider},
		{"an admin lifts a freeze", "root", false, nil},
		{"an operator does not lift a freeze", "alice", false, queue.ErrNotAnAdmin},
		{"an auditor does not lift a freeze", "audrey", false, queue.ErrNotAnAdmin},
		{"an unknown name does not lift a freeze", "mallory", false, queue.ErrNotAnAdmin},
		{"a disabled admin does not lift a freeze", "old-root", false, queue.ErrNotAnAdmin},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := freezeEnv(t)
			if !tc.freeze {
				if _, err := e.q.Freeze(ctx, "root", audit.ChannelWeb, "payments.refund", "", "incident 7"); err != nil {
					t.Fatal(err)
				}
			}
			before := auditCount(t, e)
			var err error
			if tc.freeze {
				_, err = e.q.Freeze(ctx, tc.by, audit.ChannelCLI, "payments.refund", "", "incident 7")
			} else {
				_, err = e.q.Unfreeze(ctx, tc.by, audit.ChannelCLI, "payments.refund", "")
			}
			if !matches(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			fs, ferr := e.q.Freezes(ctx)
			if ferr != nil {
				t.Fatal(ferr)
			}
			// A freeze is in force after a freeze, or after a refused lift.
			if frozen := len(fs) == 1; frozen != (tc.freeze == (tc.want == nil)) {
				t.Errorf("freezes in force = %v", fs)
			}
			if got := auditCount(t, e); (got == before) != (tc.want != nil) {
				t.Errorf("audit entries %d -> %d", before, got)
			}
		})
	}
}

// TestFreezeRulesCheckedInsideTheTransaction: an account disabled between
// the page load (or the command) and the write freezes and lifts nothing.
func TestFreezeRulesCheckedInsideTheTransaction(t *testing.T) {
	ctx := context.Background()
	e := freezeEnv(t)
	accounts := account.NewService(e.db.Accounts(), nil)
	disable := func(name string) {
		e.store.setBefore(func() {
			e.store.setBefore(nil)
			if err := accounts.DisableUser(ctx, name, "test", audit.ChannelCLI); err != nil {
				t.Error(err)
			}
		})
	}
	disable("alice")
	if _, err := e.q.Freeze(ctx, "alice", audit.ChannelWeb, "", "", "incident 8"); !errors.Is(err, queue.ErrNotADecider) {
		t.Fatalf("Freeze by an operator disabled meanwhile: %v, want ErrNotADecider", err)
	}
	if _, err := e.q.Freeze(ctx, "root", audit.ChannelWeb, "", "", "incident 8"); err != nil {
		t.Fatal(err)
	}
	disable("root")
	var ae *queue.AdminError
	if _, err := e.q.Unfreeze(ctx, "root", audit.ChannelWeb, "", ""); !errors.As(err, &ae) || ae.Operator != "root" {
		t.Fatalf("Unfreeze by an admin disabled meanwhile: %v, want an AdminError for root", err)
	}
	if fs, _ := e.q.Freezes(ctx); len(fs) != 1 {
		t.Fatalf("freezes in force = %v, want the one freeze", fs)
	}
}

func auditCount(t *testing.T, e *env) int64 {
	t.Helper()
	res, err := e.db.Verify(context.Background(), audit.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return res.Count
}
