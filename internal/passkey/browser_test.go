package passkey

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdpwebauthn "github.com/chromedp/cdproto/webauthn"
	"github.com/chromedp/chromedp"
	"github.com/countersign/countersign/internal/testkit"
	"github.com/go-webauthn/webauthn/webauthn"
)

// The browser test runs the ceremonies in Debian's Chromium with its
// virtual authenticator (a real CTAP2 authenticator in software, signing
// with P-256) against a page served from http://localhost:PORT, since an
// IP address cannot be an RP ID. With COUNTERSIGN_RECORD_PASSKEYS=1 it
// also rewrites testdata/recorded.json, the assertions that the replay
// tests check without a browser:
//
//	COUNTERSIGN_RECORD_PASSKEYS=1 go test -run TestBrowserCeremonies ./internal/passkey/

const chromiumPath = "/usr/bin/chromium"

func requireChromium(tb testing.TB) {
	tb.Helper()
	if fi, err := os.Stat(chromiumPath); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
		return
	}
	testkit.Need(tb, fmt.Sprintf("the browser test needs Chromium at %s: apt-get install -y chromium", chromiumPath))
}

// page is one tab on http://localhost:PORT with a virtual authenticator.
type page struct {
	t      *testing.T
	ctx    context.Context
	auth   cdpwebauthn.AuthenticatorID
	origin string
}

func startPage(t *testing.T) *page {
	t.Helper()
	requireChromium(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, "<!doctype html><title>passkey ceremonies</title><p>ceremonies run here</p>")
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	origin := "http://localhost:" + fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath), chromedp.UserDataDir(t.TempDir()),
		chromedp.Headless, chromedp.NoSandbox, chromedp.NoFirstRun,
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
	)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(func() { bcancel(); acancel() })
	p := &page{t: t, ctx: bctx, origin: origin}
	if err := chromedp.Do(bctx, chromedp.Navigate(origin+"/")); err != nil {
		t.Fatalf("open %s: %v", origin, err)
	}
	p.auth = p.addAuthenticator(true)
	return p
}

func (p *page) cdp(f func(ctx context.Context, s cdp.Session) error) {
	p.t.Helper()
	if err := chromedp.Do(p.ctx, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error { return f(ctx, t) })); err != nil {
		p.t.Fatal(err)
	}
}

func (p *page) addAuthenticator(uv bool) cdpwebauthn.AuthenticatorID {
	p.t.Helper()
	var id cdpwebauthn.AuthenticatorID
	p.cdp(func(ctx context.Context, s cdp.Session) error {
		if _, err := cdp.Call(ctx, s, cdpwebauthn.Enable, cdpwebauthn.EnableParams{}); err != nil {
			return err
		}
		res, err := cdp.Call(ctx, s, cdpwebauthn.AddVirtualAuthenticator, cdpwebauthn.AddVirtualAuthenticatorParams{
			Options: &cdpwebauthn.VirtualAuthenticatorOptions{
				Protocol: "ctap2", Ctap2version: "ctap2_1", Transport: "internal",
				HasResidentKey: true, HasUserVerification: true,
				IsUserVerified: uv, AutomaticPresenceSimulation: true,
			},
		})
		id = res.AuthenticatorID
		return err
	})
	return id
}

func (p *page) override(badUV, bogusSig bool) {
	p.t.Helper()
	p.cdp(func(ctx context.Context, s cdp.Session) error {
		_, err := cdp.Call(ctx, s, cdpwebauthn.SetResponseOverrideBits, cdpwebauthn.SetResponseOverrideBitsParams{
			AuthenticatorID: p.auth, IsBadUV: &badUV, IsBogusSignature: &bogusSig,
		})
		return err
	})
}

// create runs navigator.credentials.create with the server's options and
// returns the browser's answer as JSON.
func (p *page) create(options any) []byte {
	p.t.Helper()
	return p.run(`navigator.credentials.create({publicKey: PublicKeyCredential.parseCreationOptionsFromJSON(o.publicKey)})`, options)
}

// get runs navigator.credentials.get with the server's options.
func (p *page) get(options any) []byte {
	p.t.Helper()
	return p.run(`navigator.credentials.get({publicKey: PublicKeyCredential.parseRequestOptionsFromJSON(o.publicKey)})`, options)
}

