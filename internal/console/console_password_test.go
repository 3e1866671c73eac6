package console

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
)

// TestMustChangePassword: when an admin sets an account's password, that
// account's sessions end; its next password login lands on the change
// page and can reach nothing else (pages redirect there, actions and the
// socket are refused) until it has chosen its own, with the current
// password, the new one twice, and the password rules; then the console
// opens and the change is audited.
func TestMustChangePassword(t *testing.T) {
	e := newConsoleEnv(t)
	e.addUser("alice", account.RoleOperator, rolePassword)
	call := e.submit("agent:billing-bot", "payments-host", conRefundBody)
	ctx := context.Background()

	old := e.browser()
	old.login("alice", rolePassword)
	const temporary = "a temporary password"
	if _, err := accountsOf(e.db).SetPassword(ctx, "alice", cheapHash(t, temporary), false, "cli:root", audit.ChannelCLI); err != nil {
		t.Fatal(err)
	}
	if p := old.get("/"); p.status != http.StatusSeeOther || p.header.Get("Location") != "/login" {
		t.Errorf("session from before the reset: GET / = %d → %q, want 303 → /login", p.status, p.header.Get("Location"))
	}
	if p := e.browser().tryLogin("alice", rolePassword); p.status != http.StatusUnauthorized {
		t.Errorf("login with the old password = %d, want 401", p.status)
	}

	b := e.browser()
	b.login("alice", temporary)
	for _, path := range []string{"/", "/calls/" + call.ID, "/history", "/account", "/allowances"} {
		if p := b.get(path); p.status != http.StatusSeeOther || p.header.Get("Location") != passwordPath {
			t.Errorf("marked account: GET %s = %d → %q, want 303 → %s", path, p.status, p.header.Get("Location"), passwordPath)
		}
	}
	page := b.get(passwordPath)
	if page.status != http.StatusOK || page.find("password-forced").Length() != 1 {
		t.Fatalf("marked account: GET %s = %d, forced notice %d", passwordPath, page.status, page.find("password-forced").Length())
	}
	csrf, _ := page.doc.Find(`form[data-testid="password-form"] input[name="csrf"]`).Attr("value")
	if csrf == "" {
		t.Fatal("no form token on the password page")
	}
	if p := b.post("/calls/"+call.ID+"/approve", url.Values{"csrf": {csrf}, "digest": {call.Digest}}); p.status != http.StatusForbidden {
		t.Errorf("marked account: approve = %d, want 403", p.status)
	}
	if conn, resp, err := b.dial("/ws", e.url); err == nil {
		conn.Close()
		t.Errorf("marked account: the socket opened")
	} else if resp != nil && resp.StatusCode != http.StatusForbidden {
		t.Errorf("marked account: socket = %d, want 403", resp.StatusCode)
	}
	if got, _ := e.q.Get(ctx, queue.Principal{Actor: call.Actor, Audience: call.Audience}, call.ID); got.Status != queue.StatusPending {
		t.Errorf("call after a refused approve = %s, want pending", got.Status)
	}

	const mine = "my very own password"
	for _, tc := range []struct {
		name                  string
		current, next, repeat string
		want                  int
	}{
		{"wrong current", "not the password!", mine, mine, http.StatusForbidden},
		{"two differ", temporary, mine, mine + "x", http.StatusBadRequest},
		{"too short", temporary, "short", "short", http.StatusBadRequest},
		{"unchanged", temporary, temporary, temporary, http.StatusBadRequest},
	} {
		p := b.post(passwordPath, url.Values{"csrf": {csrf}, "current": {tc.current}, "new": {tc.next}, "repeat": {tc.repeat}})
		if p.status != tc.want || p.find("password-error").Text() == "" {
			t.Errorf("%s: POST %s = %d (%q), want %d with a reason", tc.name, passwordPath, p.status, p.find("password-error").Text(), tc.want)
		}
	}
	if p := b.get("/"); p.status != http.StatusSeeOther {
		t.Errorf("after refused changes GET / = %d, want still held (303)", p.status)
	}
	p := b.post(passwordPath, url.Values{"csrf": {csrf}, "current": {temporary}, "new": {mine}, "repeat": {mine}})
	if p.status != http.StatusSeeOther || p.header.Get("Location") != "/account?notice=password" {
		t.Fatalf("change = %d → %q: %s", p.status, p.header.Get("Location"), p.find("password-error").Text())
	}
	if p := b.get("/"); p.status != http.StatusOK {
		t.Errorf("after the change GET / = %d, want 200", p.status)
	}
	if p := b.get("/account?notice=password"); p.find("account-notice").Text() == "" {
		t.Errorf("no notice after the change")
	}
	alice, err := accountsOf(e.db).UserByName(ctx, "alice")
	if err != nil || alice.MustChangePassword || account.Verify(alice.PasswordHash, mine) != nil {
		t.Errorf("alice after changing = %+v, %v", alice, err)
	}
	var principal, channel, details string
	e.db.SQL().QueryRow(`SELECT principal, channel, details FROM audit WHERE kind = 'password_set' ORDER BY seq DESC LIMIT 1`).Scan(&principal, &channel, &details)
	if principal != "alice" || channel != audit.ChannelWeb {
		t.Errorf("audit of the change = %s %s %s, want alice web", principal, channel, details)
	}
	if p := e.browser().tryLogin("alice", temporary); p.status != http.StatusUnauthorized {
		t.Errorf("login with the temporary password after the change = %d, want 401", p.status)
	}
	e.browser().login("alice", mine)
}

