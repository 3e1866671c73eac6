// Package ssotest runs an in-process OpenID provider (mockoidc) on
// 127.0.0.1 for tests of single sign-on: it speaks the real protocol
// (discovery, authorization code with PKCE, token endpoint, JWKS, signed ID
// tokens), and hands out the users queued on it, one per login.
package ssotest

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/oauth2-proxy/mockoidc"
)

// Provider is a running in-process OpenID provider.
type Provider struct {
	*mockoidc.MockOIDC
	// EndSession, when set, is advertised as the end_session_endpoint
	// (RP-initiated logout).
	EndSession string
	// JWKS, when set, replaces the key set the provider serves.
	JWKS func() []byte
}

// Start runs a provider until the test ends. opts run before it starts.
func Start(t testing.TB, opts ...func(*Provider)) *Provider {
	t.Helper()
	m, err := mockoidc.NewServer(nil)
	if err != nil {
		t.Fatal(err)
	}
	p := &Provider{MockOIDC: m}
	for _, o := range opts {
		o(p)
	}
	// mockoidc keeps its sessions in a plain map; one request at a time
	// keeps it (and the race detector) happy.
	var mu sync.Mutex
	if err := m.AddMiddleware(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case r.URL.Path == mockoidc.DiscoveryEndpoint && p.EndSession != "":
				rec := httptest.NewRecorder()
				next.ServeHTTP(rec, r)
				var doc map[string]any
				if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
					http.Error(w, err.Error(), 500)
					return
				}
				doc["end_session_endpoint"] = p.EndSession
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(doc)
			case r.URL.Path == mockoidc.JWKSEndpoint && p.JWKS != nil:
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write(p.JWKS())
			default:
				next.ServeHTTP(w, r)
			}
		})
	}); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ln, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Shutdown() })
	return p
}

// User queues the identity the next login receives.
func (p *Provider) User(sub, username, email string, groups ...string) {
	p.QueueUser(&mockoidc.MockUser{Subject: sub, PreferredUsername: username, Email: email, EmailVerified: true, Groups: groups})
}

// SecretFile writes the client secret to a file only the owner reads, for
// --oidc-client-secret-file.
func (p *Provider) SecretFile(t testing.TB) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "oidc-client-secret")
	if err := os.WriteFile(f, []byte(p.ClientSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}
