package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/db"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/testkit"
)

const rollbackTools = "../../examples/tools.yaml"

var rollbackAgent = queue.Principal{Actor: "agent:billing-bot", Audience: "payments-host"}

func rollbackApp(t *testing.T, data string) *app {
	t.Helper()
	a, err := openApp(data, "", rollbackTools, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// approvedRefund submits a refund and approves it, returning the call.
func approvedRefund(t *testing.T, a *app, invoice string) *queue.Call {
	t.Helper()
	ctx := context.Background()
	c, _, err := a.queue.Submit(ctx, rollbackAgent, []byte(`{"tool":"payments.refund","target":"invoice:`+invoice+
		`","args":{"amount_minor":1299,"currency":"USD","reason_code":"duplicate"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if c, err = a.queue.Approve(ctx, "olivia", audit.ChannelCLI, c.ID, c.Digest); err != nil {
		t.Fatal(err)
	}
	return c
}

func redeemOf(t *testing.T, a *app, c *queue.Call) *queue.Redemption {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"grant": c.Grant, "call": map[string]any{"tool": c.Tool, "target": c.Target, "args": c.Args}})
	r, err := a.queue.Redeem(context.Background(), rollbackAgent, body)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func copyDB(t *testing.T, from, to string) {
	t.Helper()
	for _, suffix := range []string{"", "-wal", "-shm"} {
		os.Remove(to + suffix)
		b, err := os.ReadFile(from + suffix)
		if err != nil {
			continue
		}
		if err := os.WriteFile(to+suffix, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRestoredOlderDatabaseRefused: backing up, redeeming, then restoring
// the backup (same database identity) does not make the redeemed grant
// redeem again. The data directory's high-water mark is ahead of the
// restored chain, so serve refuses to start, naming both positions; an
// admin accepts the rollback on purpose (audited), after which every grant
// issued before that moment is refused and new grants work.
func TestRestoredOlderDatabaseRefused(t *testing.T) {
	ctx := context.Background()
	data := t.TempDir()
	a := rollbackApp(t, data)
	testkit.SeedUsers(t, a.db.accounts, account.RoleOperator, "olivia")
	testkit.SeedUsers(t, a.db.accounts, account.RoleAdmin, "adam")
	c := approvedRefund(t, a, "INV-1")
	a.Close()
	backup := t.TempDir() + "/backup.db"
	copyDB(t, dbPath(data), backup)

	a = rollbackApp(t, data)
	if r := redeemOf(t, a, c); !r.Accepted {
		t.Fatalf("first redemption: %s", r.Reason)
	}
	a.Close()

	copyDB(t, backup, dbPath(data))
	_, err := openApp(data, "", rollbackTools, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil {
		t.Fatal("serve started on a database restored from before a redemption")
	}
	for _, want := range []string{"behind this data directory's high-water mark", "the database ends at entry", "this data directory recorded entry", "accept-rollback"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q lacks %q", err, want)
		}
	}

	// Only an enabled admin may accept it.
	if code, _, errs := userRun(t, "", "audit", "accept-rollback", "--as", "olivia", "--data", data); code != 1 || !strings.Contains(errs, "not an enabled admin") {
		t.Errorf("accept-rollback by an operator = %d: %s", code, errs)
	}
	code, out, errs := userRun(t, "", "audit", "accept-rollback", "--as", "adam", "--data", data)
	if code != 0 || !strings.Contains(out, "accepted") {
		t.Fatalf("accept-rollback = %d: %s %s", code, out, errs)
	}
	if code, _, errs := userRun(t, "", "audit", "accept-rollback", "--as", "adam", "--data", data); code != 1 || !strings.Contains(errs, "no rollback to accept") {
		t.Errorf("a second accept-rollback = %d: %s", code, errs)
	}
	accepted := time.Now()

	a = rollbackApp(t, data)
	defer a.Close()
	if r := redeemOf(t, a, c); r.Accepted || r.Reason != "revoked" {
		t.Errorf("the grant redeemed before the backup was restored: accepted=%v reason %q, want revoked", r.Accepted, r.Reason)
	}
	var n int
	if err := a.db.storage.(*db.DB).SQL().QueryRowContext(ctx, `SELECT COUNT(*) FROM audit WHERE kind = 'rollback_accepted' AND principal = 'adam'`).Scan(&n); err != nil || n != 1 {
		t.Errorf("rollback_accepted entries = %d, %v; want 1", n, err)
	}
	// Grants issue with second precision: one issued in a later second works.
	for time.Now().Unix() <= accepted.Unix() {
		time.Sleep(20 * time.Millisecond)
	}
	fresh := approvedRefund(t, a, "INV-2")
	if r := redeemOf(t, a, fresh); !r.Accepted {
		t.Errorf("a grant issued after the rollback was accepted: %s", r.Reason)
	}
}