func (p *page) run(call string, options any) []byte {
	p.t.Helper()
	o, err := json.Marshal(options)
	if err != nil {
		p.t.Fatal(err)
	}
	js := fmt.Sprintf(`(async () => { const o = %s; const c = await %s; return JSON.stringify(c.toJSON()); })()`, o, call)
	out, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](js, chromedp.EvalAwaitPromise))
	if err != nil {
		p.t.Fatalf("ceremony in the browser: %v", err)
	}
	return []byte(out)
}

// recording is testdata/recorded.json: one registration and the
// assertions the replay tests check.
type recording struct {
	Note       string          `json:"note"`
	RPID       string          `json:"rp_id"`
	Origin     string          `json:"origin"`
	User       recordedUser    `json:"user"`
	Credential json.RawMessage `json:"credential"` // webauthn.Credential as registered
	Assertions []recorded      `json:"assertions"`
}

type recordedUser struct {
	Handle B64    `json:"handle"`
	Name   string `json:"name"`
}

type recorded struct {
	Name     string               `json:"name"`
	Binding  Binding              `json:"binding"`
	Session  webauthn.SessionData `json:"session"`
	Response json.RawMessage      `json:"response"`
}

func wantReason(t *testing.T, err error, reason Reason) {
	t.Helper()
	var r *Refusal
	if !errors.As(err, &r) || r.Reason != reason {
		t.Fatalf("err = %v, want a refusal for %s", err, reason)
	}
}

func TestBrowserCeremonies(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test: skipped with -short")
	}
	p := startPage(t)
	svc, err := New(Config{RPID: "localhost", Origins: []string{p.origin}})
	if err != nil {
		t.Fatal(err)
	}
	user := User{Handle: NewHandle(), Name: "alice", DisplayName: "Alice"}
	rec := recording{
		Note: "recorded by TestBrowserCeremonies with Chromium's virtual authenticator; " +
			"COUNTERSIGN_RECORD_PASSKEYS=1 go test -run TestBrowserCeremonies ./internal/passkey/ rewrites it",
		RPID: "localhost", Origin: p.origin, User: recordedUser{Handle: user.Handle, Name: user.Name},
	}

	// Register.
	opts, id, err := svc.BeginRegistration(context.Background(), user)
	if err != nil {
		t.Fatal(err)
	}
	cred, err := svc.FinishRegistration(context.Background(), id, user, "virtual key", p.create(opts))
	if err != nil {
		t.Fatalf("register: %v", err)
	}
	if !cred.Flags.UserVerified || len(cred.PublicKey) == 0 {
		t.Fatalf("registered credential: UV %v, key %d bytes", cred.Flags.UserVerified, len(cred.PublicKey))
	}
	rec.Credential, _ = json.Marshal(cred.Credential)
	user.Credentials = []Credential{cred}

	binding := Binding{CallID: "c_01", Digest: strings.Repeat("ab", 32), Operator: "alice"}
	ceremony := func(name string, b Binding) (string, []byte) {
		t.Helper()
		opts, id, err := svc.BeginApproval(context.Background(), user, b)
		if err != nil {
			t.Fatal(err)
		}
		resp := p.get(opts)
		sd := peekSession(t, svc, id)
		rec.Assertions = append(rec.Assertions, recorded{Name: name, Binding: b, Session: sd, Response: resp})
		return id, resp
	}

	t.Run("approve", func(t *testing.T) {
		id, resp := ceremony("approve", binding)
		a, err := svc.FinishApproval(context.Background(), id, user, binding, resp)
		if err != nil {
			t.Fatalf("approve: %v", err)
		}
		if err := Verify(a.Evidence, binding); err != nil {
			t.Fatalf("evidence does not verify offline: %v", err)
		}
		if a.Credential.Authenticator.SignCount <= cred.Authenticator.SignCount && a.Credential.Authenticator.SignCount != 0 {
			t.Errorf("sign count %d after %d", a.Credential.Authenticator.SignCount, cred.Authenticator.SignCount)
		}
		user.Credentials = []Credential{a.Credential}
		// A second finish with the same session data approves nothing.
		_, err = svc.FinishApproval(context.Background(), id, user, binding, resp)
		wantReason(t, err, ReasonCeremony)
	})

	t.Run("user verification missing", func(t *testing.T) {
		p.override(true, false)
		defer p.override(false, false)
		id, resp := ceremony("uv_missing", binding)
		_, err := svc.FinishApproval(context.Background(), id, user, binding, resp)
		wantReason(t, err, ReasonUserVerification)
	})

	t.Run("bogus signature", func(t *testing.T) {
		p.override(false, true)
		defer p.override(false, false)
		id, resp := ceremony("bogus_signature", binding)
		_, err := svc.FinishApproval(context.Background(), id, user, binding, resp)
		wantReason(t, err, ReasonSignature)
	})

	t.Run("sign count backwards", func(t *testing.T) {
		ahead := user
		c := user.Credentials[0]
		c.Authenticator.SignCount += 1000
		ahead.Credentials = []Credential{c}
		id, resp := ceremony("sign_count_backwards", binding)
		_, err := svc.FinishApproval(context.Background(), id, ahead, binding, resp)
		wantReason(t, err, ReasonSignCount)
	})

	t.Run("call changed between begin and finish", func(t *testing.T) {
		id, resp := ceremony("call_changed", binding)
		changed := binding
		changed.Digest = strings.Repeat("cd", 32)
		_, err := svc.FinishApproval(context.Background(), id, user, changed, resp)
		wantReason(t, err, ReasonCallChanged)
	})

	t.Run("another call's approval", func(t *testing.T) {
		other := Binding{CallID: "c_02", Digest: binding.Digest, Operator: "alice"}
		id, resp := ceremony("approve_other_call", other)
		// Signed for c_02; presented as the approval of c_01's ceremony is
		// impossible (ceremonies are keyed), so check the evidence instead:
		a, err := svc.FinishApproval(context.Background(), id, user, other, resp)
		if err != nil {
			t.Fatal(err)
		}
		user.Credentials = []Credential{a.Credential}
		if err := Verify(a.Evidence, binding); !errors.Is(err, ErrEvidence) {
			t.Errorf("evidence for c_02 verified as c_01's: %v", err)
		}
	})

	if os.Getenv("COUNTERSIGN_RECORD_PASSKEYS") == "1" {
		b, err := json.MarshalIndent(rec, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join("testdata", "recorded.json"), append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote testdata/recorded.json (%d assertions)", len(rec.Assertions))
	}
}

