package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// peopleTools has a tool only a passkey may approve and one only admins may
// approve.
const peopleTools = `tools:
  funds.transfer:
    description: Move money between accounts
    audience: bank-host
    target: '^account:[0-9]+$'
    approvals: 1
    approve_with: passkey
    args:
      type: object
      additionalProperties: false
      required: [amount_minor]
      properties:
        amount_minor: {type: integer, minimum: 1, maximum: 100000000}
  vault.rotate:
    description: Rotate a secret
    audience: vault-host
    target: '^secret:[a-z]+$'
    approvals: 1
    approvers: {roles: [admin]}
    args: {type: object, additionalProperties: false, properties: {}}
`

// tokenWithOwner creates an agent token whose owner may not approve its
// calls.
func (s *server) tokenWithOwner(actor, audience, owner string) string {
	s.tb.Helper()
	out, code := runConsole(s.tb, "", "token", "create", "--data", s.data, "--actor", actor, "--audience", audience, "--owner", owner)
	if code != 0 {
		s.tb.Fatalf("token create exited %d", code)
	}
	return strings.TrimSpace(out)
}

// Through the real console and Chromium's virtual authenticator: a
// passkey-only call approved with a passkey (the page shows what is
// signed; the approval says so; `console audit verify` re-verifies the
// signature), the same kind of call refused from the command line, an
// owner's card highlighted and the owner refused, and a reviewer condition
// shown and enforced.
func TestBrowserPasskeyApprovalOwnersAndApprovers(t *testing.T) {
	requireChromium(t)
	file := filepath.Join(t.TempDir(), "tools.yaml")
	if err := os.WriteFile(file, []byte(peopleTools), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, base := localhostServer(t, "--tools", file)
	alice := srv.addUser("alice", "operator")
	owen := srv.addUser("owen", "operator")
	root := srv.addUser("root", "admin")
	bank := newRawAgent(srv.url, srv.tokenWithOwner("agent:bank", "bank-host", "owen"))
	vault := newRawAgent(srv.url, srv.tokenWithOwner("agent:vault", "vault-host", "owen"))

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	submit := func(a *rawAgent, body string) (id, digest string) {
		t.Helper()
		r, err := a.submit(ctx, body)
		if err != nil || r.status != 201 {
			t.Fatalf("submit %s: %d %s %v", body, r.status, r.raw, err)
		}
		return r.str("id"), r.str("digest")
	}
	payID, payDigest := submit(bank, `{"tool":"funds.transfer","target":"account:1001","args":{"amount_minor":250000}}`)
	otherID, otherDigest := submit(bank, `{"tool":"funds.transfer","target":"account:1002","args":{"amount_minor":100}}`)
	rotateID, _ := submit(vault, `{"tool":"vault.rotate","target":"secret:db","args":{}}`)

	b := startBrowser(t, ctx)
	w := b.window(t, "alice")
	auth := w.virtualAuthenticator()
	w.login(base, alice)
	w.navigate(base + "/account")
	w.do("register a passkey", waitLong,
		chromedp.SendKeys(testID("passkey-new-name"), "virtual key"),
		chromedp.Click(testID("passkey-register")),
		chromedp.WaitVisible(testID("account-notice")),
	)

	t.Run("approve with a passkey", func(t *testing.T) {
		w := w.with(t)
		w.navigate(base + "/calls/" + payID)
		w.do("the passkey button", waitShort, chromedp.WaitVisible(testID("approve-passkey")))
		if got := w.text(testID("passkey-digest")); got != payDigest {
			t.Fatalf("the digest beside the button = %q, want %q", got, payDigest)
		}
		if got := w.text(testID("passkey-target")); got != "account:1001" {
			t.Errorf("the target beside the button = %q", got)
		}
		if n := len(w.texts(testID("approve"))); n != 0 {
			t.Fatalf("a passkey-only call offers a click approval (%d buttons)", n)
		}
		w.do("approve with the passkey", waitLong,
			chromedp.WaitEnabled(testID("approve-passkey")),
			chromedp.Click(testID("approve-passkey")),
			chromedp.WaitVisible(statusIs("approved")),
		)
		how := strings.Join(strings.Fields(w.text(testID("approval-how"))), " ")
		if how != "with a passkey (virtual key)" {
			t.Errorf("the approval says %q", how)
		}
		r, err := bank.do(ctx, "GET", "/api/v1/calls/"+payID, nil)
		if err != nil || r.str("status") != "approved" || r.str("grant") == "" {
			t.Errorf("the agent sees %d %s", r.status, r.raw)
		}
		out, code := runConsole(t, "", "audit", "verify", "--data", srv.data)
		if code != 0 || !strings.Contains(out, "passkeys: 1 approval signatures re-verified") {
			t.Errorf("audit verify exited %d:\n%s", code, out)
		}
		out, _ = runConsole(t, "", "audit", "export", "--format", "jsonl", "--data", srv.data)
		if !strings.Contains(out, `"method":"passkey"`) || !strings.Contains(out, `"evidence":{`) ||
			!strings.Contains(out, `"format":"countersign.passkey-approval.v1"`) {
			t.Error("the audit export does not carry the evidence")
		}
		w.navigate(base + "/history")
		row := `[data-testid="history-row"][data-call="` + payID + `"] `
		w.do("the call in the history", waitShort, chromedp.WaitVisible(chromedp.CSS(row+`[data-testid="row-decider-how"]`)))
		if got := strings.Join(strings.Fields(w.text(chromedp.CSS(row+`[data-testid="row-decider-how"]`))), " "); got != "with a passkey (virtual key)" {
			t.Errorf("the history row says %q", got)
		}
	})

	t.Run("a bad signature or no user verification approves nothing", func(t *testing.T) {
		w := w.with(t)
		for _, c := range []struct {
			name          string
			badUV, badSig bool
			want          string
		}{
			{"bogus signature", false, true, "signature does not verify"},
			{"user verification missing", true, false, "did not verify the user"},
		} {
			w.overrideResponses(auth, c.badUV, c.badSig)
			w.navigate(base + "/calls/" + otherID)
			w.do(c.name, waitLong,
				chromedp.WaitEnabled(testID("approve-passkey")),
				chromedp.Click(testID("approve-passkey")),
				chromedp.WaitVisible(chromedp.CSS(`[data-testid="passkey-status"].error`)),
			)
			if got := w.text(testID("passkey-status")); !strings.Contains(got, c.want) {
				t.Errorf("%s: the page says %q, want %q", c.name, got, c.want)
			}
			if r, _ := bank.do(ctx, "GET", "/api/v1/calls/"+otherID, nil); r.str("status") != "pending" {
				t.Fatalf("%s: status %q", c.name, r.str("status"))
			}
		}
		w.overrideResponses(auth, false, false)
	})

	t.Run("a passkey-only call refused from the command line", func(t *testing.T) {
		if _, code := runConsole(t, "", "approve", otherID, "--as", "alice", "--digest", otherDigest, "--data", srv.data); code == 0 {
			t.Fatal("console approve approved a passkey-only call")
		}
		r, _ := controlApprove(ctx, srv.data, otherID, "alice", otherDigest)
		if r.status != 403 || r.code() != "passkey_required" {
			t.Errorf("control socket = %d %s", r.status, r.raw)
		}
		if r, _ := bank.do(ctx, "GET", "/api/v1/calls/"+otherID, nil); r.str("status") != "pending" {
			t.Errorf("status after the refusals = %q", r.str("status"))
		}
	})

	t.Run("the owner's cards are highlighted and the owner is refused", func(t *testing.T) {
		o := b.window(t, "owen")
		o.login(base, owen)
		o.openQueue(base)
		o.do("the owner's card", waitShort, chromedp.WaitVisible(chromedp.CSS(`article.owned[data-call="`+otherID+`"] [data-testid="card-owned"]`)))
		o.navigate(base + "/calls/" + rotateID)
		o.do("the owner's call page", waitShort, chromedp.WaitVisible(testID("owned-by-you")))
		if n := len(o.texts(testID("approve"))); n != 0 {
			t.Errorf("the owner is offered approving")
		}
	})

	t.Run("who may approve is shown and enforced", func(t *testing.T) {
		w := w.with(t)
		w.navigate(base + "/calls/" + rotateID)
		w.do("the condition", waitShort, chromedp.WaitVisible(testID("not-an-approver")))
		if got := strings.Join(strings.Fields(w.text(testID("approvers"))), " "); got != "only role admin, except the agent's owners" {
			t.Errorf("who can approve = %q", got)
		}
		r := b.window(t, "root")
		r.login(base, root)
		r.navigate(base + "/calls/" + rotateID)
		r.do("the admin approves by click", waitLong,
			chromedp.WaitEnabled(testID("approve")),
			chromedp.Click(testID("approve")),
			chromedp.WaitVisible(statusIs("approved")),
		)
		if how := strings.Join(strings.Fields(r.text(testID("approval-how"))), " "); how != "by click" {
			t.Errorf("the approval says %q", how)
		}
	})
}
