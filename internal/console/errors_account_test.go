package console

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/server"
)

// TestErrorOfAccountErrors: the accounts' refusals map through the one
// error table to a status, a code and the message for the person, never a
// 500 and never a package prefix.
func TestErrorOfAccountErrors(t *testing.T) {
	_, roleErr := account.ParseRole("root")
	tests := []struct {
		err    error
		status int
		code   string
		says   string
	}{
		{account.CheckName("bad name"), http.StatusBadRequest, "invalid_name", "1 to 64 characters"},
		{account.CheckName("console"), http.StatusBadRequest, "invalid_name", "reserved"},
		{roleErr, http.StatusBadRequest, "invalid_role", "operator, auditor or admin"},
		{account.CheckPassword("short"), http.StatusBadRequest, "invalid_password", "at least 10 characters"},
		{account.CheckOwner("team:"), http.StatusBadRequest, "invalid_owner", "team:GROUP"},
		{fmt.Errorf("queue: operator %q: %w", "console", account.CheckReserved("console")), http.StatusBadRequest, "invalid_name", "reserved"},
		{&account.ShadowError{Name: "olivia", Holder: "olivia", Local: true}, http.StatusConflict, "name_taken", "local account"},
		{account.ErrLoginDisabled, http.StatusForbidden, "account_disabled", "ask an administrator"},
		{account.ErrBadPrincipal, http.StatusForbidden, "bad_principal", "printable ASCII"},
		{account.ErrTooManyPasskeys, http.StatusConflict, "too_many_passkeys", "remove one first"},
	}
	for _, tt := range tests {
		ae := server.ErrorOf(tt.err)
		if ae.Status != tt.status || ae.Code != tt.code || !strings.Contains(ae.Message, tt.says) || strings.Contains(ae.Message, "account:") {
			t.Errorf("server.ErrorOf(%v) = %d %s %q, want %d %s saying %q without a package prefix", tt.err, ae.Status, ae.Code, ae.Message,
				tt.status, tt.code, tt.says)
		}
	}
}

// TestAdminRefusalsSayWhatIsAllowed: the admin page's refusals of a new
// account or token say what is allowed, in the accounts' own words.
func TestAdminRefusalsSayWhatIsAllowed(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	b := e.browser()
	b.login("adam", rolePassword)
	tok := b.csrf()
	for _, tt := range []struct {
		path string
		form url.Values
		says string
	}{
		{"/admin/users", url.Values{"name": {"bad name"}, "role": {"operator"}, "password": {"a fine password"}}, "1 to 64 characters"},
		{"/admin/users", url.Values{"name": {"console"}, "role": {"operator"}, "password": {"a fine password"}}, "reserved for Countersign itself"},
		{"/admin/users", url.Values{"name": {"oidc:x"}, "role": {"operator"}, "password": {"a fine password"}}, "single-sign-on principals"},
		{"/admin/users", url.Values{"name": {"zed"}, "role": {"root"}, "password": {"a fine password"}}, `unknown role "root"`},
		{"/admin/users", url.Values{"name": {"zed"}, "role": {"operator"}, "password": {"short"}}, "at least 10 characters"},
		{"/admin/tokens", url.Values{"actor": {"policy:x"}, "audience": {"h"}}, "names starting with policy: are reserved"},
		{"/admin/tokens", url.Values{"actor": {""}, "audience": {"h"}}, "needs an actor and an audience"},
		{"/admin/tokens", url.Values{"actor": {"agent:a"}, "audience": {"h"}, "owners": {"console"}}, `owner "console"`},
	} {
		tt.form.Set("csrf", tok)
		p := b.post(tt.path, tt.form)
		msg := p.find("admin-error").Text()
		if p.status != http.StatusBadRequest || !strings.Contains(msg, tt.says) || strings.Contains(msg, "account:") {
			t.Errorf("POST %s %v = %d %q, want 400 saying %q", tt.path, tt.form, p.status, msg, tt.says)
		}
	}
}
