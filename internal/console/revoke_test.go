package console

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/answer"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/wire"
)

// TestRevokeGrantFromCallPage: an operator revokes an approved call's
// unredeemed grant from the call page, with a reason; the call then reads
// revoked (page and API, without its grant), its redemption is refused as
// revoked and consumes nothing, the revocation is audited, and neither a
// second revocation, one of a redeemed call, nor one by an auditor works.
func TestRevokeGrantFromCallPage(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	ctx := context.Background()
	call := e.submit("agent:billing-bot", "payments-host", conRefundBody)
	approved, err := e.q.Approve(ctx, "adam", audit.ChannelCLI, call.ID, call.Digest)
	if err != nil {
		t.Fatal(err)
	}
	b := e.browser()
	b.login("olivia", rolePassword)
	p := b.get("/calls/" + call.ID)
	if p.find("revoke-form").Length() != 1 {
		t.Fatal("the page of an approved, unredeemed call offers no revoke form")
	}
	tok := b.csrf()
	if p := b.post("/calls/"+call.ID+"/revoke", url.Values{"csrf": {tok}, "reason": {" "}}); p.status != http.StatusBadRequest {
		t.Errorf("revoke without a reason = %d, want 400", p.status)
	}
	if p := b.post("/calls/"+call.ID+"/revoke", url.Values{"csrf": {tok}, "reason": {"wrong customer"}}); p.status != http.StatusSeeOther {
		t.Fatalf("revoke = %d", p.status)
	}
	p = b.get("/calls/" + call.ID)
	if got := p.find("status-value").Text(); got != "revoked" || !strings.Contains(p.find("revoked-by").Text(), "olivia") ||
		p.find("revoke-reason-shown").Text() != "wrong customer" || p.find("revoke-form").Length() != 0 {
		t.Errorf("after revoking: status %q, by %q, reason %q", got, p.find("revoked-by").Text(), p.find("revoke-reason-shown").Text())
	}
	got, err := e.q.Call(ctx, call.ID)
	if err != nil {
		t.Fatal(err)
	}
	view, _ := json.Marshal(mustStored(t, got))
	if !strings.Contains(string(view), `"status":"revoked"`) || strings.Contains(string(view), `"grant"`) || !strings.Contains(string(view), "wrong customer") {
		t.Errorf("API view after revoking: %s", view)
	}
	body, _ := json.Marshal(map[string]any{"grant": approved.Grant, "call": map[string]any{"tool": approved.Tool, "target": approved.Target, "args": approved.Args}})
	r, err := e.q.Redeem(ctx, queue.Principal{Actor: "agent:billing-bot", Audience: "payments-host"}, body)
	if err != nil || r.Accepted || r.Reason != "revoked" {
		t.Fatalf("redeem of a revoked grant: %v accepted=%v reason %q, want revoked", err, r != nil && r.Accepted, r.Reason)
	}
	var n int
	e.db.SQL().QueryRow(`SELECT COUNT(*) FROM redemptions`).Scan(&n)
	if n != 0 {
		t.Errorf("ledger rows = %d after a refused redemption", n)
	}
	e.db.SQL().QueryRow(`SELECT COUNT(*) FROM audit WHERE kind = 'revoked' AND call_id = ? AND principal = 'olivia'`, call.ID).Scan(&n)
	if n != 1 {
		t.Errorf("revoked entries = %d, want 1", n)
	}
	if p := b.post("/calls/"+call.ID+"/revoke", url.Values{"csrf": {tok}, "reason": {"again"}}); p.status != http.StatusConflict {
		t.Errorf("a second revocation = %d, want 409", p.status)
	}

	// A redeemed call's grant cannot be revoked, and auditors cannot revoke.
	other := e.submit("agent:billing-bot", "payments-host", strings.Replace(conRefundBody, "INV-1042", "INV-1043", 1))
	ok, _ := e.q.Approve(ctx, "adam", audit.ChannelCLI, other.ID, other.Digest)
	body, _ = json.Marshal(map[string]any{"grant": ok.Grant, "call": map[string]any{"tool": ok.Tool, "target": ok.Target, "args": ok.Args}})
	if r, err := e.q.Redeem(ctx, queue.Principal{Actor: "agent:billing-bot", Audience: "payments-host"}, body); err != nil || !r.Accepted {
		t.Fatalf("redeem: %v", err)
	}
	if p := b.post("/calls/"+other.ID+"/revoke", url.Values{"csrf": {tok}, "reason": {"late"}}); p.status != http.StatusConflict {
		t.Errorf("revoking a redeemed call = %d, want 409", p.status)
	}
	aud := e.browser()
	aud.login("aude", rolePassword)
	if p := aud.post("/calls/"+other.ID+"/revoke", url.Values{"csrf": {aud.csrf()}, "reason": {"x"}}); p.status != http.StatusForbidden {
		t.Errorf("revoke by an auditor = %d, want 403", p.status)
	}
}

// mustStored is the call object as operators' tools see it.
func mustStored(t testing.TB, c *queue.Call) wire.Call {
	t.Helper()
	v, err := answer.CallAsStored(c, c.CreatedAt)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
