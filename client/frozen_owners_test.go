package client_test

import (
	"context"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/client"
	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
)

// An approved call whose actor an operator froze before it was redeemed:
// the console answers 503 in the redemption's own shape, which Redeem
// returns as an *Error with code frozen and the freeze's reason (not
// unexpected_response, and not a Redemption); nothing was consumed.
func TestRedeemFrozen(t *testing.T) {
	tc := startConsole(t, t.TempDir(), "127.0.0.1:0")
	const actor = "agent:frozen-bot"
	c := client.New(tc.url, tc.token(actor, "payments-host"))
	ctx := context.Background()
	approved := approvedRefund(t, tc, c)
	const reason = "incident 7: refunds on hold"
	if _, err := tc.queue.Freeze(ctx, "alice", "cli", "", actor, reason); err != nil {
		t.Fatalf("Freeze: %v", err)
	}
	res, err := c.Redeem(ctx, approved.Grant, approved.Spec())
	if res != nil {
		t.Fatalf("Redeem while frozen: %+v, want no redemption", res)
	}
	e, ok := client.AsError(err)
	if !ok {
		t.Fatalf("Redeem while frozen: %v, want a *client.Error", err)
	}
	if e.Code != client.CodeFrozen || e.Status != http.StatusServiceUnavailable || e.Reason != reason || e.CallID != approved.ID {
		t.Errorf("Redeem while frozen: Code=%q Status=%d Reason=%q CallID=%q; want %q 503 %q %s",
			e.Code, e.Status, e.Reason, e.CallID, client.CodeFrozen, reason, approved.ID)
	}
	if !strings.Contains(e.Message, "frozen") || !strings.Contains(e.Message, reason) {
		t.Errorf("Message=%q, want the console's sentence naming the freeze and its reason", e.Message)
	}
	if !client.IsCode(err, client.CodeFrozen) || len(e.Raw) == 0 {
		t.Errorf("IsCode(frozen)=%v Raw=%q", client.IsCode(err, client.CodeFrozen), e.Raw)
	}
	if got, err := c.Get(ctx, approved.ID); err != nil || got.Status != client.StatusApproved || got.Grant == "" {
		t.Errorf("after the frozen redemption: %+v, %v; want still approved with its grant", got, err)
	}
}

// The call object's owners and approvals.given, as a real console answers
// them, decode into Call.Owners and Approvals.Given.
func TestOwnersAndApprovalsGiven(t *testing.T) {
	tc := startConsole(t, t.TempDir(), "127.0.0.1:0")
	_, secret, err := accountsOf(tc.db).CreateTokenWith(context.Background(), account.TokenSpec{
		Actor: "agent:owned-bot", Audience: "payments-host", Owners: []string{"olga", "team:payments"}}, "test", audit.ChannelCLI)
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(tc.url, secret)
	ctx := context.Background()
	call, err := c.Submit(ctx, refund(1299))
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	if want := []string{"olga", "team:payments"}; !reflect.DeepEqual(call.Owners, want) {
		t.Errorf("Submit: Owners=%q, want %q", call.Owners, want)
	}
	if len(call.Approvals.Given) != 0 {
		t.Errorf("Submit: Approvals.Given=%+v, want none yet", call.Approvals.Given)
	}
	before := time.Now().Add(-time.Minute)
	if _, err := tc.queue.Approve(ctx, "alice", "cli", call.ID, call.Digest); err != nil {
		t.Fatalf("Approve: %v", err)
	}
	got, err := c.Get(ctx, call.ID)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if want := []string{"olga", "team:payments"}; !reflect.DeepEqual(got.Owners, want) {
		t.Errorf("Get: Owners=%q, want %q", got.Owners, want)
	}
	given := got.Approvals.Given
	if len(given) != 1 || given[0].By != "alice" || given[0].Channel != "cli" || given[0].Method != client.MethodCommand ||
		given[0].At.Before(before) || given[0].At.After(time.Now().Add(time.Minute)) {
		t.Errorf("Get: Approvals.Given=%+v, want alice by command on cli, now (raw %s)", given, got.Raw)
	}
}

// An approved call whose grant an operator revoked before it was redeemed:
// Get returns status revoked with the revocation (who, why, when) in
// Call.Revocation, and redeeming the grant is refused (revoked).
func TestRevocation(t *testing.T) {
	tc := startConsole(t, t.TempDir(), "127.0.0.1:0")
	c := client.New(tc.url, tc.token("agent:revoked-bot", "payments-host"))
	ctx := context.Background()
	approved := approvedRefund(t, tc, c)
	if approved.Revocation != nil {
		t.Fatalf("Get: %+v; want no revocation", approved)
	}
	const reason = "wrong invoice: INV-2041 was refunded by hand"
	before := time.Now().Add(-time.Minute)
	if _, err := tc.queue.RevokeGrant(ctx, "alice", "web", approved.ID, reason); err != nil {
		t.Fatalf("RevokeGrant: %v", err)
	}
	got, err := c.Get(ctx, approved.ID)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	r := got.Revocation
	if got.Status != client.StatusRevoked || r == nil || r.By != "alice" || r.Reason != reason ||
		r.At.Before(before) || r.At.After(time.Now().Add(time.Minute)) {
		t.Fatalf("Get after the revocation: Status=%q Revocation=%+v, want revoked by alice, %q, now (raw %s)", got.Status, r, reason, got.Raw)
	}
	res, err := c.Redeem(ctx, approved.Grant, approved.Spec())
	if err != nil || res.Accepted || res.Reason != "revoked" {
		t.Errorf("Redeem the revoked grant: %+v, %v; want rejected, revoked", res, err)
	}
}

// approvedRefund submits a refund through c, approves it as alice, and
// returns the call as the agent then reads it: approved.
func approvedRefund(t *testing.T, tc *testConsole, c *client.Client) *client.Call {
	t.Helper()
	ctx := context.Background()
	call, err := c.Submit(ctx, refund(1299))
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	if _, err := tc.queue.Approve(ctx, "alice", "cli", call.ID, call.Digest); err != nil {
		t.Fatalf("Approve: %v", err)
	}
	approved, err := c.Get(ctx, call.ID)
	if err != nil || approved.Status != client.StatusApproved {
		t.Fatalf("Get: %+v, %v; want approved", approved, err)
	}
	return approved
}
