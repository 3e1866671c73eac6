package main

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/db"
	"github.com/countersign/countersign/internal/mcp"
	"github.com/countersign/countersign/internal/testkit"
)

// TestMCPGatewayTakesAgentTokensOnly: the MCP gateway's authentication
// takes an agent token and refuses a person's operator token as
// unauthorized.
func TestMCPGatewayTakesAgentTokensOnly(t *testing.T) {
	d, err := db.Open(filepath.Join(t.TempDir(), "x.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	testkit.SeedUsers(t, d.Accounts(), account.RoleOperator, "alice")
	accounts := account.NewService(d.Accounts(), nil)
	ctx := context.Background()
	_, agent, err := accounts.CreateToken(ctx, "agent:desk", "demo", "", "admin", audit.ChannelCLI)
	if err != nil {
		t.Fatal(err)
	}
	_, op, err := accounts.CreateOperatorToken(ctx, account.OperatorTokenSpec{Person: "alice", Scope: account.ScopeDecide, Life: time.Hour}, audit.ChannelWeb)
	if err != nil {
		t.Fatal(err)
	}
	auth := mcpAgent(accounts)
	if a, err := auth(ctx, agent); err != nil || a.Principal.Actor != "agent:desk" {
		t.Errorf("an agent token: %+v %v", a, err)
	}
	if _, err := auth(ctx, op); !errors.Is(err, mcp.ErrUnauthorized) {
		t.Errorf("an operator token at the MCP gateway: %v, want ErrUnauthorized", err)
	}
}
