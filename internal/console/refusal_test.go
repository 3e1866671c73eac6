package console

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
)

// A refused approval re-shows the call's page, never a bare error page:
// the reason in an operator's terms, what to do next, and the page's
// status (a client error: the freeze, too, is the console's own state).
// One case per kind of refusal: a freeze, a changed tool, a stale page,
// and the rules of who may approve.
func TestRefusedApprovalReshowsTheCall(t *testing.T) {
	type setup struct {
		b  *consoleBrowser
		id string
		// form is posted to the call's approve action; nil: the harness's
		// current form (approveForm).
		form url.Values
	}
	cases := []struct {
		name, code string
		status     int
		prepare    func(t *testing.T) setup
		says, next string
	}{
		{"a frozen tool", "frozen", http.StatusConflict, func(t *testing.T) setup {
			e := newConsoleEnv(t)
			addRoleUsers(e)
			c := e.submit("agent:support-bot", "search-host", conSearchBody)
			b := e.browser()
			b.login("olivia", rolePassword)
			form := url.Values{"csrf": {b.csrf()}, "digest": {c.Digest}, "presented": {b.presented(c.ID)}}
			if _, err := e.q.Freeze(context.Background(), "adam", audit.ChannelCLI, "search.query", "", "index rebuild under way"); err != nil {
				t.Fatal(err)
			}
			return setup{b: b, id: c.ID, form: form}
		}, "search.query is frozen (index rebuild under way)", "an admin lifts the freeze"},
		{"a changed tool", "tool_changed", http.StatusConflict, func(t *testing.T) setup {
			e := newConsoleEnv(t)
			addRoleUsers(e)
			c := e.submit("agent:support-bot", "search-host", conSearchBody)
			b := e.browser()
			b.login("olivia", rolePassword)
			form := url.Values{"csrf": {b.csrf()}, "digest": {c.Digest}, "presented": {b.presented(c.ID)}}
			e.exec(`UPDATE calls SET tool_digest = 'sha256:0000000000000000000000000000000000000000000000000000000000000000' WHERE id = ?`, c.ID)
			return setup{b: b, id: c.ID, form: form}
		}, "defines search.query differently", "have the agent propose it again"},
		{"a stale page", "presentation_invalid", http.StatusConflict, func(t *testing.T) setup {
			e := newConsoleEnv(t)
			addRoleUsers(e)
			c := e.submit("agent:support-bot", "search-host", conSearchBody)
			b := e.browser()
			b.login("olivia", rolePassword)
			return setup{b: b, id: c.ID, form: url.Values{"csrf": {b.csrf()}, "digest": {c.Digest}, "presented": {"not-a-page-token"}}}
		}, "did not show the call as it is now", "read it again, then decide"},
		{"one's own call", "own_call", http.StatusForbidden, func(t *testing.T) setup {
			e := newConsoleEnv(t)
			e.addUser("agent:deployer", account.RoleOperator, rolePassword)
			c := e.submit("agent:deployer", "deploy-host", conDeployBody)
			b := e.browser()
			b.login("agent:deployer", rolePassword)
			return setup{b: b, id: c.ID}
		}, "your own name", "Another operator approves it"},
		{"a second approval by the same person", "already_approved", http.StatusConflict, func(t *testing.T) setup {
			e := newConsoleEnv(t)
			addRoleUsers(e)
			c := e.submit("agent:deployer", "deploy-host", conDeployBody) // two approvals
			b := e.browser()
			b.login("olivia", rolePassword)
			if p := b.approveForm(c.ID, nil); p.status != http.StatusSeeOther {
				t.Fatalf("first approval: %d %q", p.status, p.find("decision-error").Text())
			}
			return setup{b: b, id: c.ID}
		}, "already approved", "another person's approval"},
		{"not one of the tool's approvers", "not_an_approver", http.StatusForbidden, func(t *testing.T) setup {
			e := newPeopleConsole(t)
			c := e.submitOwned(vaultAgent, `{"tool":"vault.rotate","target":"secret:db","args":{}}`)
			b := e.browser()
			b.login("olivia", rolePassword)
			return setup{b: b, id: c.ID}
		}, "may approve", "Ask one of the approvers"},
		{"the agent's owner", "owner", http.StatusForbidden, func(t *testing.T) setup {
			e := newPeopleConsole(t)
			c := e.submitOwned(bankAgent, `{"tool":"funds.transfer","target":"account:42","args":{}}`)
			b := e.browser()
			b.login("owen", rolePassword)
			return setup{b: b, id: c.ID}
		}, "you own the agent", "does not run this agent"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.prepare(t)
			var p *htmlPage
			if s.form != nil {
				p = s.b.post("/calls/"+s.id+"/approve", s.form)
			} else {
				p = s.b.approveForm(s.id, nil)
			}
			if p.find("error-status").Length() != 0 {
				t.Fatalf("a bare error page: %s", p.find("error-message").Text())
			}
			if p.status != tc.status {
				t.Errorf("status %d, want %d", p.status, tc.status)
			}
			if got := p.find("call-id").Text(); got != s.id {
				t.Errorf("the page shows call %q, want %s re-shown", got, s.id)
			}
			refused := p.find("decision-refused")
			if code, _ := refused.Attr("data-code"); code != tc.code {
				t.Errorf("refusal code %q, want %q", code, tc.code)
			}
			if got := p.find("decision-error").Text(); !strings.Contains(got, tc.says) {
				t.Errorf("reason %q, want it to say %q", got, tc.says)
			}
			if got := p.find("decision-next").Text(); !strings.HasPrefix(got, "What to do:") || !strings.Contains(got, tc.next) {
				t.Errorf("next step %q, want it to say %q", got, tc.next)
			}
			// The page goes on: the queue is one link away.
			if p.find("nav-queue").Length() != 1 {
				t.Error("the re-shown page has no navigation")
			}
		})
	}
}
