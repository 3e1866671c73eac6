package server

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBearerSchemeCaseInsensitive: the auth scheme is matched without
// regard to case (RFC 7235), the secret exactly.
func TestBearerSchemeCaseInsensitive(t *testing.T) {
	st := startAPIStack(t)
	agent := st.token("agent:billing-bot", "payments-host")
	id := st.submit(agent, refundBody, http.StatusCreated).str("id")
	for _, h := range []string{"bearer " + agent, "BEARER " + agent, "BeArEr   " + agent, "  Bearer " + agent + " "} {
		if got := authGet(t, st, "/api/v1/calls/"+id, h); got != http.StatusOK {
			t.Errorf("Authorization %q = %d, want 200", h[:8], got)
		}
	}
	for _, h := range []string{"Basic " + agent, "Bearer" + agent, "Bearer ", "Bearer " + strings.ToUpper(agent), agent} {
		if got := authGet(t, st, "/api/v1/calls/"+id, h); got != http.StatusUnauthorized {
			t.Errorf("Authorization %q = %d, want 401", h[:min(8, len(h))], got)
		}
	}
}

func authGet(t *testing.T, st *apiStack, path, authorization string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, st.url+path, nil)
	req.Header.Set("Authorization", authorization)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestNoStoreOnGrantResponses: every agent API response that can carry a
// grant says Cache-Control: no-store, so no proxy or client cache keeps it.
func TestNoStoreOnGrantResponses(t *testing.T) {
	st := startAPIStack(t)
	agent := st.token("agent:billing-bot", "payments-host")
	r := st.submit(agent, refundBody, http.StatusCreated)
	mustApprove(t, st, "alice", r.str("id"), r.str("digest"))
	type probe struct{ method, path, body string }
	for _, p := range []probe{
		{http.MethodGet, "/api/v1/calls/" + r.str("id"), ""},
		{http.MethodGet, "/api/v1/calls/" + r.str("id") + "?wait=1s", ""},
		{http.MethodPost, "/api/v1/calls", refundBody}, // the approved call again, grant included
		{http.MethodPost, "/api/v1/redeem", `{"grant":"x","call":` + refundCall + `}`},
		{http.MethodGet, "/api/v1/calls/call_unknown", ""},
	} {
		var body io.Reader
		if p.body != "" {
			body = strings.NewReader(p.body)
		}
		req, _ := http.NewRequest(p.method, st.url+p.path, body)
		req.Header.Set("Authorization", "Bearer "+agent)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if got := resp.Header.Get("Cache-Control"); got != "no-store" {
			t.Errorf("%s %s (%d): Cache-Control = %q, want no-store", p.method, p.path, resp.StatusCode, got)
		}
		if p.method == http.MethodPost && p.path == "/api/v1/calls" && !strings.Contains(string(raw), `"grant"`) {
			t.Errorf("resubmitting an approved call did not return its grant: %s", raw)
		}
	}
}

// TestHealthzFailsWhenDatabaseGone: /healthz answers 503 once the database
// file is deleted or replaced, although pooled connections still answer.
func TestHealthzFailsWhenDatabaseGone(t *testing.T) {
	for _, how := range []string{"deleted", "replaced"} {
		t.Run(how, func(t *testing.T) {
			st := startAPIStack(t)
			if r := st.do(http.MethodGet, "/healthz", "", nil); r.Status != http.StatusOK {
				t.Fatalf("healthz = %d %s", r.Status, r.Raw)
			}
			path := filepath.Join(st.dir, "countersign.db")
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if how == "replaced" {
				if err := os.WriteFile(path, nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if r := st.do(http.MethodGet, "/healthz", "", nil); r.Status != http.StatusServiceUnavailable {
				t.Errorf("healthz with the database %s = %d %s, want 503", how, r.Status, r.Raw)
			}
		})
	}
}
