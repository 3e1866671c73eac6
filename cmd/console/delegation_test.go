package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/control"
	"github.com/countersign/countersign/internal/db"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/testkit"
)

// TestDelegationCommands: console delegation lists the delegations in
// force (of one person, or everyone's) and ends one in the name of one of
// its people, through the control socket when a server runs and on the
// database when none does; a third person may not end it.
func TestDelegationCommands(t *testing.T) {
	data := t.TempDir()
	d, err := db.Open(dbPath(data))
	if err != nil {
		t.Fatal(err)
	}
	testkit.SeedUsers(t, d.Accounts(), account.RoleOperator, "alice", "bob", "carol")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	q := queue.NewService(queue.Config{Store: d.Store(), Logger: log})
	ctx := context.Background()
	give := func(from, to string) *queue.Delegation {
		dl, err := q.GiveDelegation(ctx, queue.DelegationInput{By: from, Channel: audit.ChannelWeb, Delegator: from, Delegate: to,
			Until: time.Now().Add(48 * time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		return dl
	}
	ab, cb := give("alice", "bob"), give("carol", "bob")

	// Through the socket of a running server (a directory with no database:
	// only the socket can answer).
	served := t.TempDir()
	ln, err := control.Listen(controlPath(served))
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); control.Serve(sctx, ln, q, log) }()
	code, out, errs := userRun(t, "", "delegation", "list", "--person", "alice", "--data", served)
	if code != 0 || !strings.Contains(out, ab.ID+"  bob approves for alice") || strings.Contains(out, cb.ID) {
		t.Errorf("delegation list --person alice = %d %q %q", code, out, errs)
	}
	code, _, errs = userRun(t, "", "delegation", "end", ab.ID, "--as", "carol", "--data", served)
	if code != 1 || !strings.Contains(errs, "may_not_delegate") {
		t.Errorf("carol ending alice's delegation = %d %q, want may_not_delegate", code, errs)
	}
	code, out, errs = userRun(t, "", "delegation", "end", ab.ID, "--as", "alice", "--data", served)
	if code != 0 || !strings.Contains(out, "Ended delegation "+ab.ID) {
		t.Errorf("delegation end = %d %q %q", code, out, errs)
	}
	stop()
	<-done
	d.Close()

	// On the database, with no server.
	code, out, errs = userRun(t, "", "delegation", "list", "--data", data)
	if code != 0 || strings.Contains(out, ab.ID) || !strings.Contains(out, cb.ID+"  bob approves for carol") {
		t.Errorf("delegation list after the end = %d %q %q, want carol's only", code, out, errs)
	}
	code, out, _ = userRun(t, "", "delegation", "list", "--all", "--data", data)
	if code != 0 || !strings.Contains(out, ab.ID) || !strings.Contains(out, "ended by alice") {
		t.Errorf("delegation list --all = %d %q, want alice's ended", code, out)
	}
	code, _, errs = userRun(t, "", "delegation", "end", cb.ID, "--as", "bob", "--data", data)
	if code != 0 {
		t.Errorf("bob ending carol's delegation on the database = %d %q", code, errs)
	}
	code, _, errs = userRun(t, "", "delegation", "end", cb.ID, "--as", "bob", "--data", data)
	if code != 1 || !strings.Contains(errs, "delegation_ended") {
		t.Errorf("ending it again = %d %q, want delegation_ended", code, errs)
	}
}
