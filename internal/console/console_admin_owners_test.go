package console

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/account"
)

// TestAdminTokenOwnersBoundCountsTheCreator: the admin who makes a token
// in the console is one of its owners, and counts against the bound of
// account.MaxOwners: with that many others named the token is refused
// with what to do, and with one fewer it is made with exactly the bound.
// An admin who names themselves is not counted twice.
func TestAdminTokenOwnersBoundCountsTheCreator(t *testing.T) {
	e := newConsoleEnv(t)
	e.addUser("adele", account.RoleAdmin, rolePassword)
	adele := e.browser()
	adele.login("adele", rolePassword)
	others := func(n int) string {
		var o []string
		for i := range n {
			o = append(o, "owner"+strconv.Itoa(i))
		}
		return strings.Join(o, ", ")
	}
	create := func(actor, owners string) *htmlPage {
		t.Helper()
		return adele.post("/admin/tokens", url.Values{"csrf": {adele.csrf()}, "actor": {actor}, "audience": {"x-host"}, "owners": {owners}})
	}
	r := create("agent:full", others(account.MaxOwners))
	if msg := r.find("admin-error").Text(); r.status != http.StatusBadRequest || r.find("new-token").Length() != 0 ||
		!strings.Contains(msg, "at most 20 owners, and you are one of them") || !strings.Contains(msg, "name at most 19 others") {
		t.Errorf("20 owners and the creator = %d %q, want 400 saying to name at most 19 others", r.status, msg)
	}
	if r := create("agent:self", others(account.MaxOwners-1)+", adele"); r.status != http.StatusOK || r.find("new-token").Length() != 1 {
		t.Errorf("19 owners and the creator by name = %d %q", r.status, r.find("admin-error").Text())
	}
	if r := create("agent:fits", others(account.MaxOwners-1)); r.status != http.StatusOK || r.find("new-token").Length() != 1 {
		t.Fatalf("19 owners and the creator = %d %q", r.status, r.find("admin-error").Text())
	}
	toks, err := e.c.accounts.Tokens(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range toks {
		if tk.Actor == "agent:full" {
			t.Errorf("the refused token was stored with %d owners", len(tk.Owners))
		}
		if len(tk.Owners) != account.MaxOwners || tk.Owners[len(tk.Owners)-1] != "adele" {
			t.Errorf("%s has %d owners ending %q, want %d ending with its creator", tk.Actor, len(tk.Owners), tk.Owners[len(tk.Owners)-1], account.MaxOwners)
		}
	}
}

// TestAdminPageNamesSingleSignOnOwners: a single-sign-on admin who makes a
// token is listed among its owners on the admin page by the name people
// see, with the principal beside it as the console names operators; an
// SSO admin who names themselves by their user name is not counted twice.
func TestAdminPageNamesSingleSignOnOwners(t *testing.T) {
	e := newSSOEnv(t, LocalAll)
	e.idp.User("00u-7", "greta", "", "sre")
	greta := e.browser()
	e.ssoLogin(t, greta, "")
	r := greta.post("/admin/tokens", url.Values{"csrf": {greta.csrf()}, "actor": {"agent:x"}, "audience": {"x-host"}, "owners": {"olivia"}})
	if r.status != http.StatusOK || r.find("new-token").Length() != 1 {
		t.Fatalf("create token = %d %q", r.status, r.find("admin-error").Text())
	}
	want := "olivia, greta (" + e.principal("00u-7") + ")"
	if got := strings.TrimSpace(r.find("token-owners").First().Text()); got != want {
		t.Errorf("owners column %q, want %q", got, want)
	}
	var o []string
	for i := range account.MaxOwners - 1 {
		o = append(o, "owner"+strconv.Itoa(i))
	}
	r = greta.post("/admin/tokens", url.Values{"csrf": {greta.csrf()}, "actor": {"agent:y"}, "audience": {"x-host"},
		"owners": {strings.Join(o, ",") + ",greta"}})
	if r.status != http.StatusOK || r.find("new-token").Length() != 1 {
		t.Errorf("19 owners and the SSO creator by user name = %d %q", r.status, r.find("admin-error").Text())
	}
}
