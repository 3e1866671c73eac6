package control

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/scope"
	"github.com/countersign/countersign/internal/testkit"
	"github.com/countersign/countersign/internal/testkit/sqlitekit"
	"github.com/countersign/countersign/internal/tools"
)

const allowanceTools = `tools:
  payments.refund:
    description: Refund an invoice
    audience: payments-host
    target: '^invoice:INV-[0-9]+$'
    args:
      type: object
      additionalProperties: false
      required: [amount_minor, currency]
      properties:
        amount_minor: {type: integer, minimum: 1, maximum: 500000}
        currency: {type: string, enum: [USD, EUR]}
    allowance: {max_uses: 10, max_for: 1h, vary: [target]}
`

// TestRevokeAllowanceOverTheSocket: console allowance revoke hands the
// revocation to the running server's queue through the control socket,
// which answers with the allowance as it now stands, or the refusal in the
// API's shape; and the grant the allowance minted is revoked with it.
func TestRevokeAllowanceOverTheSocket(t *testing.T) {
	reg, err := tools.Parse([]byte(allowanceTools))
	if err != nil {
		t.Fatal(err)
	}
	k := sqlitekit.NewQueue(t, sqlitekit.WithTools(reg))
	testkit.SeedUsers(t, k.DB.Accounts(), account.RoleOperator, "alice", "bob")
	testkit.SeedUsers(t, k.DB.Accounts(), account.RoleAuditor, "aud")
	ctx := context.Background()
	payer := queue.Principal{Actor: "agent:billing", Audience: "payments-host"}
	base, _, err := k.Service.Submit(ctx, payer, []byte(`{"tool":"payments.refund","target":"invoice:INV-1","args":{"amount_minor":100,"currency":"EUR"}}`))
	if err != nil {
		t.Fatal(err)
	}
	tool, _ := reg.Tool("payments.refund")
	ch := scope.Choices{Uses: 3, Until: k.Clock.Now().Add(time.Hour), TargetPrefix: "invoice:INV-"}
	sc, err := scope.Materialise(scope.Call{Actor: base.Actor, Audience: base.Audience, Tool: base.Tool, Target: base.Target,
		ToolDigest: base.ToolDigest, Args: base.Args}, tool, ch, k.Clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	a, _, err := k.Service.GiveAllowance(ctx, queue.GiveInput{Operator: "alice", Channel: audit.ChannelWeb, CallID: base.ID,
		Digest: base.Digest, ScopeDigest: sc.Digest(), Choices: ch})
	if err != nil {
		t.Fatal(err)
	}
	covered, _, err := k.Service.Submit(ctx, payer, []byte(`{"tool":"payments.refund","target":"invoice:INV-2","args":{"amount_minor":100,"currency":"EUR"}}`))
	if err != nil || covered.Status != queue.StatusApproved {
		t.Fatalf("covered call: %v, %v", covered, err)
	}

	sock := filepath.Join(t.TempDir(), "control.sock")
	ln, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- Serve(sctx, ln, k.Service, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	defer func() { stop(); <-done }()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
	post := func(req Request) (int, Response) {
		t.Helper()
		body, _ := json.Marshal(req)
		res, err := client.Post("http://control/v1/decide", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var out Response
		if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		return res.StatusCode, out
	}
	for _, r := range []struct {
		req    Request
		status int
		code   string
	}{
		{Request{Action: ActionRevokeAllowance, ID: a.ID, Operator: "aud", Reason: "stop"}, http.StatusForbidden, "not_a_decider"},
		{Request{Action: ActionRevokeAllowance, ID: a.ID, Operator: "bob"}, http.StatusBadRequest, "reason_required"},
		{Request{Action: ActionRevokeAllowance, ID: "alw_none", Operator: "bob", Reason: "stop"}, http.StatusNotFound, "allowance_not_found"},
	} {
		if status, resp := post(r.req); status != r.status || resp.Error == nil || resp.Error.Code != r.code || resp.Allowance != nil {
			t.Errorf("%+v: %d %+v, want %d %s", r.req, status, resp.Error, r.status, r.code)
		}
	}
	status, resp := post(Request{Action: ActionRevokeAllowance, ID: a.ID, Operator: "bob", Reason: "stop"})
	if status != http.StatusOK || resp.Error != nil || resp.Allowance == nil || resp.Allowance.State != queue.EndRevoked ||
		resp.Allowance.EndedBy != "bob" || resp.Allowance.Used != 1 {
		t.Fatalf("revoke: %d %+v %+v", status, resp.Error, resp.Allowance)
	}
	if c, err := k.Service.Call(ctx, covered.ID); err != nil || c.Revoked == nil || c.Revoked.Channel != audit.ChannelCLI {
		t.Fatalf("the covered call's grant after the revocation: %+v, %v", c.Revoked, err)
	}
	if status, resp := post(Request{Action: ActionRevokeAllowance, ID: a.ID, Operator: "bob", Reason: "again"}); status != http.StatusConflict ||
		resp.Error == nil || resp.Error.Code != "allowance_ended" {
		t.Errorf("revoked twice: %d %+v, want 409 allowance_ended", status, resp.Error)
	}
}
