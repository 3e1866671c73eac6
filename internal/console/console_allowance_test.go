package console

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/queue"
)

// allowanceRefund is a refund of invoice n for amount cents.
func allowanceRefund(n, amount int) string {
	return fmt.Sprintf(`{"tool":"payments.refund","target":"invoice:INV-%d","args":{"amount_minor":%d,"currency":"USD","reason_code":"duplicate"}}`,
		n, amount)
}

// giveForm is the give form of the review page of call's allowance with
// choices, as the browser posts it.
func giveForm(t *testing.T, b *consoleBrowser, call *queue.Call, choices url.Values) (*htmlPage, url.Values) {
	t.Helper()
	review := b.get("/calls/" + call.ID + "/allowance?" + choices.Encode())
	if review.status != http.StatusOK || review.find("allowance-give-form").Length() != 1 {
		t.Fatalf("review: %d %q", review.status, review.find("allowance-error").Text())
	}
	f := url.Values{}
	review.find("allowance-give-form").Find("input[type=hidden]").Each(func(_ int, s *goquerySelection) {
		f.Add(s.AttrOr("name", ""), s.AttrOr("value", ""))
	})
	return review, f
}

// TestAllowanceFromTheCallPage: a pending refund's page offers "Approve
// this and more like it"; the review step shows the call, the scope in
// words and its digest; giving approves the call and the allowance; the
// next refund it covers arrives approved by it, and the call's page says
// so; a refund outside it waits; revoking it makes the next one wait.
func TestAllowanceFromTheCallPage(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	base := e.submit("agent:billing-bot", "payments-host", allowanceRefund(7001, 1200))
	b := e.browser()
	b.login("olivia", rolePassword)
	if p := b.get("/calls/" + base.ID); p.find("allowance-offer").Length() != 1 {
		t.Fatal("the call's page offers no allowance")
	}
	choices := url.Values{"uses": {"2"}, "minutes": {"30"}, "target_prefix": {"invoice:INV-7"}, "max:/amount_minor": {"5000"}}
	review, f := giveForm(t, b, base, choices)
	words := review.find("allowance-words").Text()
	for _, want := range []string{"agent:billing-bot", "invoice:INV-7", "50.00"} {
		if !strings.Contains(words, want) {
			t.Errorf("the scope in words %q does not say %q", words, want)
		}
	}
	if review.find("allowance-base").Find(`[data-testid="digest"]`).Length() != 1 || len(review.find("allowance-scope-digest").Text()) != 64 {
		t.Error("the review step does not show the call's digest and the scope's")
	}
	if f.Get("presented") == "" || f.Get("until") == "" || f.Get("scope_digest") == "" {
		t.Fatalf("the give form carries %v", f)
	}

	// Another scope digest, or no page token: nothing is given.
	for name, edit := range map[string]func(url.Values){
		"another scope digest":  func(v url.Values) { v.Set("scope_digest", strings.Repeat("0", 64)) },
		"no page token":         func(v url.Values) { v.Del("presented") },
		"the call page's token": func(v url.Values) { v.Set("presented", b.presented(base.ID)) },
		"a larger maximum":      func(v url.Values) { v.Set("max:/amount_minor", "9000") },
	} {
		bad := url.Values{}
		for k, v := range f {
			bad[k] = append([]string(nil), v...)
		}
		edit(bad)
		p := b.post("/calls/"+base.ID+"/allowance", bad)
		if p.find("allowance-error").Length() != 1 {
			t.Errorf("%s: %d, no error shown", name, p.status)
		}
		if got := mustCall(t, e, base.ID); got.Status != queue.StatusPending {
			t.Fatalf("%s: the base call is %s", name, got.Status)
		}
	}
	if list, _ := e.q.Allowances(t.Context(), queue.AllowanceFilter{}); len(list) != 0 {
		t.Fatalf("refused gives stored %d allowances", len(list))
	}

	p := b.post("/calls/"+base.ID+"/allowance", f)
	if p.status != http.StatusSeeOther || !strings.HasPrefix(p.header.Get("Location"), "/allowances/alw_") {
		t.Fatalf("give: %d %s %q", p.status, p.header.Get("Location"), p.find("allowance-error").Text())
	}
	if got := mustCall(t, e, base.ID); got.Status != queue.StatusApproved || got.Approvals[0].Presented == nil {
		t.Fatalf("the base call after the give: %s %+v", got.Status, got.Approvals)
	}
	page := b.get(p.header.Get("Location"))
	if !strings.Contains(page.find("allowance-uses-left").Text(), "2 left") || page.find("allowance-notice").Length() != 1 {
		t.Errorf("the allowance's page: %q", page.find("allowance-uses-left").Text())
	}

	covered := e.submit("agent:billing-bot", "payments-host", allowanceRefund(7002, 4000))
	outside := e.submit("agent:billing-bot", "payments-host", allowanceRefund(7003, 6000))
	if covered.Status != queue.StatusApproved || outside.Status != queue.StatusPending {
		t.Fatalf("inside the scope: %s; above its maximum: %s", covered.Status, outside.Status)
	}
	cp := b.get("/calls/" + covered.ID)
	how := strings.Join(strings.Fields(cp.find("approval-how").Text()), " ")
	if cp.find("approval-allowance").Length() != 1 || !strings.HasPrefix(how, "covered by allowance alw_") ||
		!strings.Contains(cp.find("approval-allowance-left").Text(), "1 of 2 left, until ") {
		t.Errorf("the covered call's page: %q %q", how, cp.find("approval-allowance-left").Text())
	}
	if list := b.get("/allowances"); list.find("allowance").Length() != 1 {
		t.Errorf("the allowances page lists %d", list.find("allowance").Length())
	}

	id := strings.TrimPrefix(strings.Split(p.header.Get("Location"), "?")[0], "/allowances/")
	// An auditor reads it, and may neither confirm nor revoke it.
	aud := e.browser()
	aud.login("aude", rolePassword)
	if ap := aud.get("/allowances/" + id); ap.status != http.StatusOK || ap.find("allowance-words").Length() != 1 ||
		ap.find("allowance-revoke-form").Length() != 0 || ap.find("allowance-confirm-form").Length() != 0 {
		t.Errorf("an auditor's view of the allowance: %d, revoke form %d", ap.status, ap.find("allowance-revoke-form").Length())
	}
	if r := aud.post("/allowances/"+id+"/revoke", url.Values{"csrf": {aud.csrf()}, "reason": {"audit"}}); r.status != http.StatusForbidden {
		t.Errorf("an auditor's revocation: %d, want 403", r.status)
	}
	if r := b.post("/allowances/"+id+"/revoke", url.Values{"csrf": {b.csrf()}}); r.find("allowance-error").Length() != 1 {
		t.Errorf("a revocation without a reason: %d", r.status)
	}
	if r := b.post("/allowances/"+id+"/revoke", url.Values{"csrf": {b.csrf()}, "reason": {"enough"}}); r.status != http.StatusSeeOther {
		t.Fatalf("revoke: %d %q", r.status, r.find("allowance-error").Text())
	}
	if got := mustCall(t, e, covered.ID); got.Revoked == nil {
		t.Errorf("the covered call's unredeemed grant is not revoked: %s", got.Shown())
	}
	if next := e.submit("agent:billing-bot", "payments-host", allowanceRefund(7004, 100)); next.Status != queue.StatusPending {
		t.Errorf("after the revocation a call is %s", next.Status)
	}
}

