package client_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/countersign/countersign/client"
	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/db"
	"github.com/countersign/countersign/internal/grant"
	"github.com/countersign/countersign/internal/present"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/server"
	"github.com/countersign/countersign/internal/testkit"
	"github.com/countersign/countersign/internal/tools"
)

// TestOperatorClient: the Go client's operator API lists the queue with
// listing tokens, shows a call, approves it as the token's person
// (recorded command over api) and denies another; a read token cannot
// decide, and an agent token is refused, each with its error code.
func TestOperatorClient(t *testing.T) {
	dir := t.TempDir()
	d, err := db.Open(filepath.Join(dir, "x.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	keys, err := grant.OpenKeyring(filepath.Join(dir, "keys"), "countersign", time.Now)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.Load("../examples/tools.yaml")
	if err != nil {
		t.Fatal(err)
	}
	shown, err := present.NewKey([]byte("the operator client's present key"))
	if err != nil {
		t.Fatal(err)
	}
	testkit.SeedUsers(t, d.Accounts(), account.RoleOperator, "alice")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	q := queue.NewService(queue.Config{Store: d.Store(), Tools: reg, Signer: keys, Logger: log, Presentations: shown})
	accounts := account.NewService(d.Accounts(), nil)
	srv, err := server.New(server.Config{Queue: q, Accounts: accounts, Audit: d, Ping: d.Ping, Keys: keys, Logger: log, OperatorAPI: true})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	defer func() { cancel(); q.Shutdown(); <-done }()
	url := "http://" + ln.Addr().String()

	_, agentSecret, err := accounts.CreateToken(ctx, "agent:billing-bot", "payments-host", "", "test", audit.ChannelCLI)
	if err != nil {
		t.Fatal(err)
	}
	token := func(scope string) string {
		_, secret, err := accounts.CreateOperatorToken(ctx, account.OperatorTokenSpec{Person: "alice", Scope: scope, Life: time.Hour}, audit.ChannelWeb)
		if err != nil {
			t.Fatal(err)
		}
		return secret
	}
	agent := client.New(url, agentSecret)
	refund := func(invoice string) *client.Call {
		c, err := agent.Submit(ctx, client.Proposal{Tool: "payments.refund", Target: "invoice:" + invoice,
			Args: map[string]any{"amount_minor": 1299, "currency": "USD", "reason_code": "duplicate"}})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	first, second := refund("INV-5001"), refund("INV-5002")

	reader, decider := client.NewOperator(url, token(account.ScopeRead)), client.NewOperator(url, token(account.ScopeDecide))
	listing, err := decider.Queue(ctx, "payments.refund")
	if err != nil || len(listing.Calls) != 2 {
		t.Fatalf("Queue: %+v %v", listing, err)
	}
	shownCall, err := reader.Call(ctx, first.ID)
	if err != nil || shownCall.Call.Digest != first.Digest || shownCall.Listing == "" {
		t.Fatalf("Call: %+v %v", shownCall, err)
	}
	if _, err := reader.Approve(ctx, shownCall, ""); !client.IsCode(err, "insufficient_scope") {
		t.Errorf("Approve with a read token: %v", err)
	}
	if _, err := client.NewOperator(url, agentSecret).Queue(ctx, ""); !client.IsCode(err, "agent_token_refused") {
		t.Errorf("Queue with an agent token: %v", err)
	}
	var mine *client.OperatorCall
	for i := range listing.Calls {
		if listing.Calls[i].Call.ID == first.ID {
			mine = &listing.Calls[i]
		}
	}
	approved, err := decider.Approve(ctx, mine, "checked from a script")
	if err != nil || approved.Call.Status != client.StatusApproved || approved.Call.Grant != "" {
		t.Fatalf("Approve: %+v %v", approved, err)
	}
	if g := approved.Call.Approvals.Given; len(g) != 1 || g[0].Channel != "api" || g[0].Method != "command" || g[0].Human != "unattested" {
		t.Errorf("the approval: %+v", g)
	}
	denied, err := decider.Deny(ctx, second.ID, "not this one")
	if err != nil || denied.Call.Status != client.StatusDenied {
		t.Errorf("Deny: %+v %v", denied, err)
	}
	var ce *client.Error
	if _, err := decider.Deny(ctx, second.ID, "again"); !errors.As(err, &ce) || ce.Code != "not_pending" {
		t.Errorf("Deny twice: %v", err)
	}
}
