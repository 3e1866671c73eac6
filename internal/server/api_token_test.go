package server

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/audit"
)

// A token revoked while the console runs is refused on its next request,
// on every route, whatever that request is: a submission, the same one
// again, a malformed or invalid one, a redemption, a malformed one, a
// read. Each token made a submission before it was revoked. Nothing the
// refused requests carried is written: the grant still redeems, and the
// call is new for another token of the agent.
func TestRevokedTokenRefusedOnItsNextRequest(t *testing.T) {
	st := startAPIStack(t)
	accounts := accountsOf(st.db)
	first := st.token("agent:billing-bot", "payments-host")
	r := st.submit(first, refundBody, http.StatusCreated)
	id, digest := r.str("id"), r.str("digest")
	mustApprove(t, st, "alice", id, digest)
	grant := st.do(http.MethodGet, "/api/v1/calls/"+id, first, nil).str("grant")
	const newCall = `{"tool":"payments.refund","target":"invoice:INV-2","args":{"amount_minor":1,"currency":"USD","reason_code":"duplicate"}}`

	for i, tc := range []struct {
		name, method, path string
		body               []byte
	}{
		{"a submission", http.MethodPost, "/api/v1/calls", []byte(newCall)},
		{"the same submission", http.MethodPost, "/api/v1/calls", []byte(refundBody)},
		{"a malformed submission", http.MethodPost, "/api/v1/calls", []byte(`{"tool":`)},
		{"an invalid submission", http.MethodPost, "/api/v1/calls", []byte(`{"tool":"payments.refund","target":"invoice:INV-3","args":{}}`)},
		{"the redemption", http.MethodPost, "/api/v1/redeem", redeemBody(grant, refundCall)},
		{"a malformed redemption", http.MethodPost, "/api/v1/redeem", redeemBody(grant, `{"tool":"payments.refund"}`)},
		{"a read", http.MethodGet, "/api/v1/calls/" + id, nil},
	} {
		tok, secret, err := accounts.CreateToken(context.Background(), "agent:billing-bot", "payments-host", "", "test", audit.ChannelCLI)
		if err != nil {
			t.Fatal(err)
		}
		st.submit(secret, `{"tool":"payments.refund","target":"invoice:INV-`+strconv.Itoa(900+i)+`","args":{"amount_minor":1,"currency":"USD","reason_code":"duplicate"}}`, http.StatusCreated)
		if err := accounts.RevokeToken(context.Background(), tok.ID, "admin", audit.ChannelCLI); err != nil {
			t.Fatal(err)
		}
		got := st.do(tc.method, tc.path, secret, tc.body)
		if got.Status != http.StatusUnauthorized || got.errorCode() != "unauthorized" {
			t.Errorf("%s with a revoked token = %d %s, want 401 unauthorized", tc.name, got.Status, got.Raw)
		}
	}
	other := st.token("agent:billing-bot", "payments-host")
	st.submit(other, newCall, http.StatusCreated)
	if red := st.do(http.MethodPost, "/api/v1/redeem", other, redeemBody(grant, refundCall)); red.str("decision") != "accepted" {
		t.Errorf("the grant redeemed with another token of the agent = %d %s, want accepted", red.Status, red.Raw)
	}
}

// Responses are counted by status in /metrics, a wrong token's 401s on
// their own, so that a run of guesses shows without reading the log.
func TestResponsesCountedByStatus(t *testing.T) {
	st := startAPIStack(t)
	for range 3 {
		if r := st.do(http.MethodGet, "/api/v1/calls/call_x", "cst_wrong", nil); r.Status != http.StatusUnauthorized {
			t.Fatalf("a wrong token = %d", r.Status)
		}
	}
	st.do(http.MethodGet, "/healthz", "", nil)
	m := string(st.do(http.MethodGet, "/metrics", "", nil).Raw)
	for _, want := range []string{`countersign_http_responses_total{status="401"} 3`, `countersign_http_responses_total{status="2xx"}`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