// TestAllowanceReviewRefusals: choices beyond the tool's ceilings are
// shown again with what to do, nothing given; an auditor may not open it.
func TestAllowanceReviewRefusals(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	base := e.submit("agent:billing-bot", "payments-host", allowanceRefund(8001, 1200))
	b := e.browser()
	b.login("olivia", rolePassword)
	for name, q := range map[string]url.Values{
		"too many uses":        {"uses": {"500"}, "minutes": {"30"}},
		"too long":             {"uses": {"2"}, "minutes": {"600"}},
		"not a number":         {"uses": {"two"}, "minutes": {"30"}},
		"below the base":       {"uses": {"2"}, "minutes": {"30"}, "max:/amount_minor": {"100"}},
		"a prefix it lacks":    {"uses": {"2"}, "minutes": {"30"}, "target_prefix": {"invoice:INV-9"}},
		"above the schema max": {"uses": {"2"}, "minutes": {"30"}, "max:/amount_minor": {"99999999"}},
	} {
		p := b.get("/calls/" + base.ID + "/allowance?" + q.Encode())
		if p.find("allowance-error").Length() != 1 || p.find("allowance-give-form").Length() != 0 {
			t.Errorf("%s: %d, error %q, give form %d", name, p.status, p.find("allowance-error").Text(), p.find("allowance-give-form").Length())
		}
		if got := p.find("allowance-uses").AttrOr("value", ""); got != q.Get("uses") {
			t.Errorf("%s: the choice typed is not kept: %q", name, got)
		}
	}
	aud := e.browser()
	aud.login("aude", rolePassword)
	if p := aud.get("/allowances"); p.status != http.StatusOK {
		t.Errorf("an auditor's allowances page: %d", p.status)
	}
	if p := aud.get("/calls/" + base.ID + "/allowance?uses=2&minutes=30"); p.status != http.StatusForbidden {
		t.Errorf("an auditor's review: %d", p.status)
	}
	if p := aud.get("/calls/" + base.ID); p.find("allowance-offer").Length() != 0 {
		t.Error("an auditor is offered an allowance")
	}
	deploy := e.submit("agent:deployer", "deploy-host", conDeployBody)
	if p := b.get("/calls/" + deploy.ID); p.find("allowance-offer").Length() != 0 {
		t.Error("a tool without an allowance block offers one")
	}
}

