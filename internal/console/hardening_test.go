package console

import (
	"crypto/ed25519"
	"io"
	"net/http"
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
	e := newConsoleEnv(t, func(c *Config) { c.PublicURL = "https://approvals.example.com" })
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
	e2 := newConsoleEnvWith(t, func(c *envConfig) { c.AllowedHosts = []string{"countersign.internal"} })
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
	e := newConsoleEnv(t, func(c *Config) { c.PublicURL = "https://approvals.example.com" })
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

// TestHistoryAuditExportHeaderSigned: the console's audit download carries
// a header signed with the data directory's audit key.
func TestHistoryAuditExportHeaderSigned(t *testing.T) {
	signer := audit.NewSigner(ed25519.NewKeyFromSeed(make([]byte, 32)))
	e := newConsoleEnvWith(t, func(c *envConfig) { c.AuditSigner = signer })
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
