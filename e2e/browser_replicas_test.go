package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/countersign/countersign/internal/pgtest"
	"github.com/countersign/countersign/internal/sso/ssotest"
)

// balancer is a load balancer in front of console replicas: a reverse
// proxy on 127.0.0.1 that sends a request to the replica route picks for
// its path (-1: the next one in turn), and counts where each went.
type balancer struct {
	url    string // http://localhost:PORT, the replicas' public URL
	ln     net.Listener
	route  func(path string) int
	turn   atomic.Int64
	mu     sync.Mutex
	served map[string]int // "PATH → replica N"
}

func newBalancer(t *testing.T, route func(path string) int) *balancer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return &balancer{url: fmt.Sprintf("http://localhost:%d", ln.Addr().(*net.TCPAddr).Port), ln: ln, route: route,
		served: map[string]int{}}
}

// serve proxies to the replicas from now on; the Host header is kept, as
// a load balancer keeps it.
func (b *balancer) serve(t *testing.T, backends []string) {
	t.Helper()
	var targets []*url.URL
	for _, s := range backends {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		targets = append(targets, u)
	}
	proxy := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		i := b.route(pr.In.URL.Path)
		if i < 0 {
			i = int(b.turn.Add(1)) % len(targets)
		}
		b.mu.Lock()
		b.served[fmt.Sprintf("%s %s → replica %d", pr.In.Method, pr.In.URL.Path, i)]++
		b.mu.Unlock()
		pr.SetURL(targets[i])
		pr.Out.Host = pr.In.Host
	}}
	srv := &http.Server{Handler: proxy}
	go srv.Serve(b.ln)
	t.Cleanup(func() { srv.Close() })
}

// count is how many requests for method and path went to replica i.
func (b *balancer) count(method, path string, i int) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.served[fmt.Sprintf("%s %s → replica %d", method, path, i)]
}

// TestBrowserIdentityAcrossReplicas runs the ceremonies whose state is
// kept between two requests through a load balancer that sends their two
// halves to different replicas on one PostgreSQL database: a single-sign-on
// login begun on A finishes on B, a passkey registered with the prompt
// from A is stored by B, and a passkey approval begun on B is recorded by
// A; each half taken once.
func TestBrowserIdentityAcrossReplicas(t *testing.T) {
	requireChromium(t)
	requirePostgres(t)
	idp := ssotest.Start(t)
	tools := filepath.Join(t.TempDir(), "tools.yaml")
	if err := os.WriteFile(tools, []byte(peopleTools), 0o600); err != nil {
		t.Fatal(err)
	}
	lb := newBalancer(t, func(path string) int {
		switch {
		case path == "/auth/oidc/login", path == "/account/passkeys/begin", strings.HasSuffix(path, "/passkey/finish"):
			return 0
		case path == "/auth/oidc/callback", path == "/account/passkeys/finish", strings.HasSuffix(path, "/passkey/begin"):
			return 1
		}
		return -1
	})
	r := startReplicasWith(t, pgtest.Database(t), 2, func(int) string { return tools },
		"--public-url", lb.url, "--oidc-issuer", idp.Issuer(), "--oidc-client-id", idp.ClientID,
		"--oidc-client-secret-file", idp.SecretFile(t), "--oidc-role-map", "approvers=operator", "--oidc-name", "Test IdP")
	lb.serve(t, []string{r.srv[0].url, r.srv[1].url})
	base := lb.url
	bank := newRawAgent(r.srv[0].url, r.token("agent:bank", "bank-host"))

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	b := startBrowser(t, ctx)

	t.Run("single sign-on begun on A finishes on B", func(t *testing.T) {
		w := b.window(t, "bob")
		idp.User("00u-bob", "bobby", "bob@example.com", "approvers")
		w.navigate(base + "/login")
		w.do("sign in through the provider", waitLong,
			chromedp.Click(testID("sso-login")),
			chromedp.WaitVisible(testID("whoami")),
		)
		if got := w.text(testID("whoami")); got != "bobby · operator" {
			t.Fatalf("whoami after single sign-on = %q", got)
		}
		if a, b := lb.count("GET", "/auth/oidc/login", 0), lb.count("GET", "/auth/oidc/callback", 1); a != 1 || b != 1 {
			t.Fatalf("the login began on A %d times and finished on B %d times, want once each", a, b)
		}
	})

	alice := login{name: "alice", password: "pw-alice-correct horse battery staple", role: "operator"}
	w := b.window(t, "alice")
	w.virtualAuthenticator()
	w.login(base, alice)

	t.Run("a passkey registered with A's prompt is stored by B", func(t *testing.T) {
		w := w.with(t)
		w.navigate(base + "/account")
		w.do("register a passkey", waitLong,
			chromedp.SendKeys(testID("passkey-new-name"), "virtual key"),
			chromedp.Click(testID("passkey-register")),
			chromedp.WaitVisible(testID("account-notice")),
		)
		if got := w.texts(testID("passkey-name")); len(got) != 1 || got[0] != "virtual key" {
			t.Fatalf("passkeys listed = %q, want the one registered", got)
		}
		if a, b := lb.count("POST", "/account/passkeys/begin", 0), lb.count("POST", "/account/passkeys/finish", 1); a != 1 || b != 1 {
			t.Fatalf("registration began on A %d times and finished on B %d times, want once each", a, b)
		}
	})

	t.Run("a passkey approval begun on B is recorded by A", func(t *testing.T) {
		w := w.with(t)
		sub, err := bank.submit(ctx, `{"tool":"funds.transfer","target":"account:1001","args":{"amount_minor":250000}}`)
		if err != nil || sub.status != http.StatusCreated {
			t.Fatalf("submit: %d %s %v", sub.status, sub.raw, err)
		}
		id := sub.str("id")
		w.navigate(base + "/calls/" + id)
		w.do("approve with the passkey", waitLong,
			chromedp.WaitEnabled(testID("approve-passkey")),
			chromedp.Click(testID("approve-passkey")),
			chromedp.WaitVisible(statusIs("approved")),
		)
		if how := strings.Join(strings.Fields(w.text(testID("approval-how"))), " "); how != "with a passkey (virtual key)" {
			t.Errorf("the approval says %q", how)
		}
		path := "/calls/" + id + "/passkey/"
		if b, a := lb.count("POST", path+"begin", 1), lb.count("POST", path+"finish", 0); b != 1 || a != 1 {
			t.Fatalf("the approval began on B %d times and finished on A %d times, want once each", b, a)
		}
		g, err := newRawAgent(r.srv[1].url, bank.token).do(ctx, http.MethodGet, "/api/v1/calls/"+id, nil)
		if err != nil || g.str("status") != "approved" || g.str("grant") == "" {
			t.Fatalf("the agent on B sees %d %s %v", g.status, g.raw, err)
		}
		if out := r.verify(); !strings.Contains(out, "passkeys: 1 approval signatures re-verified") {
			t.Errorf("audit verify:\n%s", out)
		}
	})
}

