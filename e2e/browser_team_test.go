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

// TestBrowserDelegation: in Chromium, alice (an admin) delegates her
// approvals to bob on her account page; bob's account page lists the
// delegation; on a call only admins may approve, bob's page offers
// approving for alice, he approves, and the page and the agent's answer
// say "bob, for alice".
func TestBrowserDelegation(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	file := filepath.Join(t.TempDir(), "tools.yaml")
	if err := os.WriteFile(file, []byte(peopleTools), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "", "--tools", file)
	alice := s.addUser("alice", "admin")
	bob := s.addUser("bob", "operator")
	vault := newRawAgent(s.url, s.token("agent:vault", "vault-host"))
	r, err := vault.submit(ctx, `{"tool":"vault.rotate","target":"secret:db","args":{}}`)
	if err != nil || r.status != 201 {
		t.Fatalf("submit: %v %v", r, err)
	}
	id := r.str("id")

	b := startBrowser(t, ctx)
	aw := b.window(t, "alice")
	aw.login(s.url, alice)
	aw.navigate(s.url + "/account")
	aw.do("delegate to bob", waitShort,
		chromedp.SetValue(testID("delegation-delegate"), "bob"),
		chromedp.SetValue(testID("delegation-for"), "3d"),
		chromedp.Click(testID("delegation-give")),
		chromedp.WaitVisible(testID("account-notice")))
	if got := aw.text(testID("account-notice")); !strings.HasPrefix(got, "bob may approve for alice until ") {
		t.Errorf("the notice says %q", got)
	}
	for _, w := range sizes {
		aw.do("set the window to "+w.name, waitShort, chromedp.EmulateViewport(w.width, w.height))
		if problems := eval[[]string](aw, layoutProblemsJS); len(problems) > 0 {
			t.Errorf("the account page with a delegation at %s px:\n  %s", w.name, strings.Join(problems, "\n  "))
		}
		eval[bool](aw, `(() => { document.getElementById("delegations").scrollIntoView({block: "start"}); return true; })()`)
		aw.screenshot("delegation-account-" + w.name)
		accessible(t, aw, "the account page with a delegation at "+w.name)
	}

	bw := b.window(t, "bob")
	bw.login(s.url, bob)
	bw.navigate(s.url + "/account")
	if got := strings.Join(strings.Fields(bw.text(testID("delegation-row"))), " "); !strings.Contains(got, "alice") || !strings.Contains(got, "bob (you)") || !strings.Contains(got, "live") {
		t.Errorf("bob's account page lists %q", got)
	}
	bw.navigate(s.url + "/calls/" + id)
	bw.do("the offer to approve for alice", waitShort, chromedp.WaitVisible(testID("approve-for")))
	for _, w := range sizes {
		bw.do("set the window to "+w.name, waitShort, chromedp.EmulateViewport(w.width, w.height))
		if problems := eval[[]string](bw, layoutProblemsJS); len(problems) > 0 {
			t.Errorf("the call page offering approval for alice at %s px:\n  %s", w.name, strings.Join(problems, "\n  "))
		}
		eval[bool](bw, `(() => { document.querySelector('[data-testid="approve-for"]').scrollIntoView({block: "start"}); return true; })()`)
		bw.screenshot("delegation-approve-for-" + w.name)
		accessible(t, bw, "the call page offering approval for alice at "+w.name)
	}
	bw.do("back to 1280", waitShort, chromedp.EmulateViewport(1280, 900))
	bw.do("approve for alice", waitShort,
		chromedp.WaitEnabled(testID("approve")),
		chromedp.Click(testID("approve")),
		chromedp.WaitVisible(statusIs("approved")))
	if got := strings.Join(strings.Fields(bw.text(testID("approval"))), " "); !strings.HasPrefix(got, "bob, for alice at ") {
		t.Errorf("the approval reads %q, want bob, for alice", got)
	}
	eval[bool](bw, `(() => { document.querySelector('[data-testid="approval"]').scrollIntoView({block: "center"}); return true; })()`)
	bw.screenshot("delegation-approved-1280")

	got, err := vault.do(ctx, "GET", "/api/v1/calls/"+id, nil)
	if err != nil || got.status != 200 || !strings.Contains(string(got.raw), `"by":"bob"`) || !strings.Contains(string(got.raw), `"for":"alice"`) {
		t.Errorf("the agent's answer: %v %s", err, got.raw)
	}
}

// tierTools: only admins approve vault.rotate, until its call has waited
// eight seconds (long enough for the page to open first); then operators
// may too.
const tierTools = `tools:
  vault.rotate:
    description: Rotate a secret
    audience: vault-host
    target: '^secret:[a-z]+$'
    approvals: 1
    decide_within: 10m
    approvers: {roles: [admin]}
    escalate:
      - {after: 8s, add_roles: [operator]}
    args: {type: object, additionalProperties: false, properties: {}}
`

// TestBrowserEscalation: an operator watches, in Chromium, a call only
// admins may approve; when it reaches its tier, the real console's sweep
// escalates it and the page turns, live, into one the operator may
// approve, which they do.
func TestBrowserEscalation(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	file := filepath.Join(t.TempDir(), "tools.yaml")
	if err := os.WriteFile(file, []byte(tierTools), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "", "--tools", file)
	olga := s.addUser("olga", "operator")
	vault := newRawAgent(s.url, s.token("agent:vault", "vault-host"))

	b := startBrowser(t, ctx)
	w := b.window(t, "olga")
	w.login(s.url, olga)
	r, err := vault.submit(ctx, `{"tool":"vault.rotate","target":"secret:db","args":{}}`)
	if err != nil || r.status != 201 {
		t.Fatalf("submit: %v %v", r, err)
	}
	id := r.str("id")
	w.navigate(s.url + "/calls/" + id)
	if got := w.text(testID("not-an-approver")); !strings.Contains(got, "Only role admin may approve") {
		t.Errorf("the page before the tier says %q", got)
	}
	if reached := eval[bool](w, `document.querySelector('[data-testid="tier"]').dataset.reached === "true"`); reached {
		t.Fatal("the tier was reached before the page opened; nothing was seen live")
	}
	w.screenshot("escalation-before-1280")
	w.do("the tier is reached and pushed", 30*time.Second,
		chromedp.WaitVisible(`[data-testid="tier"][data-reached="true"]`),
		chromedp.WaitVisible(testID("approve-form")))
	if got := strings.Join(strings.Fields(w.text(testID("approvers"))), " "); !strings.Contains(got, "roles admin, operator") {
		t.Errorf("who can approve after the tier: %q", got)
	}
	for _, size := range sizes {
		w.do("set the window to "+size.name, waitShort, chromedp.EmulateViewport(size.width, size.height))
		if problems := eval[[]string](w, layoutProblemsJS); len(problems) > 0 {
			t.Errorf("the escalated call's page at %s px:\n  %s", size.name, strings.Join(problems, "\n  "))
		}
		w.screenshot("escalation-reached-" + size.name)
		accessible(t, w, "the escalated call's page at "+size.name)
	}
	w.do("back to 1280", waitShort, chromedp.EmulateViewport(1280, 900))
	w.do("approve", waitShort,
		chromedp.WaitEnabled(testID("approve")),
		chromedp.Click(testID("approve")),
		chromedp.WaitVisible(statusIs("approved")))
}