// Synced passkeys keep no counter and report 0 every time: 0 after 0 is
// accepted, twice.
func TestBrowserZeroSignCount(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test: skipped with -short")
	}
	p := startPage(t)
	svc, err := New(Config{RPID: "localhost", Origins: []string{p.origin}})
	if err != nil {
		t.Fatal(err)
	}
	user := User{Handle: NewHandle(), Name: "bob"}
	opts, id, err := svc.BeginRegistration(context.Background(), user)
	if err != nil {
		t.Fatal(err)
	}
	cred, err := svc.FinishRegistration(context.Background(), id, user, "synced", p.create(opts))
	if err != nil {
		t.Fatal(err)
	}
	// Give the virtual credential no counter: every assertion reports 0.
	p.cdp(func(ctx context.Context, s cdp.Session) error {
		got, err := cdp.Call(ctx, s, cdpwebauthn.GetCredential, cdpwebauthn.GetCredentialParams{AuthenticatorID: p.auth, CredentialID: cred.ID})
		if err != nil {
			return err
		}
		c := got.Credential
		if _, err := cdp.Call(ctx, s, cdpwebauthn.RemoveCredential, cdpwebauthn.RemoveCredentialParams{AuthenticatorID: p.auth, CredentialID: cred.ID}); err != nil {
			return err
		}
		// Sent as a plain object: the generated type always carries the
		// cmtg members, which this authenticator refuses.
		return s.Call(ctx, cdpwebauthn.CommandAddCredential, map[string]any{
			"authenticatorId": p.auth,
			"credential": map[string]any{
				"credentialId": c.CredentialID, "isResidentCredential": c.IsResidentCredential,
				"rpId": c.RpID, "privateKey": c.PrivateKey, "userHandle": c.UserHandle, "signCount": -1,
			},
		}, nil)
	})
	cred.Authenticator.SignCount = 0
	user.Credentials = []Credential{cred}
	b := Binding{CallID: "c_9", Digest: strings.Repeat("0f", 32), Operator: "bob"}
	for i := 0; i < 2; i++ {
		opts, id, err := svc.BeginApproval(context.Background(), user, b)
		if err != nil {
			t.Fatal(err)
		}
		a, err := svc.FinishApproval(context.Background(), id, user, b, p.get(opts))
		if err != nil {
			t.Fatalf("approval %d with counter 0 after 0: %v", i+1, err)
		}
		if a.Evidence.SignCount != 0 {
			t.Fatalf("sign count %d, want 0", a.Evidence.SignCount)
		}
		if err := Verify(a.Evidence, b); err != nil {
			t.Fatal(err)
		}
		user.Credentials = []Credential{a.Credential}
	}
}
