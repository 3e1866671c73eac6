package e2e

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdpwebauthn "github.com/chromedp/cdproto/webauthn"
	"github.com/chromedp/chromedp"

	"github.com/countersign/countersign/internal/sso/ssotest"
)

// localhostServer starts `console serve` on a free port with --public-url
// http://localhost:PORT, the address browsers use in these tests: passkeys
// need a host name (an IP address cannot be a WebAuthn RP ID), and the
// provider on 127.0.0.1 is then another site, as a real one is. The port
// is found by listening on port 0 and closing again; the kernel hands out
// ephemeral ports in turn, so another process taking it in between is
// unlikely, and would show as a console that failed to listen.
func localhostServer(t *testing.T, extra ...string) (*server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	base := fmt.Sprintf("http://localhost:%d", port)
	data := t.TempDir()
	args := append([]string{"serve", "--addr", fmt.Sprintf("127.0.0.1:%d", port), "--public-url", base,
		"--data", data, "--tools", toolsFile(t), "--log-level", "warn"}, extra...)
	return startProcess(t, data, args...), base
}

// virtualAuthenticator gives the tab a CTAP 2.1 platform authenticator with
// user verification, resident keys and automatic presence, as Chromium's
// DevTools protocol offers.
func (tb *tab) virtualAuthenticator() cdpwebauthn.AuthenticatorID {
	tb.t.Helper()
	var id cdpwebauthn.AuthenticatorID
	err := chromedp.Do(tb.ctx, chromedp.Func(func(ctx context.Context, s *chromedp.Target) error {
		if _, err := cdp.Call(ctx, s, cdpwebauthn.Enable, cdpwebauthn.EnableParams{}); err != nil {
			return err
		}
		res, err := cdp.Call(ctx, s, cdpwebauthn.AddVirtualAuthenticator, cdpwebauthn.AddVirtualAuthenticatorParams{
			Options: &cdpwebauthn.VirtualAuthenticatorOptions{
				Protocol: "ctap2", Ctap2version: "ctap2_1", Transport: "internal",
				HasResidentKey: true, HasUserVerification: true,
				IsUserVerified: true, AutomaticPresenceSimulation: true,
			},
		})
		if err != nil {
			return err
		}
		id = res.AuthenticatorID
		return nil
	}))
	if err != nil {
		tb.t.Fatalf("%s: add a virtual authenticator: %v", tb.name, err)
	}
	return id
}

// overrideResponses makes the tab's virtual authenticator answer with the
// user-verified flag cleared, or with a bogus signature.
func (tb *tab) overrideResponses(id cdpwebauthn.AuthenticatorID, badUV, badSig bool) {
	tb.t.Helper()
	err := chromedp.Do(tb.ctx, chromedp.Func(func(ctx context.Context, s *chromedp.Target) error {
		_, err := cdp.Call(ctx, s, cdpwebauthn.SetResponseOverrideBits, cdpwebauthn.SetResponseOverrideBitsParams{
			AuthenticatorID: id, IsBadUV: &badUV, IsBogusSignature: &badSig,
		})
		return err
	}))
	if err != nil {
		tb.t.Fatalf("%s: override the authenticator's answers: %v", tb.name, err)
	}
}

