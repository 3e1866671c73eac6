package console

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/account"
)

// Changing one's own password ends every other session of the account,
// and their open pages' sockets; the browser that changed it goes on in a
// new session, and the old password no longer logs in.
func TestChangingOwnPasswordEndsOtherSessions(t *testing.T) {
	e := newConsoleEnv(t)
	e.addUser("olivia", account.RoleOperator, rolePassword)
	here, elsewhere := e.browser(), e.browser()
	here.login("olivia", rolePassword)
	elsewhere.login("olivia", rolePassword)
	socket, _ := elsewhere.mustDial("/ws")
	const next = "a new and longer passphrase"
	p := here.post(passwordPath, url.Values{"csrf": {here.csrf()}, "current": {rolePassword}, "new": {next}, "repeat": {next}})
	if p.status != http.StatusSeeOther {
		t.Fatalf("change password: %d %s", p.status, p.find("password-error").Text())
	}
	if p := here.get("/account"); p.status != http.StatusOK || p.find("whoami").Length() != 1 {
		t.Errorf("the browser that changed the password: GET /account = %d, want its page in a new session", p.status)
	}
	if p := elsewhere.get("/"); p.status != http.StatusSeeOther || !strings.HasPrefix(p.header.Get("Location"), "/login") {
		t.Errorf("the other session: GET / = %d → %q, want it ended (to the login page)", p.status, p.header.Get("Location"))
	}
	if code, _ := wsReadClose(t, socket); code != 1008 {
		t.Errorf("the other session's socket closed with %d, want 1008 (session ended)", code)
	}
	again := e.browser()
	if p := again.tryLogin("olivia", rolePassword); p.status == http.StatusSeeOther {
		t.Error("the old password still logs in")
	}
	again.login("olivia", next)
}
