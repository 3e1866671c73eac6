package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/countersign/countersign/client"
)

// TestBrowserPresenceWording: a call's page names who else is viewing it
// ("…viewing this call: bob") and asks to agree who decides only while the
// call waits for a decision.
func TestBrowserPresenceWording(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	s := startServer(t, "")
	alice := s.addUser("alice", "operator")
	bob := s.addUser("bob", "operator")
	s.addUser("carol", "operator")
	payments := client.New(s.url, s.token("agent:billing-bot", "payments-host"), client.WithPollWait(30*time.Second))
	call := submit(t, ctx, payments, refund("INV-6300", 1200))
	b := startBrowser(t, ctx)
	a := b.window(t, "alice")
	a.login(s.url, alice)
	a.navigate(s.url + "/calls/" + call.ID)
	a.waitLive()
	o := b.window(t, "bob")
	o.login(s.url, bob)
	o.navigate(s.url + "/calls/" + call.ID)
	o.waitLive()
	a.do("alice sees bob", waitShort, chromedp.WaitVisible(chromedp.CSS(`#presence li[data-viewer="bob"]`)))
	if got := eval[string](a, `document.querySelector('#presence').innerText.replace(/\s+/g, " ").trim()`); got != "Someone else is viewing this call: bob Agree who decides it before you do." {
		t.Errorf("the presence reads %q", got)
	}
	if !eval[bool](a, `getComputedStyle(document.querySelector('[data-testid="presence-advice"]')).display !== "none"`) {
		t.Error("a pending call's page does not ask to agree who decides")
	}
	if r, err := controlApprove(ctx, s.data, call.ID, "carol", call.Digest); err != nil || r.status != 200 {
		t.Fatalf("carol approves: %v %d %s", err, r.status, r.raw)
	}
	a.do("the call is approved", waitShort, chromedp.WaitVisible(statusIs("approved")))
	if !eval[bool](a, `getComputedStyle(document.querySelector('[data-testid="presence-advice"]')).display === "none"`) {
		t.Error("a decided call's page still asks to agree who decides")
	}
}