// TestChangeOwnPassword: an account that is not marked may change its
// own password from its account page; it is not held to the page.
func TestChangeOwnPassword(t *testing.T) {
	e := newConsoleEnv(t)
	e.addUser("olivia", account.RoleOperator, rolePassword)
	b := e.browser()
	b.login("olivia", rolePassword)
	if p := b.get("/account"); p.find("change-password-link").Length() != 1 {
		t.Errorf("no change-password link on a local account's page")
	}
	page := b.get(passwordPath)
	if page.status != http.StatusOK || page.find("password-forced").Length() != 0 {
		t.Errorf("GET %s = %d, forced notice %d; want 200 without it", passwordPath, page.status, page.find("password-forced").Length())
	}
	const mine = "another fine password"
	p := b.post(passwordPath, url.Values{"csrf": {b.csrf()}, "current": {rolePassword}, "new": {mine}, "repeat": {mine}})
	if p.status != http.StatusSeeOther {
		t.Fatalf("change = %d: %s", p.status, p.find("password-error").Text())
	}
	if p := b.get("/"); p.status != http.StatusOK {
		t.Errorf("own session after changing = %d, want 200", p.status)
	}
	e.browser().login("olivia", mine)
}

// TestChangePasswordThrottled: the current password on the change page is
// checked under the login throttle, so an open session cannot be used to
// guess it; the right password is refused too while the wait lasts.
func TestChangePasswordThrottled(t *testing.T) {
	e := newConsoleEnv(t)
	e.addUser("olivia", account.RoleOperator, rolePassword)
	b := e.browser()
	b.login("olivia", rolePassword)
	csrf := b.csrf()
	const mine = "another fine password"
	throttled := false
	for i := range 20 {
		p := b.post(passwordPath, url.Values{"csrf": {csrf}, "current": {"guess number " + string(rune('a'+i))}, "new": {mine}, "repeat": {mine}})
		if p.status == http.StatusTooManyRequests {
			throttled = p.header.Get("Retry-After") != "" && p.find("password-error").Text() != ""
			break
		}
		if p.status != http.StatusForbidden {
			t.Fatalf("wrong guess %d = %d, want 403 or 429", i, p.status)
		}
	}
	if !throttled {
		t.Fatal("20 wrong current passwords were never throttled")
	}
	if p := b.post(passwordPath, url.Values{"csrf": {csrf}, "current": {rolePassword}, "new": {mine}, "repeat": {mine}}); p.status != http.StatusTooManyRequests {
		t.Errorf("the right password while throttled = %d, want 429", p.status)
	}
	if u, _ := accountsOf(e.db).UserByName(context.Background(), "olivia"); account.Verify(u.PasswordHash, rolePassword) != nil {
		t.Errorf("the password changed while throttled")
	}
}