// TestBrowserPresenceAcrossReplicas: alice's browser on replica A and
// bob's on replica B open one call's page; each shows the other and never
// its own viewer; bob leaving is shown on alice's page; bob comes back and A
// is killed (SIGKILL): bob's page stops naming alice once A's presence has
// expired.
func TestBrowserPresenceAcrossReplicas(t *testing.T) {
	requireChromium(t)
	requirePostgres(t)
	r := startReplicas(t, pgtest.Database(t), 2)
	sub, err := newRawAgent(r.srv[0].url, r.token("agent:billing-bot", "payments-host")).
		submit(context.Background(), fmt.Sprintf(replicaRefund, 18))
	if err != nil || sub.status != http.StatusCreated {
		t.Fatalf("submit on A: %d %s %v", sub.status, sub.raw, err)
	}
	page := "/calls/" + sub.str("id")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b := startBrowser(t, ctx)
	alice, bob := b.window(t, "alice"), b.window(t, "bob")
	alice.login(r.srv[0].url, login{name: "alice", password: "pw-alice-correct horse battery staple", role: "operator"})
	bob.login(r.srv[1].url, login{name: "bob", password: "pw-bob-correct horse battery staple", role: "operator"})
	alice.navigate(r.srv[0].url + page)
	alice.waitLive()
	bob.navigate(r.srv[1].url + page)
	bob.waitLive()
	alice.do("alice on A sees bob on B", waitLong, chromedp.WaitVisible(chromedp.CSS(`#presence li[data-viewer="bob"]`)))
	bob.do("bob on B sees alice on A", waitLong, chromedp.WaitVisible(chromedp.CSS(`#presence li[data-viewer="alice"]`)))
	for _, w := range []struct {
		tab  *tab
		name string
	}{{alice, "alice"}, {bob, "bob"}} {
		if n := eval[int](w.tab, `document.querySelectorAll('#presence li[data-viewer="`+w.name+`"]').length`); n != 0 {
			t.Errorf("%s is told that she or he is viewing", w.name)
		}
	}
	bob.navigate(r.srv[1].url + "/history")
	alice.waitFor("the indicator to go on A when bob leaves B's page", `document.getElementById("presence").hidden === true`)

	bob.navigate(r.srv[1].url + page)
	bob.waitLive()
	bob.do("bob on B sees alice again", waitLong, chromedp.WaitVisible(chromedp.CSS(`#presence li[data-viewer="alice"]`)))
	r.srv[0].kill()
	bob.do("alice leaves bob's page once the killed A's presence expires", time.Minute,
		discard(chromedp.Poll[bool](`document.getElementById("presence").hidden === true`, chromedp.WithPollingInterval(100*time.Millisecond))))
}
