package console

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
)

func mustCall(t *testing.T, e *consoleEnv, id string) *queue.Call {
	t.Helper()
	c, err := e.q.Call(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestApproveNeedsCSRF(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	call := e.submit("agent:billing-bot", "payments-host", conRefundBody)
	b := e.browser()
	b.login("olivia", rolePassword)
	tok := b.csrf()
	otherSession := e.browser()
	otherSession.login("adam", rolePassword)
	foreignTok := otherSession.csrf()
	path := "/calls/" + call.ID + "/approve"
	tests := []struct {
		name    string
		form    url.Values
		headers []string
	}{
		{"no token", url.Values{"digest": {call.Digest}}, nil},
		{"empty token", url.Values{"csrf": {""}, "digest": {call.Digest}}, nil},
		{"wrong token", url.Values{"csrf": {tok + "x"}, "digest": {call.Digest}}, nil},
		{"another session's token", url.Values{"csrf": {foreignTok}, "digest": {call.Digest}}, nil},
		{"cross-site fetch", url.Values{"csrf": {tok}, "digest": {call.Digest}}, []string{"Sec-Fetch-Site", "cross-site"}},
		{"same-site fetch", url.Values{"csrf": {tok}, "digest": {call.Digest}}, []string{"Sec-Fetch-Site", "same-site"}},
		{"foreign origin", url.Values{"csrf": {tok}, "digest": {call.Digest}}, []string{"Origin", "http://evil.example"}},
		{"sandboxed cross-site frame", url.Values{"csrf": {tok}, "digest": {call.Digest}}, []string{"Origin", "null", "Sec-Fetch-Site", "cross-site"}},
		{"null origin without the token", url.Values{"digest": {call.Digest}}, []string{"Origin", "null"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := b.post(path, tt.form, tt.headers...)
			if p.status != http.StatusForbidden {
				t.Errorf("approve = %d, want 403", p.status)
			}
			if p.header.Get("Content-Security-Policy") == "" || p.find("error-status").Length() != 1 {
				t.Error("the refusal is not an error page with the security headers")
			}
			if c := mustCall(t, e, call.ID); c.Status != queue.StatusPending || len(c.Approvals) != 0 {
				t.Errorf("call is %s with %d approvals, want pending with none", c.Status, len(c.Approvals))
			}
		})
	}
	// With the session's token but without the page's presentation
	// token, or with another call's, nothing is approved.
	other := e.submit("agent:billing-bot", "payments-host", batchRefund(4242, 100, "another"))
	for name, shown := range map[string]string{"no page": "", "another call's page": b.presented(other.ID)} {
		p := b.post(path, url.Values{"csrf": {tok}, "digest": {call.Digest}, "presented": {shown}})
		if p.status != http.StatusConflict || !strings.Contains(p.find("decision-error").Text(), "did not show the call as it is now") ||
			!strings.Contains(p.find("decision-next").Text(), "read it again, then decide") {
			t.Errorf("approve from %s = %d %q, want 409 re-showing the call to read again", name, p.status, p.find("decision-error").Text())
		}
		if c := mustCall(t, e, call.ID); c.Status != queue.StatusPending || len(c.Approvals) != 0 {
			t.Errorf("approve from %s: the call is %s with %d approvals", name, c.Status, len(c.Approvals))
		}
	}
	if p := b.post(path, url.Values{"csrf": {tok}, "digest": {call.Digest}, "presented": {b.presented(call.ID)}}); p.status != http.StatusSeeOther {
		t.Fatalf("a proper approve = %d, want 303", p.status)
	}
	if c := mustCall(t, e, call.ID); c.Status != queue.StatusApproved || c.Approvals[0].Operator != "olivia" || c.Approvals[0].Channel != "web" {
		t.Errorf("after approve: %s, approvals %+v", c.Status, c.Approvals)
	}
	// The click is recorded with the page that presented the call; a
	// command's approval is said to be unattested on the call's page.
	if a := mustCall(t, e, call.ID).Approvals[0]; a.Method != queue.MethodClick || a.Human() != queue.HumanTrue || a.Presented == nil {
		t.Errorf("the click's record: %+v", a)
	}
	p := b.get("/calls/" + call.ID)
	if strings.TrimSpace(p.find("approval-how").Text()) != "by click" || p.find("approval-unattested").Length() != 0 {
		t.Errorf("the click reads %q, unattested %d", p.find("approval-how").Text(), p.find("approval-unattested").Length())
	}
	cmd := e.submit("agent:billing-bot", "payments-host", batchRefund(4343, 100, "by command"))
	if _, err := e.q.Approve(context.Background(), "adam", audit.ChannelCLI, cmd.ID, cmd.Digest); err != nil {
		t.Fatal(err)
	}
	if p := b.get("/calls/" + cmd.ID); !strings.Contains(p.find("approval-how").Text(), "from the command line") || p.find("approval-unattested").Length() != 1 {
		t.Errorf("a command's approval reads %q, unattested %d", p.find("approval-how").Text(), p.find("approval-unattested").Length())
	}
}

func TestStaleDigestRefused(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	call := e.submit("agent:billing-bot", "payments-host", conRefundBody)
	other := e.submit("agent:billing-bot", "payments-host", strings.Replace(conRefundBody, "129999", "129998", 1))
	b := e.browser()
	b.login("olivia", rolePassword)
	tok := b.csrf()
	for _, digest := range []string{other.Digest, "", strings.ToUpper(call.Digest), call.Digest[:63]} {
		p := b.post("/calls/"+call.ID+"/approve", url.Values{"csrf": {tok}, "digest": {digest}, "presented": {b.presented(call.ID)}})
		if p.status != http.StatusConflict {
			t.Errorf("approve with digest %q = %d, want 409", digest, p.status)
		}
		if msg := p.find("decision-error").Text(); !strings.Contains(msg, "digest") {
			t.Errorf("message = %q, want it to explain the digest", msg)
		}
		if p.find("call-id").Text() != call.ID {
			t.Error("the refusal does not show the call again")
		}
	}
	if c := mustCall(t, e, call.ID); c.Status != queue.StatusPending || len(c.Approvals) != 0 {
		t.Errorf("call is %s with %d approvals, want untouched", c.Status, len(c.Approvals))
	}
}

func TestOwnCallRefused(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	e.addUser("agent:deployer", account.RoleOperator, rolePassword)
	call := e.submit("agent:deployer", "deploy-host", conDeployBody)
	b := e.browser()
	b.login("agent:deployer", rolePassword)
	p := b.get("/calls/" + call.ID)
	if p.find("own-call").Length() != 1 || p.find("approve-form").Length() != 0 {
		t.Error("the call page offers an approval of one's own call")
	}
	p = b.post("/calls/"+call.ID+"/approve", url.Values{"csrf": {b.csrf()}, "digest": {call.Digest}, "presented": {b.presented(call.ID)}})
	if p.status != http.StatusForbidden {
		t.Errorf("approving one's own call = %d, want 403", p.status)
	}
	if msg := p.find("decision-error").Text(); !strings.Contains(msg, "your own name") {
		t.Errorf("message = %q", msg)
	}
	if c := mustCall(t, e, call.ID); len(c.Approvals) != 0 {
		t.Errorf("approvals = %d, want 0", len(c.Approvals))
	}
}

func TestQuorumNeedsTwoOperators(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	e.addUser("otto", account.RoleOperator, rolePassword)
	call := e.submit("agent:deployer", "deploy-host", conDeployBody)
	if call.ApprovalsRequired != 2 {
		t.Fatalf("releases.deploy requires %d approvals, want 2", call.ApprovalsRequired)
	}
	olivia := e.browser()
	olivia.login("olivia", rolePassword)
	tok := olivia.csrf()
	p := olivia.post("/calls/"+call.ID+"/approve", url.Values{"csrf": {tok}, "digest": {call.Digest}, "presented": {olivia.presented(call.ID)}})
	if p.status != http.StatusSeeOther {
		t.Fatalf("first approval = %d", p.status)
	}
	p = olivia.get(p.header.Get("Location"))
	if got := p.find("status-value").Text(); got != "pending" {
		t.Errorf("after one approval status = %q, want pending", got)
	}
	if got := p.find("quorum").Text(); got != "1 of 2" {
		t.Errorf("quorum = %q, want 1 of 2", got)
	}
	if p.find("approved-by-you").Length() != 1 || p.find("approve-form").Length() != 0 {
		t.Error("the first approver is offered a second approval")
	}
	if got := strings.TrimSpace(p.find("approval-by").Text()); got != "olivia" {
		t.Errorf("approved by = %q", got)
	}
	if p.find("decision-notice").Length() != 1 {
		t.Error("no confirmation after approving")
	}
	p = olivia.post("/calls/"+call.ID+"/approve", url.Values{"csrf": {tok}, "digest": {call.Digest}, "presented": {olivia.presented(call.ID)}})
	if p.status != http.StatusConflict || !strings.Contains(p.find("decision-error").Text(), "already approved") {
		t.Errorf("second approval by the same operator = %d %q, want 409 already approved", p.status, p.find("decision-error").Text())
	}
	if c := mustCall(t, e, call.ID); c.Status != queue.StatusPending || len(c.Approvals) != 1 {
		t.Fatalf("after a repeated approval: %s, %d approvals", c.Status, len(c.Approvals))
	}
	otto := e.browser()
	otto.login("otto", rolePassword)
	p = otto.post("/calls/"+call.ID+"/approve", url.Values{"csrf": {otto.csrf()}, "digest": {call.Digest}, "presented": {otto.presented(call.ID)}})
	if p.status != http.StatusSeeOther {
		t.Fatalf("second operator's approval = %d", p.status)
	}
	c := mustCall(t, e, call.ID)
	if c.Status != queue.StatusApproved || len(c.Approvals) != 2 || c.Grant == "" {
		t.Fatalf("after two approvals: %s, %d approvals, grant %v", c.Status, len(c.Approvals), c.Grant != "")
	}
	p = otto.get("/calls/" + call.ID)
	if p.find("status-value").Text() != "approved" || p.find("grant-expires").Length() != 1 || p.find("approval").Length() != 2 {
		t.Errorf("approved page: status %q, grant expiry %d, approvals %d", p.find("status-value").Text(),
			p.find("grant-expires").Length(), p.find("approval").Length())
	}
	if p.find("decide").Length() != 0 {
		t.Error("decide controls on an approved call")
	}
	if strings.Contains(p.body, c.Grant) {
		t.Error("the grant token is on the page; only the agent should receive it")
	}
}

func TestDenyNeedsReason(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	call := e.submit("agent:billing-bot", "payments-host", conRefundBody)
	b := e.browser()
	b.login("olivia", rolePassword)
	tok := b.csrf()
	for _, reason := range []string{"", "   \n\t"} {
		p := b.post("/calls/"+call.ID+"/deny", url.Values{"csrf": {tok}, "reason": {reason}})
		if p.status != http.StatusBadRequest || !strings.Contains(p.find("decision-error").Text(), "reason") {
			t.Errorf("deny with reason %q = %d %q, want 400 asking for a reason", reason, p.status, p.find("decision-error").Text())
		}
	}
	long := strings.Repeat("x", queue.MaxReasonBytes+1)
	if p := b.post("/calls/"+call.ID+"/deny", url.Values{"csrf": {tok}, "reason": {long}}); p.status != http.StatusBadRequest ||
		!strings.Contains(p.find("decision-error").Text(), "longer than 2000 bytes") {
		t.Errorf("deny with a %d-byte reason = %d %q, want 400 explained", len(long), p.status, p.find("decision-error").Text())
	} else if got := p.find("deny-reason").Text(); got != long {
		t.Error("the typed reason was not kept in the form")
	}
	if c := mustCall(t, e, call.ID); c.Status != queue.StatusPending {
		t.Fatalf("status = %s, want pending", c.Status)
	}
	p := b.post("/calls/"+call.ID+"/deny", url.Values{"csrf": {tok}, "reason": {"<b>not</b> this invoice"}})
	if p.status != http.StatusSeeOther {
		t.Fatalf("deny = %d", p.status)
	}
	p = b.get("/calls/" + call.ID)
	if p.find("status-value").Text() != "denied" || p.find("deny-reason-shown").Text() != "<b>not</b> this invoice" ||
		strings.TrimSpace(p.find("denied-by").Text()) != "olivia" {
		t.Errorf("denied page: %q by %q reason %q", p.find("status-value").Text(), p.find("denied-by").Text(), p.find("deny-reason-shown").Text())
	}
	p = b.post("/calls/"+call.ID+"/approve", url.Values{"csrf": {tok}, "digest": {call.Digest}, "presented": {b.presented(call.ID)}})
	if p.status != http.StatusConflict || !strings.Contains(p.find("decision-error").Text(), "no longer pending") {
		t.Errorf("approve after deny = %d %q, want 409 no longer pending", p.status, p.find("decision-error").Text())
	}
	if c := mustCall(t, e, call.ID); c.Status != queue.StatusDenied || c.Denial.Reason != "<b>not</b> this invoice" {
		t.Errorf("call = %s %+v", c.Status, c.Denial)
	}
}