// The whole single-sign-on redirect flow in Chromium, through the real
// console binary and an in-process provider on another site: login lands
// on the queue with the role from groups (the SameSite=Strict session
// cookie survives the cross-site redirect chain), the account shows its
// principal, a user in no mapped group gets the no-role page and no
// session, and logout ends the session here and at the provider.
func TestBrowserSingleSignOn(t *testing.T) {
	requireChromium(t)
	idp := ssotest.Start(t)
	srv, base := localhostServer(t, "--oidc-issuer", idp.Issuer(), "--oidc-client-id", idp.ClientID,
		"--oidc-client-secret-file", idp.SecretFile(t), "--oidc-role-map", "approvers=operator,sre=admin",
		"--oidc-name", "Test IdP")
	_ = srv
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b := startBrowser(t, ctx)
	host := strings.TrimPrefix(strings.TrimPrefix(idp.Issuer(), "http://"), "https://")
	host = host[:strings.IndexByte(host, '/')]

	w := b.window(t, "bob")
	idp.User("00u-bob", "bob", "bob@example.com", "approvers")
	w.navigate(base + "/login")
	if got := w.text(testID("sso-login")); got != "Sign in with Test IdP" {
		t.Fatalf("login button = %q", got)
	}
	w.do("sign in through the provider", waitLong,
		chromedp.Click(testID("sso-login")),
		chromedp.WaitVisible(testID("whoami")),
	)
	if got := w.text(testID("whoami")); got != "bob · operator" {
		t.Fatalf("whoami after single sign-on = %q", got)
	}
	w.waitLive()
	w.navigate(base + "/account")
	if got, want := w.text(testID("account-principal")), "oidc:"+host+"/00u-bob"; got != want {
		t.Errorf("account principal = %q, want %q", got, want)
	}
	// The provider advertises end_session_endpoint: logging out goes there
	// (the console's Content-Security-Policy lets the form's redirect
	// through) and comes back to the login page.
	w.do("log out, at the provider too", waitLong, chromedp.Click(testID("logout")), chromedp.WaitVisible(testID("sso-login")))
	if logouts := idp.Logouts(); len(logouts) != 1 || logouts[0].Get("post_logout_redirect_uri") != base+"/login" {
		t.Errorf("the provider's end-session endpoint saw %v, want one logout back to %s/login", logouts, base)
	}
	w.navigate(base + "/")
	w.do("back at the login page", waitShort, chromedp.WaitVisible(testID("sso-login")))

	// Someone whose groups map to no role.
	n := b.window(t, "nobody")
	idp.User("00u-n", "nora", "nora@example.com", "everyone")
	n.navigate(base + "/login")
	n.do("sign in without a mapped group", waitLong,
		chromedp.Click(testID("sso-login")),
		chromedp.WaitVisible(testID("no-role")),
	)
	if got := n.text(testID("no-role-groups")); got != "everyone" {
		t.Errorf("no-role page groups = %q", got)
	}
	n.navigate(base + "/")
	n.do("no session was opened", waitShort, chromedp.WaitVisible(testID("sso-login")))
}

// A passkey registered on the account page through Chromium's virtual
// authenticator, named, listed, audited, and removed.
func TestBrowserPasskeyRegistration(t *testing.T) {
	requireChromium(t)
	srv, base := localhostServer(t)
	alice := srv.addUser("alice", "operator")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b := startBrowser(t, ctx)
	w := b.window(t, "alice")
	w.virtualAuthenticator()
	w.login(base, alice)
	w.navigate(base + "/account")
	w.do("register a passkey", waitLong,
		chromedp.SendKeys(testID("passkey-new-name"), "virtual key"),
		chromedp.Click(testID("passkey-register")),
		chromedp.WaitVisible(testID("account-notice")),
	)
	if got := w.texts(testID("passkey-name")); len(got) != 1 || got[0] != "virtual key" {
		t.Fatalf("passkeys listed = %q", got)
	}
	out, code := runConsole(t, "", "audit", "export", "--format", "jsonl", "--data", srv.data)
	if code != 0 || !strings.Contains(out, `"kind":"passkey_registered"`) || !strings.Contains(out, `"name":"virtual key"`) {
		t.Errorf("audit export lacks the registration (exit %d)", code)
	}
	w.do("remove it", waitShort,
		chromedp.Click(testID("passkey-remove")),
		chromedp.WaitVisible(testID("no-passkeys")),
	)
	out, _ = runConsole(t, "", "audit", "export", "--format", "jsonl", "--data", srv.data)
	if !strings.Contains(out, `"kind":"passkey_removed"`) {
		t.Error("audit export lacks the removal")
	}
}
