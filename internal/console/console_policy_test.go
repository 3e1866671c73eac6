package console

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/problem"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/server"
	"github.com/countersign/countersign/internal/testkit"
)

const refund = `{"tool":"payments.refund","target":"invoice:INV-1042","args":{"amount_minor":1299,"currency":"USD","reason_code":"duplicate"}}`

// TestFreezeBannerAndAdminForms: an admin freezes from the admin page;
// every page shows the banner; an operator cannot lift it; the admin can.
func TestFreezeBannerAndAdminForms(t *testing.T) {
	e := newConsoleEnv(t)
	e.addUser("root", account.RoleAdmin, "root-password-1")
	e.addUser("olive", account.RoleOperator, "olive-password-1")
	admin := e.browser()
	admin.login("root", "root-password-1")
	p := admin.post("/admin/freeze", url.Values{"csrf": {admin.csrf()}, "tool": {"payments.refund"}, "reason": {"ledger out of sync"}})
	if p.status != http.StatusOK || !strings.Contains(p.find("admin-notice").Text(), "payments.refund is frozen") {
		t.Fatalf("freeze: %d %s", p.status, p.find("admin-error").Text())
	}
	op := e.browser()
	op.login("olive", "olive-password-1")
	for _, path := range []string{"/", "/history"} {
		b := op.get(path).find("freeze-banner")
		if b.Length() != 1 || !strings.Contains(b.Text(), "payments.refund") || !strings.Contains(b.Text(), "ledger out of sync") {
			t.Fatalf("%s: banner %q", path, b.Text())
		}
	}
	// The freeze is in force for the queue.
	_, _, err := e.q.Submit(context.Background(), queue.Principal{Actor: "agent:x", Audience: "payments-host"}, []byte(refund))
	if ae := server.ErrorOf(err); ae.Status != http.StatusServiceUnavailable || ae.Code != "frozen" || ae.Reason != "ledger out of sync" {
		t.Fatalf("submission while frozen: %v", err)
	}
	// An operator cannot lift it.
	if p := op.post("/admin/unfreeze", url.Values{"csrf": {op.csrf()}, "tool": {"payments.refund"}}); p.status == http.StatusOK {
		t.Fatalf("an operator lifted a freeze: %d", p.status)
	}
	p = admin.post("/admin/unfreeze", url.Values{"csrf": {admin.csrf()}, "tool": {"payments.refund"}})
	if p.status != http.StatusOK || p.find("freeze-banner").Length() != 0 {
		t.Fatalf("unfreeze: %d, banner %q", p.status, p.find("freeze-banner").Text())
	}
}

// TestFreezeRefusalsOnTheAdminPage: the admin page's freeze forms answer
// the queue's refusals with the error table's words.
func TestFreezeRefusalsOnTheAdminPage(t *testing.T) {
	e := newConsoleEnv(t)
	e.addUser("root", account.RoleAdmin, "root-password-1")
	admin := e.browser()
	admin.login("root", "root-password-1")
	for _, tt := range []struct {
		path   string
		form   url.Values
		status int
		says   string
	}{
		{"/admin/freeze", url.Values{"tool": {"payments.refund"}, "reason": {" "}}, http.StatusBadRequest, "a freeze needs a reason"},
		{"/admin/freeze", url.Values{"reason": {strings.Repeat("x", queue.MaxReasonBytes+1)}}, http.StatusBadRequest, "a freeze needs a reason"},
		{"/admin/unfreeze", url.Values{"tool": {"payments.refund"}}, http.StatusNotFound, "no freeze in force has that scope"},
		{"/admin/freeze", url.Values{"tool": {"Payments.Refund"}, "reason": {"incident"}}, http.StatusBadRequest, `Did you mean "payments.refund"?`},
		{"/admin/freeze", url.Values{"actor": {"agent:new"}, "reason": {"incident"}}, http.StatusUnprocessableEntity, "not seen yet"},
	} {
		tt.form.Set("csrf", admin.csrf())
		p := admin.post(tt.path, tt.form)
		if msg := p.find("admin-error").Text(); p.status != tt.status || !strings.Contains(msg, tt.says) {
			t.Errorf("POST %s = %d %q, want %d saying %q", tt.path, p.status, msg, tt.status, tt.says)
		}
	}
	if fz, _ := e.q.Freezes(context.Background()); len(fz) != 0 {
		t.Errorf("refused freezes stored: %+v", fz)
	}
	// Asked for explicitly, a name not seen yet is frozen, and the page
	// says it was not seen.
	p := admin.post("/admin/freeze", url.Values{"csrf": {admin.csrf()}, "actor": {"agent:new"}, "reason": {"incident"}, "allow_unknown": {"1"}})
	if msg := p.find("admin-notice").Text(); p.status != http.StatusOK || !strings.Contains(msg, "every call by agent:new is frozen") ||
		!strings.Contains(msg, "has not seen agent:new yet") {
		t.Errorf("freeze with allow_unknown = %d %q %q", p.status, msg, p.find("admin-error").Text())
	}
	if p.find("freeze-allow-unknown").Length() != 1 {
		t.Error("the freeze form has no box to freeze a name not seen yet")
	}
	var ae *problem.Error
	if ae = server.ErrorOf(&queue.AdminError{Operator: "olive"}); ae.Status != http.StatusForbidden || ae.Code != "not_an_admin" || !strings.Contains(ae.Message, `"olive"`) {
		t.Errorf("server.ErrorOf(AdminError) = %+v", ae)
	}
}

// TestReplayPage: an admin pastes a candidate tools file and sees the
// table, with the call a person denied that the rules would approve.
func TestReplayPage(t *testing.T) {
	e := newConsoleEnv(t)
	e.addUser("root", account.RoleAdmin, "root-password-1")
	bot := queue.Principal{Actor: "agent:billing-bot", Audience: "payments-host"}
	testkit.SeedUsers(t, e.db.Accounts(), account.RoleOperator, "alice")
	c, _, err := e.q.Submit(context.Background(), bot, []byte(refund))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.q.Deny(context.Background(), "alice", audit.ChannelWeb, c.ID, "already refunded"); err != nil {
		t.Fatal(err)
	}
	candidate, err := os.ReadFile("../../examples/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	admin := e.browser()
	admin.login("root", "root-password-1")
	p := admin.post("/admin/replay", url.Values{"csrf": {admin.csrf()}, "tools": {string(candidate)}, "since": {"1h"}})
	if p.status != http.StatusOK {
		t.Fatalf("replay: %d %s", p.status, p.find("admin-error").Text())
	}
	row := p.doc.Find(`[data-testid="replay-row"][data-tool="payments.refund"]`)
	if row.Find(`[data-testid="to-approve"]`).Text() != "1" {
		t.Fatalf("replay row %q", row.Text())
	}
	if f := p.find("flagged-row"); f.Length() != 1 || !strings.Contains(f.Text(), c.ID) || !strings.Contains(f.Text(), "already refunded") {
		t.Fatalf("flagged %q", f.Text())
	}
	// A refused file is shown with its problems, and the text is kept.
	p = admin.post("/admin/replay", url.Values{"csrf": {admin.csrf()}, "tools": {strings.Replace(string(candidate), "args.reason_code", "args.reason", 1)}})
	if p.status != http.StatusBadRequest || !strings.Contains(p.find("admin-error").Text(), "args.reason") ||
		!strings.Contains(p.find("replay-tools").Text(), "args.reason") {
		t.Fatalf("bad file: %d %q", p.status, p.find("admin-error").Text())
	}
}
