package server

import (
	"crypto/ed25519"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/audit"
)

// requestHost sends a GET with the given Host header and returns the
// response's status and headers.
func requestHost(t *testing.T, base, path, host string) (int, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+path, nil)
	req.Host = host
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header
}

// TestHostCheckDNSRebinding: a request whose Host is a name the console does
// not answer for (an attacker's name rebound to the console's address) is
// refused on every route; the public URL's name, IP literals and localhost
// are served.
func TestHostCheckDNSRebinding(t *testing.T) {
	e := newConsoleEnv(t, func(c *ConsoleConfig) { c.PublicURL = "https://approvals.example.com" })
	port := e.url[strings.LastIndex(e.url, ":")+1:]
	for _, path := range []string{"/", "/login", "/api/v1/keys", "/api/v1/calls/x", "/ws", "/healthz", "/metrics", "/history"} {
		for _, host := range []string{"evil.example:" + port, "rebind.attacker.test", "approvals.example.com.evil.test",
			"approvals.example.com.", "localhost.evil.test", "127.0.0.1.nip.io", "xapprovals.example.com"} {
			if got, _ := requestHost(t, e.url, path, host); got != http.StatusMisdirectedRequest {
				t.Errorf("GET %s with Host %s = %d, want 421", path, host, got)
			}
		}
	}
	for _, host := range []string{"approvals.example.com", "APPROVALS.example.com", "127.0.0.1:" + port, "localhost:" + port, "[::1]:" + port} {
		if got, _ := requestHost(t, e.url, "/login", host); got != http.StatusOK {
			t.Errorf("GET /login with Host %s = %d, want 200", host, got)
		}
	}
	// A name added with AllowedHosts is served too.
	e2 := newConsoleEnvWith(t, func(c *Config) { c.AllowedHosts = []string{"countersign.internal"} })
	if got, _ := requestHost(t, e2.url, "/healthz", "countersign.internal:9000"); got != http.StatusOK {
		t.Errorf("an allowed host = %d, want 200", got)
	}
	if got, _ := requestHost(t, e2.url, "/healthz", "other.internal"); got != http.StatusMisdirectedRequest {
		t.Errorf("another host = %d, want 421", got)
	}
}

// TestHSTSWhenPublicURLHTTPS: Strict-Transport-Security is sent when, and
// only when, the public URL is https.
func TestHSTSWhenPublicURLHTTPS(t *testing.T) {
	e := newConsoleEnv(t, func(c *ConsoleConfig) { c.PublicURL = "https://approvals.example.com" })
	for _, path := range []string{"/login", "/api/v1/keys", "/nonexistent"} {
		if _, h := requestHost(t, e.url, path, "approvals.example.com"); h.Get("Strict-Transport-Security") != "max-age=31536000" {
			t.Errorf("%s over an https public URL: HSTS = %q", path, h.Get("Strict-Transport-Security"))
		}
	}
	plain := newConsoleEnv(t)
	if _, h := requestHost(t, plain.url, "/login", strings.TrimPrefix(plain.url, "http://")); h.Get("Strict-Transport-Security") != "" {
		t.Errorf("over an http public URL: HSTS = %q, want none", h.Get("Strict-Transport-Security"))
	}
}

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

// TestHistoryAuditExportHeaderSigned: the console's audit download carries
// a header signed with the data directory's audit key.
func TestHistoryAuditExportHeaderSigned(t *testing.T) {
	signer := audit.NewSigner(ed25519.NewKeyFromSeed(make([]byte, 32)))
	e := newConsoleEnvWith(t, func(c *Config) { c.AuditSigner = signer })
	addRoleUsers(e)
	b := e.browser()
	b.login("aude", rolePassword)
	p := b.get("/history/export/audit.jsonl")
	if p.status != http.StatusOK {
		t.Fatalf("export = %d", p.status)
	}
	rep, err := audit.VerifyExport(strings.NewReader(p.body), audit.VerifyOptions{TrustedKeys: []string{signer.PublicKey()}})
	if err != nil || rep.Header == nil || !rep.Header.Signed() || rep.Header.KID != signer.KID() || rep.Header.Count != rep.Count {
		t.Fatalf("the console's export: %+v, %v; want a header signed by %s", rep.Header, err, signer.KID())
	}
}
