package sso

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/countersign/countersign/internal/testkit"
	"github.com/oauth2-proxy/mockoidc"
)

const chromiumPath = "/usr/bin/chromium"

// TestBrowserRedirectFlow runs the whole redirect flow in Chromium: a
// relying party on http://localhost:PORT keeps the state in a SameSite=Lax
// cookie, the provider on 127.0.0.1 (another site) redirects back, and the
// callback completes only in the browser that started it.
func TestBrowserRedirectFlow(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test: skipped with -short")
	}
	if fi, err := os.Stat(chromiumPath); err != nil || fi.IsDir() {
		testkit.Need(t, "the browser test needs Chromium at "+chromiumPath+": apt-get install -y chromium")
	}
	p := startProvider(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("http://localhost:%d", ln.Addr().(*net.TCPAddr).Port)
	rp := newRP(t, p, func(c *Config) { c.RedirectURL = base + "/auth/oidc/callback" })
	mux := http.NewServeMux()
	mux.HandleFunc("/login", func(w http.ResponseWriter, r *http.Request) {
		u, f, err := rp.Begin(context.Background(), "/queue", 0)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		// The console seals the flow in a signed, encrypted cookie; this
		// page keeps it as plain JSON, which is enough for the browser.
		b, _ := json.Marshal(f)
		http.SetCookie(w, &http.Cookie{Name: "oidc_state", Value: base64.RawURLEncoding.EncodeToString(b), Path: "/auth/oidc", HttpOnly: true, SameSite: http.SameSiteLaxMode, MaxAge: int(FlowTTL / time.Second)})
		http.Redirect(w, r, u, http.StatusFound)
	})
	mux.HandleFunc("/auth/oidc/callback", func(w http.ResponseWriter, r *http.Request) {
		var f Flow
		if c, err := r.Cookie("oidc_state"); err == nil {
			b, _ := base64.RawURLEncoding.DecodeString(c.Value)
			_ = json.Unmarshal(b, &f)
		}
		http.SetCookie(w, &http.Cookie{Name: "oidc_state", Path: "/auth/oidc", MaxAge: -1})
		id, err := rp.Finish(r.Context(), r.URL.Query(), f)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if err != nil {
			fmt.Fprintf(w, `<p id="refused">%s</p>`, html.EscapeString(err.Error()))
			return
		}
		fmt.Fprintf(w, `<p id="principal">%s</p><p id="role">%s</p><p id="return">%s</p>`,
			html.EscapeString(id.Principal), id.Role, html.EscapeString(id.ReturnTo))
	})
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: mux}}
	srv.Start()
	t.Cleanup(srv.Close)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath), chromedp.UserDataDir(t.TempDir()),
		chromedp.Headless, chromedp.NoSandbox, chromedp.NoFirstRun,
		chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-background-networking", true),
	)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(func() { bcancel(); acancel() })

	p.QueueUser(&mockoidc.MockUser{Subject: "00u-alice", Email: "alice@example.com", Groups: []string{"approvers"}})
	var principal, role, back, callbackURL string
	if err := chromedp.Do(bctx,
		chromedp.Navigate(base+"/login"),
		chromedp.WaitVisible(chromedp.ID("principal")),
		text(chromedp.ID("principal"), &principal),
		text(chromedp.ID("role"), &role),
		text(chromedp.ID("return"), &back),
		store(chromedp.Location(), &callbackURL),
	); err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(p.Addr(), "http://")
	if principal != "oidc:"+host+"/00u-alice" || role != "operator" || back != "/queue" {
		t.Fatalf("logged in as %q, role %q, back to %q", principal, role, back)
	}
	if !strings.Contains(callbackURL, "code=") || !strings.Contains(callbackURL, "state=") {
		t.Fatalf("callback URL %s", callbackURL)
	}

	// The same callback again (a replayed code, the state cookie gone) is
	// refused; so is the callback opened in another browser.
	var refused string
	if err := chromedp.Do(bctx,
		chromedp.Navigate(callbackURL),
		chromedp.WaitVisible(chromedp.ID("refused")),
		text(chromedp.ID("refused"), &refused),
	); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(refused, "(state)") {
		t.Fatalf("replayed callback: %q, want a state refusal", refused)
	}
	other, ocancel := chromedp.NewContext(bctx, chromedp.WithNewBrowserContext())
	t.Cleanup(ocancel)
	// A login started in this browser, its callback delivered to another.
	u, _, err := rp.Begin(context.Background(), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := noRedirect.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	stolen := resp.Header.Get("Location")
	if !strings.HasPrefix(stolen, base+"/auth/oidc/callback?") {
		t.Fatalf("provider redirected to %s", stolen)
	}
	if err := chromedp.Do(other,
		chromedp.Navigate(stolen),
		chromedp.WaitVisible(chromedp.ID("refused")),
		text(chromedp.ID("refused"), &refused),
	); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(refused, "another browser") {
		t.Fatalf("callback in another browser: %q", refused)
	}
}

// store runs a for its value and keeps it in *dst.
func store[T any](a chromedp.Action[T], dst *T) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		v, err := a(ctx, t)
		*dst = v
		return err
	})
}

func text(sel chromedp.ID, dst *string) chromedp.Action[chromedp.Void] {
	return store(chromedp.Text(sel), dst)
}
