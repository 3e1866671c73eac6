package server

import (
	"net/http"
	"testing"
)

// TestCallsBelongToTheirToken: over HTTP, another token of the same actor
// (one for another audience included, as a desktop MCP client holds) is
// answered 404 for the call, its long-poll, cancel, heartbeat and outcome;
// the identical envelope it submits is a new call, never the first
// token's with its grant; and the executor's outcome lands after the
// other token tried.
func TestCallsBelongToTheirToken(t *testing.T) {
	st := startAPIStack(t)
	agent := st.token("agent:billing-bot", "payments-host")
	sibling := st.token("agent:billing-bot", "payments-host")
	desktop := st.token("agent:billing-bot", "desktop")

	r := st.submit(agent, refundBody, http.StatusCreated)
	id, digest := r.str("id"), r.str("digest")
	mustApprove(t, st, "alice", id, digest)
	for name, tok := range map[string]string{"sibling": sibling, "desktop": desktop} {
		for _, req := range []struct{ method, path string }{
			{http.MethodGet, "/api/v1/calls/" + id},
			{http.MethodGet, "/api/v1/calls/" + id + "?wait=1s"},
			{http.MethodDelete, "/api/v1/calls/" + id},
		} {
			if got := st.do(req.method, req.path, tok, nil); got.Status != http.StatusNotFound || got.errorCode() != "not_found" {
				t.Errorf("%s %s by the %s token = %d %s, want 404 not_found", req.method, req.path, name, got.Status, got.Raw)
			}
		}
	}
	// The sibling's identical envelope is a call of its own, with no grant.
	twin := st.submit(sibling, refundBody, http.StatusCreated)
	if twin.str("id") == id || twin.str("grant") != "" || twin.str("status") != "pending" {
		t.Fatalf("the sibling's identical envelope = %s, want a new pending call", twin.Raw)
	}
	// The first token finds its own approved call again, grant and all.
	again := st.submit(agent, refundBody, http.StatusOK)
	if again.str("id") != id || again.str("grant") == "" {
		t.Fatalf("the first token resubmitting = %s, want its approved call %s", again.Raw, id)
	}
	red := st.do(http.MethodPost, "/api/v1/redeem", agent, redeemBody(again.str("grant"), refundCall))
	if red.Status != http.StatusOK || red.str("decision") != "accepted" {
		t.Fatalf("redeem = %d %s", red.Status, red.Raw)
	}
	outcome := []byte(`{"status":"failed","detail":"not mine"}`)
	for name, tok := range map[string]string{"sibling": sibling, "desktop": desktop} {
		if got := st.do(http.MethodPost, "/api/v1/calls/"+id+"/outcome", tok, outcome); got.Status != http.StatusNotFound {
			t.Errorf("outcome by the %s token = %d %s, want 404", name, got.Status, got.Raw)
		}
		if got := st.do(http.MethodPost, "/api/v1/calls/"+id+"/heartbeat", tok, nil); got.Status != http.StatusNotFound {
			t.Errorf("heartbeat by the %s token = %d %s, want 404", name, got.Status, got.Raw)
		}
	}
	done := st.do(http.MethodPost, "/api/v1/calls/"+id+"/outcome", agent, []byte(`{"status":"succeeded"}`))
	if done.Status != http.StatusOK {
		t.Fatalf("the executor's outcome after the others tried = %d %s, want 200", done.Status, done.Raw)
	}
}