// TestFrozenCallPage: while a freeze stops a pending call, its page says
// which freeze, why, who set it and since when, offers no approval (nor an
// allowance) and still lets the call be denied; lifted, approval is back.
func TestFrozenCallPage(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	call := e.submit("agent:billing-bot", "payments-host", allowanceRefund(9001, 1200))
	if _, err := e.q.Freeze(t.Context(), "adam", "cli", "payments.refund", "", "refunds double-paid since 09:00"); err != nil {
		t.Fatal(err)
	}
	b := e.browser()
	b.login("olivia", rolePassword)
	p := b.get("/calls/" + call.ID)
	frozen := p.find("frozen-call").Text()
	if !strings.Contains(frozen, "refunds double-paid since 09:00") || !strings.Contains(frozen, "adam") || !strings.Contains(frozen, "payments.refund") {
		t.Errorf("the frozen call's page says %q", frozen)
	}
	if p.find("approve").Length() != 0 || p.find("allowance-offer").Length() != 0 || p.find("deny-form").Length() != 1 {
		t.Errorf("frozen: approve %d, offer %d, deny %d; want only deny", p.find("approve").Length(), p.find("allowance-offer").Length(), p.find("deny-form").Length())
	}
	other := e.submit("agent:other", "files-host", `{"tool":"files.delete","target":"file:/srv/shared/tmp/x","args":{"reason":"old"}}`)
	if p := b.get("/calls/" + other.ID); p.find("frozen-call").Length() != 0 {
		t.Error("a call of another tool reads as frozen")
	}
	if _, err := e.q.Unfreeze(t.Context(), "adam", "cli", "payments.refund", ""); err != nil {
		t.Fatal(err)
	}
	if p := b.get("/calls/" + call.ID); p.find("frozen-call").Length() != 0 || p.find("approve").Length() != 1 {
		t.Errorf("after the freeze was lifted: frozen %d, approve %d", p.find("frozen-call").Length(), p.find("approve").Length())
	}
}
